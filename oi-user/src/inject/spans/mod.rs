//! Call recording inside the target, for `calls --mechanism inject`: the entry stub each
//! hooked function's patched entry jumps to, the one exit stub that hooked calls return
//! into, and the tracer's side, which drains the per-thread event rings and turns the events
//! into the call tree's nodes. The shared layout is `oi_common::inject::spans`.
//!
//! - [`stubs`]: the entry and exit stubs, assembled with iced-x86 for the address each runs
//!   at (the thread's slot found by `record`'s slot lookup, the same as the allocation
//!   wrappers');
//! - [`reader`]: a bounded drain of every thread's ring from our view of the data part (the
//!   target can write all of it: nothing read is believed before it is checked);
//! - [`nodes`]: events to the nodes (parent, function) → calls, total, self, which
//!   `calls::tree` builds the tree from, as the uprobe path's kernel maps give them;
//! - [`undo`]: the hooked return addresses still on the target's stacks, found from the
//!   shadow stacks and put back, which unpatching and the guardian do before the segment
//!   goes;
//! - [`local`]: the stubs mapped in oi-trace's own process, for the tests and the bench.
//!
//! Never a system call, a lock or an atomic instruction in a stub (one thread writes its
//! area; signal handlers are kept out by its `busy` word), never memory outside the data
//! part, the stub's own pushes and the hooked call's return slot.

pub mod local;
pub mod nodes;
pub mod reader;
pub mod stubs;
pub mod undo;

#[cfg(test)]
mod tests;

/// What recording calls can fail at.
#[derive(Debug, thiserror::Error)]
pub enum SpansError {
    #[error("cannot assemble a call stub: {0}")]
    Assemble(String),
    #[error("cannot map the in-process stubs: {0}")]
    Local(String),
}

pub type Result<T, E = SpansError> = std::result::Result<T, E>;

impl From<SpansError> for crate::error::Error {
    fn from(e: SpansError) -> Self {
        crate::error::Error::internal(e.to_string())
    }
}
