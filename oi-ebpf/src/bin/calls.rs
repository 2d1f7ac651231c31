//! The call-tree profiler's kernel side: one uprobe program on the entry and on every return
//! instruction of every instrumented function, keeping a shadow stack per thread and
//! aggregating each completed call into the node of the call tree keyed by its path.
//!
//! The attach cookie says what a hit is (`oi_common::calls::cookie`): an entry, the entry of
//! the window function, a `ret`, a tail-call `jmp` (a conditional one counts only when the
//! flags say it is taken), or the C++ runtime's `__cxa_begin_catch`.
//! A thread has a shadow stack only while it is inside the entry function (its window): any
//! other hit costs one hash lookup that finds nothing.
//!
//! The stack pointer keeps the shadow stack true to the machine stack. At a function's first
//! instruction `rsp` points at its return address, and at its `ret` (or at the `jmp` of a tail
//! call) it points at the same slot. So a hit with stack pointer `sp` first closes every frame
//! the machine stack no longer holds: at an entry, frames whose slot is at or below `sp`; at a
//! `ret`, frames whose slot is below `sp` (then the frame at `sp` is the one returning). Frames
//! left by an exception or a longjmp are closed at the next hit of the thread (at the latest
//! its next call or return; at once when a catch block starts), timed up to then and counted
//! as abandoned; recursion needs nothing special. A tail call (`jmp` to an instrumented
//! function) marks the jumping frame: the target's entry at the same stack pointer becomes its
//! callee, and one `ret` closes both, so a tail call keeps the shape of the source's call tree.
//! A tail call to a function that is not instrumented (or through a register) closes the
//! jumping frame at the jump.
//!
//! Aggregates only: calls, total and self time, abandoned calls and calls beyond the depth
//! limit per node; optionally a log2 latency histogram per function. One ring-buffer record per
//! call is sent only for the first `--trace-entries` windows (`--chrome`). Every table is
//! bounded; what does not fit is counted, never written elsewhere.
#![no_std]
#![no_main]

use core::ffi::c_void;

use aya_ebpf::{
    EbpfContext, Global,
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST},
    helpers::{
        bpf_get_current_pid_tgid,
        generated::{bpf_get_attach_cookie, bpf_loop},
    },
    macros::{map, uprobe},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::ProbeContext,
};
use aya_log_ebpf::{debug, info, warn};
use oi_common::calls::{
    Frame, HISTOGRAM_BUCKETS, MAX_DEPTH, MAX_THREADS, NO_NODE, NodeKey, NodeStats, RING_BYTES,
    ROOT, Record, ThreadState, cookie, counter, global, record,
};
use oi_ebpf::{clock, count, in_cgroup};

// Set by the loader (`EbpfLoader::set_global`) before the program is verified; read-only here.
/// The traced process (pid mode), 0 in cgroup mode.
#[unsafe(no_mangle)]
static TARGET_TGID: Global<u32> = Global::new(0);
/// oi-trace itself: its calibration calls are always in scope.
#[unsafe(no_mangle)]
static SELF_TGID: Global<u32> = Global::new(0);
/// cgroup mode: the cgroup's id and its depth below the root.
#[unsafe(no_mangle)]
static CGROUP_ID: Global<u64> = Global::new(0);
#[unsafe(no_mangle)]
static CGROUP_LEVEL: Global<u32> = Global::new(0);
/// Frames a shadow stack may hold (`--depth` + 1, at most `MAX_DEPTH`).
#[unsafe(no_mangle)]
static MAX_FRAMES: Global<u32> = Global::new(MAX_DEPTH);
/// Node ids below this fit the node tables.
#[unsafe(no_mangle)]
static MAX_NODES: Global<u32> = Global::new(0);
/// Windows to open at most (`--count`), 0 for no limit.
#[unsafe(no_mangle)]
static WINDOW_LIMIT: Global<u64> = Global::new(0);
/// Windows whose calls are sent as records (`--chrome --trace-entries`).
#[unsafe(no_mangle)]
static TRACED_WINDOWS: Global<u64> = Global::new(0);
/// Non-zero: keep a latency histogram per function.
#[unsafe(no_mangle)]
static HISTOGRAMS: Global<u32> = Global::new(0);

