//! Recording inside the target: the wrappers that count every allocator call once, at the
//! outermost hooked call, into the shared data part (`oi_common::inject`), and the tracer's
//! reader of that part.
//!
//! - [`shape`]: which wrapper a hooked function gets, from `allocs`' classification;
//! - [`wrapper()`]: assembles one wrapper with iced-x86's `CodeAssembler` for the address it
//!   will run at (`slot`: the thread's slot from `fs:[0]`; `table`: the live blocks;
//!   `usable`: usable sizes by glibc's and jemalloc's rules);
//! - [`sample`]: the sampling decision and record in an allocation's counted path (a byte or
//!   call countdown, the caller's registers and top of stack into a ring);
//! - [`Snapshot::read`]: bounded parse of the data part into totals, live blocks and lifetimes;
//!   [`samples`]: the draws the tracer writes, the samples' weights, the ring's bounded reader;
//! - [`clock`]: the TSC's scale the tracer writes into the header;
//! - [`local`]: the wrappers mapped into oi-trace's own process around its own libc, for the
//!   tests and the benchmark.
//!
//! The tracer writes the data part's header before any wrapper can run, then only reads. The
//! wrappers never touch memory outside the data part and their own frame, except
//! posix_memalign's `*memptr` and glibc's chunk header word; they make no system call and take
//! no lock. Thread slots outlive threads: a thread that exits leaves its slot, and a thread
//! created later with the same TCB address counts on in it. A forked child shares the region
//! and its thread's slot with its parent, which makes both processes' counts unreliable: the
//! child must be unpatched or given its own region (`oi_common::inject::ThreadSlot`).

pub mod clock;
pub mod local;
pub mod sample;
pub mod samples;
pub mod shape;
pub(crate) mod slot;
pub mod snapshot;
mod table;
mod usable;
pub mod wrapper;

#[cfg(test)]
mod sampling_tests;
#[cfg(test)]
mod tests;

pub use sample::Sampling;
pub use samples::{Drain, Sample};
pub use shape::{Align, Shape};
pub use snapshot::{LiveBlock, Snapshot, Totals};
pub use wrapper::wrapper;

/// What recording can fail at.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot assemble the {shape} wrapper: {why}")]
    Assemble { shape: Shape, why: String },
    #[error("the shared allocation counters are unreadable: {0}")]
    Snapshot(String),
    #[error("cannot map the in-process wrappers: {0}")]
    Local(String),
}

pub type Result<T, E = RecordError> = std::result::Result<T, E>;

impl From<RecordError> for crate::error::Error {
    fn from(e: RecordError) -> Self {
        crate::error::Error::internal(e.to_string())
    }
}
