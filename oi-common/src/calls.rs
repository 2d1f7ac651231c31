//! Types of the call-tree profiler (`oi-trace calls`) shared by its eBPF program
//! (`oi-ebpf/src/bin/calls.rs`) and user space (`oi-user/src/calls`).
//!
//! The kernel side keeps one shadow stack per thread ([`ThreadState`]) while the thread is
//! inside the entry function (its *window*), and aggregates every completed call into the node
//! of the call tree keyed by its path: [`NodeKey`] (parent node, function) → node id, and
//! [`NodeStats`] per node id. User space rebuilds the tree from those two maps.

/// Frames one shadow stack holds (the entry function's frame included). Deeper calls are
/// counted on the deepest node ([`NodeStats::deeper`]), never timed, never lost.
pub const MAX_DEPTH: u32 = 128;
/// Threads inside a window at once; one more is counted in [`counter::THREADS_FULL`].
pub const MAX_THREADS: u32 = 16384;
/// Buckets of a latency histogram: bucket `b` counts calls of `2^(b-1) ≤ ns < 2^b` (bucket 0:
/// zero ns).
pub const HISTOGRAM_BUCKETS: u32 = 64;
/// Size of the ring buffer of `--chrome` call records (a power of two, a multiple of the page
/// size).
pub const RING_BYTES: u32 = 4 * 1024 * 1024;

/// Parent of the entry function's nodes (the roots of the tree).
pub const ROOT: u32 = u32::MAX;
/// The node of a call that found the node table full: timed nowhere, counted in
/// [`counter::NODES_FULL`]; every call beneath it lands there too.
pub const NO_NODE: u32 = u32::MAX - 1;

/// The attach cookie of every probe: what kind of instruction it is on, which function it
/// belongs to and, for a tail call, which function it jumps to.
pub mod cookie {
    /// The first instruction of an instrumented function. When that instruction is itself a
    /// tail-call jump to an instrumented function, the cookie's target names it.
    pub const ENTRY: u64 = 0;
    /// The first instruction of the entry function: opens a window when none is open.
    pub const WINDOW: u64 = 1;
    /// A `ret` of an instrumented function.
    pub const RETURN: u64 = 2;
    /// A `jmp` by which a function leaves for another one (a tail call); the target's id is in
    /// the cookie, or [`NO_FUNCTION`] when it is not instrumented or not known (indirect).
    pub const TAIL: u64 = 3;
    /// The entry of the C++ runtime's `__cxa_begin_catch`: a catch block starts, so the frames
    /// an exception unwound are closed now rather than at the thread's next call.
    pub const CATCH: u64 = 4;
    /// The first instruction of a function that leaves at once (it is a `ret`, or a jump to a
    /// function that is not instrumented): a call of no duration.
    pub const INSTANT: u64 = 5;
    /// A conditional jump out of the function: a [`TAIL`] when its condition holds (the
    /// condition code, 0-15 as in `0x7X`, is in bits 28-31, see [`with_condition`]).
    pub const TAIL_IF: u64 = 6;
    /// A `ret` of the entry function: a [`RETURN`] inside a window; outside every window, the
    /// return of a call of the entry that began before the probes were armed.
    pub const WINDOW_RETURN: u64 = 7;

    /// Function ids fit in 28 bits (the tail target shares the cookie).
    pub const MAX_FUNCTIONS: u32 = (1 << 28) - 1;
    /// No function: the target of a tail call that is not instrumented.
    pub const NO_FUNCTION: u32 = MAX_FUNCTIONS;

    const KIND_SHIFT: u32 = 60;
    const TARGET_SHIFT: u32 = 32;
    const FUNCTION_MASK: u64 = (1 << 28) - 1;

    pub const fn encode(kind: u64, function: u32, target: u32) -> u64 {
        (kind << KIND_SHIFT)
            | (((target as u64) & FUNCTION_MASK) << TARGET_SHIFT)
            | ((function as u64) & FUNCTION_MASK)
    }

