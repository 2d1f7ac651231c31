//! The in-target core: code of ours placed inside a live process, reached by patched
//! function entries, sharing memory with oi-trace. `segment` maps the code and data parts
//! within reach of a library, `relocate` moves a function's first instructions there with
//! iced-x86, `patch` writes and removes the entry jumps with every thread stopped. The
//! guardian (`inferior::guardian`) undoes the patches when oi-trace is killed.
//!
//! Never leaves a patched byte, a thread inside our code, or a mapping of ours behind once
//! detached; never unmaps anything a thread may still return into.

pub mod counter;
pub mod patch;
pub mod relocate;
pub mod segment;
