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

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, generated::bpf_get_current_ancestor_cgroup_id},
    maps::PerCpuArray,
};

/// CLOCK_MONOTONIC in ns (`bpf_ktime_get_ns`), the clock user space reads too.
#[inline(always)]
pub fn clock() -> u64 {
    // SAFETY: a plain helper call.
    unsafe { bpf_ktime_get_ns() }
}

/// Adds one to slot `index` of a per-CPU counter array (no atomics: one CPU runs one program
/// at a time).
#[inline(always)]
pub fn count(counters: &PerCpuArray<u64>, index: u32) {
    if let Some(c) = counters.get_ptr_mut(index) {
        // SAFETY: this CPU's slot of a per-CPU array.
        unsafe { *c += 1 };
    }
}

/// Whether the current task is in the cgroup `id`, `level` levels below the root: the scope
/// of a run over a cgroup (the load-time globals `CGROUP_ID` and `CGROUP_LEVEL`).
#[inline(always)]
pub fn in_cgroup(level: u32, id: u64) -> bool {
    // SAFETY: a plain helper call without pointers.
    let ancestor = unsafe { bpf_get_current_ancestor_cgroup_id(level as i32) };
    ancestor == id
}

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
