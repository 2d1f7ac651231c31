//! What the eBPF programs of every tool share: the footprint trigger (`src/bin/footprint.rs`)
//! and the profilers (`src/bin/*.rs`, each built as an object of its own so a tool loads only
//! its own programs and maps), and what they share: the CFI user-stack unwinder ([`stack`], whose maps
//! every object carries; only loaders that walk stacks size them). Kernel side only; types that
//! cross to user space live in `oi-common`.
#![no_std]
// The BPF target has no `AtomicU64::fetch_add` or `compare_exchange`, but LLVM lowers the
// xadd and cxchg intrinsics to BPF's atomic fetch-and-add and compare-and-exchange, which
// exact counters and the allocation profiler's live slots need.
#![allow(internal_features)]
#![feature(core_intrinsics)]

pub mod stack;

use core::intrinsics::{AtomicOrdering, atomic_cxchg, atomic_xadd};

/// Adds `n` to a counter shared by all CPUs and returns the new value.
///
/// # Safety
/// `counter` must point into a map value (which lives as long as the map), be 8-byte aligned,
/// and every concurrent access to it must go through atomics.
#[inline(always)]
pub unsafe fn add(counter: *mut u64, n: u64) -> u64 {
    // SAFETY: the caller guarantees a valid, aligned, atomically accessed counter.
    let before = unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(counter, n) };
    before + n
}

/// Atomically replaces `*p` by `new` when it is `old`; returns what `*p` held (`old`: done).
///
/// # Safety
/// `p` points into a map value, 8-byte aligned, and every concurrent access to it is atomic
/// or allowed by the caller's protocol (the allocation profiler's `LIVE_SLOTS`).
#[inline(always)]
pub unsafe fn cmpxchg(p: *mut u64, old: u64, new: u64) -> u64 {
    // SAFETY: as the caller guarantees.
    unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(p, old, new).0
    }
}
