//! Recognised standard-library containers (libstdc++, g++ 12, x86-64), one file per family.
//!
//! Each family file knows three things: how to find its fields in the container's own DWARF
//! layout (by member name after base flattening, so custom allocators and stateful
//! comparators shift nothing by guesswork), how the interpreter walks it in target memory,
//! and how its size is charged (docs/semantics.md, "Kind by kind",
//! "libstdc++ node sizes"). Recognition (which family a type is) is the type graph's
//! (`typegraph::kinds`); nothing here decides it.

pub mod adapter;
pub mod array;
pub mod deque;
pub mod hashtable;
pub mod list;
pub mod optional;
pub mod pair;
pub mod rbtree;
pub mod refwrap;
pub mod smart_ptr;
pub mod string;
pub mod variant;
pub mod vector;

use crate::typegraph::{Kind, TypeGraph, TypeId, layout};

// Which container a type is belongs to the type graph (it is decided while the graph is built);
// the families here only lay out and walk what it recognised.
pub use crate::typegraph::kinds::{ContainerKind, recognise};

/// Which rules charge a container's bytes (docs/semantics.md, "Two sizings"): `Real`, the
/// bytes its library really obtained from the allocator for it; `Oi`, Object Introspection's
/// rules, byte for byte. Decided when the plan is built (a hash node's size is static) and
/// read by the decoder and the walkers that add up sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Sizing {
    Real,
    #[default]
    Oi,
}

impl Sizing {
    /// As `--sizes` and the summary spell it.
    pub fn name(self) -> &'static str {
        match self {
            Sizing::Real => "real",
            Sizing::Oi => "oi",
        }
    }

    /// Bytes a heap string allocated beyond its capacity, in characters: the terminator,
    /// which OI's rules do not count.
    pub fn terminator(self) -> u64 {
        u64::from(self == Sizing::Real)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("unexpected layout of {container}: {what}")]
    Unexpected { container: String, what: String },
}

pub(crate) fn unexpected(tg: &TypeGraph, id: TypeId, what: &str) -> LayoutError {
    LayoutError::Unexpected {
        container: crate::typegraph::names::qualified_or_anon(tg, id),
        what: what.to_string(),
    }
}

/// Byte offset of the flattened member `path` (a member name, or names through nested
/// members: `["_M_impl", "_M_start"]`) of struct `id`, and its declared type.
pub(crate) fn field(
    tg: &TypeGraph,
    id: TypeId,
    path: &[&str],
) -> Result<(u64, TypeId), LayoutError> {
    let mut cur = id;
    let mut off = 0;
    for name in path {
        let members = layout::flatten(tg, cur);
        let m = members
            .iter()
            .find(|m| m.name.as_deref() == Some(*name))
            .ok_or_else(|| unexpected(tg, id, &format!("no member {}", path.join("."))))?;
        off += m.bit_offset / 8;
        cur = m.ty;
    }
    Ok((off, cur))
}

/// Like [`field`], but finds the first flattened member (searching nested structs
/// depth-first) whose resolved type is a pointer; for fields named differently across
/// versions (`unique_ptr`'s stored pointer inside its tuple).
/// `want` restricts the search to pointers to that (resolved) type.
pub(crate) fn first_pointer(
    tg: &TypeGraph,
    id: TypeId,
    want: Option<TypeId>,
    depth: u32,
) -> Option<(u64, TypeId)> {
    if depth > 8 {
        return None;
    }
    for m in layout::flatten(tg, id) {
        let r = tg.resolve(m.ty);
        match &tg.get(r).kind {
            Kind::Pointer { target } if want.is_none() || target.map(|t| tg.resolve(t)) == want => {
                return Some((m.bit_offset / 8, m.ty));
            }
            Kind::Struct(_) => {
                if let Some((o, t)) = first_pointer(tg, r, want, depth + 1) {
                    return Some((m.bit_offset / 8 + o, t));
                }
            }
            _ => {}
        }
    }
    None
}

/// The little-endian word at byte `off` of `bytes`, if in range.
pub fn word(bytes: &[u8], off: u64) -> Option<u64> {
    uint(bytes, off, 8)
}

/// A little-endian unsigned integer of `size` (1..=8) bytes at `off`.
pub fn uint(bytes: &[u8], off: u64, size: u64) -> Option<u64> {
    let off = usize::try_from(off).ok()?;
    let size = usize::try_from(size).ok()?.min(8);
    let b = bytes.get(off..off.checked_add(size)?)?;
    let mut w = [0u8; 8];
    w[..size].copy_from_slice(b);
    Some(u64::from_le_bytes(w))
}

/// round(x, a) of docs/semantics.md, "libstdc++ node sizes".
pub fn round_up(x: u64, a: u64) -> u64 {
    let a = a.max(1);
    x.div_ceil(a) * a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_rounding() {
        assert_eq!(round_up(16, 4) + 4, 20);
        assert_eq!(round_up(20, 8), 24);
        assert_eq!(round_up(0, 8), 0);
    }
}
