//! The in-target core: code and counters that oi-trace places inside a live process so that
//! allocator calls (and, later, traced calls) are recorded in the process itself, without a
//! kernel trap per call. Four parts: a *segment* near each patched library (executable code,
//! reachable by a `jmp rel32`) and a shared *data part* (a memfd mapped in the target and in
//! oi-trace), in [`segment`]; *relocation* of each hooked function's first instructions into
//! the segment with iced-x86, so that calling the relocated copy is calling the original, in
//! [`relocate`]; *patching* of those entries to jump to their wrappers, and unpatching, with
//! every thread stopped and outside the replaced bytes, in [`patch`], with a guardian
//! (`guardian`) that undoes everything if oi-trace dies; and *recording*
//! ([`record`]): the wrappers themselves, which count each request once, at the outermost
//! hooked call, into the data part, and the tracer-side reader of that part.
//!
//! Never leaves a patched byte, a thread inside our code, or a mapping of ours behind once
//! detached; never unmaps anything a thread may still return into.

pub mod counter;
pub mod patch;
pub mod record;
pub mod relocate;
pub mod segment;
pub mod spans;
