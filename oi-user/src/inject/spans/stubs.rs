//! The entry and exit stubs, assembled with iced-x86's `CodeAssembler` for the address each
//! will run at.
//!
//! ```text
//! entry stub of f (reached by the jmp patched over f's entry; [rsp] = f's return address)
//!   push rax, r10, r11; the thread's slot from fs:[0] (record's slot lookup)
//!   f is not the entry function and the window is 0 → pop; jmp f's relocated prologue
//!   push rdx, rcx, rsi, rdi; the thread's area; busy → interrupted, pass
//!   busy = 1; t = rdtsc
//!   close the shadow entries the stack left (their slot at or below f's, but a tail call's)
//!     with an UNWOUND event each, putting back a return still hooked (`resynced`)
//!   f is not the entry function and that closed the window → pass
//!   no room in the ring for the entry, its exit and every open frame's exit → dropped, pass
//!   shadow full → shadow_full, pass
//!   push {[rsp], rsp, f | window bit, t} on the shadow stack; ENTRY event {f, t}
//!   entry function: window += 1
//!   [rsp] = exit stub; busy = 0; pop everything; jmp f's relocated prologue
//!
//! exit stub (f returned into it; rsp = its return slot + 8)
//!   push every register it uses; slot; area; busy = 1; t = rdtsc
//!   close the shadow entries below this frame's slot (UNWOUND, a hooked return put back);
//!   pop this frame's (EXIT)
//!   entry function: window -= 1
//!   not on the shadow stack: the newest orphan of this slot (a dropped frame) gives it
//!   busy = 0; the real return address into the return slot; pop all; ret through the slot
//! ```
//!
//! What the function sees is what its caller passed: every general register (the argument
//! registers, rax the vararg count, r10, r11) is given back before the jump, the stubs never
//! touch xmm or x87 registers, and nothing pushed stays on the stack, so stack-passed
//! arguments and varargs are where the function expects them. The exit stub gives back every
//! general register too, not only the return values rax and rdx, and leaves xmm0, xmm1 and
//! st(0) untouched (a `long double` returns intact): a caller compiled with GCC's
//! interprocedural register allocation (`-fipa-ra`, on at -O2) keeps values in the
//! caller-saved registers its callee is known not to touch. Only the flags are clobbered,
//! which every call does (DF stays clear).
//!
//! A tail call (`jmp g` from hooked f) reaches g's stub with [rsp] already the exit stub: g's
//! shadow entry gets the exit stub as its return address, so g returns into the exit stub,
//! which pops g, then returns into it again for f: g is f's child and both close together.
//!
//! Bounded everywhere: the shadow depth is checked against [`SHADOW_CAP`] before it indexes
//! anything, the ring and orphan indices are masked. A return whose frame neither the shadow
//! stack nor the orphans hold cannot know where to go and stops on `ud2`: it takes a target
//! that corrupted the area, or more dropped frames than the orphans keep between a copy of the
//! exit stub's address and its use.

use iced_x86::IcedError;
use iced_x86::code_asm::*;
use oi_common::inject::{
    HEADER_SIZE, SLOT_SHIFT,
    offset::DEPTH as WINDOW,
    spans::{
        AREA_SHIFT, EVENT_SHIFT, FUNCTION_MASK, KIND_SHIFT, ORPHAN_CAP, ORPHAN_ENTRIES,
        ORPHAN_OFFSET, ORPHAN_SHIFT, ORPHANS_TAKEN, RING_CAP, RING_OFFSET, SHADOW_CAP,
        SHADOW_ENTRY_SIZE, SHADOW_OFFSET, SHADOW_SHIFT, SpansLayout, WINDOW_BIT, kind, offset,
    },
};

use super::{Result, SpansError};
use crate::inject::record::slot;

/// The most bytes an entry stub takes.
pub const ENTRY_MAX: usize = 768;
/// The most bytes the exit stub takes.
pub const EXIT_MAX: usize = 768;
/// The most bytes an unwinding stub takes.
pub const UNWIND_MAX: usize = 768;