/// pid_tgid → the thread's shadow stack, present only while the thread is in a window.
#[map]
static THREADS: HashMap<u64, ThreadState> =
    HashMap::with_max_entries(MAX_THREADS, BPF_F_NO_PREALLOC);

/// Where a new shadow stack is prepared (too large for the BPF stack).
#[map]
static SCRATCH: PerCpuArray<ThreadState> = PerCpuArray::with_max_entries(1, 0);

/// (parent node, function) → node id. Sized by the loader (`--max-nodes`).
#[map]
static NODES: HashMap<NodeKey, u32> = HashMap::with_max_entries(1, 0);

/// node id → its aggregates. Same size as `NODES`.
#[map]
static STATS: Array<NodeStats> = Array::with_max_entries(1, 0);

/// function id × `HISTOGRAM_BUCKETS` + bucket → calls. Sized by the loader (1 when off).
#[map]
static HISTOGRAM: Array<u64> = Array::with_max_entries(1, 0);

/// Slot 0: 1 while the program counts the target's calls. User space sets it once every probe
/// is attached and clears it before detaching any: attaching and detaching go link by link,
/// and a window opened while only some probes are there would miss callees or keep frames
/// whose `ret` is not probed yet (closed later as abandoned). A call of the entry already
/// running when the switch is set opens no window: its inner calls are not counted and its
/// return is counted as [`counter::ENTERED_BEFORE_ATTACHING`]. oi-trace's own calibration
/// runs before anything is attached to the target and ignores the switch.
#[map]
static ARMED: Array<u64> = Array::with_max_entries(1, 0);

#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

#[map]
static GLOBALS: Array<u64> = Array::with_max_entries(global::COUNT, 0);

#[map]
static RECORDS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

#[uprobe]
pub fn oi_calls(ctx: ProbeContext) -> u32 {
    on_hit(&ctx);
    0
}

#[inline(always)]
fn on_hit(ctx: &ProbeContext) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if !in_scope(tgid) || (tgid != SELF_TGID.load() && ARMED.get(0) != Some(&1)) {
        return;
    }
    // SAFETY: the context pointer is the one the kernel passed to this program.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    // SAFETY: `regs` is the pt_regs the kernel passed to this program, readable for its run.
    let sp = unsafe { (*ctx.regs).rsp };
    let kind = cookie::kind(cookie);
    let function = cookie::function(cookie);
    let target = cookie::target(cookie);
    let Some(state) = THREADS.get_ptr_mut(pid_tgid) else {
        if kind == cookie::WINDOW {
            count(&COUNTERS, counter::HITS_INSIDE);
            open_window(pid_tgid, function, target, sp);
        } else {
            count(&COUNTERS, counter::HITS_OUTSIDE);
            if kind == cookie::WINDOW_RETURN && !window_limit_reached() {
                count(&COUNTERS, counter::ENTERED_BEFORE_ATTACHING);
            }
        }
        return;
    };
    count(&COUNTERS, counter::HITS_INSIDE);
    match kind {
        cookie::ENTRY | cookie::WINDOW | cookie::INSTANT => {
            on_entry(state, pid_tgid, kind, function, target, sp)
        }
        cookie::RETURN | cookie::WINDOW_RETURN => on_return(state, pid_tgid, function, sp),
        cookie::TAIL => on_tail(state, pid_tgid, function, target, sp),
        cookie::TAIL_IF => {
            // SAFETY: as above.
            let eflags = unsafe { (*ctx.regs).eflags };
            if cookie::condition_holds(cookie::condition(cookie), eflags) {
                on_tail(state, pid_tgid, function, target, sp);
            }
        }
        _ => on_catch(state, pid_tgid, sp),
    }
}

