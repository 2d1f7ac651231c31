//! Running a compiled walker on the calling thread so that a corrupt object cannot kill the
//! program, and giving the walk and the decoding the deep stack they may need.
//!
//! ## Choice: catch the fault, then ask the interpreter
//! The other way, validating every address the native walk will read against
//! `/proc/self/maps` first, means knowing those addresses before the walk, that is, doing
//! the walk (the interpreter's) before the walk, and it still races with the program's
//! other threads, which can unmap memory between the check and the read. So the native walk
//! runs where a fault is caught, and a caught fault (or a corrupt object the walker reports
//! itself) hands the object to the interpreter reading through `process_vm_readv` on our own
//! pid, which gets `EFAULT` instead of a signal and says which read failed (`run`).
//!
//! ## How a fault is caught, soundly
//! A `SIGSEGV`/`SIGBUS` handler, installed once, recognises a fault of the walk this thread
//! is running (the faulting instruction is in walker code, and the walk is found from it as
//! said below) and makes the walk return [`STATUS_FAULT`] to its caller,
//! discarding the walk's frames. Only frames of generated code are ever discarded (no
//! destructors, no locks, no allocations, nothing that `longjmp`-like recovery could leave
//! half done), and registers are restored as the calling convention says. Every other signal
//! goes to the handler that was there before ours (or the default action), as if ours did
//! not exist.
//!
//! A walk runs on one of two stacks:
//! - **the caller's own stack** ([`run_direct`]), when the thread's stack has room for it (its
//!   bounds are read once per thread, into a [`ThreadState`] the caller keeps): the walker is
//!   entered through a small trampoline (`oil_walk_direct`) that saves the callee-saved
//!   registers. Nothing about the walk is recorded for the handler: it recognises a direct
//!   walk from the fault itself. The instruction is in registered walker code
//!   ([`register_code`]), and that code keeps frame pointers, so the chain of walker frames
//!   above the fault leads to the entry's, whose return address is the trampoline's; the
//!   stack pointer that call left is where the walk resumes, in the trampoline's return
//!   path, which pops the registers and returns `STATUS_FAULT`. The walker is told how much
//!   of the stack it may use (`WalkFrame::stack_len`) and returns `STATUS_STACK` rather than
//!   go further, so it never reaches the guard page. This costs a call and no thread-local
//!   of this library.
//! - **the caller's own stack, with no trampoline**, for a walker whose entry is a leaf that
//!   saves no callee-saved register (`LocalWalker::leaf_entry`, registered with
//!   [`register_leaf_entry`]): `oil.h` calls it directly after the same room and handler
//!   checks, inline ([`ThreadState`] and the type's `SteadyHead` are read by the header). A
//!   fault with its instruction in such an entry is in the entry's body (only the body reads
//!   the object; the prologue and epilogue touch only its frame, on a stack checked to have
//!   room), where `rbp` is its frame pointer: the handler returns from that frame to the
//!   entry's caller, as the epilogue would, with `STATUS_FAULT`; every callee-saved register
//!   still holds the caller's value, since the entry saves none. This is the steady state
//!   of `oil::size` for a struct walked inline.
//! - **a stack of its own** ([`run_walker`], in a `corosensei` coroutine, recovered with
//!   corosensei's trap support), for types that nest deeper than the caller's stack allows
//!   and for threads whose stack is small or unknown (a fiber).
//!
//! ## Keeping the handler in front, without a system call per walk
//! A program that installs its own `SIGSEGV`/`SIGBUS` handler after ours would take the
//! walk's faults away from us. Reading the installed action before each walk would cost two
//! `rt_sigaction` system calls, ten times a small walk. Instead `liboil` interposes
//! `sigaction` and `signal` (it is linked before libc, so the dynamic linker binds the
//! program's and its libraries' calls to ours, as sanitizers and Android's libsigchain do):
//! ours forward to libc unchanged (the caller sees exactly libc's behaviour and result) and
//! raise a flag when the action of `SIGSEGV` or `SIGBUS` may have changed. The next walk
//! sees the flag (one atomic load) and, if our handler is no longer installed, puts it back
//! in front and chains to the program's, as at the first walk. A program that changes the
//! action in a way we do not see (the raw system call, `sigset`, `sysv_signal`) is caught by
//! a check of the installed action every [`RECHECK_EVERY`] walks of a thread and by its
//! first walk. What no check before a walk can cover: another thread replacing the handler
//! *during* a walk; a program that does that while measuring corrupt objects must chain to
//! the previous handler, as signal handlers should.
//!
//! Never runs a walker without the handler armed for it, never touches a signal it does not
//! own, never discards a frame that is not generated walker code, never changes what the
//! program's own `sigaction`/`signal` calls do.

