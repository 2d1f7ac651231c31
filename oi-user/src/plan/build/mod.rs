//! Type graph → plan. Decides every static fact of the output per use site: names, typeNames,
//! staticSize, is_primitive, which pointers are chased (each under its heading in
//! docs/semantics.md), and each container's layout (from `containers`).

mod container;

use std::collections::HashMap;

use super::{Capture, Node, NodeId, Op, Plan, Scalar, ScalarKind};
use crate::containers::{
    self, ContainerKind, LayoutError, deque, hashtable, list, optional, rbtree, refwrap, smart_ptr,
    string, variant, vector,
};
use crate::typegraph::{Kind, PrimKind, TypeGraph, TypeId, layout, names, readable};

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Describe(#[from] crate::describe::DescribeError),
    #[error("{0} is not a complete type and cannot be measured")]
    Incomplete(String),
}

/// Not an OI feature but passed with them (it changes the plan, hence the caches' keys):
/// read the scalar values the tree shows with `--values`.
pub const VALUES: &str = "values";

/// Not OI features either, passed with them for the same reason: the sizing (`--sizes`).
/// Without either, a plan follows OI's rules (`Sizing::Oi`).
pub const SIZES_REAL: &str = "sizes-real";
pub const SIZES_OI: &str = "sizes-oi";

/// Options that change the walk (docs/semantics.md, "Pointers, sharing and cycles",
/// "Captured keys").
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub chase_raw_pointers: bool,
    /// Record the keys of std::map / std::unordered_map as `data` (docs/semantics.md,
    /// "Captured keys"): of every one, unless OI's configuration selects some (`capture_top`,
    /// `capture_members`).
    pub capture_keys: bool,
    /// `[[codegen.capture_keys]] top_level = true`: the root's map.
    pub capture_top: bool,
    /// `[[codegen.capture_keys]] type, members`: (unqualified struct name, member name).
    pub capture_members: Vec<(String, String)>,
    /// Measure dynamic classes as their most-derived class (needs vtable ranges).
    pub polymorphic: bool,
    /// Read scalar values (`--values`): every primitive, enum and stubbed pointer.
    pub values: bool,
    /// OI's `[[codegen.ignore]]` (`--config`): qualified names of types measured as opaque.
    pub ignored_types: Vec<String>,
    /// ... and (qualified type name, member name) of members dropped before padding.
    pub ignored_members: Vec<(String, String)>,
    /// Containers described as data (`describe`): the shipped ones and `--containers`.
    pub descriptions: crate::describe::Descriptions,
    /// The rules that charge containers' bytes (`--sizes`).
    pub sizing: super::Sizing,
}

type MemoKey = (TypeId, &'static str);

/// polymorphic-inheritance: per dynamic class, (vtable start, vtable end, derived class),
/// vtable addresses as in the ELF file.
pub type DerivedClasses = HashMap<TypeId, Vec<(u64, u64, TypeId)>>;

pub struct PlanBuilder<'t> {
    tg: &'t TypeGraph,
    pub plan: Plan,
    opts: Options,
    anon: names::AnonNames,
    /// Child nodes (single resolved typeName) are shared per (type, child name): this is
    /// what closes cycles through pointers and containers.
    memo: HashMap<MemoKey, NodeId>,
    /// polymorphic-inheritance: per dynamic class, (vtable start, end, derived class).
    poly: DerivedClasses,
    /// The node being built is selected for capture-keys (the root or a configured member);
    /// taken by the first `op` that follows, so it never reaches a nested map.
    capture_here: bool,
    /// Set by `op` when it made an opaque union, for the node it builds.
    opaque_union_here: bool,
    /// Set by `op` when it met a standard container it does not know, for the node it builds.
    foreign_here: bool,
    /// Types descriptions name by spelling, found in DWARF beforehand (`describe::names`).
    named: crate::describe::names::NamedTypes,
}

const STUBBED: &str = "uintptr_t (stubbed)";

