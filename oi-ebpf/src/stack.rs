//! Whole user stacks in the kernel, for code built without frame pointers: a DWARF-CFI
//! unwinder that walks the stack of the thread that hit a uprobe, with tables that user space
//! (`oi-user/src/unwind`) compiled from each mapped file's `.eh_frame`.
//!
//! Why this design: the allocation profiler needs the stack of every allocation *in the
//! kernel*, to key its per-site maps by stack, at millions of calls a second. `bpf_get_stack`
//! follows frame pointers, which Debian's -O2 code (libc, libstdc++, most programs) does not
//! keep; copying the top of the stack to user space and unwinding there cannot keep up and
//! gives the kernel no key. So, as production profilers do, user space turns `.eh_frame` into
//! compact rows ([`oi_common::stack::Row`]: CFA = rsp+off or rbp+off, where rbp was saved),
//! and this module steps frame by frame: find the process's mapping of the pc (binary search
//! over at most 256), find the row of the pc (binary search over the file's rows), CFA from
//! the row, return address at CFA − 8, rbp from CFA + 8·slot when saved. A pc no table covers
//! (JIT code, a file without CFI, a process not tracked) is stepped by the frame pointer,
//! except the probed instruction itself, which callers place at a function's first
//! instruction: its return address is at [rsp] (a process that started a moment ago, before
//! user space tracked it, still gets its allocator's exact caller). The
//! walk ends at an undefined return address (`_start`), a zero return address or frame
//! pointer; it stops early (counted as truncated) on a rule it cannot follow, an unreadable
//! or non-advancing stack, or after [`MAX_FRAMES`] frames.
//!
//! The stack's top is copied with one read per walk ([`STACK_COPY`] bytes from the probed
//! stack pointer, into a per-CPU buffer) and the frames' return addresses and saved rbp come
//! from that copy; only what lies above it is read word by word. A read of user memory is the
//! costly part of a step (kernel `bpf_stats`: one large copy costs about what one word does),
//! and a hot allocation site's whole stack usually fits.
//!
//! No memo of the last walk (every word a walk read, its frames and id, reused when a fresh
//! copy holds the same words): it would spare nearly every walk of a hot site yet cost more,
//! since with the row cache such a walk is mostly its fixed costs (the mappings lookup, the
//! copy), which a check of the memo pays as well.
//!
//! Every loop is bounded: the frame loop runs under `bpf_loop` (the verifier checks one step,
//! not 48), the searches have fixed iteration counts. No large stack buffers: the frames go
//! straight into the caller's map value. Never writes user memory; reads it only with
//! `bpf_probe_read_user`, which fails cleanly on a bad address.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::BPF_F_MMAPABLE,
    helpers::{
        bpf_get_current_pid_tgid, bpf_probe_read_user,
        generated::{self, bpf_loop},
    },
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
    programs::ProbeContext,
};
use oi_common::stack::{
    MAPPING_SEARCH_STEPS, MAX_FRAMES, MAX_MAPPINGS, MAX_UNWIND_PROCESSES, ProcessMappings,
    ROW_SEARCH_STEPS, Row, counter, rule,
};

/// The rows of every file of every tracked process (written by user space only). One entry
/// here: every object of this crate carries the map, so only the loaders of programs that
/// walk stacks size it (`oi_user::unwind::size_maps`, `MAX_ROWS` rows); the others keep it
/// tiny. Memory-mappable: user space writes rows straight into it (`oi_user::unwind::rows`).
#[map]
static UNWIND_ROWS: Array<Row> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// tgid → its executable mappings, sorted by start (written by user space only).
#[map]
static UNWIND_MAPPINGS: HashMap<u32, ProcessMappings> =
    HashMap::with_max_entries(MAX_UNWIND_PROCESSES, aya_ebpf::bindings::BPF_F_NO_PREALLOC);

/// Per-CPU counters, indexed by `oi_common::stack::counter`.
#[map]
static UNWIND_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Per CPU and frame depth, the row the last walk found there. A hot allocation site walks the
/// same pcs again and again: this spares it the two binary searches per frame, which are most
/// of a walk's cost without it (kernel `bpf_stats`; docs/performance.md,
/// "Stacks (`unwind`)").
#[map]
static UNWIND_ROW_CACHE: PerCpuArray<CachedRow> =
    PerCpuArray::with_max_entries(MAX_FRAMES as u32, 0);

/// Bytes of the stack each walk copies at once, from the probed stack pointer up.
const STACK_COPY: usize = 2048;
/// A page: a copy that would cross into an unmapped page is cut at the end of the probed
/// stack pointer's page, which is mapped (the probed call just wrote its return address).
const PAGE: u64 = 4096;