mod handlers;

pub use handlers::RECHECK_EVERY;
use handlers::{MAYBE_REPLACED, ensure_handlers};

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ops::Range;
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use corosensei::stack::{Stack, StackPointer};
use corosensei::trap::CoroutineTrapHandler;
use corosensei::{CoroutineResult, ScopedCoroutine};
use oi_trace::jit::WalkFrame;
use oi_trace::jit::in_process::LocalWalker;

/// What [`run_walker`] returns when the walk faulted (no walker status has this value).
pub const STATUS_FAULT: u64 = 0xfa17_0000;

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("cannot reserve a {size}-byte walk stack: {source}")]
    Stack { size: usize, source: std::io::Error },
    #[error("cannot install the fault handler for signal {signal}: {source}")]
    Handler {
        signal: c_int,
        source: std::io::Error,
    },
}

/// The walk in progress on this thread, as the signal handler needs it.
#[derive(Clone, Copy)]
struct Active {
    trap: CoroutineTrapHandler<u64>,
    code_start: usize,
    code_end: usize,
}

/// What a thread's direct walks need between calls ([`run_direct`]). C++ callers keep it in
/// a `thread_local` of their own (`oil_thread` in `oil.h`, one `%fs`-relative access in an
/// executable), so that the steady state reaches no thread-local of this library (each is a
/// call to `__tls_get_addr` from a shared library); Rust callers use [`with_thread_state`].
/// All zero at first. `oil.h` reads it too (its steady state checks the room inline): the
/// layout and the meaning of the fields are part of the interface.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadState {
    /// `DIRECT_RESERVE + DIRECT_MIN` above this thread's stack's low end, once read (0: not
    /// read yet): a direct walk may start at a stack pointer `sp` iff `sp - floor < span`
    /// (one subtraction and one unsigned comparison; a stack pointer below `floor` wraps far
    /// above `span`), and then has `sp - floor + DIRECT_MIN` bytes of room.
    floor: usize,
    /// How far above `floor` a stack pointer of this thread's stack can be (0: unknown
    /// stack, never walk on it).
    span: usize,
    /// Walks left before the installed actions are read again (0: read them now).
    walks_to_check: usize,
}

/// What a walk on a stack of its own and the signal handler share (a direct walk needs no
/// per-thread record: the handler finds it from the faulting frame, see [`recover`]).
struct PerThread {
    /// The walk in progress on a stack of its own.
    active: Cell<Option<Active>>,
    /// Where the last caught fault of such a walk was.
    fault_addr: Cell<usize>,
    /// The direct walks' state of Rust callers.
    state: Cell<ThreadState>,
}

thread_local! {
    // Const-initialised and without a destructor: reading it in a signal handler is a plain
    // thread-local access (no lazy initialisation, no allocation).
    static THREAD: PerThread = const {
        PerThread {
            active: Cell::new(None),
            fault_addr: Cell::new(0),
            state: Cell::new(ThreadState { floor: 0, span: 0, walks_to_check: 0 }),
        }
    };
}

/// Runs `f` with this thread's [`ThreadState`] (the Rust callers' copy).
pub fn with_thread_state<R>(f: impl FnOnce(&mut ThreadState) -> R) -> R {
    THREAD.with(|t| {
        let mut st = t.state.get();
        let r = f(&mut st);
        t.state.set(st);
        r
    })
}

/// Most code ranges a [`CodeTable`] holds.
const MAX_CODE_RANGES: usize = 4096;

/// An append-only table of code ranges `[start, end)` that the signal handler reads
/// (async-signal-safe: atomic loads only). An entry is written before the count that
/// publishes it. Ranges are never removed: OIL keeps its walkers for the life of the process
/// (a stale range would only make the handler look at a frame it then does not recognise).
struct CodeTable {
    ranges: [[AtomicUsize; 2]; MAX_CODE_RANGES],
    count: AtomicUsize,
    register: Mutex<()>,
}