impl<'t> PlanBuilder<'t> {
    pub fn new(tg: &'t TypeGraph, opts: Options) -> Self {
        Self {
            tg,
            plan: Plan {
                sizing: opts.sizing,
                ..Plan::default()
            },
            opts,
            anon: names::AnonNames::default(),
            memo: HashMap::new(),
            poly: HashMap::new(),
            capture_here: false,
            opaque_union_here: false,
            foreign_here: false,
            named: Default::default(),
        }
    }

    /// The types descriptions name by spelling (`describe::names::resolve`).
    pub fn with_named_types(mut self, named: crate::describe::names::NamedTypes) -> Self {
        self.named = named;
        self
    }

    /// Enables polymorphic-inheritance for the given dynamic classes.
    pub fn with_polymorphism(mut self, poly: DerivedClasses) -> Self {
        self.poly = poly;
        self
    }

    /// A node that picks the most-derived class at runtime, or None if `r` is not a dynamic
    /// class with known derived classes.
    fn poly_node(
        &mut self,
        r: TypeId,
        name: &str,
        fallback: NodeId,
    ) -> Result<Option<NodeId>, PlanError> {
        let Some(cands) = self.poly.get(&r).cloned() else {
            return Ok(None);
        };
        let fb = &self.plan.nodes[fallback];
        let (size, prim) = (fb.static_size, fb.is_primitive);
        let id = self.reserve(name.into(), Vec::new(), size, prim);
        let mut candidates = Vec::new();
        for (start, end, derived) in cands {
            let names = vec![names::spell(self.tg, derived, &self.anon)];
            let node = self.build_node(derived, name.into(), names, false)?;
            self.plan.nodes[node].readable = readable::readable(self.tg, derived);
            candidates.push((start, end, node));
        }
        self.plan.nodes[id].op = Op::Poly {
            candidates,
            fallback,
        };
        Ok(Some(id))
    }

    /// Adds the root node of one argument whose (already dereferenced) type is `ty`.
    pub fn root(&mut self, ty: TypeId) -> Result<NodeId, PlanError> {
        let tg = self.tg;
        if !tg.is_complete(ty) {
            return Err(PlanError::Incomplete(names::qualified_or_anon(tg, ty)));
        }
        // Anonymous numbering and memoised children are per root.
        self.anon = names::AnonNames::for_root(tg, ty);
        self.memo.clear();
        let mut type_names = names::type_names_with_typedefs(tg, ty, &self.anon);
        if self.is_stubbed(ty)
            && let Some(last) = type_names.last_mut()
        {
            *last = STUBBED.into();
        }
        let is_primitive = tg.is_fundamental(ty);
        self.capture_here = self.opts.capture_top;
        let node = self.build_node(ty, "a0".into(), type_names, is_primitive)?;
        self.plan.nodes[node].readable = readable::declared(tg, ty);
        let root = self.poly_node(tg.resolve(ty), "a0", node)?.unwrap_or(node);
        self.plan.nodes[root].readable = readable::declared(tg, ty);
        Ok(root)
    }

    pub fn finish(mut self) -> Plan {
        self.plan.compute_dynamic();
        self.plan
    }

    fn is_stubbed(&self, ty: TypeId) -> bool {
        match &self.tg.get(self.tg.resolve(ty)).kind {
            Kind::Pointer { target } => !self.opts.chase_raw_pointers || self.is_function(*target),
            _ => false,
        }
    }

    fn is_function(&self, target: Option<TypeId>) -> bool {
        target.is_some_and(|t| matches!(self.tg.get(self.tg.resolve(t)).kind, Kind::Function))
    }

    fn push(&mut self, node: Node) -> NodeId {
        self.plan.nodes.push(node);
        self.plan.nodes.len() - 1
    }

