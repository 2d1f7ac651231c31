//! What the eBPF programs of every tool share: the footprint trigger (`src/main.rs`) and the
//! profilers (`src/bin/*.rs`, each built as an object of its own so a tool loads only its own
//! programs and maps), and what they share: the CFI user-stack unwinder ([`stack`], whose maps
//! every object carries; only loaders that walk stacks size them). Kernel side only; types that
//! cross to user space live in `oi-common`.
#![no_std]
// The BPF target has no `AtomicU64::fetch_add` (no CAS), but LLVM lowers the xadd intrinsic
// to BPF's atomic fetch-and-add, which exact counters need.
#![allow(internal_features)]
#![feature(core_intrinsics)]

pub mod stack;

use core::intrinsics::{AtomicOrdering, atomic_xadd};

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
