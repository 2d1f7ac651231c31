//! The allocation profiler's kernel side: one uprobe program on the entry of every allocator
//! function a process maps (the malloc family, every `operator new`/`delete`, jemalloc's and
//! tcmalloc's own names), on the return of its C allocation functions (uretprobes), and on the
//! return instructions of the `operator new` variants that need them, keeping the live blocks,
//! the allocating stacks and per-stack counts and lifetime histograms in maps.
//!
//! One count per user request, at the outermost allocator call, by the stack pointer: at an
//! allocator's first instruction `rsp` points at its return slot. A thread keeps one record
//! ([`Open`]).
//! - Allocations are counted when they return, where the block's address is known
//!   (posix_memalign's from `*memptr`). A C allocation function (`malloc`, `calloc`,
//!   `realloc`, `posix_memalign`, `aligned_alloc`, jemalloc's `*allocx`, `tc_malloc` …) returns
//!   through a uretprobe: nothing unwinds through C code, so hijacking its return address is
//!   safe, and on 6.18 the return runs through the kernel's trampoline (the `uretprobe` system
//!   call), cheaper than a trap plus an out-of-line step at a `ret`. An `operator new` can
//!   throw, and an exception unwinding through a hijacked return address kills the process, so
//!   it never gets a uretprobe: where it takes its block from a hooked C allocator it calls
//!   directly (libstdc++'s `operator new` → `malloc`), the return of the first such nested
//!   call closes it ([`cookie::INNER_CLOSED`], `Open::inner_sp`: not a deeper one, such as the
//!   `bad_alloc` object's); otherwise probes on its `ret` instructions do (a `ret` at the
//!   open slot closes the call with rax, one above it shows the call was left), and on its tail
//!   jumps (to a hooked function: the callee's entry at the same stack pointer is part of the
//!   call; out: the call ends there, its result unseen).
//! - An entry at a lower stack pointer than the open allocation is nested (`operator new` →
//!   `malloc`) and ignored; one at the same stack pointer is a tail callee of a C function or a
//!   marked tail jump, otherwise the open call was left without its return (an exception, a
//!   longjmp) and is replaced.
//! - Frees are counted at their entry and need no return probe: the free stays as the thread's
//!   pending free (pointer, stack pointer) until its next hooked entry, and a free of the same
//!   pointer at the same or a lower stack pointer is the same request (`operator delete` →
//!   `free`, by a tail jump or a call) and is not counted again.
//!
//! A second program, on the dynamic linker's `_dl_debug_state`, reports each change of a
//! process's mapped objects (a dlopen) to user space and holds the thread, bounded, until user
//! space has hooked the new files, so that their first allocations are counted.
//!
//! Blocks live in a bounded table (address → size, usable size, time, stack, thread) of two
//! halves: an array of slots indexed by a hash of the address, each claimed and released by
//! compare-and-exchange on its address (no lock, no hash update: a malloc + free pair touches
//! one slot), and a hash map for the blocks whose slot was taken. A free finds its block in
//! either, adds its lifetime to its site's histogram and removes it; a free of a block the
//! table does not hold is an unknown free; a block that does not fit is dropped and counted.
//! Never writes user memory, never stops a thread; every table is bounded and what does not
//! fit is counted.
#![no_std]
#![no_main]

use aya_ebpf::{
    EbpfContext, Global,
    bindings::{BPF_F_MMAPABLE, BPF_NOEXIST},
    helpers::{
        bpf_get_current_pid_tgid, bpf_probe_read_user,
        generated::{bpf_get_attach_cookie, bpf_get_prandom_u32, bpf_loop},
    },
    macros::{map, uprobe, uretprobe},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::{ProbeContext, RetProbeContext},
};
use aya_log_ebpf::{debug, info, warn};
use oi_common::{
    allocs::{
        Block, LiveSlot, MAX_BUCKETS, Mapped, Open, RT_CONSISTENT, SiteStats, Stack, WEIGHT_ONE,
        cookie, counter, function, mapped,
    },
    calls::cookie::condition_holds,
    stack::MAX_FRAMES,
};
use oi_ebpf::{clock, count, in_cgroup, stack::user_stack};

