//! The live table as the wrappers use it: [`insert`] records a block after its allocation
//! returned, [`take`] removes one before its free (or realloc) is called, and [`count_free`]
//! credits a taken block's free to the thread.
//!
//! Entries are claimed and released by `lock cmpxchg` on their address ([`Block`] docs), over
//! at most [`TABLE_PROBES`] entries from the address's hash; a removal leaves a hole, so a
//! search never stops early at a free entry. A block is taken *before* the free or realloc
//! that ends it runs: until then no other thread can be given its address, so no other
//! thread's new block of the same address can be in the table and be taken instead. A block
//! that finds no free entry is counted in `Header::table_full`.
//!
//! Memory: only the data part and the wrapper's own frame. Registers: see each emitter.
//!
//! [`Block`]: oi_common::inject::Block

use iced_x86::IcedError;
use iced_x86::code_asm::*;
use oi_common::{
    allocs::MAX_BUCKETS,
    inject::{BLOCK_SIZE, HASH_MULTIPLIER, TABLE_PROBES, offset},
};

/// The wrapper's frame (rsp-relative, below the saved registers): what [`take`] found, and the
/// fields of the block [`insert`] writes.
pub(super) mod frame {
    /// 1: [`super::take`] removed the old block from the table; its fields follow.
    pub const FOUND: u64 = 0;
    pub const OLD_SIZE: u64 = 8;
    pub const OLD_USABLE: u64 = 16;
    pub const OLD_TSC: u64 = 24;
    pub const OLD_THREAD: u64 = 32;
    /// The usable size, time and thread slot index of the block to insert.
    pub const NEW_USABLE: u64 = 40;
    pub const NEW_TSC: u64 = 48;
    pub const NEW_THREAD: u64 = 56;
    /// Bytes (a multiple of 16, so that the stack stays aligned at the call).
    pub const SIZE: u64 = 64;
}

/// rdx = the address of entry `r11 & table_mask` (r10: the data part).
fn entry(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.and(r11, qword_ptr(r10 + offset::TABLE_MASK))?;
    a.imul_3(rdx, r11, BLOCK_SIZE as i32)?;
    a.add(rdx, qword_ptr(r10 + offset::TABLE_OFFSET))?;
    a.add(rdx, r10)?;
    Ok(())
}

/// r11 = the hash of the block address in rdi (clobbers rax).
fn hash(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.mov(r11, rdi)?;
    a.shr(r11, 4)?;
    a.mov(rax, HASH_MULTIPLIER)?;
    a.imul_2(r11, rax)?;
    a.shr(r11, 32)?;
    Ok(())
}

/// Records the block at rdi (non-zero, even) of rsi requested bytes, with the frame's
/// `NEW_USABLE`, `NEW_TSC` and `NEW_THREAD`. r10: the data part. Clobbers rax, rcx, rdx, r9,
/// r11.
pub(super) fn insert(a: &mut CodeAssembler) -> Result<(), IcedError> {
    let mut probe = a.create_label();
    let mut next = a.create_label();
    let mut claimed = a.create_label();
    let mut done = a.create_label();
    hash(a)?;
    a.mov(r9d, TABLE_PROBES as u32)?;
    a.lea(rcx, qword_ptr(rdi + 1))?;
    a.set_label(&mut probe)?;
    entry(a)?;
    // A plain look first: a locked instruction only on an entry that seems free.
    a.cmp(qword_ptr(rdx + offset::ADDR), 0)?;
    a.jne(next)?;
    a.xor(eax, eax)?;
    a.lock().cmpxchg(qword_ptr(rdx + offset::ADDR), rcx)?;
    a.je(claimed)?;
    a.set_label(&mut next)?;
    a.inc(r11)?;
    a.dec(r9d)?;
    a.jne(probe)?;
    a.lock().inc(qword_ptr(r10 + offset::TABLE_FULL))?;
    a.jmp(done)?;
    a.set_label(&mut claimed)?;
    a.mov(qword_ptr(rdx + offset::SIZE), rsi)?;
    a.mov(rax, qword_ptr(rsp + frame::NEW_USABLE))?;
    a.mov(qword_ptr(rdx + offset::USABLE), rax)?;
    a.mov(rax, qword_ptr(rsp + frame::NEW_TSC))?;
    a.mov(qword_ptr(rdx + offset::TSC), rax)?;
    a.mov(rax, qword_ptr(rsp + frame::NEW_THREAD))?;
    a.mov(qword_ptr(rdx + offset::THREAD), rax)?;
    // The even address last: a plain store is a release on x86, so a reader that sees it
    // sees the fields.
    a.mov(qword_ptr(rdx + offset::ADDR), rdi)?;
    a.set_label(&mut done)?;
    Ok(())
}