/// The two places of the C++ runtime where an exception meets the hooked return addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unwinding {
    /// `_Unwind_RaiseException`, `_Unwind_Resume_or_Rethrow`, `_Unwind_ForcedUnwind`: the
    /// unwinder is about to read return addresses, so every hooked one of the thread goes back
    /// to the real one (the unwinder finds no frame information for the exit stub, and a C++
    /// program whose unwinder finds none terminates).
    Raise,
    /// `__cxa_begin_catch`: a catch block starts; the frames at or below its return slot were
    /// unwound (closed as UNWOUND), the others live on and are hooked again.
    Catch,
}

/// Where a stub finds what it needs: the data part and its layout, and the exit stub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub data: u64,
    pub layout: SpansLayout,
    pub exit: u64,
}

/// The entry stub of function `function` (its id in events), to run at `at`, continuing in
/// `original` (the relocated prologue). `window`: it is the entry function.
pub fn entry_stub(
    place: Place,
    at: u64,
    function: u32,
    window: bool,
    original: u64,
) -> Result<Vec<u8>> {
    if u64::from(function) > FUNCTION_MASK {
        return Err(SpansError::Assemble(format!(
            "function id {function} does not fit an event"
        )));
    }
    let bytes = assemble_entry(place, at, function, window, original)
        .map_err(|e| SpansError::Assemble(e.to_string()))?;
    fits(bytes, ENTRY_MAX)
}

/// The exit stub, to run at `place.exit`.
pub fn exit_stub(place: Place) -> Result<Vec<u8>> {
    let bytes = assemble_exit(place).map_err(|e| SpansError::Assemble(e.to_string()))?;
    fits(bytes, EXIT_MAX)
}