#[inline(always)]
fn in_scope(tgid: u32) -> bool {
    let target = TARGET_TGID.load();
    if tgid == SELF_TGID.load() || (target != 0 && tgid == target) {
        return true;
    }
    if target != 0 {
        return false;
    }
    in_cgroup(CGROUP_LEVEL.load(), CGROUP_ID.load())
}

/// `--count` windows were opened: a return of the entry with no window open may be one that
/// was skipped, not one that began before attaching.
#[inline(always)]
fn window_limit_reached() -> bool {
    let limit = WINDOW_LIMIT.load();
    limit != 0
        && GLOBALS
            .get(global::WINDOWS_OPENED)
            .is_some_and(|opened| *opened >= limit)
}

/// The thread enters the window function with no window open: a new shadow stack.
#[inline(always)]
fn open_window(pid_tgid: u64, function: u32, target: u32, sp: u64) {
    let Some(opened) = GLOBALS.get_ptr_mut(global::WINDOWS_OPENED) else {
        return;
    };
    // oi-trace's own calibration windows are neither limited nor traced.
    let ours = (pid_tgid >> 32) as u32 == SELF_TGID.load();
    let window = add(opened, 1);
    let limit = WINDOW_LIMIT.load();
    if limit != 0 && window > limit && !ours {
        count(&COUNTERS, counter::WINDOWS_SKIPPED);
        if window == limit + 1 {
            info!(&(), "--count {} reached: no more windows open", limit);
        }
        return;
    }
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: `scratch` points at this CPU's value of a per-CPU array; nothing else runs on
    // this CPU while the program does.
    unsafe {
        (*scratch).depth = 0;
        (*scratch).window = window;
        (*scratch).traced = u32::from(window <= TRACED_WINDOWS.load() && !ours);
    }
    // SAFETY: as above; the helper copies the value into the map.
    if THREADS
        .insert(pid_tgid, unsafe { &*scratch }, BPF_NOEXIST as u64)
        .is_err()
    {
        count(&COUNTERS, counter::THREADS_FULL);
        warn!(
            &(),
            "thread table full: window {} of pid_tgid {} not opened", window, pid_tgid
        );
        return;
    }
    let Some(state) = THREADS.get_ptr_mut(pid_tgid) else {
        return;
    };
    if let Some(frame) = push(state, function, sp) {
        // SAFETY: `frame` points into the thread's map value (see `frame`).
        unsafe { (*frame).tail_target = target };
    }
}

#[inline(always)]
fn on_entry(
    state: *mut ThreadState,
    pid_tgid: u64,
    kind: u64,
    function: u32,
    target: u32,
    sp: u64,
) {
    unwind(state, Unwind::ENTRY, function, sp, clock());
    // SAFETY: `state` points at the thread's map value, which only this thread touches.
    if unsafe { (*state).depth } == 0 {
        // The window function itself was left without a return (an exception escaped it).
        close_window(pid_tgid);
        if kind == cookie::WINDOW {
            open_window(pid_tgid, function, target, sp);
        }
        return;
    }
    let Some(frame) = push(state, function, sp) else {
        return;
    };
    if kind == cookie::INSTANT {
        // The first instruction already leaves (a `ret`, or a jump out of what is
        // instrumented): one call of no duration.
        pop(state, clock(), false);
    } else {
        // SAFETY: `frame` points into the thread's map value (see `frame`).
        unsafe { (*frame).tail_target = target };
    }
}

#[inline(always)]
fn on_return(state: *mut ThreadState, pid_tgid: u64, function: u32, sp: u64) {
    unwind(state, Unwind::RETURN, function, sp, clock());
    // SAFETY: as in `on_entry`.
    if unsafe { (*state).depth } == 0 {
        close_window(pid_tgid);
    }
}

