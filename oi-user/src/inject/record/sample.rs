//! The sampling decision and the sample record, emitted into an allocation's counted path
//! (`wrapper::allocated`), between the block's fields and its insertion into the live table.
//!
//! ```text
//! countdown −= size (or 1: every Nth call)      ; the common path: one subtract, one branch
//! countdown > 0 → done
//! never drawn (the thread's first crossing): countdown += draw; countdown > 0 → done
//! countdown = draw; mark the block sampled (Block::thread's SAMPLED_BIT)
//! claim record ring_head++ (lock xadd); seq = 0; fields; caller's pc, sp, rbp; stack copy;
//! seq = number + 1
//! ```
//!
//! Why a countdown of bytes with exponential draws (tcmalloc's and Go's sampler): the sample
//! points form a Poisson process over the bytes allocated, so an allocation of n bytes is
//! sampled with probability 1 − exp(−n / mean), whatever came before it, and the tracer
//! weighs it by the inverse. The overshoot of a crossing is dropped, not carried: by the
//! process's memorylessness the next point after the allocation's end is a fresh draw away.
//! The draws are the tracer's (`Header::draws_offset`, taken by each thread in an order of its
//! own count, see [`draw`]): no
//! random number generator and no floating point in the target. With `--every N` every draw
//! is N and the countdown counts calls.
//!
//! The caller's registers: the wrapper never touches rbp and the allocator restores it, so
//! rbp is the caller's; the return address is at the wrapper's entry rsp, and the caller's
//! stack pointer after the return is 8 above. The stack copy goes from there up to the end
//! of the thread's stack, at most [`STACK_WINDOW`] bytes, and never past memory the thread's
//! stack is known to have: a thread created by glibc has its descriptor (the thread pointer,
//! `fs:[0]`) at the top of its stack, the main thread's stack ends where the tracer read its
//! `[stack]` mapping to end (`Header::main_stack_end`); a stack pointer below neither within
//! [`THREAD_STACK_SPAN`] or [`MAIN_STACK_SPAN`] (a stack of the program's own: a fiber, a
//! signal stack) copies only up to the end of the page that holds the return address, which
//! the call just wrote. A full ring
//! overwrites its oldest records; the tracer counts what it lost.
//!
//! Registers: keeps rdi, rsi (the block and its size, for the table), rbx, r10, r12–r15 and
//! rbp; clobbers rax, rcx, rdx, r8, r9, r11 and the flags. Memory: the slot, the draws, the
//! ring, the wrapper's frame and the caller's stack (read only).

use iced_x86::IcedError;
use iced_x86::code_asm::*;
use oi_common::inject::{
    DRAWS, HASH_MULTIPLIER, RECORD_HEADER, RECORD_SHIFT, SAMPLED_BIT, STACK_WINDOW, offset,
    sample_mode,
};

use super::table::frame;

/// What the wrappers sample by (assembled in: a run without sampling has no sampling code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    Off,
    /// A countdown of requested bytes (`--sample-bytes`).
    Bytes,
    /// A countdown of allocations (`--every`).
    Calls,
}

impl Sampling {
    /// The header's `sample_mode` of this.
    pub fn mode(self) -> u64 {
        match self {
            Sampling::Off => sample_mode::OFF,
            Sampling::Bytes => sample_mode::BYTES,
            Sampling::Calls => sample_mode::CALLS,
        }
    }
}

/// How far below a glibc thread's thread pointer a stack pointer may be and still be on that
/// thread's stack: glibc's default thread stack (RLIMIT_STACK, 8 MiB on most systems), all of
/// it one mapping. A deeper stack pointer copies only its page (a shorter walk, counted); a
/// thread given a smaller stack with a mapping of its own right below is the remaining risk
/// (docs/inject.md, "Known limits").
pub const THREAD_STACK_SPAN: u64 = 8 << 20;
/// How far below the main thread's stack end a stack pointer may be and still be on it: the
/// kernel places no `mmap` within 128 MiB (plus the guard gap) below the stack's top unless
/// asked for a fixed address, so nothing but the stack lies in this span.
pub const MAIN_STACK_SPAN: u64 = 120 << 20;

/// Emits the decision and, when sampled, the record, for the block at rdi of rsi requested
/// bytes whose usable size, tsc and thread index are in the frame already. `entry` is the
/// distance from rsp to the wrapper's entry rsp (where the return address is).
pub(super) fn emit(a: &mut CodeAssembler, sampling: Sampling, entry: u64) -> Result<(), IcedError> {
    let mut done = a.create_label();
    let mut take = a.create_label();
    match sampling {
        Sampling::Off => return Ok(()),
        Sampling::Bytes => a.sub(qword_ptr(rbx + offset::COUNTDOWN), rsi)?,
        Sampling::Calls => a.dec(qword_ptr(rbx + offset::COUNTDOWN))?,
    }
    a.jg(done)?;
    a.cmp(qword_ptr(rbx + offset::DRAWS), 0)?;
    a.jne(take)?;
    // The thread's first crossing: its countdown started at 0, not at a draw.
    draw(a)?;
    a.add(qword_ptr(rbx + offset::COUNTDOWN), rax)?;
    a.cmp(qword_ptr(rbx + offset::COUNTDOWN), 0)?;
    a.jg(done)?;
    a.set_label(&mut take)?;
    draw(a)?;
    a.mov(qword_ptr(rbx + offset::COUNTDOWN), rax)?;
    record(a, entry)?;
    a.set_label(&mut done)?;
    // One label an instruction: the caller's next instruction may carry its own.
    a.zero_bytes()?;
    Ok(())
}

