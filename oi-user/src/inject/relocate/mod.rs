//! Moving a function's first instructions elsewhere, so that its entry can become a 5-byte
//! `jmp rel32` and the original still be called: whole instructions covering at least
//! [`PATCH_LEN`] bytes are decoded and re-encoded at the destination by iced-x86's
//! `BlockEncoder` (which fixes every RIP-relative operand and branch), followed by a `jmp`
//! back to the first instruction that stays in place.
//!
//! A function is refused, with a [`Refusal`] that says why, when the move could change what
//! it does: it is shorter than the patch, or its flow ends inside the replaced bytes; a byte
//! there is `int3` (0xCC: someone's uprobe or breakpoint, or data we would copy as code);
//! any direct branch of the whole body lands strictly inside the replaced bytes; a call is
//! among them (its return address would lie in our segment, which could then never be
//! unmapped safely); a RIP-relative operand would be out of reach from the destination; or
//! iced cannot encode an instruction there. Pure: bytes in, bytes out.

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, Instruction,
    InstructionBlock, Mnemonic, OpKind,
};
use serde::{Deserialize, Serialize};

/// Length of the patch written at a function's entry: `jmp rel32`.
pub const PATCH_LEN: usize = 5;
/// Room to reserve for one relocated prologue: at most [`PATCH_LEN`] instructions, each of
/// which the encoder may turn into a 16-byte sequence, and the jump back.
pub const MAX_RELOCATED: usize = 128;
/// How far a RIP-relative target may lie from the relocated code (a margin below 2 GiB for
/// the instruction's own length and position in the block).
const RIP_REACH: i128 = (1 << 31) - 4096;

/// Why a function cannot be patched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the function is {size} bytes long, shorter than the {PATCH_LEN}-byte patch")]
    TooShort { size: u64 },
    #[error("its flow ends inside the bytes to replace (`{mnemonic}` at +{offset})")]
    EndsEarly { offset: u64, mnemonic: String },
    #[error("an int3 byte (0xCC: a uprobe or breakpoint) is at +{offset}")]
    Breakpoint { offset: u64 },
    #[error("the branch at +{from} lands at +{to}, inside the bytes to replace")]
    BranchInto { from: u64, to: u64 },
    #[error("a call is among the bytes to replace (+{offset}); its return address would be ours")]
    CallInPrologue { offset: u64 },
    #[error("the RIP-relative operand at +{offset} ({target:#x}) is out of reach from {at:#x}")]
    RipOutOfReach { offset: u64, target: u64, at: u64 },
    #[error("undecodable bytes at +{offset}")]
    Undecodable { offset: u64 },
    #[error("the instructions cannot be relocated: {why}")]
    Unrelocatable { why: String },
    #[error("a thread kept running inside the bytes to replace")]
    ThreadInside,
    #[error("the function's bytes changed since they were read")]
    Changed,
}

/// The instructions a patch replaces, found by [`analyse`].
#[derive(Debug, Clone)]
pub struct Prologue {
    pub entry: u64,
    /// Bytes replaced: whole instructions, at least [`PATCH_LEN`].
    pub len: usize,
    instructions: Vec<Instruction>,
    pub original: Vec<u8>,
}

/// A prologue moved to `at`: its code, and where each of its instructions went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relocated {
    pub entry: u64,
    /// The original bytes the patch replaces (`len` of them).
    pub original: Vec<u8>,
    pub at: u64,
    pub code: Vec<u8>,
    /// (offset in the original, offset in `code`) of each instruction, in order; the last
    /// pair is (`len`, offset of the jump back).
    pub offsets: Vec<(u32, u32)>,
}

impl Relocated {
    pub fn len(&self) -> usize {
        self.original.len()
    }

    pub fn is_empty(&self) -> bool {
        self.original.is_empty()
    }

    /// Where a thread at `rip` inside the relocated code must go to do the same in the
    /// original: the original instruction whose copy starts at or before `rip`. (An
    /// instruction the encoder expanded into several has no effect before its last part,
    /// so restarting it is exact.) None when `rip` is not in the relocated code.
    pub fn original_of(&self, rip: u64) -> Option<u64> {
        let off = rip.checked_sub(self.at)?;
        if off >= self.code.len() as u64 {
            return None;
        }
        let (orig, _) = self
            .offsets
            .iter()
            .rev()
            .find(|&&(_, new)| u64::from(new) <= off)?;
        Some(self.entry + u64::from(*orig))
    }
}

fn decoder(bytes: &[u8], ip: u64) -> Decoder<'_> {
    Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE)
}