impl CodeTable {
    const fn new() -> Self {
        Self {
            ranges: [const { [AtomicUsize::new(0), AtomicUsize::new(0)] }; MAX_CODE_RANGES],
            count: AtomicUsize::new(0),
            register: Mutex::new(()),
        }
    }

    /// Adds `code`; false when the table is full.
    fn add(&self, code: Range<usize>) -> bool {
        let _serial = self.register.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.count.load(Ordering::Acquire);
        let Some(slot) = self.ranges.get(n) else {
            return false;
        };
        slot[0].store(code.start, Ordering::Relaxed);
        slot[1].store(code.end, Ordering::Relaxed);
        self.count.store(n + 1, Ordering::Release);
        true
    }

    fn contains(&self, addr: usize) -> bool {
        let n = self.count.load(Ordering::Acquire).min(MAX_CODE_RANGES);
        self.ranges[..n]
            .iter()
            .any(|r| (r[0].load(Ordering::Relaxed)..r[1].load(Ordering::Relaxed)).contains(&addr))
    }
}

/// The code of every walker that may run on a caller's stack: the signal handler's test
/// that a fault (and each frame above it) is in generated walker code.
static WALKER_CODE: CodeTable = CodeTable::new();
/// The entries that may be called with no trampoline (`LocalWalker::leaf_entry`): a fault
/// in one returns to the entry's caller from the entry's frame ([`recover`]).
static LEAF_ENTRIES: CodeTable = CodeTable::new();

/// Registers a walker's code so that it may run on a caller's stack ([`run_direct`]); false
/// when the table is full (then run it with [`run_walker`]).
pub fn register_code(code: Range<usize>) -> bool {
    WALKER_CODE.add(code)
}

/// Registers a leaf entry (`LocalWalker::leaf_entry`, its code registered with
/// [`register_code`] already) so that it may be called directly, as `oil.h`'s steady state
/// does: a fault in it makes it return ([`STATUS_FAULT`], the faulting address) to whoever
/// called it. False when the table is full (then enter it through [`run_direct_optimistic`]).
pub fn register_leaf_entry(entry: Range<usize>) -> bool {
    LEAF_ENTRIES.add(entry)
}

/// Whether `addr` is in registered walker code (async-signal-safe: atomic loads only).
fn in_walker_code(addr: usize) -> bool {
    WALKER_CODE.contains(addr)
}

/// The flag that says the action of SIGSEGV or SIGBUS may have changed since our handler was
/// last seen in front: a direct call of a leaf entry (`oil.h`) must not start while it is
/// raised, nor when the thread's countdown (`ThreadState::walks_to_check`) is 0 (then the
/// general path puts the handler back first, see [`check_handlers`]).
pub fn handlers_changed() -> &'static AtomicBool {
    &MAYBE_REPLACED
}

/// A private stack: reserved, not committed (`MAP_NORESERVE`: only the pages a walk
/// touches ever become memory), with a guard page below. corosensei's `DefaultStack`
/// commits the whole size, too much for the depth a walk may need.
pub struct WalkStack {
    base: *mut c_void,
    len: usize,
}

impl WalkStack {
    pub fn new(size: usize) -> Result<Self, GuardError> {
        let page = 4096;
        let len = size.next_multiple_of(page) + page;
        // SAFETY: a fresh private anonymous mapping that this value owns.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(GuardError::Stack {
                size,
                source: std::io::Error::last_os_error(),
            });
        }
        let stack = Self { base, len };
        // SAFETY: the lowest page of our own mapping becomes the guard page.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(GuardError::Stack {
                size,
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(stack)
    }
}