/// rax = the thread's next draw: the table's entry at the top bits of (draws taken × an odd
/// constant), a Weyl sequence that never repeats a cycle of the table, so a program whose
/// allocations repeat with the table's period (its draws add up to 1024 × the mean, a power
/// of two when the mean is) is not sampled at the same places each cycle. Clobbers rcx and
/// the flags.
fn draw(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.mov(rax, qword_ptr(rbx + offset::DRAWS))?;
    a.inc(qword_ptr(rbx + offset::DRAWS))?;
    a.mov(rcx, HASH_MULTIPLIER)?;
    a.imul_2(rax, rcx)?;
    a.shr(rax, 64 - DRAWS.trailing_zeros())?;
    a.shl(rax, 3)?;
    a.add(rax, qword_ptr(r10 + offset::DRAWS_OFFSET))?;
    a.mov(rax, qword_ptr(r10 + rax))?;
    Ok(())
}

/// The record of the sampled block (see the module's docs).
fn record(a: &mut CodeAssembler, entry: u64) -> Result<(), IcedError> {
    use offset::record as r;
    let mut have_end = a.create_label();
    let mut main = a.create_label();
    let mut page = a.create_label();
    a.push(rdi)?;
    a.push(rsi)?;
    let pushed = 16u64;
    let at = |o: u64| qword_ptr(rsp + (o + pushed));
    a.bts(at(frame::NEW_THREAD), SAMPLED_BIT)?;
    a.mov(eax, 1)?;
    a.lock().xadd(qword_ptr(r10 + offset::RING_HEAD), rax)?;
    a.inc(qword_ptr(rbx + offset::SAMPLES))?;
    a.mov(r11, rax)?;
    a.and(r11, qword_ptr(r10 + offset::RING_MASK))?;
    a.shl(r11, RECORD_SHIFT)?;
    a.add(r11, qword_ptr(r10 + offset::RING_OFFSET))?;
    a.add(r11, r10)?;
    a.mov(qword_ptr(r11 + r::SEQ), 0)?;
    a.lea(r9, qword_ptr(rax + 1))?;
    a.mov(qword_ptr(r11 + r::ADDR), rdi)?;
    a.mov(qword_ptr(r11 + r::SIZE), rsi)?;
    for (from, to) in [
        (frame::NEW_USABLE, r::USABLE),
        (frame::NEW_TSC, r::TSC),
        (frame::NEW_THREAD, r::THREAD),
    ] {
        a.mov(rax, at(from))?;
        a.mov(qword_ptr(r11 + to), rax)?;
    }
    a.btr(qword_ptr(r11 + r::THREAD), SAMPLED_BIT)?;
    a.mov(rax, qword_ptr(rsp + (entry + pushed)))?;
    a.mov(qword_ptr(r11 + r::PC), rax)?;
    a.lea(rsi, qword_ptr(rsp + (entry + pushed + 8)))?;
    a.mov(qword_ptr(r11 + r::SP), rsi)?;
    a.mov(qword_ptr(r11 + r::BP), rbp)?;
    // The end of the stack: the thread pointer above sp, else the main thread's stack end.
    a.mov(rax, qword_ptr(0u64).fs())?;
    a.cmp(rax, rsi)?;
    a.jbe(main)?;
    a.mov(rdx, rax)?;
    a.sub(rdx, rsi)?;
    a.cmp(rdx, THREAD_STACK_SPAN as i32)?;
    a.jbe(have_end)?;
    a.set_label(&mut main)?;
    a.mov(rax, qword_ptr(r10 + offset::MAIN_STACK_END))?;
    a.cmp(rax, rsi)?;
    a.jbe(page)?;
    a.mov(rdx, rax)?;
    a.sub(rdx, rsi)?;
    a.cmp(rdx, MAIN_STACK_SPAN as i32)?;
    a.jbe(have_end)?;
    a.set_label(&mut page)?;
    // The end of the page of the return address.
    a.lea(rax, qword_ptr(rsp + (entry + pushed)))?;
    a.or(rax, 4095)?;
    a.inc(rax)?;
    a.set_label(&mut have_end)?;
    a.sub(rax, rsi)?;
    a.mov(ecx, STACK_WINDOW as u32)?;
    a.cmp(rax, rcx)?;
    a.cmova(rax, rcx)?;
    a.mov(rcx, rax)?;
    a.mov(qword_ptr(r11 + r::STACK_LEN), rax)?;
    a.lea(rdi, qword_ptr(r11 + RECORD_HEADER))?;
    // The ABI leaves the direction flag clear at a call: forward.
    a.rep().movsb()?;
    // Written: a plain store is a release on x86.
    a.mov(qword_ptr(r11 + r::SEQ), r9)?;
    a.pop(rsi)?;
    a.pop(rdi)?;
    Ok(())
}