/// This CPU's copy of the top of the stack being walked.
#[map]
static UNWIND_STACK_COPY: PerCpuArray<StackCopy> = PerCpuArray::with_max_entries(1, 0);

#[repr(C)]
struct StackCopy {
    /// Bumped by each walk on this CPU before it copies: a walk preempted by another one on
    /// the same CPU (which overwrote the copy) sees it changed at its end and gives the
    /// probed frame only, counted as truncated.
    generation: u64,
    /// Bytes copied.
    len: u64,
    words: [u64; STACK_COPY / 8],
}

/// The row found for `pc` in process `tgid` while its mappings had `generation` (`found` 0:
/// no row covers it). Valid only when `check` matches the other fields: a walk on this CPU
/// may be preempted by another one between its writes, and a torn entry must read as a miss.
#[repr(C)]
#[derive(Clone, Copy)]
struct CachedRow {
    pc: u64,
    tgid: u32,
    generation: u32,
    row: Row,
    found: u64,
    check: u64,
}

impl CachedRow {
    #[inline(always)]
    fn checksum(&self) -> u64 {
        let row = u64::from(self.row.pc)
            | u64::from(self.row.cfa_offset) << 32
            | u64::from(self.row.rule) << 48
            | u64::from(self.row.rbp_slot as u8) << 56;
        let h = (self.pc ^ (u64::from(self.tgid) << 32 | u64::from(self.generation)))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h ^ row ^ self.found).wrapping_mul(0xff51_afd7_ed55_8ccd) | 1
    }
}

/// The state of one walk, passed to each step of `bpf_loop`.
#[repr(C)]
struct Walk {
    frames: *mut [u64; MAX_FRAMES],
    /// The process's mappings, null when the process is not tracked.
    mappings: *const ProcessMappings,
    tgid: u32,
    /// The mappings' generation, read once per walk.
    generation: u32,
    pc: u64,
    sp: u64,
    bp: u64,
    /// Frames written.
    n: u64,
    /// 1 once the walk met the stack's end.
    ended: u64,
    /// This CPU's copy of the stack from `copy_start` on, `copy_len` bytes of it valid (0: no
    /// copy, every read goes to user memory).
    copy: *const StackCopy,
    copy_start: u64,
    copy_len: u64,
    /// The copy's generation when this walk made it.
    copy_generation: u64,
}

/// Writes the user stack of the thread that hit the probe into `frames`: `frames[0]` is the
/// probed instruction's address, then each caller's return address, innermost first. Returns
/// how many frames were written (≥ 1). Probe a function's first instruction: where no table
/// covers it, the return address is taken from [rsp].
#[inline(always)]
pub fn user_stack(ctx: &ProbeContext, frames: &mut [u64; MAX_FRAMES]) -> usize {
    // SAFETY: `regs` is the pt_regs the kernel passed to this program, readable for its run.
    let (pc, sp, bp) = unsafe { ((*ctx.regs).rip, (*ctx.regs).rsp, (*ctx.regs).rbp) };
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let mappings = UNWIND_MAPPINGS.get_ptr(tgid).unwrap_or(core::ptr::null());
    let generation = if mappings.is_null() {
        0
    } else {
        // SAFETY: a value of UNWIND_MAPPINGS, read-only here.
        unsafe { (*mappings).generation }
    };
    let mut walk = Walk {
        frames: frames as *mut _,
        mappings,
        tgid,
        generation,
        pc,
        sp,
        bp,
        n: 0,
        ended: 0,
        copy: core::ptr::null(),
        copy_start: sp,
        copy_len: 0,
        copy_generation: 0,
    };
    let Some(copy) = UNWIND_STACK_COPY.get_ptr_mut(0) else {
        frames[0] = pc;
        return 1;
    };
    // SAFETY: this CPU's value of a per-CPU array (see `StackCopy` for other walks).
    unsafe {
        walk.copy_generation = (*copy).generation.wrapping_add(1);
        (*copy).generation = walk.copy_generation;
        (*copy).len = copy_stack(copy, sp);
        // Read back as the verifier sees a map value, unknown: every way of copying reaches
        // the loop in one state, so its callback is verified once, not once per way.
        walk.copy_len = core::ptr::read_volatile(&raw const (*copy).len);
    }
    walk.copy = copy;
    // SAFETY: the callback is a BPF function of this program and `walk` lives on this stack
    // for the whole call.
    unsafe {
        bpf_loop(
            MAX_FRAMES as u32,
            step as *mut c_void,
            (&raw mut walk).cast::<c_void>(),
            0,
        );
    }
    count(counter::STACKS);
    // SAFETY: as above.
    if unsafe { (*copy).generation } != walk.copy_generation {
        // Another walk overwrote the copy meanwhile (see `StackCopy`): the frames above the
        // probed one may be wrong, so they are not given.
        count(counter::TRUNCATED_STACKS);
        frames[0] = pc;
        return 1;
    }
    if walk.ended == 0 {
        count(counter::TRUNCATED_STACKS);
    }
    if walk.n == 0 {
        // Never expected (the first step always writes); the contract is at least one frame.
        frames[0] = pc;
        return 1;
    }
    walk.n as usize
}

