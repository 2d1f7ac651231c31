//! The shared core on live processes, apart from any tool: the hijack that runs code inside a
//! frozen thread (`hijack`, with hand-written walkers), the profilers' symbolizer
//! (`symbolize`), and the profilers' start-up when the target exits meanwhile
//! (`startup_exit`).

mod hijack;
mod startup_exit;
mod symbolize;
