//! Where the probes of one instrumented function go, as offsets into its file with the cookie
//! each carries: its first instruction (an entry, or the window's entry), every `ret`, and every
//! tail-call jump (with the id of the function it jumps to when that one is instrumented too).
//!
//! A function's `.cold` parts belong to it: a jump into one is not a tail call, and the parts'
//! own `ret`s and tail calls are the function's. Functions that cannot be probed correctly are
//! left out and said so: a first instruction the kernel cannot probe (moving the probe would
//! change what the stack pointer means there), or no code to read (size 0, outside the file).
//!
//! Pure: reads bytes of mapped files, never touches a process.

use std::collections::HashMap;

use oi_common::calls::cookie;

use super::select::{ColdParts, Function};

/// One probe: an offset in a file and its cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    pub file_offset: u64,
    pub cookie: u64,
}

/// Why a function is not instrumented.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Skipped {
    #[error("no code to read")]
    NoCode,
    /// The first instruction cannot carry a uprobe (its mnemonic).
    #[error("its first instruction, {0}, cannot carry a uprobe")]
    Unprobeable(String),
}

/// The probes of `functions[i]` for every `i`, given the function ids (`ids[i]`) and, per file,
/// the bytes of the file and its `.cold` parts. Functions are looked up by (file, address) to
/// give tail calls their target's id.
pub fn sites_of(
    functions: &[Function],
    ids: &[u32],
    file_bytes: &[&[u8]],
    cold: &[ColdParts],
) -> Vec<Result<Vec<Site>, Skipped>> {
    let by_address: HashMap<(usize, u64), u32> = functions
        .iter()
        .zip(ids)
        .map(|(f, &id)| ((f.file, f.symbol.address), id))
        .collect();
    functions
        .iter()
        .zip(ids)
        .map(|(f, &id)| {
            let bytes = file_bytes[f.file];
            function_sites(f, id, bytes, &cold[f.file], &by_address)
        })
        .collect()
}

fn function_sites(
    f: &Function,
    id: u32,
    file: &[u8],
    cold: &ColdParts,
    by_address: &HashMap<(usize, u64), u32>,
) -> Result<Vec<Site>, Skipped> {
    let s = &f.symbol;
    let code = code_of(file, s.file_offset, s.size).ok_or(Skipped::NoCode)?;
    if let Some(refused) = disasm::unprobeable_first(code, s.address) {
        return Err(Skipped::Unprobeable(refused));
    }
    let entry_kind = if f.is_entry {
        cookie::WINDOW
    } else {
        cookie::ENTRY
    };
    let mut sites = vec![Site {
        file_offset: s.file_offset,
        cookie: cookie::encode(entry_kind, id, cookie::NO_FUNCTION),
    }];
    // The function's body, then its cold parts (which sit elsewhere in the same section).
    let mut ranges = vec![(s.address, s.size, s.file_offset)];
    for (address, size) in cold.of(s.address) {
        // Same section, so the same distance in the file; wrapping covers parts placed before
        // the function (`code_of` rejects anything outside the file).
        let file_offset = s.file_offset.wrapping_add(address.wrapping_sub(s.address));
        ranges.push((address, size, file_offset));
    }
    let inside = |target: u64| {
        ranges
            .iter()
            .any(|&(a, size, _)| target >= a && target < a + size)
            || cold.owner_of(target) == Some(Some(s.address))
    };
    for &(address, size, file_offset) in &ranges {
        let Some(bytes) = code_of(file, file_offset, size) else {
            continue;
        };
        for site in disasm::return_sites(bytes, address) {
            let offset = file_offset + (site.address - address);
            let cookie = match site.kind {
                disasm::SiteKind::Return => cookie::encode(cookie::RETURN, id, cookie::NO_FUNCTION),
                disasm::SiteKind::TailCall { target } => {
                    if target.is_some_and(inside) {
                        continue;
                    }
                    let target_id = target
                        .and_then(|t| by_address.get(&(f.file, t)).copied())
                        .unwrap_or(cookie::NO_FUNCTION);
                    cookie::encode(cookie::TAIL, id, target_id)
                }
            };
            sites.push(Site {
                file_offset: offset,
                cookie,
            });
        }
    }
    Ok(sites)
}

fn code_of(file: &[u8], offset: u64, size: u64) -> Option<&[u8]> {
    if size == 0 {
        return None;
    }
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    file.get(start..end)
}

/// Return sites of machine code and whether an instruction can carry a uprobe.
// TODO(real): replace with `debuginfo::code` once branch `real` lands in main; same API.
mod disasm {
    use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind};

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SiteKind {
        Return,
        /// A jump out of the function; the target when the jump says it (not through a
        /// register or memory).
        TailCall {
            target: Option<u64>,
        },
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct ReturnSite {
        pub address: u64,
        pub kind: SiteKind,
    }

    /// Every `ret` and every jump that leaves `[address, address + bytes.len())`.
    pub fn return_sites(bytes: &[u8], address: u64) -> Vec<ReturnSite> {
        let end = address + bytes.len() as u64;
        let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
        let mut instr = Instruction::default();
        let mut sites = Vec::new();
        while decoder.can_decode() {
            decoder.decode_out(&mut instr);
            if instr.is_invalid() {
                continue;
            }
            let kind = match instr.mnemonic() {
                Mnemonic::Ret => Some(SiteKind::Return),
                // Through memory at a fixed address (a GOT slot): a call of another function.
                Mnemonic::Jmp
                    if instr.op0_kind() == OpKind::Memory && instr.is_ip_rel_memory_operand() =>
                {
                    Some(SiteKind::TailCall { target: None })
                }
                // `jmp` and `jcc` (g++ makes conditional tail calls too).
                m if m != Mnemonic::Call && instr.op0_kind() == OpKind::NearBranch64 => {
                    let target = instr.near_branch_target();
                    (target < address || target >= end).then_some(SiteKind::TailCall {
                        target: Some(target),
                    })
                }
                _ => None,
            };
            if let Some(kind) = kind {
                sites.push(ReturnSite {
                    address: instr.ip(),
                    kind,
                });
            }
        }
        sites
    }

    /// The mnemonic of the first instruction when the kernel refuses a uprobe on it (a `lock`
    /// prefix, `int3`, undecodable bytes), else `None`.
    pub fn unprobeable_first(bytes: &[u8], address: u64) -> Option<String> {
        let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
        let instr = decoder.decode();
        if instr.is_invalid() {
            return Some("undecodable bytes".into());
        }
        if instr.has_lock_prefix() {
            return Some(format!("lock {:?}", instr.mnemonic()).to_lowercase());
        }
        matches!(
            instr.mnemonic(),
            Mnemonic::Int3 | Mnemonic::Int | Mnemonic::Into
        )
        .then(|| format!("{:?}", instr.mnemonic()).to_lowercase())
    }
}