    pub const fn kind(cookie: u64) -> u64 {
        cookie >> KIND_SHIFT
    }

    pub const fn function(cookie: u64) -> u32 {
        (cookie & FUNCTION_MASK) as u32
    }

    pub const fn target(cookie: u64) -> u32 {
        ((cookie >> TARGET_SHIFT) & FUNCTION_MASK) as u32
    }

    const CONDITION_SHIFT: u32 = 28;

    /// `cookie` with the x86 condition code `cc` (0-15) of a [`TAIL_IF`].
    pub const fn with_condition(cookie: u64, cc: u8) -> u64 {
        cookie | (((cc & 0xf) as u64) << CONDITION_SHIFT)
    }

    pub const fn condition(cookie: u64) -> u8 {
        ((cookie >> CONDITION_SHIFT) & 0xf) as u8
    }

    /// Whether condition code `cc` holds for the flags `eflags` (CF bit 0, PF 2, ZF 6, SF 7,
    /// OF 11), as the CPU decides a `jcc`.
    pub const fn condition_holds(cc: u8, eflags: u64) -> bool {
        let cf = eflags & 1 != 0;
        let pf = eflags & (1 << 2) != 0;
        let zf = eflags & (1 << 6) != 0;
        let sf = eflags & (1 << 7) != 0;
        let of = eflags & (1 << 11) != 0;
        let holds = match cc >> 1 {
            0 => of,
            1 => cf,
            2 => zf,
            3 => cf || zf,
            4 => sf,
            5 => pf,
            6 => sf != of,
            _ => zf || sf != of,
        };
        // Odd codes are the negations (jno, jae, jne, ja, jns, jnp, jge, jg).
        holds != (cc & 1 != 0)
    }
}

/// One call on a shadow stack.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// `bpf_ktime_get_ns()` at the entry.
    pub start_ns: u64,
    /// The stack pointer at the entry: the address of the return address. The matching `ret`
    /// (or tail-call `jmp`) runs with the same stack pointer; a frame whose slot lies below the
    /// current stack pointer has been left (by an exception or a longjmp).
    pub sp: u64,
    /// Time of the completed calls beneath this one (self time = total − this).
    pub child_ns: u64,
    pub node: u32,
    pub function: u32,
    /// Set by a tail-call `jmp` of this frame to an instrumented function: the entry of that
    /// function at the same stack pointer is this frame's callee, and both return together.
    /// [`cookie::NO_FUNCTION`] otherwise.
    pub tail_target: u32,
    pub _pad: u32,
}

/// The shadow stack of one thread inside a window (map value, keyed by pid_tgid).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ThreadState {
    /// Frames in use.
    pub depth: u32,
    /// Non-zero when the window's calls are sent to user space (`--chrome`).
    pub traced: u32,
    /// The window's number (1-based, in order of opening).
    pub window: u64,
    pub frames: [Frame; MAX_DEPTH as usize],
}

/// Key of the node map: the node of the caller (or [`ROOT`]) and the function called.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeKey {
    pub parent: u32,
    pub function: u32,
}

/// What one node of the tree has seen, updated atomically by every thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Completed calls, abandoned ones included.
    pub calls: u64,
    /// Sum of the calls' durations.
    pub total_ns: u64,
    /// Sum of the calls' durations minus their timed callees'.
    pub self_ns: u64,
    /// Calls directly beneath this node that the depth limit left untimed (their time is in
    /// this node's self time).
    pub deeper: u64,
    /// Calls closed because the stack pointer showed they had been left without a `ret`
    /// (an exception or a longjmp); timed up to the moment that was seen.
    pub abandoned: u64,
}