// The parts in files of their own, under `allocs/` (never `src/bin/*.rs`: each of those is
// an eBPF object of its own).
#[path = "allocs/live.rs"]
mod live;
#[path = "allocs/sizes.rs"]
mod sizes;
#[path = "allocs/stacks.rs"]
mod stacks;

use live::*;
use sizes::*;
use stacks::*;

// Set by the loader (`EbpfLoader::override_global`) before the program is verified.
/// The traced process (pid mode), 0 in cgroup mode.
#[unsafe(no_mangle)]
static TARGET_TGID: Global<u32> = Global::new(0);
/// cgroup mode: the cgroup's id and its depth below the root.
#[unsafe(no_mangle)]
static CGROUP_ID: Global<u64> = Global::new(0);
#[unsafe(no_mangle)]
static CGROUP_LEVEL: Global<u32> = Global::new(0);
/// `--every N`: sample every Nth allocation (0 or 1: all of them).
#[unsafe(no_mangle)]
static EVERY: Global<u64> = Global::new(0);
/// `--sample-bytes B`: take an allocation of n bytes with probability min(1, n / B), so that
/// on average one sample is taken per B bytes; each stands for B / n allocations (0: off).
#[unsafe(no_mangle)]
static SAMPLE_BYTES: Global<u64> = Global::new(0);
/// Lifetime bucket bounds in ns, ascending; `BOUNDS` of them are used.
#[unsafe(no_mangle)]
static BUCKET_NS: Global<[u64; MAX_BUCKETS]> = Global::new([0; MAX_BUCKETS]);
#[unsafe(no_mangle)]
static BOUNDS: Global<u32> = Global::new(0);
/// How long `oi_allocs_mapped` holds a thread at most (0: never holds, only tells user space:
/// one CPU, where the spinning thread would keep user space off that CPU).
#[unsafe(no_mangle)]
static HOLD_NS: Global<u64> = Global::new(0);
/// The size of `THREADS` − 1 (a power of two − 1).
#[unsafe(no_mangle)]
static THREAD_MASK: Global<u32> = Global::new(0);
/// 1 when thread ids outnumber `THREADS`' slots (`pid_max` above it), so that two live
/// threads may share a slot: a thread then never takes a slot that holds another thread's
/// open allocation (the call would be lost uncounted), and its own call is counted as
/// `THREADS_FULL` instead (see [`may_take`]). 0 when every thread id has its own slot:
/// another owner's open call is then a dead thread's, and is taken over.
#[unsafe(no_mangle)]
static SHARED_SLOTS: Global<u32> = Global::new(0);
/// The size of `LIVE_SLOTS` − 1.
#[unsafe(no_mangle)]
static LIVE_MASK: Global<u32> = Global::new(0);
/// The last site index `SITES` holds (`--max-stacks`).
#[unsafe(no_mangle)]
static MAX_SITE: Global<u32> = Global::new(0);

/// Thread id modulo its size → the outermost allocator call the thread is inside (see
/// [`Open`]: `owner` says whose slot it is). An array, not a hash on pid_tgid: its lookup is a
/// few inlined instructions where a hash lookup hashes the key and compares it, three or four
/// times per malloc+free pair. Written in place and kept when the call ends (`sp` 0: no call);
/// a thread that exits leaves its slot, which reads as empty to the next owner. Sized by the
/// loader; `THREAD_MASK` is its size − 1.
#[map]
static THREADS: Array<Open> = Array::with_max_entries(1, 0);

/// Block address → the live block, for blocks whose `LIVE_SLOTS` slot was taken. Sized by
/// the loader (`--max-live` minus the slots).
#[map]
static LIVE: HashMap<u64, Block> = HashMap::with_max_entries(1, 0);