#[inline(always)]
fn on_tail(state: *mut ThreadState, pid_tgid: u64, function: u32, target: u32, sp: u64) {
    let now = clock();
    unwind(state, Unwind::TAIL, function, sp, now);
    let Some(top) = top(state) else {
        close_window(pid_tgid);
        return;
    };
    // SAFETY: as in `on_entry`.
    let (top_sp, top_function) = unsafe { ((*top).sp, (*top).function) };
    if top_sp != sp {
        // A jump of a call beneath the depth limit.
        return;
    }
    if top_function != function {
        count(&COUNTERS, counter::UNMATCHED);
    }
    if target != cookie::NO_FUNCTION {
        // SAFETY: as in `on_entry`.
        unsafe { (*top).tail_target = target };
        return;
    }
    // Into code that is not instrumented: this call ends here.
    pop(state, now, false);
    // SAFETY: as in `on_entry`.
    if unsafe { (*state).depth } == 0 {
        close_window(pid_tgid);
    }
}

/// A catch block starts: every frame at or below the handler's call slot was unwound.
#[inline(always)]
fn on_catch(state: *mut ThreadState, pid_tgid: u64, sp: u64) {
    unwind(state, Unwind::CATCH, cookie::NO_FUNCTION, sp, clock());
    // SAFETY: as in `on_entry`.
    if unsafe { (*state).depth } == 0 {
        close_window(pid_tgid);
    }
}

/// What [`unwind`] pops, from the top of a shadow stack, for a hit with stack pointer `sp`.
#[repr(C)]
struct Unwind {
    state: *mut ThreadState,
    sp: u64,
    now: u64,
    function: u32,
    mode: u32,
    /// 1 once a frame was popped as returned (not abandoned).
    returned: u32,
    _pad: u32,
}

impl Unwind {
    /// An entry: a live caller's slot is above `sp`; a frame at `sp` itself is dead unless it
    /// tail-jumped to this very function.
    const ENTRY: u32 = 0;
    /// A `ret`: frames below `sp` were left without a return; the frame at `sp` returns, and
    /// with it every frame that tail-jumped into it (they share the slot).
    const RETURN: u32 = 1;
    /// A tail-call jump: frames below `sp` were left.
    const TAIL: u32 = 2;
    /// A catch block: every frame at or below the handler's call slot was unwound.
    const CATCH: u32 = 3;
}

/// Pops what the stack pointer shows has ended. A loop of up to `MAX_DEPTH` pops, run by
/// `bpf_loop` (Linux 5.17) so that the verifier checks one pop rather than every iteration.
#[inline(always)]
fn unwind(state: *mut ThreadState, mode: u32, function: u32, sp: u64, now: u64) {
    let mut u = Unwind {
        state,
        sp,
        now,
        function,
        mode,
        returned: 0,
        _pad: 0,
    };
    // SAFETY: the callback is a BPF function of this program and the context lives on this
    // stack for the whole call.
    unsafe {
        bpf_loop(
            MAX_DEPTH,
            unwind_step as *mut c_void,
            (&raw mut u).cast::<c_void>(),
            0,
        );
    }
}

/// One step of [`unwind`]: 0 to go on, 1 to stop.
#[inline(never)]
extern "C" fn unwind_step(_index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the `Unwind` that `unwind` passed, on its caller's stack.
    let u = unsafe { &mut *ctx.cast::<Unwind>() };
    let Some(top) = top(u.state) else {
        return 1;
    };
    // SAFETY: as in `on_entry`.
    let (top_sp, tail, top_function) = unsafe { ((*top).sp, (*top).tail_target, (*top).function) };
    let (ended, abandoned) = match u.mode {
        Unwind::ENTRY => (
            top_sp < u.sp || (top_sp == u.sp && tail != u.function),
            true,
        ),
        Unwind::RETURN => (top_sp <= u.sp, top_sp < u.sp),
        Unwind::TAIL => (top_sp < u.sp, true),
        _ => (top_sp <= u.sp, true),
    };
    if !ended {
        return 1;
    }
    if !abandoned && u.returned == 0 {
        // Only the first frame that returns is the function whose `ret` this is; the rest
        // tail-jumped into it. (A flag, not a count: the verifier must see the loop's state
        // repeat.)
        if top_function != u.function {
            count(&COUNTERS, counter::UNMATCHED);
            warn!(
                &(),
                "return of function {} met the frame of function {}", u.function, top_function
            );
        }
        u.returned = 1;
    }
    pop(u.state, u.now, abandoned);
    0
}