impl Drop for WalkStack {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this value owns; nothing runs on it any more (a
        // coroutine or `on_stack` borrows the stack mutably while it runs).
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

// SAFETY: `base` is page-aligned (hence 16-byte aligned) and non-null, the range is ours for
// the life of the value, and its lowest page is a guard page (PROT_NONE).
unsafe impl Stack for WalkStack {
    fn base(&self) -> StackPointer {
        StackPointer::new(self.base as usize + self.len).unwrap_or(StackPointer::MIN)
    }

    fn limit(&self) -> StackPointer {
        StackPointer::new(self.base as usize).unwrap_or(StackPointer::MIN)
    }
}

/// Runs `walker` on `frame` in a coroutine on `stack`, with faults contained: returns the
/// walker's status, or [`STATUS_FAULT`] with the faulting address.
pub fn run_walker(
    stack: &mut WalkStack,
    walker: &LocalWalker,
    frame: &mut WalkFrame,
) -> Result<(u64, usize), GuardError> {
    THREAD.with(|t| {
        let mut st = t.state.get();
        if st.walks_to_check == 0 || MAYBE_REPLACED.load(Ordering::Acquire) {
            ensure_handlers()?;
            st.walks_to_check = RECHECK_EVERY;
        }
        st.walks_to_check -= 1;
        t.state.set(st);
        Ok(in_coroutine(t, stack, walker, frame))
    })
}

fn in_coroutine(
    t: &PerThread,
    stack: &mut WalkStack,
    walker: &LocalWalker,
    frame: &mut WalkFrame,
) -> (u64, usize) {
    let code = walker.code_range();
    let frame_ptr: *mut WalkFrame = frame;
    let status = ScopedCoroutine::with_stack(stack, move |_, ()| {
        // SAFETY: the frame and the buffers it names outlive the coroutine (the caller owns
        // them); the stack is the coroutine's, far larger than `frame.stack_len`; a fault in
        // the walk is turned into a return of STATUS_FAULT by the handler below. Nothing but
        // this raw pointer lives in this frame while the generated code runs.
        unsafe { walker.call(&mut *frame_ptr) }
    })
    .scope(|mut co| {
        t.active.set(Some(Active {
            trap: co.trap_handler(),
            code_start: code.start,
            code_end: code.end,
        }));
        t.fault_addr.set(0);
        let r = co.resume(());
        t.active.set(None);
        match r {
            CoroutineResult::Return(s) => s,
            // The walker never yields.
            CoroutineResult::Yield(()) => STATUS_FAULT,
        }
    });
    (status, t.fault_addr.get())
}

/// Runs `f` on `stack` (for the interpreter and the decoder, which recurse as deep as the
/// object nests). A panic in `f` comes back to the caller as a panic.
pub fn on_stack<R>(stack: &mut WalkStack, f: impl FnOnce() -> R) -> R {
    corosensei::on_stack(stack, f)
}

// The trampoline that enters a walker on the caller's stack. `oil_walk_direct(entry, a, b, c)`
// saves the callee-saved registers and calls `entry(a, b, c)` (a frame walker takes the
// frame as `a`; an optimistic one `obj, bias, stack_len`), whose return address is
// `oil_walk_direct_return`; it returns the walker's rax:rdx (status, and the optimistic
// walker's total or anything). The handler resumes a faulting
// walk at `oil_walk_direct_resume` with the stack pointer the call left (found from the
// walker's frame chain, see `recover`), `rax = STATUS_FAULT` and `rdx` = the faulting
// address, which restores the registers and returns, as if the walker had returned.
std::arch::global_asm!(
    ".pushsection .text.oil_walk_direct,\"ax\",@progbits",
    ".p2align 4",
    ".globl oil_walk_direct",
    ".hidden oil_walk_direct",
    ".type oil_walk_direct,@function",
    "oil_walk_direct:",
    ".cfi_startproc",
    "push rbp",
    ".cfi_adjust_cfa_offset 8",
    "push rbx",
    ".cfi_adjust_cfa_offset 8",
    "push r12",
    ".cfi_adjust_cfa_offset 8",
    "push r13",
    ".cfi_adjust_cfa_offset 8",
    "push r14",
    ".cfi_adjust_cfa_offset 8",
    "push r15",
    ".cfi_adjust_cfa_offset 8",
    // Six pushes after the return address: rsp is 16-byte aligned after 8 more bytes.
    "sub rsp, 8",
    ".cfi_adjust_cfa_offset 8",
    "mov rax, rdi",
    "mov rdi, rsi",
    "mov rsi, rdx",
    "mov rdx, rcx",
    "call rax",
    ".globl oil_walk_direct_return",
    ".hidden oil_walk_direct_return",
    "oil_walk_direct_return:",
    ".globl oil_walk_direct_resume",
    ".hidden oil_walk_direct_resume",
    "oil_walk_direct_resume:",
    "add rsp, 8",
    ".cfi_adjust_cfa_offset -8",
    "pop r15",
    ".cfi_adjust_cfa_offset -8",
    "pop r14",
    ".cfi_adjust_cfa_offset -8",
    "pop r13",
    ".cfi_adjust_cfa_offset -8",
    "pop r12",
    ".cfi_adjust_cfa_offset -8",
    "pop rbx",
    ".cfi_adjust_cfa_offset -8",
    "pop rbp",
    ".cfi_adjust_cfa_offset -8",
    "ret",
    ".cfi_endproc",
    ".size oil_walk_direct, .-oil_walk_direct",
    ".popsection",
);

/// What the trampoline returns (in rax:rdx): the walker's status and, with [`STATUS_FAULT`],
/// the faulting address, else the walker's second result (an optimistic walker's total).
#[repr(C)]
struct DirectResult {
    status: u64,
    second: u64,
}

unsafe extern "sysv64" {
    fn oil_walk_direct(entry: usize, a: u64, b: u64, c: u64) -> DirectResult;
    fn oil_walk_direct_return();
    fn oil_walk_direct_resume();
}

/// Stack kept free below a direct walk's limit: signal frames (the kernel's, with the
/// extended register state, then ours and any handler we chain to) and the trampoline.
const DIRECT_RESERVE: usize = 256 << 10;
/// More kept free on the main thread: its stack grows on demand, and the kernel refuses to
/// grow it within `stack_guard_gap` (1 MiB by default) of the mapping below, which the bounds
/// pthread gives do not account for (a fault there could not even get its signal frame).
const MAIN_STACK_GAP: usize = 1 << 20;
/// A direct walk needs at least this much room (else it goes to the walk stack): the
/// walker's own margin (32 KiB) and a useful depth.
const DIRECT_MIN: usize = 256 << 10;

/// How many bytes of the caller's stack a walk entered from here may use: `None` when the
/// thread's stack is unknown, or this is not it (a fiber), or it has too little room.
#[inline]
fn direct_room(st: &mut ThreadState) -> Option<usize> {
    if st.floor == 0 {
        read_stack_bounds(st);
    }
    room_of(st)
}

/// The room below the current stack pointer, if a direct walk may start there (bounds not
/// read yet make `span` 0: no room).
#[inline(always)]
fn room_of(st: &ThreadState) -> Option<usize> {
    let above = stack_pointer().wrapping_sub(st.floor);
    (above < st.span).then_some(above + DIRECT_MIN)
}

/// A thread's first direct walk: its stack's bounds, as [`direct_room`] uses them.
#[cold]
#[inline(never)]
fn read_stack_bounds(st: &mut ThreadState) {
    let (low, high) = thread_stack().unwrap_or((1, 1));
    st.floor = low + DIRECT_RESERVE + DIRECT_MIN;
    st.span = high.saturating_sub(st.floor);
}

/// The current stack pointer (a register read: an address taken of a local would cost a
/// store and a reload on the steady state's path).
#[inline(always)]
fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: reads rsp into a register; touches no memory, no flags, no stack.
    unsafe {
        std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags));
    }
    sp
}

