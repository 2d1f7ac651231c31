//! The eBPF side every tool shares: loading an eBPF object and a profiler's programs,
//! attaching, detaching them, file by file or all or nothing (`profiler`), multi-uprobe links
//! (`multi`), arrays read and written as memory (`mapped`), telling a refusal for want of privileges from other failures (`not_permitted`),
//! what a profiler traces (`scope`: the processes and the files they run), and the kernel's
//! clock.
//!
//! Knows nothing of any one tool's programs or maps: a tool's loader (footprint's trigger,
//! `allocs::program`, `calls::program`) says what to load and where to attach it.

pub mod mapped;
pub mod multi;
pub mod not_permitted;
pub mod profiler;
pub mod scope;

use nix::sys::time::TimeSpec;
use nix::time::{ClockId, clock_gettime};

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
pub(crate) fn monotonic_ns() -> u64 {
    let t: TimeSpec = clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap_or(TimeSpec::new(0, 0));
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}
