//! The interpreter backend: executes a [`Plan`](crate::plan::Plan) against target memory
//! read through a [`MemoryReader`] and produces the data stream (`plan` documents the words).
//!
//! Never writes to the target. Reads are batched: a vector's whole element array is one read,
//! deque blocks go out in one `process_vm_readv` with many iovecs.

pub mod heap;
pub mod heap_ranges;
pub mod memory;
pub mod walk;

pub use memory::{LocalReader, MemoryReader, ReadError, RemoteReader};
pub use walk::{WalkError, Walker, run};

#[cfg(test)]
pub(crate) mod live_tests;
