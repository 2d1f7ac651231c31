//! Where the probes of one instrumented function go, as offsets into its file with the cookie
//! each carries: its entry (an entry, or the window's entry), every `ret`, and every tail-call
//! jump (with the id of the function it jumps to when that one is instrumented too; for a
//! conditional one, the condition, which the kernel side evaluates on the flags).
//!
//! The machine code is read by `debuginfo::code`: return sites of the function and of its
//! `.cold` parts (a jump into one is not a tail call), and the entry probe's place (past an
//! unprobeable first instruction only when what is skipped leaves `rsp` alone, so a frame's
//! slot stays right). Functions that cannot be probed correctly are left out and said so: no
//! probeable entry, a return the kernel refuses to probe (its calls could not all be closed),
//! or no code to read.
//!
//! Pure: reads bytes of mapped files, never touches a process.

use std::collections::HashMap;

use oi_common::calls::cookie;

use super::select::{ColdParts, Function};
use crate::debuginfo::code::{self, Part, Refusal, ReturnKind, Unprobeable, condition_code};

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
    /// No instruction at or near the entry can carry the entry probe.
    #[error("{0}")]
    Entry(#[from] Unprobeable),
    /// One of its returns cannot carry a probe: its calls could not all be timed.
    #[error("its return at {address:#x} cannot carry a uprobe ({refusal})")]
    Return { address: u64, refusal: Refusal },
}

/// The probes of one function, and whether its entry probe had to move past unprobeable
/// first instructions (which leave `rsp` as it was, so the frame's slot is still right).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSites {
    pub sites: Vec<Site>,
    /// The instructions the entry probe was moved past (`lock add`), if any.
    pub entry_moved_past: Vec<String>,
}

/// The probes of `functions[i]` for every `i`, given the function ids (`ids[i]`) and, per file,
/// the bytes of the file and its `.cold` parts. Functions are looked up by (file, address) to
/// give tail calls their target's id.
pub fn sites_of(
    functions: &[Function],
    ids: &[u32],
    file_bytes: &[&[u8]],
    cold: &[ColdParts],
) -> Vec<Result<FunctionSites, Skipped>> {
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
) -> Result<FunctionSites, Skipped> {
    let s = &f.symbol;
    let code = code_of(file, s.file_offset, s.size).ok_or(Skipped::NoCode)?;
    // The function's body, then its cold parts (elsewhere in the same section, so at the same
    // distance in the file; wrapping covers parts placed before the function, and `code_of`
    // rejects anything outside the file).
    let mut parts = vec![(
        Part {
            address: s.address,
            bytes: code,
        },
        s.file_offset,
    )];
    for (address, size) in cold.of(s.address) {
        let file_offset = s.file_offset.wrapping_add(address.wrapping_sub(s.address));
        if let Some(bytes) = code_of(file, file_offset, size) {
            parts.push((Part { address, bytes }, file_offset));
        }
    }
    let offset_of = |address: u64| {
        parts
            .iter()
            .find(|(p, _)| address >= p.address && address < p.address + p.bytes.len() as u64)
            .map(|(p, off)| off + (address - p.address))
    };
    let entry = code::entry_probe(code, s.address)?;
    let entry_offset = s.file_offset + (entry.address - s.address);
    let mut returns = Vec::new();
    let code_parts: Vec<Part<'_>> = parts.iter().map(|(p, _)| *p).collect();
    for site in code::return_sites_of(&code_parts) {
        if let Some(refusal) = site.refusal {
            return Err(Skipped::Return {
                address: site.address,
                refusal,
            });
        }
        let Some(offset) = offset_of(site.address) else {
            continue;
        };
        let target_id = |target: u64| {
            by_address
                .get(&(f.file, target))
                .copied()
                .unwrap_or(cookie::NO_FUNCTION)
        };
        let cookie = match site.kind {
            ReturnKind::Ret if f.is_entry => {
                cookie::encode(cookie::WINDOW_RETURN, id, cookie::NO_FUNCTION)
            }
            ReturnKind::Ret => cookie::encode(cookie::RETURN, id, cookie::NO_FUNCTION),
            ReturnKind::TailCall { target } => cookie::encode(cookie::TAIL, id, target_id(target)),
            ReturnKind::IndirectTailCall => cookie::encode(cookie::TAIL, id, cookie::NO_FUNCTION),
            ReturnKind::ConditionalTailCall { target } => {
                let Some(condition) = offset_of(site.address)
                    .and_then(|o| file.get(o as usize..o as usize + usize::from(site.len)))
                    .and_then(condition_code)
                else {
                    continue;
                };
                cookie::with_condition(
                    cookie::encode(cookie::TAIL_IF, id, target_id(target)),
                    condition,
                )
            }
        };
        returns.push(Site {
            file_offset: offset,
            cookie,
        });
    }
    // A first instruction that already leaves (`ret`, or a jump) shares the entry's offset:
    // one probe does both.
    let leaves_at_entry = returns.iter().position(|r| r.file_offset == entry_offset);
    let entry_kind = if f.is_entry {
        cookie::WINDOW
    } else {
        cookie::ENTRY
    };
    let entry_cookie = match leaves_at_entry.map(|i| returns.remove(i).cookie) {
        None => cookie::encode(entry_kind, id, cookie::NO_FUNCTION),
        Some(c) => match (cookie::kind(c), cookie::target(c)) {
            // `jmp g` as the whole body: a call whose callee is g.
            (cookie::TAIL, target) if target != cookie::NO_FUNCTION => {
                cookie::encode(entry_kind, id, target)
            }
            _ if f.is_entry => cookie::encode(entry_kind, id, cookie::NO_FUNCTION),
            _ => cookie::encode(cookie::INSTANT, id, cookie::NO_FUNCTION),
        },
    };
    let mut sites = vec![Site {
        file_offset: entry_offset,
        cookie: entry_cookie,
    }];
    sites.extend(returns);
    Ok(FunctionSites {
        sites,
        entry_moved_past: entry.skipped,
    })
}

fn code_of(file: &[u8], offset: u64, size: u64) -> Option<&[u8]> {
    if size == 0 {
        return None;
    }
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    file.get(start..end)
}