fn fits(bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
    if bytes.len() > max {
        return Err(SpansError::Assemble(format!(
            "{} bytes, more than {max}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// r10 = the thread's area, from r10 = the data part and r11 = its slot. Clobbers rax.
fn area(a: &mut CodeAssembler, layout: SpansLayout) -> Result<(), IcedError> {
    a.mov(rax, r11)?;
    a.sub(rax, r10)?;
    a.sub(rax, HEADER_SIZE as i32)?;
    // (slot offset − header) is the index << SLOT_SHIFT.
    a.shl(rax, AREA_SHIFT - SLOT_SHIFT)?;
    a.add(rax, layout.areas_offset() as i32)?;
    a.add(r10, rax)?;
    Ok(())
}

/// t = rdtsc into rdi. Clobbers rax, rdx.
fn timestamp(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.mov(rdi, rax)?;
    Ok(())
}

/// Writes the event {esi = kind << 28 | function, rdi = tsc} to the area's (r10) ring, then
/// advances `reserved`. The caller checked the room. Clobbers rax, rdx.
fn emit(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.mov(rax, qword_ptr(r10 + offset::RESERVED))?;
    a.mov(rdx, rax)?;
    a.and(edx, (RING_CAP - 1) as u32)?;
    a.shl(rdx, EVENT_SHIFT)?;
    a.add(rdx, r10)?;
    a.mov(qword_ptr(rdx + (RING_OFFSET + offset::EVENT_TSC)), rdi)?;
    a.shl(rax, 32)?;
    a.or(rax, rsi)?;
    a.mov(qword_ptr(rdx + (RING_OFFSET + offset::EVENT_WORD)), rax)?;
    a.inc(qword_ptr(r10 + offset::RESERVED))?;
    Ok(())
}

/// Turns the shadow entry at rcx's function word into an event word in esi (`kind`), and
/// closes a window when the entry has its bit (r11: the slot). Clobbers rsi.
fn close_word(a: &mut CodeAssembler, kind: u64) -> Result<(), IcedError> {
    let mut plain = a.create_label();
    a.mov(rsi, qword_ptr(rcx + offset::FUNCTION))?;
    a.bt(rsi, WINDOW_BIT.trailing_zeros())?;
    a.jnc(plain)?;
    a.dec(qword_ptr(r11 + WINDOW))?;
    a.set_label(&mut plain)?;
    a.and(esi, FUNCTION_MASK as u32)?;
    a.or(esi, (kind << KIND_SHIFT) as u32)?;
    Ok(())
}

/// Before the shadow entry at rcx is dropped without its return: when its slot lies below
/// rsp (outside the stub's own frame: pushed registers there are not return slots) and
/// still holds the exit stub's address, the real return address goes back into it and the
/// area counts it in `resynced`. The frame may live on, on another stack the thread switched
/// away from (`swapcontext`, a fiber), and must then return straight to its caller; for a
/// frame a `longjmp` left, the slot is free stack memory. The slot and the address are kept
/// as the newest orphan too, for a copy of the exit stub's address the program took (see
/// [`find_orphan`]). Clobbers rax, rdx, rsi.
fn unhook_dropped(a: &mut CodeAssembler, exit: u64) -> Result<(), IcedError> {
    let mut kept = a.create_label();
    a.mov(rdx, qword_ptr(rcx + offset::SLOT))?;
    a.cmp(rdx, rsp)?;
    a.jae(kept)?;
    a.mov(rax, exit)?;
    a.cmp(qword_ptr(rdx), rax)?;
    a.jne(kept)?;
    a.mov(rax, qword_ptr(rcx + offset::RET))?;
    a.mov(qword_ptr(rdx), rax)?;
    a.inc(qword_ptr(r10 + offset::RESYNCED))?;
    a.mov(rsi, qword_ptr(r10 + ORPHAN_OFFSET))?;
    a.inc(qword_ptr(r10 + ORPHAN_OFFSET))?;
    a.and(esi, (ORPHAN_CAP - 1) as u32)?;
    a.shl(rsi, ORPHAN_SHIFT)?;
    a.add(rsi, r10)?;
    a.mov(qword_ptr(rsi + (ORPHAN_ENTRIES + offset::ORPHAN_SLOT)), rdx)?;
    a.mov(qword_ptr(rsi + (ORPHAN_ENTRIES + offset::ORPHAN_RET)), rax)?;
    a.set_label(&mut kept)?;
    Ok(())
}

/// The exit stub reached for a frame the shadow stack does not hold (r8: its return slot):
/// the program copied the exit stub's address before the frame's entry was dropped (a hooked
/// function that tail-calls `swapcontext` has it saved as the resume address) and now
/// returns through the copy. The newest orphan of that slot gives the real return address
/// (r9), and is used up; none: `not_found`. Clobbers rax, rcx, rdx.
fn find_orphan(a: &mut CodeAssembler, not_found: CodeLabel) -> Result<(), IcedError> {
    let mut each = a.create_label();
    a.mov(rax, qword_ptr(r10 + ORPHAN_OFFSET))?;
    a.mov(ecx, ORPHAN_CAP as u32)?;
    a.set_label(&mut each)?;
    a.test(rcx, rcx)?;
    a.je(not_found)?;
    a.test(rax, rax)?;
    a.je(not_found)?;
    a.dec(rax)?;
    a.dec(rcx)?;
    a.mov(rdx, rax)?;
    a.and(edx, (ORPHAN_CAP - 1) as u32)?;
    a.shl(rdx, ORPHAN_SHIFT)?;
    a.add(rdx, r10)?;
    a.cmp(qword_ptr(rdx + (ORPHAN_ENTRIES + offset::ORPHAN_SLOT)), r8)?;
    a.jne(each)?;
    a.mov(r9, qword_ptr(rdx + (ORPHAN_ENTRIES + offset::ORPHAN_RET)))?;
    a.mov(qword_ptr(rdx + (ORPHAN_ENTRIES + offset::ORPHAN_SLOT)), 0)?;
    a.inc(qword_ptr(r10 + ORPHANS_TAKEN))?;
    Ok(())
}

/// rcx = the top shadow entry of the area (r10); jumps to `empty` when there is none and to
/// `corrupt` when the depth is beyond the stack. Clobbers rax.
fn top(a: &mut CodeAssembler, empty: CodeLabel, corrupt: CodeLabel) -> Result<(), IcedError> {
    a.mov(rax, qword_ptr(r10 + offset::SHADOW_DEPTH))?;
    a.test(rax, rax)?;
    a.je(empty)?;
    a.cmp(rax, SHADOW_CAP as i32)?;
    a.ja(corrupt)?;
    a.shl(rax, SHADOW_SHIFT)?;
    a.lea(
        rcx,
        qword_ptr(r10 + rax + (SHADOW_OFFSET - SHADOW_ENTRY_SIZE)),
    )?;
    Ok(())
}

fn assemble_entry(
    place: Place,
    at: u64,
    function: u32,
    window: bool,
    original: u64,
) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut hook = a.create_label();
    let mut pass = a.create_label();
    let mut original_slot = a.create_label();
    // Once all seven registers are pushed, the return slot is here.
    const SLOT: i32 = 56;

    for r in [rax, r10, r11] {
        a.push(r)?;
    }
    let slow = slot::lookup(&mut a, place.data, hook)?;
    if window {
        a.jmp(hook)?;
    }
    a.set_label(&mut pass)?;
    for r in [r11, r10, rax] {
        a.pop(r)?;
    }
    a.jmp(qword_ptr(original_slot))?;

    let mut interrupted = a.create_label();
    let mut resync = a.create_label();
    let mut synced = a.create_label();
    let mut dropped = a.create_label();
    let mut full = a.create_label();
    let mut done = a.create_label();
    let mut restore = a.create_label();
    let mut stale = a.create_label();
    a.set_label(&mut hook)?;
    for r in [rdx, rcx, rsi, rdi] {
        a.push(r)?;
    }
    area(&mut a, place.layout)?;
    a.cmp(qword_ptr(r10 + offset::BUSY), 0)?;
    a.jne(interrupted)?;
    a.mov(qword_ptr(r10 + offset::BUSY), 1)?;
    timestamp(&mut a)?;

    // Frames the stack has left: their return slot lies at or below this call's. The one
    // exception is a tail call, which reuses the slot of the frame that jumped, still hooked.
    a.set_label(&mut resync)?;
    top(&mut a, synced, full)?;
    a.lea(rdx, qword_ptr(rsp + SLOT))?;
    a.cmp(qword_ptr(rcx + offset::SLOT), rdx)?;
    a.ja(synced)?;
    a.jb(stale)?;
    a.mov(rax, place.exit)?;
    a.cmp(qword_ptr(rsp + SLOT), rax)?;
    a.je(synced)?;
    a.set_label(&mut stale)?;
    unhook_dropped(&mut a, place.exit)?;
    close_word(&mut a, kind::UNWOUND)?;
    emit(&mut a)?;
    a.dec(qword_ptr(r10 + offset::SHADOW_DEPTH))?;
    a.jmp(resync)?;

    a.set_label(&mut synced)?;
    if !window {
        // The entries dropped may have closed the window (a `longjmp` out of the entry
        // function): this call is outside it after all.
        a.cmp(qword_ptr(r11 + WINDOW), 0)?;
        a.je(done)?;
    }
    // Room for this entry and exit and the exit of every open frame.
    a.mov(rax, qword_ptr(r10 + offset::RESERVED))?;
    a.sub(rax, qword_ptr(r10 + offset::CONSUMED))?;
    a.add(rax, qword_ptr(r10 + offset::SHADOW_DEPTH))?;
    a.add(rax, 2)?;
    a.cmp(rax, RING_CAP as i32)?;
    a.ja(dropped)?;
    a.mov(rax, qword_ptr(r10 + offset::SHADOW_DEPTH))?;
    a.cmp(rax, SHADOW_CAP as i32)?;
    a.jae(full)?;
    a.shl(rax, SHADOW_SHIFT)?;
    a.lea(rcx, qword_ptr(r10 + rax + SHADOW_OFFSET))?;
    a.mov(rdx, qword_ptr(rsp + SLOT))?;
    a.mov(qword_ptr(rcx + offset::RET), rdx)?;
    a.lea(rdx, qword_ptr(rsp + SLOT))?;
    a.mov(qword_ptr(rcx + offset::SLOT), rdx)?;
    let word = u64::from(function) | if window { WINDOW_BIT } else { 0 };
    a.mov(rsi, word)?;
    a.mov(qword_ptr(rcx + offset::FUNCTION), rsi)?;
    a.mov(qword_ptr(rcx + offset::TSC), rdi)?;
    a.inc(qword_ptr(r10 + offset::SHADOW_DEPTH))?;
    a.mov(
        esi,
        (u64::from(function) | (kind::ENTRY << KIND_SHIFT)) as u32,
    )?;
    emit(&mut a)?;
    if window {
        a.inc(qword_ptr(r11 + WINDOW))?;
    }
    a.mov(rax, place.exit)?;
    a.mov(qword_ptr(rsp + SLOT), rax)?;
    a.set_label(&mut done)?;
    a.mov(qword_ptr(r10 + offset::BUSY), 0)?;
    a.set_label(&mut restore)?;
    for r in [rdi, rsi, rcx, rdx] {
        a.pop(r)?;
    }
    a.jmp(pass)?;

    a.set_label(&mut dropped)?;
    a.inc(qword_ptr(r10 + offset::DROPPED))?;
    a.jmp(done)?;
    a.set_label(&mut full)?;
    a.inc(qword_ptr(r10 + offset::SHADOW_FULL))?;
    a.jmp(done)?;
    a.set_label(&mut interrupted)?;
    a.inc(qword_ptr(r10 + offset::INTERRUPTED))?;
    a.jmp(restore)?;

    // No slot: the stack is as at the lookup's start.
    slot::slow_path(&mut a, slow, pass)?;
    a.set_label(&mut original_slot)?;
    a.dq(&[original])?;
    a.assemble(at)
}

/// The stub of one of the runtime's unwinding functions (see [`Unwinding`]), to run at `at`,
/// continuing in `original`.
pub fn unwind_stub(place: Place, at: u64, what: Unwinding, original: u64) -> Result<Vec<u8>> {
    let bytes = assemble_unwind(place, at, what, original)
        .map_err(|e| SpansError::Assemble(e.to_string()))?;
    fits(bytes, UNWIND_MAX)
}

fn assemble_unwind(
    place: Place,
    at: u64,
    what: Unwinding,
    original: u64,
) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut pass = a.create_label();
    let mut found_slot = a.create_label();
    let mut original_slot = a.create_label();
    let mut done = a.create_label();
    let mut restore = a.create_label();
    // The function's return slot once all seven registers are pushed.
    const SLOT: i32 = 56;

    for r in [rax, r10, r11] {
        a.push(r)?;
    }
    let slow = slot::lookup(&mut a, place.data, found_slot)?;
    a.set_label(&mut found_slot)?;
    for r in [rdx, rcx, rsi, rdi] {
        a.push(r)?;
    }
    area(&mut a, place.layout)?;
    a.cmp(qword_ptr(r10 + offset::BUSY), 0)?;
    a.jne(restore)?;
    a.mov(qword_ptr(r10 + offset::BUSY), 1)?;
    match what {
        Unwinding::Raise => {
            // Newest first: a tail call's callee (whose real return is the exit stub) before
            // the caller that shares its slot.
            let mut each = a.create_label();
            let mut next = a.create_label();
            a.mov(rsi, qword_ptr(r10 + offset::SHADOW_DEPTH))?;
            a.cmp(rsi, SHADOW_CAP as i32)?;
            a.ja(done)?;
            a.mov(rdi, place.exit)?;
            a.set_label(&mut each)?;
            a.test(rsi, rsi)?;
            a.je(done)?;
            a.dec(rsi)?;
            a.mov(rax, rsi)?;
            a.shl(rax, SHADOW_SHIFT)?;
            a.lea(rcx, qword_ptr(r10 + rax + SHADOW_OFFSET))?;
            a.mov(rdx, qword_ptr(rcx + offset::SLOT))?;
            a.cmp(qword_ptr(rdx), rdi)?;
            a.jne(next)?;
            a.mov(rax, qword_ptr(rcx + offset::RET))?;
            a.mov(qword_ptr(rdx), rax)?;
            a.set_label(&mut next)?;
            a.jmp(each)?;
        }
        Unwinding::Catch => {
            // Close what the exception left: entries whose slot is at or below this call's.
            let mut resync = a.create_label();
            let mut live = a.create_label();
            let mut each = a.create_label();
            let mut next = a.create_label();
            timestamp(&mut a)?;
            a.set_label(&mut resync)?;
            top(&mut a, done, done)?;
            a.lea(rdx, qword_ptr(rsp + SLOT))?;
            a.cmp(qword_ptr(rcx + offset::SLOT), rdx)?;
            a.ja(live)?;
            close_word(&mut a, kind::UNWOUND)?;
            emit(&mut a)?;
            a.dec(qword_ptr(r10 + offset::SHADOW_DEPTH))?;
            a.jmp(resync)?;
            // Hook the live ones again, where the real return address is back.
            a.set_label(&mut live)?;
            a.mov(rsi, qword_ptr(r10 + offset::SHADOW_DEPTH))?;
            a.mov(rdi, place.exit)?;
            a.set_label(&mut each)?;
            a.test(rsi, rsi)?;
            a.je(done)?;
            a.dec(rsi)?;
            a.mov(rax, rsi)?;
            a.shl(rax, SHADOW_SHIFT)?;
            a.lea(rcx, qword_ptr(r10 + rax + SHADOW_OFFSET))?;
            a.mov(rdx, qword_ptr(rcx + offset::SLOT))?;
            a.mov(rax, qword_ptr(rcx + offset::RET))?;
            a.cmp(qword_ptr(rdx), rax)?;
            a.jne(next)?;
            a.mov(qword_ptr(rdx), rdi)?;
            a.set_label(&mut next)?;
            a.jmp(each)?;
        }
    }
    a.set_label(&mut done)?;
    a.mov(qword_ptr(r10 + offset::BUSY), 0)?;
    a.set_label(&mut restore)?;
    for r in [rdi, rsi, rcx, rdx] {
        a.pop(r)?;
    }
    a.set_label(&mut pass)?;
    for r in [r11, r10, rax] {
        a.pop(r)?;
    }
    a.jmp(qword_ptr(original_slot))?;
    slot::slow_path(&mut a, slow, pass)?;
    a.set_label(&mut original_slot)?;
    a.dq(&[original])?;
    a.assemble(at)
}

fn assemble_exit(place: Place) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut found_slot = a.create_label();
    let mut lost = a.create_label();
    let mut resync = a.create_label();
    let mut ours = a.create_label();
    let mut back = a.create_label();
    let mut fatal = a.create_label();
    // This frame's return slot, kept for the final `ret`, once every register the stub uses
    // is pushed below it.
    const SLOT: i32 = 72;
    const SAVED: [AsmRegister64; 9] = [rax, rdx, rcx, rsi, rdi, r8, r9, r10, r11];

    a.lea(rsp, qword_ptr(rsp - 8))?;
    for r in SAVED {
        a.push(r)?;
    }
    let slow = slot::lookup(&mut a, place.data, found_slot)?;
    a.set_label(&mut found_slot)?;
    area(&mut a, place.layout)?;
    a.mov(qword_ptr(r10 + offset::BUSY), 1)?;
    timestamp(&mut a)?;
    a.lea(r8, qword_ptr(rsp + SLOT))?;

    a.set_label(&mut resync)?;
    top(&mut a, lost, lost)?;
    a.cmp(qword_ptr(rcx + offset::SLOT), r8)?;
    a.je(ours)?;
    a.ja(lost)?;
    // Below this frame: left without returning, or on another stack.
    unhook_dropped(&mut a, place.exit)?;
    close_word(&mut a, kind::UNWOUND)?;
    emit(&mut a)?;
    a.dec(qword_ptr(r10 + offset::SHADOW_DEPTH))?;
    a.jmp(resync)?;

    a.set_label(&mut ours)?;
    close_word(&mut a, kind::EXIT)?;
    emit(&mut a)?;
    a.mov(r9, qword_ptr(rcx + offset::RET))?;
    a.dec(qword_ptr(r10 + offset::SHADOW_DEPTH))?;
    a.set_label(&mut back)?;
    a.mov(qword_ptr(r10 + offset::BUSY), 0)?;
    // The real return address back into the slot the `ret` took it from, every register as
    // it was, and a `ret` through the slot.
    a.mov(qword_ptr(rsp + SLOT), r9)?;
    for r in SAVED.iter().rev() {
        a.pop(*r)?;
    }
    a.ret()?;

    // Not on the shadow stack: a copy of the exit stub's address of a dropped frame.
    a.set_label(&mut lost)?;
    find_orphan(&mut a, fatal)?;
    a.jmp(back)?;
    a.set_label(&mut fatal)?;
    a.ud2()?;
    slot::slow_path(&mut a, slow, fatal)?;
    a.assemble(place.exit)
}