/// Indices of the per-CPU counter array (user space sums the CPUs).
pub mod counter {
    /// Probe hits of threads inside a window.
    pub const HITS_INSIDE: u32 = 0;
    /// Probe hits of threads outside every window (one map lookup each).
    pub const HITS_OUTSIDE: u32 = 1;
    /// Calls not timed because the node table was full.
    pub const NODES_FULL: u32 = 2;
    /// Windows not opened because the thread table was full.
    pub const THREADS_FULL: u32 = 3;
    /// Calls beneath the depth limit (counted on their node too).
    pub const DEEPER: u32 = 4;
    /// Frames closed by the stack pointer rather than by their `ret`.
    pub const ABANDONED: u32 = 5;
    /// `--chrome` records lost to a full ring buffer.
    pub const TRACE_LOST: u32 = 6;
    /// Windows not opened because `--count` windows were already open.
    pub const WINDOWS_SKIPPED: u32 = 7;
    /// Returns and tail jumps whose frame was not on the stack (never expected; a sign of a
    /// missed entry).
    pub const UNMATCHED: u32 = 8;
    /// Returns of the entry function with no window open: calls of the entry already running
    /// when the probes were armed (not counted; their inner calls are not either).
    pub const ENTERED_BEFORE_ATTACHING: u32 = 9;
    pub const COUNT: u32 = 10;
}

/// Indices of the shared (atomically updated) array of global numbers.
pub mod global {
    /// Windows opened so far; a window's number.
    pub const WINDOWS_OPENED: u32 = 0;
    /// Windows closed so far (the entry function returned, or was left by an exception).
    pub const WINDOWS_CLOSED: u32 = 1;
    /// The next free node id.
    pub const NEXT_NODE: u32 = 2;
    pub const COUNT: u32 = 3;
}

/// Kinds of [`Record`].
pub mod record {
    /// One completed call of a traced window (`--chrome`).
    pub const CALL: u32 = 1;
    /// The `--count`th window closed: user space can stop.
    pub const DONE: u32 = 2;
}

/// One ring-buffer record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub kind: u32,
    pub tgid: u32,
    pub tid: u32,
    /// The call's node and function.
    pub node: u32,
    pub function: u32,
    /// Frames above it (the entry function's call is at depth 0).
    pub depth: u32,
    /// The window's number.
    pub window: u64,
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Non-zero when the call was closed by the stack pointer (see [`NodeStats::abandoned`]).
    pub abandoned: u32,
    pub _pad: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: every type is #[repr(C)] of integers with explicit padding fields, so every bit
    // pattern is a valid value.
    unsafe impl aya::Pod for super::Frame {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ThreadState {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::NodeKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::NodeStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Record {}
}

#[cfg(test)]
mod tests {
    use super::cookie;

    #[test]
    fn cookies_round_trip() {
        let c = cookie::encode(cookie::TAIL, 123_456, cookie::NO_FUNCTION);
        assert_eq!(cookie::kind(c), cookie::TAIL);
        assert_eq!(cookie::function(c), 123_456);
        assert_eq!(cookie::target(c), cookie::NO_FUNCTION);
        let c = cookie::with_condition(cookie::encode(cookie::TAIL_IF, 9, 3), 0x5);
        assert_eq!(cookie::kind(c), cookie::TAIL_IF);
        assert_eq!(
            (cookie::function(c), cookie::target(c), cookie::condition(c)),
            (9, 3, 5)
        );
        // je / jne on ZF; jl on SF != OF; ja on !CF && !ZF.
        assert!(cookie::condition_holds(0x4, 1 << 6));
        assert!(!cookie::condition_holds(0x5, 1 << 6));
        assert!(cookie::condition_holds(0xc, 1 << 7));
        assert!(!cookie::condition_holds(0xc, (1 << 7) | (1 << 11)));
        assert!(cookie::condition_holds(0x7, 0));
        assert!(!cookie::condition_holds(0x7, 1));
        let c = cookie::encode(cookie::CATCH, 0, 7);
        assert_eq!(
            (cookie::kind(c), cookie::function(c), cookie::target(c)),
            (4, 0, 7)
        );
    }
}