/// Removes the block at rdi from the table, if it is there, into the frame (`FOUND` 1 and its
/// fields; 0 otherwise, and for a null rdi). r10: the data part. Clobbers rax, rdx, rsi, r11;
/// never rcx, r8, r9 (it runs before the call of the original, whose arguments they may be).
pub(super) fn take(a: &mut CodeAssembler) -> Result<(), IcedError> {
    let mut probe = a.create_label();
    let mut hit = a.create_label();
    let mut done = a.create_label();
    a.mov(qword_ptr(rsp + frame::FOUND), 0)?;
    a.test(rdi, rdi)?;
    a.je(done)?;
    hash(a)?;
    a.mov(esi, TABLE_PROBES as u32)?;
    a.set_label(&mut probe)?;
    entry(a)?;
    a.cmp(qword_ptr(rdx + offset::ADDR), rdi)?;
    a.je(hit)?;
    a.inc(r11)?;
    a.dec(esi)?;
    a.jne(probe)?;
    a.jmp(done)?;
    a.set_label(&mut hit)?;
    // The fields before the release: once the address is 0 another thread may claim it.
    for (from, to) in [
        (offset::SIZE, frame::OLD_SIZE),
        (offset::USABLE, frame::OLD_USABLE),
        (offset::TSC, frame::OLD_TSC),
        (offset::THREAD, frame::OLD_THREAD),
    ] {
        a.mov(rax, qword_ptr(rdx + from))?;
        a.mov(qword_ptr(rsp + to), rax)?;
    }
    a.mov(rax, rdi)?;
    a.xor(esi, esi)?;
    a.lock().cmpxchg(qword_ptr(rdx + offset::ADDR), rsi)?;
    a.jne(done)?;
    a.mov(qword_ptr(rsp + frame::FOUND), 1)?;
    a.set_label(&mut done)?;
    Ok(())
}

/// Credits the free of the block [`take`] left in the frame to the thread's slot (rbx): its
/// bytes, and its lifetime (now − its tsc, in ns by `ns_per_tick_q32`) in the histogram by the
/// header's bounds. A pointer the table did not hold (r12 non-null, `FOUND` 0) is an unknown
/// free; a null one nothing. r10: the data part. Clobbers rax, rcx, rdx, rsi.
pub(super) fn count_free(a: &mut CodeAssembler) -> Result<(), IcedError> {
    let mut known = a.create_label();
    let mut forward = a.create_label();
    let mut bucket = a.create_label();
    let mut counted = a.create_label();
    let mut done = a.create_label();
    a.cmp(qword_ptr(rsp + frame::FOUND), 0)?;
    a.jne(known)?;
    a.test(r12, r12)?;
    a.je(done)?;
    a.inc(qword_ptr(rbx + offset::UNKNOWN_FREES))?;
    a.jmp(done)?;
    a.set_label(&mut known)?;
    a.inc(qword_ptr(rbx + offset::FREES))?;
    a.mov(rax, qword_ptr(rsp + frame::OLD_SIZE))?;
    a.add(qword_ptr(rbx + offset::FREED_BYTES), rax)?;
    a.mov(rax, qword_ptr(rsp + frame::OLD_USABLE))?;
    a.add(qword_ptr(rbx + offset::FREED_USABLE_BYTES), rax)?;
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.sub(rax, qword_ptr(rsp + frame::OLD_TSC))?;
    // A clock read on another CPU may be a little behind: a lifetime of 0, not of centuries.
    a.jae(forward)?;
    a.xor(eax, eax)?;
    a.set_label(&mut forward)?;
    a.mul(qword_ptr(r10 + offset::NS_PER_TICK_Q32))?;
    a.shrd(rax, rdx, 32)?;
    // The bucket: how many of the bounds used (at most MAX_BUCKETS) the lifetime reaches.
    a.mov(rcx, qword_ptr(r10 + offset::BOUNDS))?;
    a.mov(edx, MAX_BUCKETS as u32)?;
    a.cmp(rcx, rdx)?;
    a.cmova(rcx, rdx)?;
    a.xor(esi, esi)?;
    a.set_label(&mut bucket)?;
    a.cmp(rsi, rcx)?;
    a.jae(counted)?;
    a.cmp(rax, qword_ptr(r10 + rsi * 8 + offset::BUCKET_NS))?;
    a.jb(counted)?;
    a.inc(rsi)?;
    a.jmp(bucket)?;
    a.set_label(&mut counted)?;
    a.inc(qword_ptr(rbx + rsi * 8 + offset::LIFETIMES))?;
    a.set_label(&mut done)?;
    Ok(())
}
