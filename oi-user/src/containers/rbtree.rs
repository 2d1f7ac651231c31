//! `std::set / multiset / map / multimap`: a red-black tree `_M_t._M_impl` with the sentinel
//! `_M_header` (`_M_color, _M_parent, _M_left, _M_right`) and `_M_node_count`. Nodes are the
//! 32-byte base then the value at round(32, alignof V); maps store `pair<const K, M>`.

use super::{LayoutError, field, round_up};
use crate::typegraph::{TypeGraph, TypeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RbLayout {
    pub header_off: u64,
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
    Ok(RbLayout {
        header_off: field(tg, id, &["_M_t", "_M_impl", "_M_header"])?.0,
        count_off: field(tg, id, &["_M_t", "_M_impl", "_M_node_count"])?.0,
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
