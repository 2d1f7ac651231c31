//! `std::deque<T>` (80 bytes): a map of block pointers (`_M_map`, `_M_map_size` slots) and two
//! iterators (`_M_cur, _M_first, _M_last, _M_node`). Blocks hold 512 / sizeof T elements
//! (one if T ≥ 512 bytes). Charged: the object, every map slot, every block, minus the
//! elements (docs/semantics.md, "libstdc++ node sizes").
//!
//! libc++'s `std::__1::deque<T>` (48 bytes, [`LibcxxDeque`]) keeps its map in a
//! `__split_buffer` of block pointers (`__first_` the allocation, `[__begin_, __end_)` the
//! blocks, `__end_cap_` its end), the index of the first element in the first block's
//! sequence (`__start_`) and the size. Its blocks hold 4096 / sizeof T elements, 16 when T is
//! 256 bytes or more. Charged the same way: the object, every map slot, every block (spare
//! blocks at either end included), minus the elements. Built in rather than described: the
//! description language walks contiguous elements, and a deque's lie in blocks.

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
    /// libc++'s layout; then `map_off` is its map's `__first_` and the iterators are unused.
    #[serde(default)]
    pub libcxx: Option<LibcxxDeque>,
}

/// Offsets in a libc++ deque: its map's four pointers, `__start_` and the size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LibcxxDeque {
    pub first: u64,
    pub begin: u64,
    pub end: u64,
    pub end_cap: u64,
    pub start: u64,
    pub count: u64,
}

pub fn layout(tg: &TypeGraph, id: TypeId, elem: TypeId) -> Result<DequeLayout, LayoutError> {
    if let Ok((first, _)) = field(tg, id, &["__map_", "__first_"]) {
        let c = LibcxxDeque {
            first,
            begin: field(tg, id, &["__map_", "__begin_"])?.0,
            end: field(tg, id, &["__map_", "__end_"])?.0,
            end_cap: field(tg, id, &["__map_", "__end_cap_", "__value_"])?.0,
            start: field(tg, id, &["__start_"])?.0,
            count: field(tg, id, &["__size_", "__value_"])?.0,
        };
        return Ok(DequeLayout {
            map_off: first,
            map_size_off: c.end_cap,
            start: [0; 4],
            finish: [0; 4],
            elem_size: tg.size(elem).max(1),
            size: tg.size(id),
            libcxx: Some(c),
        });
    }
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
        libcxx: None,
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
    /// libc++: the map slot of the block holding the first element, that block's number
    /// among the map's blocks, and the element's index in it.
    pub first_slot: u64,
    pub first_block: u64,
    pub first_index: u64,
}

impl DequeLayout {
    /// Elements per block (libstdc++ `__deque_buf_size`; libc++ `__deque_block_size`).
    pub fn block_elems(&self) -> u64 {
        if self.libcxx.is_some() {
            return if self.elem_size < 256 {
                4096 / self.elem_size
            } else {
                16
            };
        }
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
        if let Some(c) = &self.libcxx {
            let mut st = DequeState {
                len: 0,
                map_slots: 0,
                blocks: 0,
                start: [0; 4],
                finish: [0; 4],
                first_slot: 0,
                first_block: 0,
                first_index: 0,
            };
            let first = w(c.first)?;
            if first == 0 {
                return Some(st);
            }
            let (begin, end, end_cap, start) = (w(c.begin)?, w(c.end)?, w(c.end_cap)?, w(c.start)?);
            st.map_slots = end_cap.checked_sub(first)? / 8;
            st.blocks = end.checked_sub(begin)? / 8;
            st.len = w(c.count)?;
            let bs = self.block_elems();
            st.first_block = start / bs;
            st.first_slot = begin.wrapping_add(st.first_block.wrapping_mul(8));
            st.first_index = start % bs;
            return Some(st);
        }
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
                first_slot: 0,
                first_block: 0,
                first_index: 0,
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
            first_slot: 0,
            first_block: 0,
            first_index: 0,
        })
    }

    /// libc++: how many blocks the elements touch from the first one, or None when they
    /// would reach past the map's blocks.
    pub fn libcxx_touched(&self, st: &DequeState) -> Option<u64> {
        if st.len == 0 {
            return Some(0);
        }
        let bs = self.block_elems();
        let touched = st.first_index.checked_add(st.len)?.div_ceil(bs);
        (st.first_block.checked_add(touched)? <= st.blocks).then_some(touched)
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
            libcxx: None,
        };
        assert_eq!(l.account(0, 8, 1), (656, 128));
        assert_eq!(l.account(3, 8, 1), (644, 128));
        let d = DequeLayout { elem_size: 80, ..l };
        assert_eq!(d.account(0, 8, 1), (624, 6));
    }

    #[test]
    fn libcxx_blocks_are_4096_bytes_or_16_elements() {
        let c = LibcxxDeque {
            first: 0,
            begin: 8,
            end: 16,
            end_cap: 24,
            start: 32,
            count: 40,
        };
        let l = DequeLayout {
            map_off: 0,
            map_size_off: 24,
            start: [0; 4],
            finish: [0; 4],
            elem_size: 4,
            size: 48,
            libcxx: Some(c),
        };
        assert_eq!(l.block_elems(), 1024);
        assert_eq!(DequeLayout { elem_size: 24, ..l }.block_elems(), 170);
        assert_eq!(
            DequeLayout {
                elem_size: 256,
                ..l
            }
            .block_elems(),
            16
        );
        // 3,000 ints from index 0: three blocks touched, in a map of 4 slots holding 3.
        let mut obj = [0u8; 48];
        for (off, v) in [
            (0, 0x1000u64),
            (8, 0x1000),
            (16, 0x1018),
            (24, 0x1020),
            (32, 0),
            (40, 3000),
        ] {
            obj[off..off + 8].copy_from_slice(&v.to_le_bytes());
        }
        let st = l.read(&obj).expect("a deque");
        assert_eq!((st.len, st.map_slots, st.blocks), (3000, 4, 3));
        assert_eq!(l.libcxx_touched(&st), Some(3));
        assert_eq!(
            l.account(st.len, st.map_slots, st.blocks),
            (48 + 32 + 3 * 4096 - 12000, 3072)
        );
    }
}
