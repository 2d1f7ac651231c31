//! CFI unwind tables for the kernel-side unwinder (owner: the unwind work).
//!
//! Placeholder until the CFI unwinder lands: stacks come from frame pointers
//! (`oi-ebpf/src/stack.rs`), so there are no tables to load and every method does nothing.
//! The interface is the one the real unwinder implements: a profiler calls [`Unwinder::new`]
//! after loading its program, [`Unwinder::track`] for every process before its stacks matter
//! (and again now and then, for new mappings), [`Unwinder::forget`] when a process exits, and
//! shows [`Unwinder::stats`] in its totals.

use crate::error::Result;

/// What the unwinder loaded and what it could not do.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct UnwindStats {
    /// Files whose CFI was loaded.
    pub files: u64,
    /// Unwind table rows loaded.
    pub rows: u64,
    /// Rows that did not fit the kernel's tables.
    pub rows_dropped: u64,
    /// Frames where no CFI row covered the pc (the stack ends there).
    pub frames_without_cfi: u64,
    /// Stacks cut at the frame limit.
    pub truncated_stacks: u64,
}

/// The user-space half of the kernel-side unwinder.
pub struct Unwinder {
    stats: UnwindStats,
}

impl Unwinder {
    /// The unwinder of a loaded program (its maps, once there are some).
    pub fn new(_ebpf: &mut aya::Ebpf) -> Result<Self> {
        Ok(Self {
            stats: UnwindStats::default(),
        })
    }

    /// Loads (or refreshes) the unwind tables of the files process `pid` maps.
    pub fn track(&mut self, _pid: i32) -> Result<()> {
        Ok(())
    }

    /// Forgets a process that exited.
    pub fn forget(&mut self, _pid: i32) {}

    pub fn stats(&self) -> UnwindStats {
        self.stats
    }
}
