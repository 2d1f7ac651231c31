//! `std::__cxx11::list<T>` (24 bytes): a sentinel `_M_impl._M_node` (`_M_next`, `_M_prev`,
//! `_M_size`); nodes are two links then the value at round(16, alignof T).

use super::{LayoutError, field, round_up};
use crate::typegraph::{TypeGraph, TypeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListLayout {
    pub head_off: u64,
    pub size_off: u64,
    pub value_off: u64,
    pub node_size: u64,
    pub elem_size: u64,
    pub size: u64,
}

pub fn layout(tg: &TypeGraph, id: TypeId, elem: TypeId) -> Result<ListLayout, LayoutError> {
    let (head_off, _) = field(tg, id, &["_M_impl", "_M_node"])?;
    let (size_off, _) = field(tg, id, &["_M_impl", "_M_node", "_M_size"])?;
    let av = tg.align(elem);
    let value_off = round_up(16, av);
    Ok(ListLayout {
        head_off,
        size_off,
        value_off,
        node_size: round_up(value_off + tg.size(elem), av.max(8)),
        elem_size: tg.size(elem),
        size: tg.size(id),
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