/// The live table's array half: a hash of the block address → a slot holding at most one
/// live block ([`LiveSlot`]), claimed and released by compare-and-exchange on its address.
/// A block takes its slot when it is free, else goes to `LIVE`: a malloc + free pair then
/// costs no hash update and no delete (their bucket locks and free list would be most of
/// the programs' map time). Sized by the loader, a power of two; `LIVE_MASK` is its size − 1.
/// Memory-mappable: user space reads it as memory at every report (`oi_user::probe::mapped`).
#[map]
static LIVE_SLOTS: Array<LiveSlot> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// Slot 0: blocks in `LIVE`. While 0 (the usual case), an allocation needs no lookup there
/// to find a stale block of its address (a missed free) before taking its slot.
#[map]
static LIVE_IN_HASH: Array<u64> = Array::with_max_entries(1, 0);

/// Stack id → the stack. Sized by the loader.
#[map]
static STACKS: HashMap<u64, Stack> = HashMap::with_max_entries(1, 0);

/// Site index ([`Stack::site`]) → what its allocations did, per CPU (user space sums the
/// CPUs): plain adds instead of a locked add per field, eleven per malloc+free pair. An array,
/// not a hash on the stack id: the allocation and the free each find their site by an
/// inlined index instead of a hash lookup. One more entry than `STACKS` (index 0: allocations
/// without a stored stack).
#[map]
static SITES: PerCpuArray<SiteStats> = PerCpuArray::with_max_entries(1, 0);

/// Slot 0: the last site index given to a stack.
#[map]
static SITE_COUNT: Array<u64> = Array::with_max_entries(1, 0);

/// Site index → the id of its stack, written before the stack is stored: checks a site index
/// taken from `LAST_STACK`, whose two slots a walk preempted on this CPU by another may have
/// left from two different stacks. Same size as `SITES`.
#[map]
static SITE_STACKS: Array<u64> = Array::with_max_entries(1, 0);

/// Where a stack is captured (too large for the BPF stack).
#[map]
static SCRATCH: PerCpuArray<Stack> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU, the id (slot 0) and site index (slot 1) of the last stack this CPU found in
/// `STACKS` or stored there: a hot site allocates from one stack again and again, and `STACKS`
/// never forgets one while the program runs, so that stack needs no lookup.
#[map]
static LAST_STACK: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

/// Slot 0: 1 while the program counts. User space sets it once every probe of the files
/// found at start is attached, and clears it before detaching them: attaching and detaching
/// go link by link (entries, then the uretprobes, file by file), and a call entered while
/// only some of its probes are there would be opened and never closed (an entry whose
/// uretprobe is not attached yet, an `operator new` whose `malloc` is not hooked yet), or
/// closed by the wrong return. A call entered before arming is not seen, its return is
/// ignored (no open call), and its nested calls are counted as outermost.
#[map]
static ARMED: Array<u64> = Array::with_max_entries(1, 0);

#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Slot 0: allocations seen (the `--every` sequence).
#[map]
static SEQUENCE: Array<u64> = Array::with_max_entries(1, 0);

/// Mapping changes: `mapped::REPORTED` counts them, user space writes `mapped::HANDLED`.
#[map]
static MAPPED: Array<u64> = Array::with_max_entries(2, 0);

/// One [`Mapped`] record per mapping change, which wakes user space.
#[map]
static MAPPED_EVENTS: RingBuf = RingBuf::with_byte_size(4096, 0);

#[uprobe]
pub fn oi_allocs(ctx: ProbeContext) -> u32 {
    on_hit(&ctx);
    0
}

/// The same program as a uretprobe, for kernels without multi-uprobe links (a multi-uprobe
/// link attaches `oi_allocs` itself with its return flag). The cookie says which probe hit.
#[uretprobe]
pub fn oi_allocs_return(ctx: RetProbeContext) -> u32 {
    on_hit(&ProbeContext::new(ctx.as_ptr()));
    0
}

