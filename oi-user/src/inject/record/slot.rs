//! The wrapper's first instructions: find the calling thread's [`ThreadSlot`] from its thread
//! pointer and decide between the counted path and a plain jump to the original.
//!
//! The thread pointer `fs:[0]` (glibc's TCB self pointer, the same for the whole life of a
//! thread and unique among live threads) is hashed into the slot array; the first slot whose
//! owner it is, or the first free one (claimed by `lock cmpxchg` 0 → thread pointer), within
//! [`SLOT_PROBES`] is the thread's. No TLS of our own, no system call. The common path is
//! one multiply, one load and a compare of a line the thread alone writes.
//!
//! Registers: only rax, r10 and r11 (and the flags) are touched before the decision, which
//! every hooked function allows at its entry; the probing loop borrows rdi, rsi and rdx on the
//! stack and gives them back. On exit of the emitted code, r10 holds the data part's address
//! and r11 the slot's, and the stack is as at entry.
//!
//! [`ThreadSlot`]: oi_common::inject::ThreadSlot

use iced_x86::IcedError;
use iced_x86::code_asm::*;
use oi_common::inject::{HASH_MULTIPLIER, HEADER_SIZE, SLOT_PROBES, SLOT_SHIFT, offset};

/// Where the out-of-line part of the lookup ([`slow_path`]) goes back to.
pub(crate) struct Slow {
    slow: CodeLabel,
    found: CodeLabel,
}

/// Emits the lookup's common path. Falls through with the slot in r11 and depth 0 (the counted
/// path); jumps to `nested` with the slot in r11 when the thread is inside a hooked call
/// already; a slot that is not the first of the hash is found by [`slow_path`], emitted out of
/// line after the wrapper's `ret`.
pub(crate) fn lookup(
    a: &mut CodeAssembler,
    data: u64,
    nested: CodeLabel,
) -> Result<Slow, IcedError> {
    let slow = a.create_label();
    let mut found = a.create_label();

    a.mov(rax, qword_ptr(0u64).fs())?;
    a.mov(r10, data)?;
    a.mov(r11, HASH_MULTIPLIER)?;
    a.imul_2(r11, rax)?;
    a.shr(r11, 32)?;
    a.and(r11, qword_ptr(r10 + offset::SLOT_MASK))?;
    a.shl(r11, SLOT_SHIFT)?;
    a.lea(r11, qword_ptr(r10 + r11 + HEADER_SIZE))?;
    a.cmp(qword_ptr(r11 + offset::OWNER), rax)?;
    a.jne(slow)?;
    a.set_label(&mut found)?;
    a.cmp(qword_ptr(r11 + offset::DEPTH), 0)?;
    a.jne(nested)?;
    Ok(Slow { slow, found })
}

/// The rest of the lookup: probes on from the hash, claiming the first free slot, and jumps
/// back to the decision; a thread without a slot is counted in `Header::no_slot` and jumps to
/// `no_slot` (the caller's way to the original) with the stack as at the lookup's start.
pub(crate) fn slow_path(
    a: &mut CodeAssembler,
    labels: Slow,
    no_slot: CodeLabel,
) -> Result<(), IcedError> {
    let Slow { mut slow, found } = labels;
    let mut probe = a.create_label();
    let mut next = a.create_label();
    let mut claimed = a.create_label();
    a.set_label(&mut slow)?;
    a.push(rdi)?;
    a.push(rsi)?;
    a.push(rdx)?;
    a.mov(rdi, HASH_MULTIPLIER)?;
    a.imul_2(rdi, rax)?;
    a.shr(rdi, 32)?;
    a.mov(esi, SLOT_PROBES as u32)?;
    a.set_label(&mut probe)?;
    a.mov(r11, rdi)?;
    a.and(r11, qword_ptr(r10 + offset::SLOT_MASK))?;
    a.shl(r11, SLOT_SHIFT)?;
    a.lea(r11, qword_ptr(r10 + r11 + HEADER_SIZE))?;
    a.cmp(qword_ptr(r11 + offset::OWNER), rax)?;
    a.je(claimed)?;
    a.cmp(qword_ptr(r11 + offset::OWNER), 0)?;
    a.jne(next)?;
    a.mov(rdx, rax)?;
    a.xor(eax, eax)?;
    a.lock().cmpxchg(qword_ptr(r11 + offset::OWNER), rdx)?;
    a.mov(rax, rdx)?;
    a.je(claimed)?;
    a.set_label(&mut next)?;
    a.inc(rdi)?;
    a.dec(esi)?;
    a.jne(probe)?;
    a.pop(rdx)?;
    a.pop(rsi)?;
    a.pop(rdi)?;
    a.lock().inc(qword_ptr(r10 + offset::NO_SLOT))?;
    a.jmp(no_slot)?;
    a.set_label(&mut claimed)?;
    a.pop(rdx)?;
    a.pop(rsi)?;
    a.pop(rdi)?;
    a.jmp(found)?;
    Ok(())
}