/// Pushes a call of `function` whose return address is at `sp` and returns its frame, or
/// counts it on the deepest node when the stack is as deep as allowed.
#[inline(always)]
fn push(state: *mut ThreadState, function: u32, sp: u64) -> Option<*mut Frame> {
    // SAFETY: as in `on_entry`.
    let depth = unsafe { (*state).depth };
    let parent = if depth == 0 {
        ROOT
    } else {
        // SAFETY: as in `on_entry`.
        unsafe { (*frame(state, depth - 1)?).node }
    };
    if depth >= MAX_FRAMES.load() {
        count(&COUNTERS, counter::DEEPER);
        if let Some(stats) = stats(parent) {
            // SAFETY: `stats` points into an array map value; shared, so added atomically.
            add(unsafe { &raw mut (*stats).deeper }, 1);
        }
        return None;
    }
    let slot = frame(state, depth)?;
    let node = node_of(parent, function);
    if node == NO_NODE {
        count(&COUNTERS, counter::NODES_FULL);
    }
    // SAFETY: as in `on_entry`.
    unsafe {
        *slot = Frame {
            // Read last, so the time spent finding the node is not the callee's.
            start_ns: clock(),
            sp,
            child_ns: 0,
            node,
            function,
            tail_target: cookie::NO_FUNCTION,
            _pad: 0,
        };
        (*state).depth = depth + 1;
    }
    Some(slot)
}

/// Closes the top frame at `now`: its node gets the call, its parent the time.
#[inline(always)]
fn pop(state: *mut ThreadState, now: u64, abandoned: bool) {
    // SAFETY: as in `on_entry`.
    let depth = unsafe { (*state).depth };
    if depth == 0 {
        return;
    }
    let Some(f) = frame(state, depth - 1) else {
        return;
    };
    // SAFETY: as in `on_entry`.
    let f = unsafe { *f };
    let duration = now.saturating_sub(f.start_ns);
    if let Some(stats) = stats(f.node) {
        // SAFETY: as in `push`.
        unsafe {
            add(&raw mut (*stats).calls, 1);
            add(&raw mut (*stats).total_ns, duration);
            add(
                &raw mut (*stats).self_ns,
                duration.saturating_sub(f.child_ns),
            );
            if abandoned {
                add(&raw mut (*stats).abandoned, 1);
            }
        }
    }
    if abandoned {
        count(&COUNTERS, counter::ABANDONED);
        debug!(
            &(),
            "frame of function {} closed by the stack pointer after {} ns", f.function, duration
        );
    }
    if HISTOGRAMS.load() != 0 {
        let index = f.function.wrapping_mul(HISTOGRAM_BUCKETS) + bucket(duration);
        if let Some(slot) = HISTOGRAM.get_ptr_mut(index) {
            add(slot, 1);
        }
    }
    if depth >= 2
        && let Some(parent) = frame(state, depth - 2)
    {
        // SAFETY: as in `on_entry`.
        unsafe { (*parent).child_ns += duration };
    }
    // SAFETY: as in `on_entry`.
    let (traced, window) = unsafe { ((*state).traced, (*state).window) };
    if traced != 0 {
        let pid_tgid = bpf_get_current_pid_tgid();
        let call = Record {
            kind: record::CALL,
            tgid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            node: f.node,
            function: f.function,
            depth: depth - 1,
            window,
            start_ns: f.start_ns,
            duration_ns: duration,
            abandoned: u32::from(abandoned),
            _pad: 0,
        };
        if RECORDS.output::<Record>(&call, 0).is_err() {
            count(&COUNTERS, counter::TRACE_LOST);
        }
    }
    // SAFETY: as in `on_entry`.
    unsafe { (*state).depth = depth - 1 };
}

