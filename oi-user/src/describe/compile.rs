//! One description against one instantiation in the type graph: template arguments bound,
//! fields found by member path (after base flattening, through union members) and their
//! widths checked, names and
//! `sizeof`s folded, giving the plan's [`DescribedArray`]. Every mismatch is a
//! [`DescribeError`] at the line that caused it; nothing is guessed.

use super::expr::{Ast, BinOp, Expr};
use super::names::NamedTypes;
use super::parse::{At, DescribeError, Description, FieldSpec, Layout};
use crate::typegraph::{Kind, TemplateArg, TypeGraph, TypeId};

/// A described array, ready for the walkers (the plan's `Op::Described`).
///
/// Stream: `address, len, cap, heap` (heap already 0 when `inline` holds), then the `len`
/// elements of `elem_size` bytes from `data` (with `swiss`: the full slots among `cap`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DescribedArray {
    /// sizeof the container.
    pub size: u64,
    pub elem_size: u64,
    pub data: Expr,
    pub len: Expr,
    pub cap: Expr,
    pub heap: Expr,
    pub inline: Option<Expr>,
    /// Layout `control_bytes`: `data` is slot 0, `cap` the slots scanned; the stream's
    /// count is that of the full slots, then those elements (`len` must equal it).
    #[serde(default)]
    pub swiss: Option<Swiss>,
    /// Layout `node_chains`: `data` is the bucket array, `cap` the bucket count; the
    /// elements are the nodes of every bucket's chain, in bucket then chain order. The
    /// stream's heap adds `len · node_size`.
    #[serde(default)]
    pub chains: Option<Chains>,
    /// Layout `btree`: `data` is the root node (not read when `len` is 0); the elements are
    /// every node's values, in key order. The stream's heap is the nodes' bytes.
    #[serde(default)]
    pub btree: Option<Box<Btree>>,
}

/// A B-tree's nodes: per-node expressions of the node's address ([`Expr::Arg`]) and the
/// constants that place values and children in a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Btree {
    /// Index of a node's first value; its values are `[start, finish)`.
    pub start: Expr,
    pub finish: Expr,
    /// Non-zero for a leaf (no children); an internal node's children are
    /// `[start, finish]`.
    pub leaf: Expr,
    /// Bytes the node was allocated with.
    pub node_size: Expr,
    /// Value `i` is at `node + values_off + i · elem_size`.
    pub values_off: u64,
    /// Child `i` (a node pointer) is at `node + children_off + 8 i`.
    pub children_off: u64,
    /// Most values a node holds: a `finish` beyond it is corrupt.
    pub node_slots: u64,
}

/// A node-based hash map's node: where its value and its next pointer sit, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Chains {
    pub next_off: u64,
    pub value_off: u64,
    pub node_size: u64,
    /// Buckets b and b^1 (b even) holding one non-null pointer share a tree of chains.
    #[serde(default)]
    pub tree: Option<ChainTree>,
}

/// The tree a bucket pair shares (protobuf's `Map`: a `std::map<key, Node*>` once a chain
/// would exceed 8 nodes): a libstdc++ red-black tree, node links at `rbtree::LEFT` and
/// `rbtree::RIGHT`, each node holding the head of a chain. Charged: the tree object once,
/// each tree node once; the chains' nodes as any chain's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ChainTree {
    /// Bytes of the tree object.
    pub size: u64,
    /// Offset in the tree object of the root node's address.
    pub root_off: u64,
    /// Bytes of a tree node.
    pub node_size: u64,
    /// Offset in a tree node of the chain head it holds.
    pub chain_off: u64,
}

/// The per-slot expressions of a Swiss table; [`Expr::Arg`] is their argument.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Swiss {
    /// Address of slot `i`'s control byte (`Arg` = i).
    pub ctrl_at: Expr,
    /// Non-zero when the slot is full (`Arg` = its control byte).
    pub full: Expr,
}

impl DescribedArray {
    /// exclusiveSize (docs/containers.md, "What is charged"): sizeof + heap − len · sizeof(elem).
    pub fn exclusive(&self, len: u64, heap: u64) -> u64 {
        self.size
            .saturating_add(heap)
            .saturating_sub(len.saturating_mul(self.elem_size))
    }
}

enum Bound {
    Type(TypeId),
    Value(u64),
}

struct Ctx<'a> {
    d: &'a Description,
    tg: &'a TypeGraph,
    id: TypeId,
    qualified: String,
    args: Vec<(String, Bound)>,
    fields: Vec<(String, Expr)>,
    named: &'a NamedTypes,
}