/// The calling thread's stack bounds, from pthread (for the main thread glibc derives them
/// from the stack's mapping and `RLIMIT_STACK`).
fn thread_stack() -> Option<(usize, usize)> {
    // SAFETY: `attr` is initialised by pthread_getattr_np before it is read and destroyed
    // after; the out-parameters are plain locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut c_void = ptr::null_mut();
        let mut size: usize = 0;
        let r = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if r != 0 || addr.is_null() {
            return None;
        }
        let low = addr as usize;
        let main = libc::getpid() == libc::gettid();
        Some((if main { low + MAIN_STACK_GAP } else { low }, low + size))
    }
}

/// Runs the walker whose entry is at `entry` (its code registered with [`register_code`]) on
/// `frame`, on the calling thread's own stack, with faults contained, when that stack has
/// room for it: `Ok(None)` when it has not (use [`run_walker`]). `st` is this thread's state
/// (the caller's `oil_thread`, or [`with_thread_state`]). Sets `frame.stack_len` to the room:
/// the walker returns `STATUS_STACK` rather than use more (then run it with [`run_walker`]).
/// Returns the walker's status, or [`STATUS_FAULT`] with the faulting address.
///
/// # Safety
/// `entry` is the entry of a live walker whose code is registered, `frame` points to a frame
/// it accepts, with the buffers it names writable and unused elsewhere during the call.
#[inline]
pub unsafe fn run_direct(
    st: &mut ThreadState,
    entry: usize,
    frame: *mut WalkFrame,
) -> Result<Option<(u64, usize)>, GuardError> {
    let Some(room) = direct_ready(st)? else {
        return Ok(None);
    };
    // SAFETY: writing the frame the caller owns.
    unsafe { (*frame).stack_len = room as u64 };
    // SAFETY: the entry has the signature the trampoline calls it with; the frame and the
    // buffers it names are the caller's and outlive the call; `stack_len` keeps the walk
    // within the room measured below the current stack pointer; a fault in the walk is
    // turned into a return of STATUS_FAULT by `handler`, which discards only generated
    // frames below the trampoline's. The walker writes only to `frame`, `out` and `scratch`
    // (raw memory the compiler sees escape through the call).
    let r = unsafe { oil_walk_direct(entry, frame as u64, 0, 0) };
    let fault_addr = if r.status == STATUS_FAULT {
        r.second
    } else {
        0
    };
    Ok(Some((r.status, fault_addr as usize)))
}

