//! User stacks in the kernel (owner: the unwind work).
//!
//! Placeholder until the CFI unwinder lands: frame pointers, through `bpf_get_stack` with
//! `BPF_F_USER_STACK`. It is exact at a function's first instruction, which is where the
//! profilers call it: there `[rsp]` is the caller's return address and `rbp` still the
//! caller's frame, so the caller comes from `[rsp]` and the frames above it from the
//! frame-pointer chain (which `bpf_get_stack` alone would start one frame too high). Code
//! built without frame pointers gives the probed pc and its direct caller only, plus whatever
//! the chain of a stray `rbp` holds; the CFI unwinder replaces this file.

use aya_ebpf::{
    EbpfContext as _,
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_probe_read_user, generated::bpf_get_stack},
    programs::ProbeContext,
};
use oi_common::stack::MAX_FRAMES;

/// Writes `frames[0]` = the probed instruction's address, then each caller's return address,
/// innermost first; returns how many were written (≥ 1).
#[inline(always)]
pub fn user_stack(ctx: &ProbeContext, frames: &mut [u64; MAX_FRAMES]) -> usize {
    // SAFETY: `regs` is the pt_regs the kernel passed to this program, readable for its run.
    let (ip, sp) = unsafe { ((*ctx.regs).rip, (*ctx.regs).rsp) };
    frames[0] = ip;
    // SAFETY: a user-memory read through the helper, which fails cleanly on a bad address.
    let Ok(caller) = (unsafe { bpf_probe_read_user(sp as *const u64) }) else {
        return 1;
    };
    if caller == 0 {
        return 1;
    }
    frames[1] = caller;
    // `bpf_get_stack` writes [ip, [rbp + 8], …]: its first entry is ours already, so it writes
    // from frames[1] on and frames[1] is put back afterwards.
    let room = ((MAX_FRAMES - 1) * 8) as u32;
    // SAFETY: the helper writes at most `room` bytes into `frames[1..]`, which holds exactly
    // that many; the context is the one the kernel passed.
    let written = unsafe {
        bpf_get_stack(
            ctx.as_ptr(),
            frames.as_mut_ptr().add(1).cast(),
            room,
            BPF_F_USER_STACK as u64,
        )
    };
    frames[1] = caller;
    if written <= 8 {
        return 2;
    }
    let n = (written as usize) / 8;
    if n + 1 > MAX_FRAMES {
        MAX_FRAMES
    } else {
        n + 1
    }
}