/// Compiles `d` for struct `id`; returns the plan data, the element type and whether
/// elements are owned pointers to it (then 8 bytes each).
pub fn compile(
    d: &Description,
    tg: &TypeGraph,
    id: TypeId,
    named: &NamedTypes,
) -> Result<(DescribedArray, TypeId, bool), DescribeError> {
    let qualified = crate::typegraph::names::qualified_or_anon(tg, id);
    let targs = tg
        .as_struct(id)
        .map(|s| s.template_args.clone())
        .unwrap_or_default();
    if d.args.len() > targs.len() {
        return Err(d.error(
            d.line,
            format!(
                "{qualified} has {} template argument(s); the description names {}",
                targs.len(),
                d.args.len()
            ),
        ));
    }
    let args = d
        .args
        .iter()
        .zip(&targs)
        .filter(|(n, _)| n.as_str() != "_")
        .map(|(n, a)| {
            let b = match a {
                TemplateArg::Type { ty, .. } => Bound::Type(*ty),
                TemplateArg::Value(v) => Bound::Value(*v as u64),
            };
            (n.clone(), b)
        })
        .collect();
    let mut cx = Ctx {
        d,
        tg,
        id,
        qualified,
        args,
        fields: Vec::new(),
        named,
    };
    for (name, spec) in &d.fields {
        let e = cx.field(name, spec)?;
        cx.fields.push((name.clone(), e));
    }
    let elem_at = d
        .elem
        .as_ref()
        .ok_or_else(|| d.error(d.line, "an array needs `elem` (its element type)"))?;
    let mut elem = cx.type_of(&elem_at.v, elem_at.line)?;
    let Layout::Array(a) = &d.layout;
    // Owned pointers: `elem` may name the element (`T*`) or the owned object (`T`).
    if a.owned
        && let Kind::Pointer { target: Some(t) } = &tg.get(tg.resolve(elem)).kind
    {
        elem = *t;
    }
    if !tg.is_complete(elem) {
        return Err(d.error(
            elem_at.line,
            format!("element type `{}` is incomplete", elem_at.v),
        ));
    }
    let len = cx.expr(&a.len)?;
    let out = DescribedArray {
        size: tg.size(id),
        elem_size: if a.owned { 8 } else { tg.size(elem) },
        data: cx.expr(&a.data)?,
        cap: a.cap.as_ref().map_or(Ok(len.clone()), |c| cx.expr(c))?,
        len,
        heap: cx.expr(&a.heap)?,
        inline: a.inline.as_ref().map(|c| cx.expr(c)).transpose()?,
        swiss: match &a.swiss {
            None => None,
            Some(sw) => {
                let ctrl = cx.expr(&sw.ctrl)?;
                let ctrl_at = match &sw.ctrl_at {
                    Some(e) => cx.fold_in(&e.v, e.line, &[("i", Expr::Arg), ("ctrl", ctrl)])?,
                    None => Expr::Bin(BinOp::Add, Box::new(ctrl), Box::new(Expr::Arg)),
                };
                Some(Swiss {
                    ctrl_at,
                    full: cx.fold_in(&sw.full.v, sw.full.line, &[("c", Expr::Arg)])?,
                })
            }
        },
        btree: match &a.btree {
            None => None,
            Some(b) => Some(Box::new(cx.btree(b, tg.size(elem), tg.align(elem))?)),
        },
        chains: match &a.chains {
            None => None,
            Some(c) => {
                let next_off = cx.constant(&c.next_offset, "next_offset")?;
                let value_off = cx.constant(&c.value_offset, "value_offset")?;
                let node_size = cx.constant(&c.node_size, "node_size")?;
                let elem_size = tg.size(elem);
                if value_off.saturating_add(elem_size) > node_size
                    || next_off.saturating_add(8) > node_size
                {
                    return Err(d.error(
                        c.node_size.line,
                        format!(
                            "a node of {node_size} bytes cannot hold the value ({elem_size} bytes at {value_off}) and the next pointer (at {next_off})"
                        ),
                    ));
                }
                let tree = c.tree.as_ref().map(|t| cx.chain_tree(t)).transpose()?;
                Some(Chains {
                    next_off,
                    value_off,
                    node_size,
                    tree,
                })
            }
        },
    };
    Ok((out, elem, a.owned))
}

