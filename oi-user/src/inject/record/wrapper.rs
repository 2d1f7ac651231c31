//! One wrapper: the machine code a hooked allocator function's patched entry jumps to,
//! assembled with iced-x86's `CodeAssembler` for the address it will run at.
//!
//! ```text
//! entry:   thread slot from fs:[0]                          (slot.rs)
//!          depth ≠ 0 → nested: slot.nested += 1; jmp original
//!          depth = 1
//!          push rbx, r12–r15; sub rsp, 64      (rsp ≡ 0 mod 16 at the call)
//!          save rdi, rsi, rdx; before a free or realloc: take the old block (table.rs)
//!          call original                        (the relocated entry: the real allocator)
//!          count what the shape says (below); an allocation may be sampled (sample.rs)
//!          restore rax, the frame and the callee-saved registers
//!          depth = 0; ret
//! ```
//!
//! `depth` is 1 from the counted entry to the `ret`: the unpatch adds the depths of all
//! slots to know that no thread is inside a wrapper (or inside a call a wrapper made, which
//! returns into it); before the depth store and after the last one a thread's RIP is in the
//! segment, which the unpatch sees. So the counted path writes only the thread's own slot:
//! no `lock`ed instruction on a line other threads write, which with many threads would
//! move one cache line between the cores on every call.
//!
//! What is counted (today's `allocs` rules, `oi-user/src/allocs/mod.rs`): an allocation that
//! returns a block adds one allocation, its requested and usable bytes (`usable.rs`) and a live
//! block; one that fails (a null block, posix_memalign's error) one `failed`; a free of a block
//! the table holds one free, its bytes and its lifetime bucket; of any other non-null pointer
//! one unknown free; `free(NULL)` nothing. realloc is a free of the old block and an allocation
//! of the new one: `realloc(NULL, n)` an allocation only, `realloc(p, 0)` returning null a free
//! only, a failed `realloc(p, n)` nothing but `failed` (its old block, taken out of the table
//! before the call, goes back in). `calloc` and `reallocarray` count n × size, saturated (an
//! overflowing request fails in the allocator and is counted failed). posix_memalign's block is
//! read from `*memptr` once it returned 0: the one word outside the data part and the frame
//! that a wrapper reads besides glibc's chunk header.
//!
//! Nesting: one count per request at the outermost hooked call. A thread's slot `depth` is 1
//! from the counted entry to its return, so the hooked calls the allocator makes itself
//! (`operator delete` → `free`, `reallocarray` → `realloc`) pass straight to their original,
//! and so do those of a signal handler that interrupts a counted call (its allocations and
//! frees are then not counted: a block it frees stays in the live table, one it allocates and
//! the program frees later is an unknown free). A thread without a slot, or one nested, never
//! touches its depth.
//!
//! Not handled here: a C++ exception (a throwing `operator new`) or a `longjmp` out of the
//! original, which would unwind through the wrapper's frame without CFI for it and leave
//! `depth` at 1; such functions must not get this wrapper unless the caller registers unwind
//! information and resets the slot (libstdc++'s `operator new` needs none: its `malloc` is
//! hooked, and counts its block).
//!
//! Registers: every callee-saved register and rsp are restored, rax (the result) is the
//! original's; rdi, rsi, rdx reach the original unchanged, rcx, r8, r9 untouched before the
//! call; rax, r10, r11 and the flags are clobbered before it, which a function's entry allows,
//! and r11 at the return, which a return allows.
//! No lock but `lock`-prefixed instructions, no system call.

use iced_x86::IcedError;
use iced_x86::code_asm::*;
use oi_common::inject::{HEADER_SIZE, SLOT_SHIFT, offset};

use super::{
    RecordError, Result,
    sample::{self, Sampling},
    shape::Shape,
    slot,
    table::{self, frame},
    usable,
};

/// The most bytes a wrapper takes (the realloc-like ones are the longest, about 1.4 KiB).
pub const MAX_LEN: usize = 2048;