/// The window ends: the shadow stack goes, and the `--count`th closed window says so.
#[inline(always)]
fn close_window(pid_tgid: u64) {
    let _ = THREADS.remove(pid_tgid);
    let Some(closed) = GLOBALS.get_ptr_mut(global::WINDOWS_CLOSED) else {
        return;
    };
    let closed = add(closed, 1);
    if closed == WINDOW_LIMIT.load() && (pid_tgid >> 32) as u32 != SELF_TGID.load() {
        let done = Record {
            kind: record::DONE,
            tgid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            window: closed,
            ..Record::default()
        };
        let _ = RECORDS.output::<Record>(&done, 0);
    }
}

/// The node of `function` called from `parent`, created on first use; `NO_NODE` when the
/// table is full (or the parent had no node).
#[inline(always)]
fn node_of(parent: u32, function: u32) -> u32 {
    if parent == NO_NODE {
        return NO_NODE;
    }
    let key = NodeKey { parent, function };
    // SAFETY: the value is a plain u32 of the map, read once.
    if let Some(node) = unsafe { NODES.get(&key) } {
        return *node;
    }
    let Some(next) = GLOBALS.get_ptr_mut(global::NEXT_NODE) else {
        return NO_NODE;
    };
    let id = add(next, 1) - 1;
    if id >= u64::from(MAX_NODES.load()) {
        if id == u64::from(MAX_NODES.load()) {
            warn!(
                &(),
                "node table full ({} nodes): further paths are not timed", id
            );
        }
        return NO_NODE;
    }
    let id = id as u32;
    if NODES.insert(&key, &id, BPF_NOEXIST as u64).is_ok() {
        return id;
    }
    // Another thread created it at the same moment: use theirs (our id stays unused).
    // SAFETY: as above.
    unsafe { NODES.get(&key) }.copied().unwrap_or(NO_NODE)
}

#[inline(always)]
fn stats(node: u32) -> Option<*mut NodeStats> {
    if node == NO_NODE || node == ROOT {
        return None;
    }
    STATS.get_ptr_mut(node)
}

#[inline(always)]
fn top(state: *mut ThreadState) -> Option<*mut Frame> {
    // SAFETY: as in `on_entry`.
    let depth = unsafe { (*state).depth };
    if depth == 0 {
        return None;
    }
    frame(state, depth - 1)
}

/// Frame `i` of the shadow stack; the explicit bound is what the verifier needs.
#[inline(always)]
fn frame(state: *mut ThreadState, i: u32) -> Option<*mut Frame> {
    if i >= MAX_DEPTH {
        return None;
    }
    // SAFETY: `state` points at a whole ThreadState map value and `i` is in bounds.
    Some(unsafe { (&raw mut (*state).frames).cast::<Frame>().add(i as usize) })
}

/// log2 bucket of a duration: 0 for 0 ns, else 1 + the index of the highest set bit.
#[inline(always)]
fn bucket(ns: u64) -> u32 {
    let mut v = ns;
    let mut b = 0;
    for shift in [32u32, 16, 8, 4, 2, 1] {
        if v >> shift != 0 {
            v >>= shift;
            b += shift;
        }
    }
    if ns == 0 { 0 } else { b + 1 }
}

/// Adds `n` to a counter shared by all CPUs and returns the new value.
#[inline(always)]
fn add(counter: *mut u64, n: u64) -> u64 {
    // SAFETY: every caller passes a pointer into an array map value (which lives as long as
    // the map and is 8-byte aligned), and every concurrent access to it is atomic.
    unsafe { oi_ebpf::add(counter, n) }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
