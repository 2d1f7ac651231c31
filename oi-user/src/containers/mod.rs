//! Recognised standard-library containers (libstdc++, g++ 12, x86-64), one file per family.
//!
//! Each family file knows three things: how to find its fields in the container's own DWARF
//! layout (by member name after base flattening, so custom allocators and stateful
//! comparators shift nothing by guesswork), how the interpreter walks it in target memory,
//! and how its size is charged (docs/semantics.md, "Kind by kind",
//! "libstdc++ node sizes"). Recognition is by the qualified DWARF name (docs/semantics.md,
//! "Type names"): the name itself or the name followed by `<`.

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainerKind {
    Vector,
    String,
    List,
    Deque,
    Set,
    MultiSet,
    Map,
    MultiMap,
    UnorderedSet,
    UnorderedMultiSet,
    UnorderedMap,
    UnorderedMultiMap,
    Pair,
    Array,
    Optional,
    Variant,
    UniquePtr,
    SharedPtr,
    WeakPtr,
    ReferenceWrapper,
    Stack,
    Queue,
    PriorityQueue,
}

const NAMES: &[(&str, ContainerKind)] = &[
    ("std::vector", ContainerKind::Vector),
    ("std::__cxx11::basic_string", ContainerKind::String),
    ("std::__cxx11::list", ContainerKind::List),
    ("std::deque", ContainerKind::Deque),
    ("std::set", ContainerKind::Set),
    ("std::multiset", ContainerKind::MultiSet),
    ("std::map", ContainerKind::Map),
    ("std::multimap", ContainerKind::MultiMap),
    ("std::unordered_set", ContainerKind::UnorderedSet),
    ("std::unordered_multiset", ContainerKind::UnorderedMultiSet),
    ("std::unordered_map", ContainerKind::UnorderedMap),
    ("std::unordered_multimap", ContainerKind::UnorderedMultiMap),
    ("std::pair", ContainerKind::Pair),
    ("std::array", ContainerKind::Array),
    ("std::optional", ContainerKind::Optional),
    ("std::variant", ContainerKind::Variant),
    ("std::unique_ptr", ContainerKind::UniquePtr),
    ("std::shared_ptr", ContainerKind::SharedPtr),
    ("std::weak_ptr", ContainerKind::WeakPtr),
    ("std::reference_wrapper", ContainerKind::ReferenceWrapper),
    ("std::stack", ContainerKind::Stack),
    ("std::queue", ContainerKind::Queue),
    ("std::priority_queue", ContainerKind::PriorityQueue),
];

/// The container a qualified DWARF type name denotes, if any.
pub fn recognise(qualified: &str) -> Option<ContainerKind> {
    NAMES.iter().find_map(|(n, k)| {
        let rest = qualified.strip_prefix(n)?;
        (rest.is_empty() || rest.starts_with('<')).then_some(*k)
    })
}

impl ContainerKind {
    /// How many leading template type arguments are measured (and therefore spelled by the
    /// full rules rather than by their bare name). `None`: all of them (variant).
    pub fn measured_args(self) -> Option<usize> {
        use ContainerKind::*;
        Some(match self {
            Vector | List | Deque | Set | MultiSet | UnorderedSet | UnorderedMultiSet
            | Optional | UniquePtr | SharedPtr | WeakPtr | ReferenceWrapper | Array => 1,
            String => 1,
            Map | MultiMap | UnorderedMap | UnorderedMultiMap | Pair => 2,
            // The element and the underlying container; priority_queue's comparator is not.
            Stack | Queue | PriorityQueue => 2,
            Variant => return None,
        })
    }

    /// Whether the node shows `pointer` (docs/semantics.md, "Kind by kind").
    pub fn is_map(self) -> bool {
        matches!(
            self,
            ContainerKind::Map
                | ContainerKind::MultiMap
                | ContainerKind::UnorderedMap
                | ContainerKind::UnorderedMultiMap
        )
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
    fn recognition_is_by_exact_qualified_prefix() {
        assert_eq!(
            recognise("std::vector<int, std::allocator<int> >"),
            Some(ContainerKind::Vector)
        );
        assert_eq!(recognise("std::vector"), Some(ContainerKind::Vector));
        assert_eq!(recognise("std::vectorx<int>"), None);
        assert_eq!(recognise("std::_Vector_base<int>"), None);
        assert_eq!(recognise("std::map<int, int>"), Some(ContainerKind::Map));
        assert_eq!(
            recognise("std::multimap<int, int>"),
            Some(ContainerKind::MultiMap)
        );
        assert_eq!(recognise("std::tuple<int>"), None);
        assert_eq!(
            recognise(
                "std::priority_queue<int, std::vector<int, std::allocator<int> >, std::less<int> >"
            ),
            Some(ContainerKind::PriorityQueue)
        );
        assert_eq!(recognise("std::stacked<int>"), None);
    }

    #[test]
    fn node_rounding() {
        assert_eq!(round_up(16, 4) + 4, 20);
        assert_eq!(round_up(20, 8), 24);
        assert_eq!(round_up(0, 8), 0);
    }
}