    /// A container element, pointee or other child: one resolved typeName.
    fn child(&mut self, ty: TypeId, name: &'static str) -> Result<NodeId, PlanError> {
        let r = self.tg.resolve(ty);
        if let Some(&id) = self.memo.get(&(r, name)) {
            return Ok(id);
        }
        let type_names = vec![if self.is_stubbed(r) {
            STUBBED.to_string()
        } else {
            names::spell(self.tg, r, &self.anon)
        }];
        let is_primitive = self.tg.is_fundamental(r);
        let id = self.reserve(name.into(), type_names, self.tg.size(r), is_primitive);
        self.plan.nodes[id].readable = readable::readable(self.tg, r);
        if self.poly.contains_key(&r) && matches!(name, "*" | "ptr_val" | "ref_val") {
            // The memo points at the dynamic node (reserved first) so that cycles reach it.
            let poly = self.reserve(name.into(), Vec::new(), self.tg.size(r), is_primitive);
            self.memo.insert((r, name), poly);
            self.set_op(id, r)?;
            let built = self.poly_node(r, name, id)?.unwrap_or(id);
            let mut node = self.plan.nodes[built].clone();
            node.readable = readable::readable(self.tg, r);
            self.plan.nodes[poly] = node;
            return Ok(poly);
        }
        self.memo.insert((r, name), id);
        self.set_op(id, r)?;
        self.plan.nodes[id].value = self.scalar(id, r, false);
        Ok(id)
    }

    fn reserve(&mut self, name: String, type_names: Vec<String>, size: u64, prim: bool) -> NodeId {
        self.push(Node {
            name,
            type_names,
            static_size: size,
            is_primitive: prim,
            op: Op::Leaf,
            dynamic: false,
            readable: String::new(),
            value: None,
            opaque_union: false,
            foreign: false,
        })
    }

    fn build_node(
        &mut self,
        ty: TypeId,
        name: String,
        type_names: Vec<String>,
        is_primitive: bool,
    ) -> Result<NodeId, PlanError> {
        let r = self.tg.resolve(ty);
        let id = self.reserve(name, type_names, self.tg.size(r), is_primitive);
        self.set_op(id, r)?;
        self.plan.nodes[id].value = self.scalar(id, r, false);
        Ok(id)
    }

    /// The element of a `vector<bool>`: a bit, which no walk reads, so never a value (the
    /// shared `bool` child node may have one, for arrays of bools).
    /// Under real sizes a bit takes no byte of its own (the vector charges its words).
    fn bit_element(&mut self, t: TypeId) -> Result<NodeId, PlanError> {
        let elem = self.child(t, "[]")?;
        let real = self.opts.sizing == super::Sizing::Real;
        if self.plan.nodes[elem].value.is_none() && !real {
            return Ok(elem);
        }
        let mut bit = self.plan.nodes[elem].clone();
        bit.value = None;
        if real {
            bit.static_size = 0;
        }
        Ok(self.push(bit))
    }

    /// With `--values`, what a `Leaf` node of resolved type `r` reads: primitives, enums
    /// and pointers that are not chased (`vptr`: the vtable pointer, whatever its type).
    fn scalar(&self, id: NodeId, r: TypeId, vptr: bool) -> Option<Scalar> {
        if !self.opts.values || !matches!(self.plan.nodes[id].op, Op::Leaf) {
            return None;
        }
        let tg = self.tg;
        let size = tg.size(r);
        if !matches!(size, 1 | 2 | 4 | 8 | 16) {
            return None;
        }
        let mask = |v: i128| (v as u64) & (u64::MAX >> (64 - 8 * size.min(8)));
        let kind = match &tg.get(r).kind {
            _ if vptr => ScalarKind::Pointer,
            Kind::Primitive {
                prim, dwarf_name, ..
            } => match prim {
                PrimKind::Bool => ScalarKind::Bool,
                PrimKind::Float => ScalarKind::Float,
                PrimKind::Signed | PrimKind::Unsigned
                    if size == 1 && dwarf_name.contains("char") =>
                {
                    ScalarKind::Char {
                        signed: *prim == PrimKind::Signed,
                    }
                }
                PrimKind::Signed => ScalarKind::Signed,
                PrimKind::Unsigned => ScalarKind::Unsigned,
            },
            Kind::Enum { enumerators, .. } => ScalarKind::Enum {
                signed: enumerators.iter().any(|(v, _)| *v < 0),
                enumerators: enumerators
                    .iter()
                    .map(|(v, n)| (mask(*v), n.clone()))
                    .collect(),
            },
            Kind::Pointer { .. } => ScalarKind::Pointer,
            _ => return None,
        };
        Some(Scalar { size, kind })
    }

