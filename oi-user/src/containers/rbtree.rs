//! `std::set / multiset / map / multimap`: a red-black tree `_M_t._M_impl` with the sentinel
//! `_M_header` (`_M_color, _M_parent, _M_left, _M_right`) and `_M_node_count`. Nodes are the
//! 32-byte base then the value at round(32, alignof V); maps store `pair<const K, M>`.
//! libc++'s `std::__1::map` (a `__tree_`: `__begin_node_`, the end node `__pair1_` whose
//! `__left_` is the root, the count `__pair3_`) has the same node size and value offset, with
//! other links: `__left_` 0, `__right_` 8, `__parent_` 16, `__is_black_` 24. Built in rather
//! than described: no description layout walks a binary tree in order.

use super::{LayoutError, field, round_up};
use crate::typegraph::{TypeGraph, TypeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RbLayout {
    /// The sentinel (end) node in the object, and where it holds the root.
    pub header_off: u64,
    pub root_link: u64,
    /// Where a node holds its left and right child.
    pub left_off: u64,
    pub right_off: u64,
    pub count_off: u64,
    pub value_off: u64,
    pub value_size: u64,
    pub node_size: u64,
    pub size: u64,
}

/// Offsets of the node base's links.
pub const PARENT: u64 = 8;
pub const LEFT: u64 = 16;
pub const RIGHT: u64 = 24;

/// `value_size`/`value_align`: of T for sets, of `pair<const K, M>` for maps.
pub fn layout(
    tg: &TypeGraph,
    id: TypeId,
    value_size: u64,
    value_align: u64,
) -> Result<RbLayout, LayoutError> {
    let value_off = round_up(32, value_align);
    let (header_off, root_link, left_off, right_off, count_off) =
        match field(tg, id, &["_M_t", "_M_impl", "_M_header"]) {
            Ok((header, _)) => (
                header,
                PARENT,
                LEFT,
                RIGHT,
                field(tg, id, &["_M_t", "_M_impl", "_M_node_count"])?.0,
            ),
            Err(e) => {
                let Ok((end, _)) = field(tg, id, &["__tree_", "__pair1_", "__value_"]) else {
                    return Err(e);
                };
                let count = field(tg, id, &["__tree_", "__pair3_", "__value_"])?.0;
                (end, 0, 0, 8, count)
            }
        };
    Ok(RbLayout {
        header_off,
        root_link,
        left_off,
        right_off,
        count_off,
        value_off,
        value_size,
        node_size: round_up(value_off + value_size, value_align.max(8)),
        size: tg.size(id),
    })
}

/// Size and alignment of `pair<const K, M>` and the offset of `second` in it.
pub fn pair_shape(tg: &TypeGraph, key: TypeId, value: TypeId) -> (u64, u64, u64) {
    let align = tg.align(key).max(tg.align(value));
    let second = round_up(tg.size(key), tg.align(value));
    (round_up(second + tg.size(value), align), align, second)
}

impl RbLayout {
    /// exclusiveSize of a set (`is_map` false) or map.
    pub fn exclusive(&self, len: u64, is_map: bool) -> u64 {
        if is_map {
            self.size
        } else {
            self.size + len * (self.node_size - self.value_size)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::round_up;

    #[test]
    fn node_sizes_match_semantics() {
        let node = |vs: u64, va: u64| round_up(round_up(32, va) + vs, va.max(8));
        assert_eq!(node(4, 4), 40); // set<int>
        assert_eq!(node(8, 4), 40); // map<int,int>
        assert_eq!(node(16, 8), 48); // map<int,double>
        assert_eq!(48 + 3 * (40 - 4), 156);
    }
}
