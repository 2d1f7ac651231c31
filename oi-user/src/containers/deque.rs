//! `std::deque<T>` (80 bytes): a map of block pointers (`_M_map`, `_M_map_size` slots) and two
//! iterators (`_M_cur, _M_first, _M_last, _M_node`). Blocks hold 512 / sizeof T elements
//! (one if T ≥ 512 bytes). Charged: the object, every map slot, every block, minus the
//! elements (docs/semantics.md, "libstdc++ node sizes").

use super::{LayoutError, field};
use crate::typegraph::{TypeGraph, TypeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DequeLayout {
    pub map_off: u64,
    pub map_size_off: u64,
    /// `_M_cur, _M_first, _M_last, _M_node` of `_M_start` and of `_M_finish`.
    pub start: [u64; 4],
    pub finish: [u64; 4],
    pub elem_size: u64,
    pub size: u64,
}

pub fn layout(tg: &TypeGraph, id: TypeId, elem: TypeId) -> Result<DequeLayout, LayoutError> {
    let it = |which: &str| -> Result<[u64; 4], LayoutError> {
        let mut out = [0; 4];
        for (i, f) in ["_M_cur", "_M_first", "_M_last", "_M_node"]
            .iter()
            .enumerate()
        {
            out[i] = field(tg, id, &["_M_impl", which, f])?.0;
        }
        Ok(out)
    };
    Ok(DequeLayout {
        map_off: field(tg, id, &["_M_impl", "_M_map"])?.0,
        map_size_off: field(tg, id, &["_M_impl", "_M_map_size"])?.0,
        start: it("_M_start")?,
        finish: it("_M_finish")?,
        elem_size: tg.size(elem).max(1),
        size: tg.size(id),
    })
}

/// What the walker reads from a deque object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DequeState {
    pub len: u64,
    pub map_slots: u64,
    pub blocks: u64,
    pub start: [u64; 4],
    pub finish: [u64; 4],
}

impl DequeLayout {
    /// Elements per block (libstdc++ `__deque_buf_size`).
    pub fn block_elems(&self) -> u64 {
        if self.elem_size < 512 {
            512 / self.elem_size
        } else {
            1
        }
    }

    pub fn block_bytes(&self) -> u64 {
        self.block_elems() * self.elem_size
    }

    pub fn read(&self, obj: &[u8]) -> Option<DequeState> {
        let w = |o| super::word(obj, o);
        let start = [
            w(self.start[0])?,
            w(self.start[1])?,
            w(self.start[2])?,
            w(self.start[3])?,
        ];
        let finish = [
            w(self.finish[0])?,
            w(self.finish[1])?,
            w(self.finish[2])?,
            w(self.finish[3])?,
        ];
        let map = w(self.map_off)?;
        if map == 0 {
            return Some(DequeState {
                len: 0,
                map_slots: 0,
                blocks: 0,
                start,
                finish,
            });
        }
        let nodes = finish[3].checked_sub(start[3])? / 8;
        let es = self.elem_size;
        let len = (nodes * self.block_elems() + finish[0].checked_sub(finish[1])? / es)
            .checked_sub(start[0].checked_sub(start[1])? / es)?;
        Some(DequeState {
            len,
            map_slots: w(self.map_size_off)?,
            blocks: nodes + 1,
            start,
            finish,
        })
    }

    /// (exclusiveSize, capacity).
    pub fn account(&self, len: u64, map_slots: u64, blocks: u64) -> (u64, u64) {
        let bytes = blocks * self.block_bytes();
        (
            (self.size + 8 * map_slots + bytes).saturating_sub(len * self.elem_size),
            bytes / self.elem_size,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_deque_of_int_and_of_deque() {
        let l = DequeLayout {
            map_off: 0,
            map_size_off: 8,
            start: [16, 24, 32, 40],
            finish: [48, 56, 64, 72],
            elem_size: 4,
            size: 80,
        };
        assert_eq!(l.account(0, 8, 1), (656, 128));
        assert_eq!(l.account(3, 8, 1), (644, 128));
        let d = DequeLayout { elem_size: 80, ..l };
        assert_eq!(d.account(0, 8, 1), (624, 6));
    }
}
