//! Plain-old-data types shared by the eBPF programs (`oi-ebpf`) and the tracer (`oi-user`).
//!
//! Everything here is `#[repr(C)]` and `Copy`: it crosses the kernel boundary through maps and
//! the ring buffer byte for byte. Nothing else is shared between the two address spaces.
#![no_std]

pub mod allocs;
pub mod calls;
pub mod footprint;
pub mod inject;
pub mod stack;

// The trigger's types are also named from the crate root (`oi_common::Event`), as both the
// kernel and the user side import them.
pub use footprint::*;
