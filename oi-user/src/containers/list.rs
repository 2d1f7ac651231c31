//! `std::__cxx11::list<T>` (24 bytes): a sentinel `_M_impl._M_node` (`_M_next`, `_M_prev`,
//! `_M_size`); nodes are two links then the value at round(16, alignof T).
//! libc++'s `std::__1::list<T>` is the same circular list with the links swapped: a sentinel
//! `__end_` (`__prev_`, `__next_`), the size after it (`__size_alloc_`), nodes `__prev_`,
//! `__next_`, value. Built in rather than described: the description language's
//! `node_chains` ends a chain at a null pointer, and a circular list ends at its sentinel.
//!
//! `forward_list<T>` ([`forward_layout`]) is walked as such a list without a size: the head
//! is the object's before-begin node (libc++ `__before_begin_`, libstdc++ `_M_impl._M_head`),
//! each node a next link then the value at round(8, alignof T), and the last node's link is
//! null. The walkers count the nodes first (at most `MAX_ELEMENTS`, so a cycle ends as
//! corrupt), then walk that many. Built in: neither list keeps its length, which
//! `node_chains` needs.

use super::{LayoutError, field, round_up};
use crate::typegraph::{TypeGraph, TypeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListLayout {
    /// The sentinel node in the list object.
    pub head_off: u64,
    /// Where a node (the sentinel too) holds the next node's address.
    pub next_off: u64,
    pub size_off: u64,
    pub value_off: u64,
    pub node_size: u64,
    pub elem_size: u64,
    pub size: u64,
    /// A `forward_list`: no size field (`size_off` unused); the nodes up to a null link are
    /// counted.
    #[serde(default)]
    pub counted: bool,
}

pub fn layout(tg: &TypeGraph, id: TypeId, elem: TypeId) -> Result<ListLayout, LayoutError> {
    let libcxx = field(tg, id, &["__end_"]).is_ok();
    let (head_off, next_off, size_off) = if libcxx {
        let (head_off, _) = field(tg, id, &["__end_"])?;
        let (next, _) = field(tg, id, &["__end_", "__next_"])?;
        let (size_off, _) = field(tg, id, &["__size_alloc_", "__value_"])?;
        (head_off, next - head_off, size_off)
    } else {
        let (head_off, _) = field(tg, id, &["_M_impl", "_M_node"])?;
        let (size_off, _) = field(tg, id, &["_M_impl", "_M_node", "_M_size"])?;
        (head_off, 0, size_off)
    };
    let av = tg.align(elem);
    let value_off = round_up(16, av);
    Ok(ListLayout {
        head_off,
        next_off,
        size_off,
        value_off,
        node_size: round_up(value_off + tg.size(elem), av.max(8)),
        elem_size: tg.size(elem),
        size: tg.size(id),
        counted: false,
    })
}

/// A `forward_list<T>`'s layout, libc++'s or libstdc++'s.
pub fn forward_layout(tg: &TypeGraph, id: TypeId, elem: TypeId) -> Result<ListLayout, LayoutError> {
    let (head_off, next) = match field(tg, id, &["__before_begin_", "__value_"]) {
        Ok((head, _)) => (
            head,
            field(tg, id, &["__before_begin_", "__value_", "__next_"])?.0,
        ),
        Err(_) => (
            field(tg, id, &["_M_impl", "_M_head"])?.0,
            field(tg, id, &["_M_impl", "_M_head", "_M_next"])?.0,
        ),
    };
    let av = tg.align(elem);
    let value_off = round_up(8, av);
    Ok(ListLayout {
        head_off,
        next_off: next - head_off,
        size_off: 0,
        value_off,
        node_size: round_up(value_off + tg.size(elem), av.max(8)),
        elem_size: tg.size(elem),
        size: tg.size(id),
        counted: true,
    })
}

impl ListLayout {
    pub fn exclusive(&self, len: u64) -> u64 {
        self.size + len * (self.node_size - self.elem_size)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn node_sizes() {
        use super::round_up;
        assert_eq!(round_up(round_up(16, 4) + 4, 8), 24); // int
        assert_eq!(round_up(round_up(16, 8) + 32, 8), 48); // std::string
        assert_eq!(24 + 3 * (24 - 4), 84);
    }
}
