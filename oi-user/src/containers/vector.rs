//! `std::vector<T>` (`_M_impl._M_start / _M_finish / _M_end_of_storage`) and the bit-packed
//! `std::vector<bool>` (`_Bit_iterator`s of word pointer + bit offset). Unused capacity is
//! charged to the vector; its `pointer` is the vector object's own address.
//!
//! libc++'s `std::__1::vector<bool>` (24 bytes) is a word pointer `__begin_`, the size in bits
//! `__size_` and the capacity in 64-bit words `__cap_alloc_` ([`LibcxxBits`]); its block is
//! capacity × 8 bytes. Built in rather than described: its elements are bits, and a
//! description's elements are whole objects.

use super::{LayoutError, field};
use crate::typegraph::{TypeGraph, TypeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VectorLayout {
    pub start_off: u64,
    pub finish_off: u64,
    pub eos_off: u64,
    pub elem_size: u64,
    pub size: u64,
}

pub fn layout(tg: &TypeGraph, id: TypeId, elem: TypeId) -> Result<VectorLayout, LayoutError> {
    Ok(VectorLayout {
        start_off: field(tg, id, &["_M_impl", "_M_start"])?.0,
        finish_off: field(tg, id, &["_M_impl", "_M_finish"])?.0,
        eos_off: field(tg, id, &["_M_impl", "_M_end_of_storage"])?.0,
        elem_size: tg.size(elem),
        size: tg.size(id),
    })
}

impl VectorLayout {
    /// (start, len, cap) read from the object bytes.
    pub fn read(&self, obj: &[u8]) -> Option<(u64, u64, u64)> {
        let start = super::word(obj, self.start_off)?;
        let finish = super::word(obj, self.finish_off)?;
        let eos = super::word(obj, self.eos_off)?;
        let es = self.elem_size.max(1);
        let len = finish.checked_sub(start)? / es;
        let cap = eos.checked_sub(start)? / es;
        Some((start, len, cap.max(len)))
    }

    pub fn exclusive(&self, len: u64, cap: u64) -> u64 {
        self.size + cap.saturating_sub(len).saturating_mul(self.elem_size)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VectorBoolLayout {
    pub start_p: u64,
    pub start_bit: u64,
    pub finish_p: u64,
    pub finish_bit: u64,
    pub eos_off: u64,
    pub size: u64,
    /// libc++'s layout (then the offsets above are unused).
    #[serde(default)]
    pub libcxx: Option<LibcxxBits>,
}

/// Offsets in a libc++ `vector<bool>`: the size in bits and the capacity in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LibcxxBits {
    pub size_off: u64,
    pub cap_off: u64,
}

pub fn bool_layout(tg: &TypeGraph, id: TypeId) -> Result<VectorBoolLayout, LayoutError> {
    if let Ok((size_off, _)) = field(tg, id, &["__size_"]) {
        return Ok(VectorBoolLayout {
            start_p: 0,
            start_bit: 0,
            finish_p: 0,
            finish_bit: 0,
            eos_off: 0,
            size: tg.size(id),
            libcxx: Some(LibcxxBits {
                size_off,
                cap_off: field(tg, id, &["__cap_alloc_", "__value_"])?.0,
            }),
        });
    }
    Ok(VectorBoolLayout {
        start_p: field(tg, id, &["_M_impl", "_M_start", "_M_p"])?.0,
        start_bit: field(tg, id, &["_M_impl", "_M_start", "_M_offset"])?.0,
        finish_p: field(tg, id, &["_M_impl", "_M_finish", "_M_p"])?.0,
        finish_bit: field(tg, id, &["_M_impl", "_M_finish", "_M_offset"])?.0,
        eos_off: field(tg, id, &["_M_impl", "_M_end_of_storage"])?.0,
        size: tg.size(id),
        libcxx: None,
    })
}

impl VectorBoolLayout {
    /// (len, cap) in bits.
    pub fn read(&self, obj: &[u8]) -> Option<(u64, u64)> {
        if let Some(c) = &self.libcxx {
            let len = super::word(obj, c.size_off)?;
            let cap = super::word(obj, c.cap_off)?.checked_mul(64)?;
            return Some((len, cap.max(len)));
        }
        let sp = super::word(obj, self.start_p)?;
        let so = super::word(obj, self.start_bit)? & 0xffff_ffff;
        let fp = super::word(obj, self.finish_p)?;
        let fo = super::word(obj, self.finish_bit)? & 0xffff_ffff;
        let eos = super::word(obj, self.eos_off)?;
        let len = (fp.checked_sub(sp)? / 8 * 64 + fo).checked_sub(so)?;
        let cap = eos.checked_sub(sp)? / 8 * 64;
        Some((len, cap.max(len)))
    }

    /// exclusiveSize of `len` bits in a capacity of `cap` bits. OI's rules count the spare
    /// capacity in bits as bytes (each bit a 1-byte child); real sizes charge the block the
    /// words take, capacity / 8 bytes, and the bits are children of no size.
    pub fn exclusive(&self, len: u64, cap: u64, sizing: super::Sizing) -> u64 {
        match sizing {
            super::Sizing::Oi => self.size + cap.saturating_sub(len),
            super::Sizing::Real => self.size + cap / 8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_ints_capacity_ten() {
        let l = VectorLayout {
            start_off: 0,
            finish_off: 8,
            eos_off: 16,
            elem_size: 4,
            size: 24,
        };
        let mut obj = [0u8; 24];
        obj[0..8].copy_from_slice(&0x1000u64.to_le_bytes());
        obj[8..16].copy_from_slice(&0x100cu64.to_le_bytes());
        obj[16..24].copy_from_slice(&0x1028u64.to_le_bytes());
        assert_eq!(l.read(&obj), Some((0x1000, 3, 10)));
        assert_eq!(l.exclusive(3, 10), 52);
    }
}