/// Copies the stack from `sp` up into `copy`: [`STACK_COPY`] bytes, or up to the end of
/// `sp`'s page when those cross into unmapped memory (the top of a stack). Returns the bytes
/// copied (0 when nothing could be read).
///
/// # Safety
/// `copy` is this CPU's value of `UNWIND_STACK_COPY`.
#[inline(always)]
unsafe fn copy_stack(copy: *mut StackCopy, sp: u64) -> u64 {
    // SAFETY: the helper writes at most the given size into the buffer and fails cleanly on
    // unreadable user memory.
    unsafe {
        let words = (&raw mut (*copy).words).cast::<c_void>();
        if generated::bpf_probe_read_user(words, STACK_COPY as u32, sp as *const c_void) == 0 {
            return STACK_COPY as u64;
        }
        let in_page = (PAGE - (sp & (PAGE - 1))).min(STACK_COPY as u64);
        if generated::bpf_probe_read_user(words, in_page as u32, sp as *const c_void) == 0 {
            return in_page;
        }
    }
    0
}

/// The user word at `addr`: from the walk's copy of the stack when it holds it, else read.
/// (`copy_len` is 0 while `copy` is not set.)
#[inline(always)]
fn read_word(w: &Walk, addr: u64) -> Option<u64> {
    let offset = addr.wrapping_sub(w.copy_start);
    if offset & 7 == 0 && offset < w.copy_len {
        // `copy_len` ≤ STACK_COPY, so the mask changes nothing; it is there for the verifier,
        // which does not learn the bound from the comparison.
        let index = (offset / 8) as usize & (STACK_COPY / 8 - 1);
        // SAFETY: a non-zero `copy_len` means `copy` is this CPU's value of
        // UNWIND_STACK_COPY; the index is in bounds.
        return Some(unsafe { (*w.copy).words[index] });
    }
    // SAFETY: a read of user memory through the helper, which fails on a bad address.
    unsafe { bpf_probe_read_user(addr as *const u64) }.ok()
}

/// One frame: record the pc, then find the caller's pc, sp and bp. 0 to go on, 1 to stop.
#[inline(never)]
extern "C" fn step(index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the `Walk` that `user_stack` passed, on its caller's stack.
    let w = unsafe { &mut *ctx.cast::<Walk>() };
    // Every step writes one frame, so the frame is the loop's index. Taken from the index,
    // which the verifier knows nothing about, rather than from a counter in `Walk`: a counter
    // it tracks (0, 1, 2, …) and that indexes an array must be exact, so each value would make
    // a state of its own and this callback would be verified once per frame (about 740,000
    // instructions for the allocation profiler instead of a few thousand).
    let n = index as usize;
    if n >= MAX_FRAMES {
        return 1;
    }
    // SAFETY: `frames` points at the caller's map value of MAX_FRAMES slots; `n` is in bounds.
    unsafe { (*w.frames)[n] = w.pc };
    w.n = index + 1;
    // A return address is the instruction after the call: the call itself (pc − 1) is in the
    // caller's frame even when the call is the last instruction of its function.
    let lookup = if n == 0 { w.pc } else { w.pc.wrapping_sub(1) };
    let found = if w.mappings.is_null() {
        None
    } else {
        cached_row(w, n, lookup)
    };
    let (cfa, rbp_slot) = match found {
        Some(row) => match row.rule {
            rule::CFA_RSP => (w.sp.wrapping_add(row.cfa_offset as u64), row.rbp_slot),
            rule::CFA_RBP => (w.bp.wrapping_add(row.cfa_offset as u64), row.rbp_slot),
            rule::CFA_PLT => {
                let pushed = if (w.pc & 15) >= row.cfa_offset as u64 {
                    8
                } else {
                    0
                };
                (w.sp.wrapping_add(8 + pushed), row.rbp_slot)
            }
            rule::END => {
                w.ended = 1;
                return 1;
            }
            rule::NONE if n == 0 => entry_frame(w),
            rule::NONE => return frame_pointer_step(w),
            _ => return 1,
        },
        None if n == 0 => entry_frame(w),
        None => return frame_pointer_step(w),
    };
    let Some(ra) = read_word(w, cfa.wrapping_sub(8)) else {
        return 1;
    };
    if rbp_slot != 0 {
        let at = cfa.wrapping_add((rbp_slot as i64 * 8) as u64);
        let Some(bp) = read_word(w, at) else {
            return 1;
        };
        w.bp = bp;
    }
    advance(w, ra, cfa)
}