/// The dynamic linker's `_dl_debug_state`, which it calls after every change of the mapped
/// objects (a dlopen: once before mapping, at `RT_ADD`, once after, at `RT_CONSISTENT`, before
/// the new files' constructors run): at `RT_CONSISTENT` (or when the state cannot be read),
/// tells user space, and holds the thread here until user space has hooked the new files or
/// `HOLD_NS` passed, so that a library's first allocations (its constructors, the code right
/// after dlopen) are counted. The attach cookie is the distance from `_dl_debug_state` to
/// `_r_debug.r_state` in the linker's file (0: unknown, every call holds). Holding is a busy
/// wait inside the probe: the thread is not stopped, nothing the process or its parent can
/// see changes, and it is bounded.
/// Sleepable, so that it runs outside an RCU read-side section: attaching uprobes waits for
/// an RCU grace period (`dup_mmap_sem`), which a non-sleepable program spinning on a CPU
/// would hold back until the bound: the attach would then end only at the bound.
#[uprobe(sleepable)]
pub fn oi_allocs_mapped(ctx: ProbeContext) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !in_scope(tgid) {
        return 0;
    }
    // SAFETY: the context pointer is the one the kernel passed to this program.
    let to_state = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    if to_state != 0 {
        // SAFETY: `regs` is the pt_regs the kernel passed; the state is read from user memory
        // through the helper, which fails cleanly (then the call holds, as without a cookie).
        let pc = unsafe { (*ctx.regs).rip };
        let state = unsafe { bpf_probe_read_user(pc.wrapping_add(to_state) as *const u32) };
        if matches!(state, Ok(s) if s != RT_CONSISTENT) {
            return 0;
        }
    }
    let Some(reported) = MAPPED.get_ptr_mut(mapped::REPORTED) else {
        return 0;
    };
    let sequence = add(reported, 1);
    let record = Mapped {
        sequence,
        tgid,
        _pad: 0,
    };
    if MAPPED_EVENTS.output::<Mapped>(&record, 0).is_err() {
        return 0;
    }
    let hold_ns = HOLD_NS.load();
    if hold_ns == 0 {
        return 0;
    }
    let mut hold = Hold {
        sequence,
        until: clock() + hold_ns,
        done: 0,
        expired: 0,
    };
    // One bpf_loop runs at most 2^23 steps (a few hundred ms here): as many as the bound
    // needs.
    for _ in 0..8 {
        // SAFETY: the callback is a BPF function of this program and `hold` lives on this
        // stack for the whole call.
        unsafe {
            bpf_loop(
                1 << 23,
                hold_step as *mut core::ffi::c_void,
                (&raw mut hold).cast(),
                0,
            );
        }
        if hold.done != 0 {
            break;
        }
    }
    if hold.expired != 0 || hold.done == 0 {
        count(&COUNTERS, counter::HOLDS_EXPIRED);
        info!(
            &ctx,
            "mapping change {} of pid {}: let go before user space hooked it", sequence, tgid
        );
    }
    0
}

/// The state of a hold (`oi_allocs_mapped`).
#[repr(C)]
struct Hold {
    sequence: u64,
    until: u64,
    /// 1 once the hold is over (handled or expired).
    done: u64,
    expired: u64,
}

/// One wait step: 1 (stop) once user space handled the change or the time is up.
#[inline(never)]
extern "C" fn hold_step(_index: u64, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the `Hold` that `oi_allocs_mapped` passed, on its stack.
    let hold = unsafe { &mut *ctx.cast::<Hold>() };
    match MAPPED.get(mapped::HANDLED) {
        Some(handled) if *handled < hold.sequence => {}
        _ => {
            hold.done = 1;
            return 1;
        }
    }
    if clock() >= hold.until {
        hold.done = 1;
        hold.expired = 1;
        return 1;
    }
    0
}