    /// Gives node `id` the op of resolved type `r` (and says if it is an opaque union).
    fn set_op(&mut self, id: NodeId, r: TypeId) -> Result<(), PlanError> {
        self.opaque_union_here = false;
        self.foreign_here = false;
        let op = self.op(r)?;
        self.plan.nodes[id].op = op;
        self.plan.nodes[id].opaque_union = std::mem::take(&mut self.opaque_union_here);
        self.plan.nodes[id].foreign = std::mem::take(&mut self.foreign_here);
        Ok(())
    }

    /// The op for resolved type `r`.
    fn op(&mut self, r: TypeId) -> Result<Op, PlanError> {
        let tg = self.tg;
        let capture_here = std::mem::take(&mut self.capture_here);
        Ok(match &tg.get(r).kind {
            Kind::Pointer { target } => {
                if self.is_stubbed(r) {
                    Op::Leaf
                } else {
                    let (target, bytes) = match target {
                        Some(t) if tg.is_complete(*t) => (Some(self.child(*t, "*")?), tg.size(*t)),
                        _ => (None, 0),
                    };
                    Op::HeapPointer {
                        target,
                        lone: super::lone_usable(bytes),
                    }
                }
            }
            Kind::Array { elem, count } => Op::Array {
                elem: self.child(*elem, "[]")?,
                offset: 0,
                count: *count,
                stride: tg.size(*elem),
                exclusive: 0,
            },
            // An ignored type is opaque as a union is: its static size, all exclusive.
            Kind::Struct(st) if self.is_ignored(st.name.as_deref()) => Op::Leaf,
            Kind::Struct(st) if st.is_union => match self.single_member_union(r)? {
                Some(op) => op,
                None => {
                    self.opaque_union_here = true;
                    Op::Leaf
                }
            },
            Kind::Struct(st) => match st.container {
                Some(kind) => self.container(kind, r, capture_here)?,
                // libstdc++'s forward_list: an ordinary class under OI's rules (its typeNames
                // too); real sizes walk its nodes.
                None if self.opts.sizing == super::Sizing::Real
                    && st
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("std::forward_list<")) =>
                {
                    self.container(ContainerKind::ForwardList, r, capture_here)?
                }
                None => match st
                    .name
                    .as_deref()
                    .and_then(|n| self.opts.descriptions.find(n))
                {
                    Some(d) => match crate::describe::compile::compile(d, tg, r, &self.named) {
                        Ok((layout, elem, owned)) => {
                            let elem = if owned {
                                self.owned_pointer(elem)?
                            } else {
                                self.child(elem, "[]")?
                            };
                            Op::Described { layout, elem }
                        }
                        // A standard container whose shipped description does not fit (libc++
                        // of another version, or a class that only borrows its name): never a
                        // plain struct, a node not walked.
                        Err(_)
                            if d.shipped && crate::typegraph::kinds::unknown_standard(&d.name) =>
                        {
                            let name = st.name.clone().unwrap_or_default();
                            self.foreign(&name)
                        }
                        // A shipped description written for another library version: the
                        // type is still measured, as the class it is, and the user is told.
                        Err(e) if d.shipped => {
                            let line = format!(
                                "shipped description {} ({}:{}) does not fit this program: {}; \
                                 measured as a plain class",
                                d.name, e.file, e.line, e.what
                            );
                            let said = format!("shipped description {} (", d.name);
                            if !self.plan.warnings.iter().any(|w| w.starts_with(&said)) {
                                self.plan.warnings.push(line);
                            }
                            self.structure(r)?
                        }
                        Err(e) => return Err(e.into()),
                    },
                    None => match st.name.as_deref() {
                        Some(n) if crate::typegraph::kinds::unknown_standard(n) => self.foreign(n),
                        _ => self.structure(r)?,
                    },
                },
            },
            _ => Op::Leaf,
        })
    }

    /// A standard container of a library whose layout oi-trace does not know: never a plain
    /// struct (its members are the library's internals, and its heap would go uncounted), but
    /// a node not walked (E = S) and one warning per type.
    fn foreign(&mut self, name: &str) -> Op {
        let line = format!(
            "{name} is a container of a standard library oi-trace does not know; \
             not walked (its heap is not counted; JSON notWalked)"
        );
        if !self.plan.warnings.contains(&line) {
            self.plan.warnings.push(line);
        }
        self.foreign_here = true;
        Op::Leaf
    }

    /// A union with exactly one member (protobuf's `union { Impl_ _impl_; }`) is walked as
    /// that member: a one-member struct, E = S − sizeof(member). None: it stays opaque.
    fn single_member_union(&mut self, r: TypeId) -> Result<Option<Op>, PlanError> {
        let tg = self.tg;
        let Some(st) = tg.as_struct(r) else {
            return Ok(None);
        };
        let [m] = st.members.as_slice() else {
            return Ok(None);
        };
        if m.bit_size.is_some() || !tg.is_complete(m.ty) || tg.size(m.ty) > tg.size(r) {
            return Ok(None);
        }
        let name = m.name.clone().unwrap_or_else(|| "__oi_anon_0".into());
        let type_names = names::type_names_with_typedefs(tg, m.ty, &self.anon);
        let is_primitive = matches!(tg.get(m.ty).kind, Kind::Primitive { .. });
        let (ty, off) = (m.ty, m.bit_offset / 8);
        let node = self.build_node(ty, name, type_names, is_primitive)?;
        self.plan.nodes[node].readable = readable::declared(tg, ty);
        Ok(Some(Op::Struct {
            members: vec![(off, node)],
            padding: tg.size(r).saturating_sub(tg.size(ty)),
            adapter: false,
        }))
    }

    /// The element of a described `owned_pointers` container: a `T*` that owns its `T`,
    /// walked as a `unique_ptr` is (S = E = 8, child `*` charged sizeof(T) and what it owns).
    fn owned_pointer(&mut self, t: TypeId) -> Result<NodeId, PlanError> {
        let r = self.tg.resolve(t);
        let spelled = format!("{}*", names::spell(self.tg, r, &self.anon));
        let id = self.reserve("[]".into(), vec![spelled], 8, false);
        let target = self.child(r, "*")?;
        self.plan.nodes[id].op = Op::SmartPtr {
            offset: 0,
            target: Some(target),
            control: None,
        };
        self.plan.nodes[id].readable = format!("{}*", readable::readable(self.tg, r));
        Ok(id)
    }

    /// The pointee of a raw pointer member of struct `holder` that an `[[owned]]` rule says
    /// the struct owns (a complete class, named or derived from the rule's base).
    fn owned_member(&self, holder: TypeId, ty: TypeId) -> Option<TypeId> {
        let tg = self.tg;
        let descs = &self.opts.descriptions;
        if descs.owned.is_empty() {
            return None;
        }
        let Kind::Pointer { target: Some(t) } = &tg.get(tg.resolve(ty)).kind else {
            return None;
        };
        let t = tg.resolve(*t);
        let holder_name = tg.as_struct(holder)?.name.as_deref()?;
        tg.as_struct(t)?;
        if !tg.is_complete(t) {
            return None;
        }
        // The class and its bases, transitively (bounded: DWARF may be malformed). A base
        // may be a declaration only (g++ leaves a class whose vtable another library emits,
        // as protobuf's `Message`, undefined): its name still counts.
        let mut names = Vec::new();
        let mut todo = vec![t];
        while let Some(c) = todo.pop() {
            if names.len() > 64 {
                break;
            }
            match &tg.get(tg.resolve(c)).kind {
                Kind::Struct(st) => {
                    names.extend(st.name.clone());
                    todo.extend(st.bases.iter().map(|b| b.ty));
                }
                Kind::Incomplete { name } => names.push(name.clone()),
                _ => {}
            }
        }
        descs.owns(holder_name, &names).then_some(t)
    }

    /// The unions of struct `holder` that `[[union]]` rules describe (a later rule wins for
    /// the same union). A user's rule that does not fit is an error; a shipped one a warning
    /// (once), its unions staying opaque.
    fn discriminated_unions(
        &mut self,
        holder: TypeId,
    ) -> Result<Vec<crate::describe::unions::CompiledUnion>, PlanError> {
        let tg = self.tg;
        let rules = self.opts.descriptions.unions.clone();
        let Some(name) = tg.as_struct(holder).and_then(|st| st.name.clone()) else {
            return Ok(Vec::new());
        };
        let mut out: Vec<crate::describe::unions::CompiledUnion> = Vec::new();
        for rule in rules.iter().filter(|r| r.matches(&name)) {
            match crate::describe::unions::compile(rule, tg, holder, &self.named) {
                Ok(found) => {
                    for u in found {
                        out.retain(|o| o.name != u.name);
                        out.push(u);
                    }
                }
                Err(e) if rule.shipped => {
                    let said = format!("shipped union rule for {} (", rule.holder);
                    if !self.plan.warnings.iter().any(|w| w.starts_with(&said)) {
                        self.plan.warnings.push(format!(
                            "{said}{}:{}) does not fit this program: {}; its unions not walked",
                            e.file, e.line, e.what
                        ));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// The op of a discriminated union member of `holder`: its case members as nodes (a
    /// raw pointer among them owned when an `[[owned]]` rule says the holder owns it).
    fn discriminated(
        &mut self,
        holder: TypeId,
        u: &crate::describe::unions::CompiledUnion,
    ) -> Result<Op, PlanError> {
        let mut built: HashMap<String, NodeId> = HashMap::new();
        let mut cases = Vec::with_capacity(u.cases.len());
        for (value, member) in &u.cases {
            let Some((mname, off, ty)) = member else {
                cases.push((*value, None));
                continue;
            };
            let node = match built.get(mname) {
                Some(&n) => n,
                None => {
                    let n = self.union_case(holder, mname, *ty)?;
                    built.insert(mname.clone(), n);
                    n
                }
            };
            cases.push((*value, Some((*off, node))));
        }
        Ok(Op::Union {
            disc: u.disc_offset as i64 - u.offset as i64,
            width: u.width,
            cases,
        })
    }

    /// One member of a discriminated union, as a member of a struct is planned.
    fn union_case(&mut self, holder: TypeId, name: &str, ty: TypeId) -> Result<NodeId, PlanError> {
        let tg = self.tg;
        let mut type_names = names::type_names_with_typedefs(tg, ty, &self.anon);
        let declared = &tg.get(ty).kind;
        let node = if let Some(target) = self.owned_member(holder, ty) {
            let id = self.reserve(name.into(), type_names, 8, false);
            let target = self.child(target, "*")?;
            self.plan.nodes[id].op = Op::SmartPtr {
                offset: 0,
                target: Some(target),
                control: None,
            };
            id
        } else {
            let stubbed = self.is_stubbed(ty);
            if stubbed && let Some(last) = type_names.last_mut() {
                *last = STUBBED.into();
            }
            let is_primitive = matches!(declared, Kind::Primitive { .. })
                || (stubbed && matches!(declared, Kind::Pointer { .. }));
            self.build_node(ty, name.into(), type_names, is_primitive)?
        };
        self.plan.nodes[node].readable = readable::declared(tg, ty);
        Ok(node)
    }

    fn is_ignored(&self, name: Option<&str>) -> bool {
        name.is_some_and(|n| self.opts.ignored_types.iter().any(|t| t == n))
    }

    fn structure(&mut self, r: TypeId) -> Result<Op, PlanError> {
        let tg = self.tg;
        let mut members = layout::flatten(tg, r);
        // Members the configuration excludes go before padding is computed: their bytes
        // become the struct's padding (docs/semantics.md,
        // "Structs, bases, padding, unions").
        if let Some(name) = tg.as_struct(r).and_then(|st| st.name.as_deref()) {
            let dropped = |m: &layout::FlatMember| {
                self.opts
                    .ignored_members
                    .iter()
                    .any(|(t, member)| t == name && m.name.as_deref() == Some(member.as_str()))
            };
            members.retain(|m| !dropped(m));
        }
        let pad = layout::padding(tg, tg.size(r), &members);
        let discriminated = self.discriminated_unions(r)?;
        let bare = tg.as_struct(r).and_then(|st| st.bare_name.clone());
        let bare = bare.as_deref();
        let mut out = Vec::with_capacity(members.len());
        for (m, idx) in members.iter().zip(&pad.indices) {
            let name = m.name.clone().unwrap_or_else(|| format!("__oi_anon_{idx}"));
            let mut type_names = names::type_names_with_typedefs(tg, m.ty, &self.anon);
            let declared = &tg.get(m.ty).kind;
            // GCC's vptr is never chased, whatever the options (docs/semantics.md,
            // "Pointers, sharing and cycles").
            let is_vptr = m.name.as_deref().is_some_and(|n| n.starts_with("_vptr."));
            let owned = if is_vptr || m.bit_size.is_some() {
                None
            } else {
                self.owned_member(r, m.ty)
            };
            let stubbed = is_vptr || (owned.is_none() && self.is_stubbed(m.ty));
            if stubbed && let Some(last) = type_names.last_mut() {
                *last = STUBBED.into();
            }
            let is_primitive = matches!(declared, Kind::Primitive { .. })
                || (stubbed && matches!(declared, Kind::Pointer { .. }));
            let union = discriminated
                .iter()
                .find(|u| Some(&u.name) == m.name.as_ref() && u.offset == m.bit_offset / 8);
            let node = if let Some(u) = union {
                let id = self.reserve(name, type_names, tg.size(m.ty), false);
                self.plan.nodes[id].op = self.discriminated(r, u)?;
                id
            } else if let Some(target) = owned {
                // Owned by an `[[owned]]` rule: walked as a unique_ptr (S = E = 8).
                let id = self.reserve(name, type_names, 8, false);
                let target = self.child(target, "*")?;
                self.plan.nodes[id].op = Op::SmartPtr {
                    offset: 0,
                    target: Some(target),
                    control: None,
                };
                id
            } else if m.bit_size.is_some() {
                let id = self.reserve(name, type_names, 0, is_primitive);
                self.plan.nodes[id].op = Op::Bitfield;
                id
            } else if is_vptr {
                let id = self.reserve(name, type_names, 8, is_primitive);
                self.plan.nodes[id].value = self.scalar(id, tg.resolve(m.ty), true);
                id
            } else {
                self.capture_here = bare.is_some_and(|s| {
                    self.opts
                        .capture_members
                        .iter()
                        .any(|(t, member)| t == s && m.name.as_deref() == Some(member.as_str()))
                });
                self.build_node(m.ty, name, type_names, is_primitive)?
            };
            self.plan.nodes[node].readable = match m.bit_size {
                Some(bits) => format!("{} : {bits}", readable::declared(tg, m.ty)),
                None if is_vptr => "(vtable pointer)".into(),
                None => readable::declared(tg, m.ty),
            };
            out.push((m.bit_offset / 8, node));
        }
        Ok(Op::Struct {
            members: out,
            padding: pad.bytes,
            adapter: false,
        })
    }

    fn arg(&self, r: TypeId, i: usize) -> Result<TypeId, PlanError> {
        self.tg
            .type_arg(r, i)
            .ok_or_else(|| containers::unexpected(self.tg, r, "missing template argument").into())
    }

    /// Whether a map built here captures its keys: every map, or the ones OI's configuration
    /// selects (`selected`: this is the root or a configured member).
    fn captures(&self, selected: bool) -> bool {
        let o = &self.opts;
        let selecting = o.capture_top || !o.capture_members.is_empty();
        o.capture_keys && (!selecting || selected)
    }
}