impl Ctx<'_> {
    /// `[container.node_chains.tree]`: four constants, checked to hold the root pointer, the
    /// red-black links and the chain head.
    fn chain_tree(&self, t: &super::parse::ChainTreeDesc) -> Result<ChainTree, DescribeError> {
        let tree = ChainTree {
            size: self.constant(&t.size, "tree size")?,
            root_off: self.constant(&t.root, "tree root")?,
            node_size: self.constant(&t.node_size, "tree node_size")?,
            chain_off: self.constant(&t.chain, "tree chain")?,
        };
        if tree.root_off.saturating_add(8) > tree.size {
            return Err(self.err(
                t.root.line,
                format!(
                    "a tree object of {} bytes cannot hold the root pointer at {}",
                    tree.size, tree.root_off
                ),
            ));
        }
        let links_end = crate::containers::rbtree::RIGHT + 8;
        if tree.chain_off.saturating_add(8) > tree.node_size || tree.node_size < links_end {
            return Err(self.err(
                t.node_size.line,
                format!(
                    "a tree node of {} bytes cannot hold the red-black links ({links_end} bytes) and the chain head (at {})",
                    tree.node_size, tree.chain_off
                ),
            ));
        }
        Ok(tree)
    }

    /// The `btree` keys: the constants first (each may name those before it), then the
    /// per-node expressions of `node`, which may name them all.
    fn btree(
        &self,
        b: &super::parse::BtreeDesc,
        elem_size: u64,
        elem_align: u64,
    ) -> Result<Btree, DescribeError> {
        let mut names = vec![
            ("elem_size", Expr::Const(elem_size)),
            ("elem_align", Expr::Const(elem_align)),
        ];
        let constant = |a: &At<Ast>, key: &'static str, names: &mut Vec<(&str, Expr)>| {
            let v = self
                .fold_in(&a.v, a.line, names)?
                .constant()
                .ok_or_else(|| {
                    self.err(
                        a.line,
                        format!("{key} must be a constant (sizeof, alignof, elem_size, numbers)"),
                    )
                })?;
            names.push((key, Expr::Const(v)));
            Ok::<u64, DescribeError>(v)
        };
        let values_off = constant(&b.values_offset, "values_offset", &mut names)?;
        let node_slots = constant(&b.node_slots, "node_slots", &mut names)?;
        let children_off = constant(&b.children_offset, "children_offset", &mut names)?;
        if node_slots == 0 || node_slots > 65_535 {
            return Err(self.err(
                b.node_slots.line,
                format!("node_slots is {node_slots}, not 1..=65535"),
            ));
        }
        let values_end = node_slots
            .checked_mul(elem_size)
            .and_then(|v| v.checked_add(values_off));
        if values_end.is_none_or(|e| e > children_off) {
            return Err(self.err(
                b.children_offset.line,
                format!(
                    "children at {children_off} overlap {node_slots} values of {elem_size} bytes at {values_off}"
                ),
            ));
        }
        names.push(("node", Expr::Arg));
        let node = |a: &At<Ast>| self.fold_in(&a.v, a.line, &names);
        Ok(Btree {
            start: node(&b.start)?,
            finish: node(&b.finish)?,
            leaf: node(&b.leaf)?,
            node_size: node(&b.node_size)?,
            values_off,
            children_off,
            node_slots,
        })
    }

    fn err(&self, line: usize, what: String) -> DescribeError {
        self.d.error(line, what)
    }

    /// Offset and declared type of a member path of the container.
    fn member(&self, path: &str, line: usize) -> Result<(u64, TypeId), DescribeError> {
        self.path_in(self.id, path)
            .ok_or_else(|| self.err(line, format!("{} has no member {path}", self.qualified)))
    }

    /// A member path of type `id`, after base flattening; a step may name a member of a
    /// union (Abseil's `map_slot_type`), at offset 0 as every union member is.
    fn path_in(&self, id: TypeId, path: &str) -> Option<(u64, TypeId)> {
        let (mut off, mut cur) = (0u64, id);
        for name in path.split('.') {
            let r = self.tg.resolve(cur);
            let (o, t) = match self.tg.as_struct(r) {
                Some(st) if st.is_union => st
                    .members
                    .iter()
                    .find(|m| m.name.as_deref() == Some(name))
                    .map(|m| (m.bit_offset / 8, m.ty))?,
                _ => crate::containers::field(self.tg, r, &[name]).ok()?,
            };
            off = off.checked_add(o)?;
            cur = t;
        }
        Some((off, cur))
    }

    /// `pointee:PATH`: the pointer member is the longest prefix of PATH that is one; the
    /// rest of PATH is a member path in the type it points to (`slots_.value`).
    fn pointee(&self, path: &str, line: usize) -> Result<TypeId, DescribeError> {
        let target = |p: &str| {
            let ty = self.path_in(self.id, p)?.1;
            match &self.tg.get(self.tg.resolve(ty)).kind {
                Kind::Pointer { target: Some(t) } => Some(*t),
                _ => None,
            }
        };
        if let Some(t) = target(path) {
            return Ok(t);
        }
        let mut cuts: Vec<usize> = path.match_indices('.').map(|(i, _)| i).collect();
        cuts.reverse();
        for i in cuts {
            if let Some(t) = target(&path[..i])
                && let Some((_, ty)) = self.path_in(t, &path[i + 1..])
            {
                return Ok(ty);
            }
        }
        Err(self.err(
            line,
            format!(
                "{path} is not a pointer member of {} (nor one followed by a member path in its target)",
                self.qualified
            ),
        ))
    }

    fn field(&self, name: &str, spec: &At<FieldSpec>) -> Result<Expr, DescribeError> {
        let size = self.tg.size(self.id);
        let (off, width) = match &spec.v {
            FieldSpec::Path { path, width } => {
                let (off, ty) = self.member(path, spec.line)?;
                let own = self.tg.size(ty);
                let width = match width {
                    Some(w) => u64::from(*w),
                    None if matches!(own, 1 | 2 | 4 | 8) => own,
                    None => {
                        return Err(self.err(
                            spec.line,
                            format!(
                                "field {name}: {}.{path} is {own} bytes, not an integer of 1, 2, 4 or 8",
                                self.qualified
                            ),
                        ));
                    }
                };
                (off, width)
            }
            FieldSpec::Offset { offset, width } => (*offset, u64::from(*width)),
        };
        if off.checked_add(width).is_none_or(|e| e > size) {
            return Err(self.err(
                spec.line,
                format!(
                    "field {name}: bytes {off}..{} lie outside {} ({size} bytes)",
                    off.saturating_add(width),
                    self.qualified
                ),
            ));
        }
        Ok(Expr::Field {
            off,
            width: width as u8,
        })
    }

    /// A type named in a description: a template argument, `member:PATH`, `pointee:PATH`.
    fn type_of(&self, name: &str, line: usize) -> Result<TypeId, DescribeError> {
        if let Some(path) = name.strip_prefix("member:") {
            return Ok(self.member(path, line)?.1);
        }
        if let Some(path) = name.strip_prefix("pointee:") {
            return self.pointee(path, line);
        }
        match self.args.iter().find(|(n, _)| n == name) {
            Some((_, Bound::Type(t))) => Ok(*t),
            Some((_, Bound::Value(_))) => Err(self.err(
                line,
                format!("template argument {name} is a value, not a type"),
            )),
            None if !super::names::is_spelled(self.d, name) => {
                Err(self.err(line, format!("unknown template argument {name}")))
            }
            None => {
                let spelled =
                    super::names::substitute(self.d, self.tg, self.id, name).ok_or_else(|| {
                        self.err(
                            line,
                            format!(
                                "`{name}` names a template argument {} does not have",
                                self.qualified
                            ),
                        )
                    })?;
                self.named.get(&spelled).copied().ok_or_else(|| {
                    self.err(
                        line,
                        format!("no type `{spelled}` in the program's DWARF (nor a template argument of that name)"),
                    )
                })
            }
        }
    }

    /// An expression that must not depend on the object (`node_size`, offsets in a node).
    fn constant(&self, a: &At<Ast>, key: &str) -> Result<u64, DescribeError> {
        self.expr(a)?.constant().ok_or_else(|| {
            self.err(
                a.line,
                format!(
                    "{key} must be a constant (sizeof, offsetof, numbers), not read from the object"
                ),
            )
        })
    }

    fn expr(&self, a: &At<Ast>) -> Result<Expr, DescribeError> {
        self.fold(&a.v, a.line)
    }

    fn fold(&self, a: &Ast, line: usize) -> Result<Expr, DescribeError> {
        self.fold_in(a, line, &[])
    }

    /// [`Ctx::fold`] where the names of `extra` (a per-slot argument) come first.
    fn fold_in(&self, a: &Ast, line: usize, extra: &[(&str, Expr)]) -> Result<Expr, DescribeError> {
        let f = |x: &Ast| self.fold_in(x, line, extra);
        Ok(match a {
            Ast::Num(n) => Expr::Const(*n),
            Ast::This => Expr::This,
            Ast::Name(n) => {
                if let Some((_, e)) = extra.iter().find(|(x, _)| x == n) {
                    e.clone()
                } else if let Some((_, e)) = self.fields.iter().find(|(f, _)| f == n) {
                    e.clone()
                } else if let Some((_, Bound::Value(v))) = self.args.iter().find(|(f, _)| f == n) {
                    Expr::Const(*v)
                } else {
                    return Err(self.err(
                        line,
                        format!("unknown name {n} (not a field or a value argument)"),
                    ));
                }
            }
            Ast::SizeOf(t) => Expr::Const(self.tg.size(self.type_of(t, line)?)),
            Ast::AlignOf(t) => Expr::Const(self.tg.align(self.type_of(t, line)?)),
            Ast::OffsetOf(p) => Expr::Const(self.member(p, line)?.0),
            Ast::Load(x, w) => Expr::Load(Box::new(f(x)?), *w),
            Ast::Un(op, x) => Expr::Un(*op, Box::new(f(x)?)),
            Ast::Bin(op, x, y) => Expr::Bin(*op, Box::new(f(x)?), Box::new(f(y)?)),
        })
    }
}