/// Assembles the wrapper of a function of `shape`, to be placed at `at` in the target, that
/// calls the original at `original` (the relocated entry) and counts into the data part at
/// `data`, sampling its allocations by `sampling` (the data part's header must say the same).
/// Position-dependent: the bytes work at `at` only (and reach `original` and `data` from
/// anywhere: absolute addresses).
pub fn wrapper(
    shape: Shape,
    sampling: Sampling,
    at: u64,
    original: u64,
    data: u64,
) -> Result<Vec<u8>> {
    let bytes =
        assemble(shape, sampling, at, original, data).map_err(|e| RecordError::Assemble {
            shape,
            why: e.to_string(),
        })?;
    if bytes.len() > MAX_LEN {
        return Err(RecordError::Assemble {
            shape,
            why: format!("{} bytes, more than {MAX_LEN}", bytes.len()),
        });
    }
    Ok(bytes)
}

/// From the counted path's rsp to the wrapper's entry rsp: the frame and five pushes.
const ENTRY: u64 = frame::SIZE + 5 * 8;

fn assemble(
    shape: Shape,
    sampling: Sampling,
    at: u64,
    original: u64,
    data: u64,
) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut nested = a.create_label();
    let mut original_slot = a.create_label();

    let slow = slot::lookup(&mut a, data, nested)?;
    // Counted, and inside, from here on.
    a.mov(qword_ptr(r11 + offset::DEPTH), 1)?;
    // Entry rsp ≡ 8 (mod 16); five pushes and the frame make it 0 at the call.
    for r in [rbx, r12, r13, r14, r15] {
        a.push(r)?;
    }
    a.sub(rsp, frame::SIZE as i32)?;
    a.mov(rbx, r11)?;
    a.mov(r12, rdi)?;
    a.mov(r13, rsi)?;
    a.mov(r14, rdx)?;
    if matches!(shape, Shape::Free | Shape::Realloc(_) | Shape::ReallocArray) {
        // rdi is the old pointer.
        table::take(&mut a)?;
        a.mov(rdi, r12)?;
        a.mov(rsi, r13)?;
        a.mov(rdx, r14)?;
    }
    a.call(qword_ptr(original_slot))?;
    a.mov(r15, rax)?;
    a.mov(r10, data)?;
    record(&mut a, shape, sampling)?;

    a.mov(rax, r15)?;
    a.mov(r11, rbx)?;
    a.add(rsp, frame::SIZE as i32)?;
    for r in [r15, r14, r13, r12, rbx] {
        a.pop(r)?;
    }
    // Out of the wrapper but for the `ret` (r11 is free at a return).
    a.mov(qword_ptr(r11 + offset::DEPTH), 0)?;
    a.ret()?;

    a.set_label(&mut nested)?;
    a.inc(qword_ptr(r11 + offset::NESTED))?;
    let mut no_slot = a.create_label();
    a.set_label(&mut no_slot)?;
    a.jmp(qword_ptr(original_slot))?;
    slot::slow_path(&mut a, slow, no_slot)?;
    a.set_label(&mut original_slot)?;
    a.dq(&[original])?;
    a.assemble(at)
}

