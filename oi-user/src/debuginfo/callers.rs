//! Who refers to a function's code in its binary: direct calls and jumps, address loads in
//! code, and pointers in data (vtables, function-pointer tables). What makes an out-of-line
//! copy reachable; one nobody refers to never runs, however long a probe waits on it.
//!
//! Pure: reads the mapped file. Conservative in the direction that matters: any four bytes
//! of code that, read as a rel32 ending there, reach the address count as a reference (an
//! instruction's displacement or a false match), so "no references" is never claimed
//! wrongly; data is searched for the address as an 8-byte word and, in position-independent
//! files, as the addend of a relative relocation.

use object::{Object as _, ObjectSection as _, RelocationTarget, SectionFlags, SectionKind, elf};

use super::Binary;

/// How many references to an address a binary holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct References {
    /// From code (a call, a jump, a rip-relative address load).
    pub code: usize,
    /// From data (a vtable slot, a function pointer).
    pub data: usize,
}

/// The references to `address` (an ELF virtual address) in `binary`.
pub fn references(binary: &Binary, address: u64) -> References {
    let mut out = References::default();
    let Ok(obj) = binary.object() else {
        return out;
    };
    for section in obj.sections() {
        let SectionFlags::Elf { sh_flags } = section.flags() else {
            continue;
        };
        if sh_flags & u64::from(elf::SHF_ALLOC) == 0
            || section.kind() == SectionKind::UninitializedData
        {
            continue;
        }
        let Ok(data) = section.data() else { continue };
        let base = section.address();
        if sh_flags & u64::from(elf::SHF_EXECINSTR) != 0 {
            out.code += data
                .windows(4)
                .enumerate()
                .filter(|(i, w)| {
                    let rel = i32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    (base + *i as u64 + 4).wrapping_add(rel as i64 as u64) == address
                })
                .count();
        } else {
            let start = (8 - (base % 8) as usize) % 8;
            out.data += data
                .get(start..)
                .unwrap_or_default()
                .chunks_exact(8)
                .filter(|w| u64::from_le_bytes((*w).try_into().unwrap_or([0; 8])) == address)
                .count();
        }
    }
    if let Some(relocations) = obj.dynamic_relocations() {
        out.data += relocations
            .filter(|(_, r)| {
                matches!(r.target(), RelocationTarget::Absolute) && r.addend() as u64 == address
            })
            .count();
    }
    out
}