/// [`run_direct`] for an optimistic walker (`LocalWalker::compile_totals_optimistic`),
/// whose entry takes the root `obj` and `bias` in registers and returns the status and the
/// total: `Some((status, total))`, or `Some(`([`STATUS_FAULT`], the faulting address)`)`;
/// `None` when this stack has no room, or when the thread's stack bounds are not read
/// yet or the fault handler is due for a check (call [`check_handlers`] first, as the
/// general path does). No frame in memory and no
/// call but the walk's, which is the last thing done: the steady state of `oil::size`.
///
/// # Safety
/// `entry` is the entry of a live optimistic walker whose code is registered; `obj` is the
/// object it walks.
#[inline(always)]
pub unsafe fn run_direct_optimistic(
    st: &mut ThreadState,
    entry: usize,
    obj: u64,
    bias: u64,
) -> Option<(u64, u64)> {
    let room = room_of(st)?;
    if st.walks_to_check == 0 || MAYBE_REPLACED.load(Ordering::Acquire) {
        return None;
    }
    st.walks_to_check -= 1;
    // SAFETY: as in `run_direct`; this walker writes nothing but its own stack, within
    // `room` below the current stack pointer.
    let r = unsafe { oil_walk_direct(entry, obj, bias, room as u64) };
    Some((r.status, r.second))
}

/// Reads this thread's stack bounds at its first walk, and makes sure our fault handler is
/// in front if this thread's countdown or a `sigaction`/`signal` call says it is due (what
/// [`run_direct_optimistic`] leaves to its caller's general path).
pub fn check_handlers(st: &mut ThreadState) -> Result<(), GuardError> {
    if st.floor == 0 {
        read_stack_bounds(st);
    }
    if st.walks_to_check == 0 || MAYBE_REPLACED.load(Ordering::Acquire) {
        ensure_handlers()?;
        st.walks_to_check = RECHECK_EVERY;
    }
    Ok(())
}

/// The room a direct walk may use on this stack (`None`: not enough, or not this thread's
/// stack), after making sure our fault handler is in front (at the first walk, after a
/// `sigaction`/`signal` call on SIGSEGV/SIGBUS, and every [`RECHECK_EVERY`] walks).
#[inline]
fn direct_ready(st: &mut ThreadState) -> Result<Option<usize>, GuardError> {
    let Some(room) = direct_room(st) else {
        return Ok(None);
    };
    if st.walks_to_check == 0 || MAYBE_REPLACED.load(Ordering::Acquire) {
        ensure_handlers()?;
        st.walks_to_check = RECHECK_EVERY;
    }
    st.walks_to_check -= 1;
    Ok(Some(room))
}

#[cfg(test)]
mod tests;
