//! Container nodes of the plan: each recognised container's layout (from `containers`) and
//! children, the hash code an unordered container's nodes hold, smart pointers' pointees,
//! and what a captured key is.

use super::*;

impl PlanBuilder<'_> {
    pub(super) fn container(
        &mut self,
        kind: ContainerKind,
        r: TypeId,
        capture_here: bool,
    ) -> Result<Op, PlanError> {
        use ContainerKind as K;
        let tg = self.tg;
        Ok(match kind {
            K::String => Op::String(string::layout(tg, r)?),
            K::Vector => {
                let t = self.arg(r, 0)?;
                let is_bool = matches!(
                    tg.get(tg.resolve(t)).kind,
                    Kind::Primitive {
                        prim: PrimKind::Bool,
                        ..
                    }
                );
                if is_bool {
                    Op::VectorBool {
                        layout: vector::bool_layout(tg, r)?,
                        elem: self.bit_element(t)?,
                    }
                } else {
                    Op::Vector {
                        layout: vector::layout(tg, r, t)?,
                        elem: self.child(t, "[]")?,
                    }
                }
            }
            K::Deque => {
                let t = self.arg(r, 0)?;
                Op::Deque {
                    layout: deque::layout(tg, r, t)?,
                    elem: self.child(t, "[]")?,
                }
            }
            K::List => {
                let t = self.arg(r, 0)?;
                Op::List {
                    layout: list::layout(tg, r, t)?,
                    elem: self.child(t, "[]")?,
                }
            }
            K::ForwardList => {
                let t = self.arg(r, 0)?;
                Op::List {
                    layout: list::forward_layout(tg, r, t)?,
                    elem: self.child(t, "[]")?,
                }
            }
            K::Set | K::MultiSet => {
                let t = self.arg(r, 0)?;
                Op::RbTree {
                    layout: rbtree::layout(tg, r, tg.size(t), tg.align(t))?,
                    elem: self.child(t, "[]")?,
                    is_map: false,
                }
            }
            K::UnorderedSet | K::UnorderedMultiSet => {
                let t = self.arg(r, 0)?;
                Op::Hashtable {
                    layout: hashtable::layout(
                        tg,
                        r,
                        tg.size(t),
                        tg.align(t),
                        self.hash_cached(r)?,
                    )?,
                    elem: self.child(t, "[]")?,
                    is_map: false,
                }
            }
            K::Map | K::MultiMap | K::UnorderedMap | K::UnorderedMultiMap => {
                let (k, v) = (self.arg(r, 0)?, self.arg(r, 1)?);
                let (psize, palign, second) = rbtree::pair_shape(tg, k, v);
                // std::map and std::unordered_map only, not the multimaps (docs/semantics.md,
                // "Captured keys").
                let capture = (self.captures(capture_here)
                    && matches!(kind, K::Map | K::UnorderedMap))
                .then(|| self.capture(k))
                .transpose()?;
                let hashed = matches!(kind, K::UnorderedMap | K::UnorderedMultiMap);
                let (op, node_size) = if hashed {
                    let l = hashtable::layout(tg, r, psize, palign, self.hash_cached(r)?)?;
                    (
                        Op::Hashtable {
                            layout: l,
                            elem: 0,
                            is_map: true,
                        },
                        l.node_size,
                    )
                } else {
                    let l = rbtree::layout(tg, r, psize, palign)?;
                    (
                        Op::RbTree {
                            layout: l,
                            elem: 0,
                            is_map: true,
                        },
                        l.node_size,
                    )
                };
                let entry = self.reserve(
                    "[]".into(),
                    Vec::new(),
                    node_size,
                    tg.is_fundamental(k) && tg.is_fundamental(v),
                );
                self.plan.nodes[entry].readable = readable::map_entry(tg, k, v);
                let key = self.child(k, "key")?;
                let value = self.child(v, "value")?;
                self.plan.nodes[entry].op = Op::Entry {
                    key: (0, key),
                    value: (second, value),
                    capture,
                };
                match op {
                    Op::Hashtable { layout, is_map, .. } => Op::Hashtable {
                        layout,
                        elem: entry,
                        is_map,
                    },
                    Op::RbTree { layout, is_map, .. } => Op::RbTree {
                        layout,
                        elem: entry,
                        is_map,
                    },
                    other => other,
                }
            }
            K::Pair => {
                let [(o1, t1), (o2, t2)] = containers::pair::layout(tg, r)?;
                Op::Pair {
                    first: (o1, self.child(t1, "first")?),
                    second: (o2, self.child(t2, "second")?),
                }
            }
            K::Array => {
                let (offset, elem, count) = containers::array::layout(tg, r)?;
                Op::Array {
                    elem: self.child(elem, "[]")?,
                    offset,
                    count,
                    stride: tg.size(elem),
                    exclusive: u64::from(count == 0),
                }
            }
            K::Optional => {
                let t = self.arg(r, 0)?;
                Op::Optional {
                    layout: optional::layout(tg, r)?,
                    elem: self.child(t, "el")?,
                }
            }
            K::Variant => {
                let layout = variant::layout(tg, r)?;
                let mut alternatives = Vec::new();
                let mut i = 0;
                while let Some(t) = tg.type_arg(r, i) {
                    alternatives.push(self.child(t, "*")?);
                    i += 1;
                }
                Op::Variant {
                    layout,
                    alternatives,
                }
            }
            K::UniquePtr | K::SharedPtr => {
                let offset = if kind == K::UniquePtr {
                    smart_ptr::unique_ptr_offset(tg, r)?
                } else {
                    smart_ptr::shared_ptr_offset(tg, r)?
                };
                let t = self.arg(r, 0)?;
                let target = self.pointee(t, "ptr_val")?;
                let control = match (kind, target) {
                    (K::SharedPtr, Some(_)) if self.opts.sizing == crate::plan::Sizing::Real => {
                        Some(smart_ptr::control_block(tg, r, t)?)
                    }
                    _ => None,
                };
                Op::SmartPtr {
                    offset,
                    target,
                    control,
                }
            }
            K::WeakPtr => Op::Leaf,
            K::Stack | K::Queue | K::PriorityQueue => {
                let (offset, c) = containers::adapter::underlying(tg, r)?;
                Op::Struct {
                    members: vec![(offset, self.child(c, "[]")?)],
                    padding: tg.size(r).saturating_sub(tg.size(c)),
                    adapter: true,
                }
            }
            K::ReferenceWrapper => {
                let t = self.arg(r, 0)?;
                Op::RefWrap {
                    offset: refwrap::offset(tg, r)?,
                    target: self.pointee(t, "ref_val")?,
                }
            }
        })
    }

    /// Whether the nodes of unordered container `r` hold the hash code: under OI's rules
    /// always; under real sizes as its library decided (`hashtable::caches_hash`).
    pub(super) fn hash_cached(&self, r: TypeId) -> Result<bool, PlanError> {
        Ok(match self.opts.sizing {
            crate::plan::Sizing::Oi => true,
            crate::plan::Sizing::Real => hashtable::caches_hash(self.tg, r)?,
        })
    }

    /// The child of a smart pointer / reference: none for incomplete types and `T[]`.
    pub(super) fn pointee(
        &mut self,
        t: TypeId,
        name: &'static str,
    ) -> Result<Option<NodeId>, PlanError> {
        let tg = self.tg;
        let unbounded = matches!(tg.get(tg.resolve(t)).kind, Kind::Array { count: 0, .. });
        if !tg.is_complete(t) || unbounded {
            return Ok(None);
        }
        Ok(Some(self.child(t, name)?))
    }

    pub(super) fn capture(&self, key: TypeId) -> Result<Capture, PlanError> {
        let tg = self.tg;
        let r = tg.resolve(key);
        Ok(match &tg.get(r).kind {
            Kind::Primitive { .. } | Kind::Enum { .. } | Kind::Pointer { .. } => Capture::Scalar {
                size: tg.size(r),
                signed: matches!(
                    tg.get(r).kind,
                    Kind::Primitive {
                        prim: PrimKind::Signed,
                        ..
                    }
                ),
            },
            Kind::Struct(st) if st.container == Some(ContainerKind::String) => {
                Capture::String(string::layout(tg, r)?)
            }
            _ => Capture::Address,
        })
    }
}