/// The counting after the original returned (rax in r15; the entry's rdi, rsi, rdx in r12,
/// r13, r14; the slot in rbx; the data part in r10).
fn record(a: &mut CodeAssembler, shape: Shape, sampling: Sampling) -> Result<(), IcedError> {
    let mut failed = a.create_label();
    let mut done = a.create_label();
    match shape {
        Shape::Malloc(_) | Shape::Calloc | Shape::Memalign | Shape::PosixMemalign => {
            let size = match shape {
                Shape::Malloc(_) => r12,
                Shape::Calloc => {
                    saturated_product(a, r12, r13)?;
                    r13
                }
                Shape::Memalign => r13,
                _ => r14,
            };
            if shape == Shape::PosixMemalign {
                // An int: 0 or an error number; then the block is in *memptr.
                a.test(r15d, r15d)?;
                a.jne(failed)?;
                a.mov(rdi, qword_ptr(r12))?;
            } else {
                a.mov(rdi, r15)?;
            }
            a.test(rdi, rdi)?;
            a.je(failed)?;
            a.mov(rsi, size)?;
            allocated(a, shape, sampling)?;
            a.jmp(done)?;
        }
        Shape::Realloc(_) | Shape::ReallocArray => {
            if shape == Shape::ReallocArray {
                saturated_product(a, r14, r13)?;
            }
            // From here the size is in r13.
            let mut null = a.create_label();
            a.inc(qword_ptr(rbx + offset::REALLOCS))?;
            a.test(r15, r15)?;
            a.je(null)?;
            table::count_free(a)?;
            a.mov(rdi, r15)?;
            a.mov(rsi, r13)?;
            allocated(a, shape, sampling)?;
            a.jmp(done)?;
            a.set_label(&mut null)?;
            // realloc(p, 0) freed p; realloc(p, n) failed and p stays.
            a.test(r13, r13)?;
            a.jne(failed)?;
            table::count_free(a)?;
            a.jmp(done)?;
        }
        Shape::Free => {
            table::count_free(a)?;
            a.jmp(done)?;
        }
    }
    a.set_label(&mut failed)?;
    a.inc(qword_ptr(rbx + offset::FAILED))?;
    if matches!(shape, Shape::Realloc(_) | Shape::ReallocArray) {
        // The old block is live still: back into the table, as it was.
        a.cmp(qword_ptr(rsp + frame::FOUND), 0)?;
        a.je(done)?;
        for (from, to) in [
            (frame::OLD_USABLE, frame::NEW_USABLE),
            (frame::OLD_TSC, frame::NEW_TSC),
            (frame::OLD_THREAD, frame::NEW_THREAD),
        ] {
            a.mov(rax, qword_ptr(rsp + from))?;
            a.mov(qword_ptr(rsp + to), rax)?;
        }
        a.mov(rdi, r12)?;
        a.mov(rsi, qword_ptr(rsp + frame::OLD_SIZE))?;
        table::insert(a)?;
        // insert's last label is on the next instruction too: one label an instruction.
        a.zero_bytes()?;
    }
    a.set_label(&mut done)?;
    Ok(())
}

/// `into` = `into` × `other`, u64::MAX when it overflows. Clobbers rax, rdx.
fn saturated_product(
    a: &mut CodeAssembler,
    other: AsmRegister64,
    into: AsmRegister64,
) -> Result<(), IcedError> {
    let mut fits = a.create_label();
    a.mov(rax, other)?;
    a.mul(into)?;
    a.jno(fits)?;
    a.mov(rax, -1i64)?;
    a.set_label(&mut fits)?;
    a.mov(into, rax)?;
    Ok(())
}

/// The allocation of the block at rdi (non-null) of rsi requested bytes: counted in the slot
/// (rbx), perhaps sampled, and recorded in the live table with its usable size, time and
/// thread.
fn allocated(a: &mut CodeAssembler, shape: Shape, sampling: Sampling) -> Result<(), IcedError> {
    a.inc(qword_ptr(rbx + offset::ALLOCS))?;
    a.add(qword_ptr(rbx + offset::BYTES), rsi)?;
    usable::alignment(a, shape.align())?;
    usable::usable_size(a)?;
    a.add(qword_ptr(rbx + offset::USABLE_BYTES), rdx)?;
    a.mov(qword_ptr(rsp + frame::NEW_USABLE), rdx)?;
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.mov(qword_ptr(rsp + frame::NEW_TSC), rax)?;
    // The slot's index: (slot − data − header) / slot size.
    a.mov(rax, rbx)?;
    a.sub(rax, r10)?;
    a.sub(rax, HEADER_SIZE as i32)?;
    a.shr(rax, SLOT_SHIFT)?;
    a.mov(qword_ptr(rsp + frame::NEW_THREAD), rax)?;
    sample::emit(a, sampling, ENTRY)?;
    table::insert(a)
}