#[inline(always)]
fn on_hit(ctx: &ProbeContext) {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !in_scope((pid_tgid >> 32) as u32) || ARMED.get(0) != Some(&1) {
        return;
    }
    count(&COUNTERS, counter::HITS);
    // SAFETY: the context pointer is the one the kernel passed to this program.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    // SAFETY: `regs` is the pt_regs the kernel passed to this program, readable for its run.
    let (sp, rax, rdi, eflags) = unsafe {
        let r = &*ctx.regs;
        (r.rsp, r.rax, r.rdi, r.eflags)
    };
    match cookie::kind(cookie) {
        cookie::ENTRY => on_entry(ctx, pid_tgid, cookie, sp),
        cookie::RETURN => on_leave(pid_tgid, sp, Some(rax)),
        // The return popped the return address: the entry's stack pointer was 8 lower.
        cookie::UPROBE_RETURN => on_return(pid_tgid, sp - 8, rax, cookie::function(cookie)),
        cookie::TAIL => on_tail(pid_tgid, sp),
        cookie::TAIL_IF => {
            if condition_holds(cookie::condition(cookie), eflags) {
                on_tail(pid_tgid, sp);
            }
        }
        cookie::LEAVE => on_leave(pid_tgid, sp, leave_result(cookie, rdi)),
        _ => {
            if condition_holds(cookie::condition(cookie), eflags) {
                on_leave(pid_tgid, sp, leave_result(cookie, rdi));
            }
        }
    }
}

#[inline(always)]
fn leave_result(cookie: u64, rdi: u64) -> Option<u64> {
    (cookie::flags(cookie) & cookie::RESULT_IN_RDI != 0).then_some(rdi)
}

#[inline(always)]
fn in_scope(tgid: u32) -> bool {
    let target = TARGET_TGID.load();
    if target != 0 {
        return tgid == target;
    }
    in_cgroup(CGROUP_LEVEL.load(), CGROUP_ID.load())
}