/// Instructions after which the function's flow does not go on to the next byte.
fn ends_flow(m: Mnemonic) -> bool {
    matches!(
        m,
        Mnemonic::Ret
            | Mnemonic::Retf
            | Mnemonic::Jmp
            | Mnemonic::Int3
            | Mnemonic::Int1
            | Mnemonic::Ud0
            | Mnemonic::Ud1
            | Mnemonic::Ud2
            | Mnemonic::Hlt
    )
}

/// The direct branch target of `insn`, if it has one (jmp, jcc, call, loop, jrcxz, xbegin).
fn branch_target(insn: &Instruction) -> Option<u64> {
    matches!(insn.op0_kind(), OpKind::NearBranch64).then(|| insn.near_branch_target())
}

/// Checks that the function at `entry` whose `body` (all `size` bytes, as the target has
/// them) can be patched, and says which instructions the patch replaces.
pub fn analyse(entry: u64, body: &[u8]) -> Result<Prologue, Refusal> {
    let size = body.len() as u64;
    if body.len() < PATCH_LEN {
        return Err(Refusal::TooShort { size });
    }
    let mut instructions = Vec::new();
    let mut len = 0usize;
    let mut dec = decoder(body, entry);
    while len < PATCH_LEN {
        let offset = len as u64;
        if !dec.can_decode() {
            return Err(Refusal::TooShort { size });
        }
        let insn = dec.decode();
        if insn.is_invalid() {
            return Err(Refusal::Undecodable { offset });
        }
        len += insn.len();
        if insn.mnemonic() == Mnemonic::Call {
            return Err(Refusal::CallInPrologue { offset });
        }
        if ends_flow(insn.mnemonic()) && len < PATCH_LEN {
            return Err(Refusal::EndsEarly {
                offset,
                mnemonic: format!("{:?}", insn.mnemonic()).to_lowercase(),
            });
        }
        instructions.push(insn);
    }
    if let Some(offset) = body[..len].iter().position(|&b| b == 0xcc) {
        return Err(Refusal::Breakpoint {
            offset: offset as u64,
        });
    }
    // Every direct branch of the whole body (a linear sweep: g++ puts no data in .text).
    let inside = entry + 1..entry + len as u64;
    let mut dec = decoder(body, entry);
    while dec.can_decode() {
        let insn = dec.decode();
        let from = insn.ip() - entry;
        if insn.is_invalid() {
            return Err(Refusal::Undecodable { offset: from });
        }
        if let Some(to) = branch_target(&insn).filter(|t| inside.contains(t)) {
            return Err(Refusal::BranchInto {
                from,
                to: to - entry,
            });
        }
    }
    Ok(Prologue {
        entry,
        len,
        instructions,
        original: body[..len].to_vec(),
    })
}

/// Re-encodes `prologue` at `at`, followed by a `jmp` back to `entry + len`.
pub fn relocate(prologue: &Prologue, at: u64) -> Result<Relocated, Refusal> {
    let entry = prologue.entry;
    for insn in &prologue.instructions {
        if insn.is_ip_rel_memory_operand() {
            let target = insn.ip_rel_memory_address();
            if (i128::from(target) - i128::from(at)).abs() > RIP_REACH {
                return Err(Refusal::RipOutOfReach {
                    offset: insn.ip() - entry,
                    target,
                    at,
                });
            }
        }
    }
    let unrelocatable = |e: iced_x86::IcedError| Refusal::Unrelocatable { why: e.to_string() };
    let back = entry + prologue.len as u64;
    let mut block = prologue.instructions.clone();
    block.push(Instruction::with_branch(Code::Jmp_rel32_64, back).map_err(unrelocatable)?);
    let encoded = BlockEncoder::encode(
        64,
        InstructionBlock::new(&block, at),
        BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
    )
    .map_err(unrelocatable)?;
    if encoded.code_buffer.len() > MAX_RELOCATED {
        return Err(Refusal::Unrelocatable {
            why: format!("{} bytes once relocated", encoded.code_buffer.len()),
        });
    }
    // u32::MAX marks an instruction rewritten into a longer sequence (a branch out of reach):
    // a thread inside it could not be mapped back exactly, and within reach of the library
    // no branch of it needs that.
    let mut offsets = Vec::with_capacity(block.len());
    for (i, &new) in encoded.new_instruction_offsets.iter().enumerate() {
        if new == u32::MAX {
            return Err(Refusal::Unrelocatable {
                why: format!("instruction {i} would have to be rewritten"),
            });
        }
        let orig = match prologue.instructions.get(i) {
            Some(insn) => (insn.ip() - entry) as u32,
            None => prologue.len as u32,
        };
        offsets.push((orig, new));
    }
    Ok(Relocated {
        entry,
        original: prologue.original.clone(),
        at,
        code: encoded.code_buffer,
        offsets,
    })
}

#[cfg(test)]
mod tests;
