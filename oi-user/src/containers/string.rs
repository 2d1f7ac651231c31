//! `std::__cxx11::basic_string<CharT>` (32 bytes): `_M_dataplus._M_p`, `_M_string_length`,
//! and a union of the 16-byte SSO buffer with `_M_allocated_capacity`. Inline (SSO) iff the
//! data pointer points inside the object; charged 32 + (capacity + 1)·sizeof(CharT) when on
//! the heap under real sizes (the terminator is allocated too), 32 + capacity·sizeof(CharT)
//! under OI's rules (docs/semantics.md, "Structs and standard containers").

use super::{LayoutError, field, unexpected};
use crate::plan::Sizing;
use crate::typegraph::{TypeGraph, TypeId, layout};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StringLayout {
    pub ptr_off: u64,
    pub len_off: u64,
    pub cap_off: u64,
    pub char_size: u64,
    pub size: u64,
}

pub fn layout(tg: &TypeGraph, id: TypeId) -> Result<StringLayout, LayoutError> {
    let (ptr_off, _) = field(tg, id, &["_M_dataplus", "_M_p"])?;
    let (len_off, _) = field(tg, id, &["_M_string_length"])?;
    // The capacity shares an anonymous union with the local buffer.
    let cap_off = layout::flatten(tg, id)
        .iter()
        .find(|m| m.name.is_none())
        .map(|m| m.bit_offset / 8)
        .unwrap_or(len_off + 8);
    let char_ty = tg
        .type_arg(id, 0)
        .ok_or_else(|| unexpected(tg, id, "no character type argument"))?;
    Ok(StringLayout {
        ptr_off,
        len_off,
        cap_off,
        char_size: tg.size(char_ty).max(1),
        size: tg.size(id),
    })
}

impl StringLayout {
    /// Capacity of the inline buffer (libstdc++ `_S_local_capacity`).
    pub fn local_capacity(&self) -> u64 {
        15 / self.char_size
    }

    /// (exclusiveSize, length, capacity) from the stream words `len, heap_capacity`, under
    /// `sizing`.
    pub fn account(&self, len: u64, heap_cap: u64, sizing: Sizing) -> (u64, u64, u64) {
        if heap_cap == 0 {
            (self.size, len, self.local_capacity())
        } else {
            (
                self.size
                    + heap_cap
                        .saturating_add(sizing.terminator())
                        .saturating_mul(self.char_size),
                len,
                heap_cap,
            )
        }
    }

    /// Stream words for a string object at `addr` whose bytes are `obj`.
    pub fn words(&self, addr: u64, obj: &[u8]) -> Option<(u64, u64)> {
        let ptr = super::word(obj, self.ptr_off)?;
        let len = super::word(obj, self.len_off)?;
        let inline = ptr >= addr && ptr < addr + self.size;
        let cap = if inline {
            0
        } else {
            super::word(obj, self.cap_off)?.max(1)
        };
        Some((len, cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l() -> StringLayout {
        StringLayout {
            ptr_off: 0,
            len_off: 8,
            cap_off: 16,
            char_size: 1,
            size: 32,
        }
    }

    #[test]
    fn heap_string_counts_capacity_without_terminator() {
        assert_eq!(l().account(35, 35, Sizing::Oi), (67, 35, 35));
        assert_eq!(l().account(3, 0, Sizing::Oi), (32, 3, 15));
    }

    #[test]
    fn real_sizes_count_the_terminator_of_heap_strings_only() {
        assert_eq!(l().account(35, 35, Sizing::Real), (68, 35, 35));
        assert_eq!(l().account(3, 0, Sizing::Real), (32, 3, 15));
    }

    #[test]
    fn inline_detection_by_pointer_inside_object() {
        let mut obj = [0u8; 32];
        obj[0..8].copy_from_slice(&0x1010u64.to_le_bytes());
        obj[8..16].copy_from_slice(&3u64.to_le_bytes());
        assert_eq!(l().words(0x1000, &obj), Some((3, 0)));
        obj[0..8].copy_from_slice(&0x9000u64.to_le_bytes());
        obj[16..24].copy_from_slice(&40u64.to_le_bytes());
        assert_eq!(l().words(0x1000, &obj), Some((3, 40)));
    }
}