/// The first instruction of a hooked function.
#[inline(always)]
fn on_entry(ctx: &ProbeContext, pid_tgid: u64, cookie: u64, sp: u64) {
    let function = cookie::function(cookie);
    // SAFETY: as in `on_hit`.
    let (rdi, rsi, rdx) = unsafe {
        let r = &*ctx.regs;
        (r.rdi, r.rsi, r.rdx)
    };
    let slot = thread_slot(pid_tgid);
    // SAFETY: the thread's own slot (see `THREADS`).
    if let Some(open) =
        slot.filter(|open| unsafe { (**open).sp != 0 && (**open).owner == pid_tgid })
    {
        // SAFETY: `open` points at this thread's map value, which only this thread touches.
        let o = unsafe { *open };
        if function::is_free(o.function as u64) {
            // The thread's pending free: the same request when this is a free of the same
            // pointer from inside it; stale otherwise (replaced below).
            if function::is_free(function) && rdi == o.arg && o.sp >= sp {
                count(&COUNTERS, counter::NESTED);
                return;
            }
        } else if o.sp > sp {
            if o.flags as u64 & cookie::INNER_CLOSED != 0
                && o.inner_sp == 0
                && cookie::flags(cookie) & cookie::C_RETURN != 0
            {
                // SAFETY: as above.
                unsafe { (*open).inner_sp = sp };
            }
            count(&COUNTERS, counter::NESTED);
            debug!(
                ctx,
                "nested allocator call at sp {:x} inside the one at {:x}: counted once", sp, o.sp
            );
            return;
        } else if o.sp == sp && (o.tail != 0 || o.flags as u64 & cookie::C_RETURN != 0) {
            // The callee of the open call's tail jump: it finishes the call, its way.
            // SAFETY: as above.
            unsafe {
                (*open).tail = 0;
                (*open).flags |= (cookie::flags(cookie) & cookie::INNER_CLOSED) as u32;
            }
            count(&COUNTERS, counter::NESTED);
            return;
        } else {
            count(&COUNTERS, left_without_return(o.flags));
            debug!(
                ctx,
                "allocator call (kind {}) at sp {:x} was left without its return (entry of kind {} at sp {:x})",
                o.function,
                o.sp,
                function,
                sp
            );
        }
    }
    if function::is_free(function) {
        free_block(rdi, clock());
        // No stack walk on this path: the slot found above is still where the thread's call
        // goes. A pending free is read only for `sp`, `function` and `arg` (every other path
        // returns at `is_free`), so only those and the owner are written: a whole `Open` has
        // runs of zero fields that LLVM writes with a byte-wise `memset` call, 5 instructions
        // a byte.
        if let Some(slot) = slot.filter(|slot| may_take(*slot, pid_tgid)) {
            // SAFETY: as above.
            unsafe {
                (*slot).sp = sp;
                (*slot).owner = pid_tgid;
                (*slot).function = function as u32;
                (*slot).arg = rdi;
            }
            return;
        }
        count(&COUNTERS, counter::THREADS_FULL);
        return;
    }
    let mut open = Open {
        sp,
        function: function as u32,
        flags: cookie::flags(cookie) as u32,
        tail: u32::from(cookie::flags(cookie) & cookie::TAIL_AT_ENTRY != 0),
        ..Open::default()
    };
    open.owner = pid_tgid;
    (open.size, open.arg) = match function {
        function::CALLOC => (times(rdi, rsi), 0),
        function::REALLOC => (rsi, rdi),
        function::REALLOCARRAY => (times(rsi, rdx), rdi),
        function::MEMALIGN => (rsi, 0),
        function::POSIX_MEMALIGN => (rdx, rdi),
        _ => (rdi, 0),
    };
    open.align = match cookie::align_source(cookie) {
        cookie::ALIGN_RDI => rdi,
        cookie::ALIGN_RSI => rsi,
        cookie::ALIGN_PAGE => JEMALLOC_PAGE,
        cookie::ALIGN_FLAGS_RSI => jemalloc_flags_align(rsi),
        cookie::ALIGN_FLAGS_RDX => jemalloc_flags_align(rdx),
        _ => 0,
    };
    open.weight = sample_weight(open.size);
    if open.weight != 0 {
        open.sampled = 1;
        (open.stack, open.site) = capture_stack(ctx, pid_tgid);
    } else {
        count(&COUNTERS, counter::SKIPPED);
    }
    // An allocation's slot is looked up again rather than kept from above: a pointer held
    // across the stack walk multiplies the states the verifier explores beyond its limit.
    let slot = thread_slot(pid_tgid).filter(|slot| may_take(*slot, pid_tgid));
    if let Some(slot) = slot {
        // SAFETY: as above.
        unsafe { *slot = open };
    } else {
        count(&COUNTERS, counter::THREADS_FULL);
        warn!(
            ctx,
            "thread table full: a call of pid_tgid {} not tracked", pid_tgid
        );
    }
}

/// Whether the calling thread may write its call into `slot`, its thread slot. Always when
/// every thread id has its own slot: another owner's call is then a dead thread's. With
/// `SHARED_SLOTS`, unless the slot holds another thread's open allocation (that call would be
/// lost uncounted; the caller counts its own as `THREADS_FULL` instead). Another thread's
/// pending free is taken: it only serves to recognise a free nested in that free (`operator
/// delete` → `free`), it stays after the free returns (frees have no return probe) and would
/// otherwise block the slot until that thread's next allocator call, or for ever once it
/// exits. Taken in the instant between that thread's outer and inner free, its inner free
/// counts as an unknown free.
#[inline(always)]
fn may_take(slot: *mut Open, pid_tgid: u64) -> bool {
    // SAFETY: a value of `THREADS`; another thread's slot is only read here.
    SHARED_SLOTS.load() == 0
        || unsafe {
            (*slot).sp == 0
                || (*slot).owner == pid_tgid
                || function::is_free((*slot).function as u64)
        }
}