/// The probed instruction with no table (a process not tracked yet, a file without CFI):
/// callers probe a function's first instruction, where the return address is at [rsp] and
/// rbp is still the caller's, so the caller is exact and frame pointers take over above it.
#[inline(always)]
fn entry_frame(w: &Walk) -> (u64, i8) {
    count(counter::FRAMES_WITHOUT_CFI);
    (w.sp.wrapping_add(8), 0)
}

/// The caller by the frame pointer: saved rbp at [rbp], return address at [rbp + 8].
#[inline(always)]
fn frame_pointer_step(w: &mut Walk) -> i64 {
    count(counter::FRAMES_WITHOUT_CFI);
    if w.bp == 0 {
        w.ended = 1;
        return 1;
    }
    let Some(next_bp) = read_word(w, w.bp) else {
        return 1;
    };
    let Some(ra) = read_word(w, w.bp.wrapping_add(8)) else {
        return 1;
    };
    let cfa = w.bp.wrapping_add(16);
    w.bp = next_bp;
    advance(w, ra, cfa)
}

/// Moves to the caller whose return address is `ra` and whose stack starts at `cfa`.
#[inline(always)]
fn advance(w: &mut Walk, ra: u64, cfa: u64) -> i64 {
    if ra == 0 {
        w.ended = 1;
        return 1;
    }
    // The stack grows down: a caller's frame is above its callee's. Anything else is a
    // damaged stack or a wrong table, and would loop.
    if cfa <= w.sp {
        return 1;
    }
    w.pc = ra;
    w.sp = cfa;
    0
}

/// [`find_row`] through this CPU's cache of the row found last at frame depth `n`.
#[inline(always)]
fn cached_row(w: &Walk, n: usize, pc: u64) -> Option<Row> {
    // SAFETY: a non-null `mappings` (the caller checks) is a value of UNWIND_MAPPINGS,
    // read-only here.
    let mappings = unsafe { &*w.mappings };
    let Some(slot) = UNWIND_ROW_CACHE.get_ptr_mut(n as u32) else {
        return find_row(mappings, pc);
    };
    // SAFETY: this CPU's entry of a per-CPU array, copied at once (see `CachedRow`).
    let cached = unsafe { *slot };
    if cached.pc == pc
        && cached.tgid == w.tgid
        && cached.generation == w.generation
        && w.generation != 0
        && cached.check == cached.checksum()
    {
        return (cached.found != 0).then_some(cached.row);
    }
    let found = find_row(mappings, pc);
    let mut entry = CachedRow {
        pc,
        tgid: w.tgid,
        generation: w.generation,
        row: found.unwrap_or_default(),
        found: u64::from(found.is_some()),
        check: 0,
    };
    entry.check = entry.checksum();
    // SAFETY: as above.
    unsafe { *slot = entry };
    found
}

/// The row covering `pc` in the process's tables; `None` where nothing covers it.
#[inline(always)]
fn find_row(mappings: &ProcessMappings, pc: u64) -> Option<Row> {
    // Last mapping starting at or below pc.
    let count = mappings.count as u64;
    if count == 0 || count > MAX_MAPPINGS as u64 {
        return None;
    }
    let mut lo: u64 = 0;
    let mut len = count;
    for _ in 0..MAPPING_SEARCH_STEPS {
        if len <= 1 {
            break;
        }
        let half = len / 2;
        let mid = lo + half;
        if mid >= MAX_MAPPINGS as u64 {
            return None;
        }
        if mappings.entries[mid as usize].start <= pc {
            lo = mid;
        }
        len -= half;
    }
    if lo >= MAX_MAPPINGS as u64 {
        return None;
    }
    let m = &mappings.entries[lo as usize];
    if pc < m.start || pc >= m.end || m.rows == 0 {
        return None;
    }
    let offset = pc.wrapping_sub(m.bias);
    if offset > u32::MAX as u64 {
        return None;
    }
    let offset = offset as u32;
    // Last row of the file starting at or below the offset.
    let mut lo = m.first_row;
    let mut len = m.rows;
    for _ in 0..ROW_SEARCH_STEPS {
        if len <= 1 {
            break;
        }
        let half = len / 2;
        let mid = lo.wrapping_add(half);
        let row = UNWIND_ROWS.get(mid)?;
        if row.pc <= offset {
            lo = mid;
        }
        len -= half;
    }
    let row = *UNWIND_ROWS.get(lo)?;
    (row.pc <= offset).then_some(row)
}

#[inline(always)]
fn count(index: u32) {
    if let Some(c) = UNWIND_COUNTERS.get_ptr_mut(index) {
        // SAFETY: this CPU's slot of a per-CPU array; one program runs per CPU at a time.
        unsafe { *c += 1 };
    }
}
