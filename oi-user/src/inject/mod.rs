//! The in-target core: code and counters that oi-trace places inside a live process so that
//! allocator calls (and, later, traced calls) are recorded in the process itself, without a
//! kernel trap per call. Four parts: a *segment* near each patched library (executable code,
//! reachable by a `jmp rel32`) and a shared *data part* (a memfd mapped in the target and in
//! oi-trace); *relocation* of each hooked function's first instructions into the segment with
//! iced-x86, so that calling the relocated copy is calling the original; *patching* of those
//! entries to jump to their wrappers, and unpatching, with every thread stopped and outside the
//! replaced bytes, with a guardian that undoes everything if oi-trace dies; and *recording*
//! ([`record`]): the wrappers themselves, which count each request once, at the outermost
//! hooked call, into the data part, and the tracer-side reader of that part.

pub mod record;