/// A tail jump to a hooked function: its entry at this stack pointer is the open call's.
#[inline(always)]
fn on_tail(pid_tgid: u64, sp: u64) {
    let Some(open) = open_call(pid_tgid) else {
        return;
    };
    // SAFETY: as in `on_entry`.
    let (open_sp, f, flags) = unsafe { ((*open).sp, (*open).function, (*open).flags) };
    if function::is_free(f as u64) {
        return;
    }
    if open_sp == sp {
        // SAFETY: as in `on_entry`.
        unsafe { (*open).tail = 1 };
    } else if open_sp < sp {
        close(open);
        count(&COUNTERS, left_without_return(flags));
    }
}

/// A `ret` (result in rax) or a jump out to code that returns in the function's place (result
/// unseen, or in rdi), of a function of kind `function`.
#[inline(always)]
fn on_leave(pid_tgid: u64, sp: u64, result: Option<u64>) {
    let Some(open) = open_call(pid_tgid) else {
        return;
    };
    // SAFETY: as in `on_entry`; copied before the value is removed.
    let o = unsafe { *open };
    if function::is_free(o.function as u64) {
        return;
    }
    if o.sp > sp {
        // A return of a nested call.
        return;
    }
    close(open);
    if o.sp < sp {
        count(&COUNTERS, left_without_return(o.flags));
        return;
    }
    let Some(result) = result else {
        count(&COUNTERS, counter::UNSEEN);
        return;
    };
    allocated(&o, result, pid_tgid as u32);
}

/// The return (uretprobe) of a C allocation function of kind `function` entered at stack
/// pointer `entry_sp`, with `result` in rax.
#[inline(always)]
fn on_return(pid_tgid: u64, entry_sp: u64, result: u64, function: u64) {
    let Some(open) = open_call(pid_tgid) else {
        return;
    };
    // SAFETY: as in `on_entry`; copied before the slot is closed.
    let o = unsafe { *open };
    if function::is_free(o.function as u64) {
        return;
    }
    if o.sp > entry_sp {
        closes_outer(open, &o, entry_sp, result, function, pid_tgid as u32);
        return;
    }
    close(open);
    if o.sp < entry_sp {
        count(&COUNTERS, left_without_return(o.flags));
        return;
    }
    allocated(&o, result, pid_tgid as u32);
}

/// A nested C allocation function of kind `function`, entered at `entry_sp`, returned
/// `result`: it closes the open call `o` when that is an `operator new` that takes its block
/// from it (the first such call inside it), and it gave one.
#[inline(always)]
fn closes_outer(open: *mut Open, o: &Open, entry_sp: u64, result: u64, function: u64, tid: u32) {
    if o.flags as u64 & cookie::INNER_CLOSED == 0
        || o.inner_sp != entry_sp
        || result == 0
        || function == function::POSIX_MEMALIGN
        || function::is_free(function)
    {
        return;
    }
    close(open);
    allocated(o, result, tid);
}

/// The counter of an open call (flags `flags`) that the thread left without its return: a C
/// allocation function cannot be left by an exception, so its uretprobe did not run
/// (`RETURNS_MISSED`); any other was left by an exception or a longjmp (`ABANDONED`).
#[inline(always)]
fn left_without_return(flags: u32) -> u32 {
    if flags as u64 & cookie::C_RETURN != 0 {
        counter::RETURNS_MISSED
    } else {
        counter::ABANDONED
    }
}

/// The thread's open call, if it is inside one (or has a pending free).
#[inline(always)]
fn open_call(pid_tgid: u64) -> Option<*mut Open> {
    // SAFETY: the thread's own slot (see `THREADS`).
    thread_slot(pid_tgid).filter(|open| unsafe { (**open).sp != 0 && (**open).owner == pid_tgid })
}

/// The thread's slot in `THREADS` (its owner may be another thread, see [`Open`]).
#[inline(always)]
fn thread_slot(pid_tgid: u64) -> Option<*mut Open> {
    THREADS.get_ptr_mut(pid_tgid as u32 & THREAD_MASK.load())
}

/// Ends the thread's open call; its slot stays for the next one.
#[inline(always)]
fn close(open: *mut Open) {
    // SAFETY: the thread's own slot (see `THREADS`).
    unsafe { (*open).sp = 0 };
}

