//! The shared core on live processes, apart from any tool: the hijack that runs code inside a
//! frozen thread (`hijack`, with hand-written walkers) and the profilers' symbolizer
//! (`symbolize`).

mod hijack;
mod symbolize;