/// An outermost allocator call returned `result`.
#[inline(always)]
fn allocated(o: &Open, result: u64, tid: u32) {
    let now = clock();
    let block = match o.function as u64 {
        function::POSIX_MEMALIGN => {
            if result != 0 {
                count(&COUNTERS, counter::FAILED);
                return;
            }
            // SAFETY: a user-memory read through the helper, which fails cleanly.
            match unsafe { bpf_probe_read_user(o.arg as *const u64) } {
                Ok(p) => p,
                Err(_) => {
                    count(&COUNTERS, counter::UNSEEN);
                    return;
                }
            }
        }
        function::REALLOC | function::REALLOCARRAY => {
            if result == 0 {
                if o.size == 0 {
                    // realloc(p, 0) frees p and returns NULL (glibc).
                    free_block(o.arg, now);
                } else {
                    // Failed: the old block is untouched.
                    count(&COUNTERS, counter::FAILED);
                }
                return;
            }
            free_block(o.arg, now);
            result
        }
        _ => result,
    };
    if block == 0 {
        count(&COUNTERS, counter::FAILED);
        return;
    }
    if o.sampled == 0 {
        return;
    }
    let usable = if o.flags as u64 & cookie::GLIBC != 0 {
        glibc_usable(block).unwrap_or(o.size)
    } else if o.flags as u64 & cookie::JEMALLOC != 0 {
        jemalloc_usable(o.size, o.align)
    } else {
        o.size
    };
    if let Some(s) = SITES.get_ptr_mut(o.site) {
        // SAFETY: `s` is this CPU's value of the site, which only this CPU's programs touch,
        // one at a time.
        unsafe {
            (*s).allocs += 1;
            (*s).bytes += o.size;
            (*s).usable_bytes += usable;
            (*s).est_allocs += o.weight;
            (*s).est_bytes += estimated_bytes(o.size, o.weight);
        }
    }
    let b = Block {
        size: o.size,
        usable,
        time_ns: now,
        stack: o.stack,
        tid,
        site: o.site,
        weight: o.weight,
    };
    if let Some(slot) = live_slot(block)
        && !in_live_hash(block)
    {
        // SAFETY: a value of an array map, claimed atomically (see `LIVE_SLOTS`).
        let held = unsafe { oi_ebpf::cmpxchg(&raw mut (*slot).addr, 0, block | 1) };
        if held == 0 {
            // SAFETY: as above; the slot is this CPU's until its address is written.
            unsafe {
                (*slot).block = b;
                core::ptr::write_volatile(&raw mut (*slot).addr, block);
            }
            return;
        }
        if held == block {
            // Its free was missed: count the old block freed now; the new one goes to `LIVE`.
            count(&COUNTERS, counter::REUSED);
            free_block(block, now);
        }
    }
    // One update when the address is new (the usual case), instead of a lookup and then an
    // update.
    match LIVE.insert(&block, &b, BPF_NOEXIST as u64) {
        Ok(()) => live_in_hash(1),
        // EEXIST: its free was missed; count the old block freed now.
        Err(-17) => {
            count(&COUNTERS, counter::REUSED);
            info!(
                &(),
                "block {:x} allocated again before its free was seen", block
            );
            free_block(block, now);
            match LIVE.insert(&block, &b, 0) {
                Ok(()) => live_in_hash(1),
                Err(_) => count(&COUNTERS, counter::DROPPED),
            }
        }
        Err(_) => {
            count(&COUNTERS, counter::DROPPED);
            info!(&(), "live table full: block {:x} not tracked", block);
        }
    }
}

/// Adds `n` to a counter shared by all CPUs and returns the new value.
#[inline(always)]
fn add(counter: *mut u64, n: u64) -> u64 {
    // SAFETY: every caller passes a pointer into a map value (which lives as long as the map
    // and is 8-byte aligned), and every concurrent access to it is atomic.
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
