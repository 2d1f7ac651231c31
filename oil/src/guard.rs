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
//! The walker runs in a coroutine (the `corosensei` crate) on a stack of its own. A
//! `SIGSEGV`/`SIGBUS` handler, installed once, checks that the faulting instruction is in
//! the code of the walker this thread is running and the stack pointer is on its coroutine
//! stack; if so it uses corosensei's trap support to make the coroutine return
//! [`STATUS_FAULT`] to its caller, discarding the coroutine stack. Only frames of generated
//! code (no destructors, no locks, no allocations, nothing that `longjmp`-like recovery
//! could leave half done) are ever discarded: the Rust closure on that stack holds only a
//! raw pointer while the code runs. Every other signal goes to the handler that was there
//! before ours (or the default action), as if ours did not exist. A program that installs
//! its own handler later would take faults away from us, so every walk first checks that
//! ours is still installed and puts it back in front (chaining to the program's) if not.
//!
//! Never runs a walker without the handler armed for it, never touches a signal it does not
//! own, never discards a frame that is not generated walker code.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

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

thread_local! {
    // Const-initialised and without destructors: reading them in a signal handler is a plain
    // thread-local access (no lazy initialisation, no allocation).
    static ACTIVE: Cell<Option<Active>> = const { Cell::new(None) };
    static FAULT_ADDR: Cell<usize> = const { Cell::new(0) };
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
    ensure_handlers()?;
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
        ACTIVE.set(Some(Active {
            trap: co.trap_handler(),
            code_start: code.start,
            code_end: code.end,
        }));
        FAULT_ADDR.set(0);
        let r = co.resume(());
        ACTIVE.set(None);
        match r {
            CoroutineResult::Return(s) => s,
            // The walker never yields.
            CoroutineResult::Yield(()) => STATUS_FAULT,
        }
    });
    Ok((status, FAULT_ADDR.get()))
}

/// Runs `f` on `stack` (for the interpreter and the decoder, which recurse as deep as the
/// object nests). A panic in `f` comes back to the caller as a panic.
pub fn on_stack<R>(stack: &mut WalkStack, f: impl FnOnce() -> R) -> R {
    corosensei::on_stack(stack, f)
}

/// The handlers that were installed before ours (leaked boxes, swapped atomically so the
/// signal handler can read them at any moment).
static PREV_SEGV: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
static PREV_BUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
/// Serialises installations (two threads' first walks).
static INSTALL: Mutex<()> = Mutex::new(());

fn prev_of(sig: c_int) -> &'static AtomicPtr<libc::sigaction> {
    if sig == libc::SIGBUS {
        &PREV_BUS
    } else {
        &PREV_SEGV
    }
}

/// Makes sure our handler is the one installed for SIGSEGV and SIGBUS (two `sigaction`
/// reads when it is, the common case).
fn ensure_handlers() -> Result<(), GuardError> {
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        if current_handler(sig)? != handler as *const () as usize {
            let _serial = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
            if current_handler(sig)? != handler as *const () as usize {
                install(sig)?;
            }
        }
    }
    Ok(())
}

fn current_handler(sig: c_int) -> Result<usize, GuardError> {
    // SAFETY: a zeroed sigaction is a valid out-parameter; reading the current action only.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::sigaction(sig, ptr::null(), &mut cur) } != 0 {
        return Err(GuardError::Handler {
            signal: sig,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(cur.sa_sigaction)
}

fn install(sig: c_int) -> Result<(), GuardError> {
    // SAFETY: a zeroed sigaction is valid; `handler` has the SA_SIGINFO signature and is
    // async-signal-safe (thread-local reads, register edits, and chaining).
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler as *const () as usize;
        // SA_ONSTACK: a thread with an alternate signal stack keeps using it.
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        let old = Box::into_raw(Box::new(std::mem::zeroed::<libc::sigaction>()));
        if libc::sigaction(sig, &act, old) != 0 {
            drop(Box::from_raw(old));
            return Err(GuardError::Handler {
                signal: sig,
                source: std::io::Error::last_os_error(),
            });
        }
        // The previous box is leaked on purpose: a handler running on another thread may
        // still be reading it.
        prev_of(sig).store(old, Ordering::Release);
    }
    Ok(())
}

extern "C" fn handler(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let active = ACTIVE.get();
    if let Some(a) = active
        && !ctx.is_null()
    {
        // SAFETY: with SA_SIGINFO, `ctx` is the interrupted thread's ucontext_t.
        let uc = unsafe { &mut *ctx.cast::<libc::ucontext_t>() };
        let gregs = &mut uc.uc_mcontext.gregs;
        let rip = gregs[libc::REG_RIP as usize] as usize;
        let rsp = gregs[libc::REG_RSP as usize] as usize;
        if (a.code_start..a.code_end).contains(&rip) && a.trap.stack_ptr_in_bounds(rsp) {
            ACTIVE.set(None);
            // SAFETY: `info` is the kernel's siginfo for this synchronous fault.
            FAULT_ADDR.set(unsafe { (*info).si_addr() } as usize);
            // SAFETY: the fault is in generated walker code running on this coroutine's
            // stack (checked just above); that code writes memory only through raw stores
            // the compiler of the Rust caller cannot see, as corosensei requires, and we
            // update the interrupted context exactly as the returned registers say.
            let regs = unsafe { a.trap.setup_trap_handler(|| STATUS_FAULT) };
            gregs[libc::REG_RIP as usize] = regs.rip as i64;
            gregs[libc::REG_RSP as usize] = regs.rsp as i64;
            gregs[libc::REG_RBP as usize] = regs.rbp as i64;
            gregs[libc::REG_RDI as usize] = regs.rdi as i64;
            gregs[libc::REG_RSI as usize] = regs.rsi as i64;
            return;
        }
    }
    // SAFETY: forwarding the signal exactly as the kernel delivered it to us.
    unsafe { chain(sig, info, ctx) }
}

/// Passes a signal that is not ours to the handler installed before ours, or lets the
/// default action happen.
unsafe fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let prev = prev_of(sig).load(Ordering::Acquire);
    // SAFETY: a leaked box stored by `install`, never freed.
    let prev = (!prev.is_null()).then(|| unsafe { &*prev });
    let action = prev.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    if action == libc::SIG_DFL || action == libc::SIG_IGN {
        // Back to the default and let it happen: a fault re-executes the faulting
        // instruction on return; a signal sent by kill() (si_code <= 0) is raised again and
        // delivered when we return.
        // SAFETY: sigaction and raise are async-signal-safe; a zeroed sigaction is SIG_DFL.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, ptr::null_mut());
            if info.is_null() || (*info).si_code <= 0 {
                libc::raise(sig);
            }
        }
        return;
    }
    let siginfo = prev.is_some_and(|p| p.sa_flags & libc::SA_SIGINFO != 0);
    // SAFETY: the previous handler was installed with this signature (SA_SIGINFO decides
    // which); calling it from our handler is what it would have been called as.
    unsafe {
        if siginfo {
            let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                std::mem::transmute(action);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(c_int) = std::mem::transmute(action);
            f(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use oi_trace::containers::string::StringLayout;
    use oi_trace::jit::{self, SCRATCH_BYTES, STATUS_DONE};
    use oi_trace::plan::{Node, Op, Plan};

    use super::*;

    /// A plan of one `std::string`-shaped root (pointer, length, capacity).
    fn string_walker() -> LocalWalker {
        let mut plan = Plan::default();
        plan.nodes.push(Node {
            name: "a0".into(),
            type_names: vec!["string".into()],
            static_size: 32,
            is_primitive: false,
            op: Op::String(StringLayout {
                ptr_off: 0,
                len_off: 8,
                cap_off: 16,
                char_size: 1,
                size: 32,
            }),
            dynamic: false,
            readable: "std::string".into(),
            value: None,
            opaque_union: false,
        });
        plan.compute_dynamic();
        LocalWalker::compile(&plan, &[0]).expect("compile")
    }

    fn walk(
        w: &LocalWalker,
        stack: &mut WalkStack,
        scratch: &mut [u64],
        addr: u64,
    ) -> (u64, usize, Vec<u8>) {
        let mut out = vec![0u8; 512];
        let mut frame = WalkFrame {
            out: out.as_mut_ptr() as u64,
            out_len: 512,
            scratch: scratch.as_mut_ptr() as u64,
            scratch_len: SCRATCH_BYTES,
            nargs: 1,
            stack_len: jit::RECOMMENDED_STACK,
            ..Default::default()
        };
        frame.args[0] = addr;
        let (status, fault) = run_walker(stack, w, &mut frame).expect("run");
        out.truncate(frame.out_used as usize);
        (status, fault, out)
    }

    #[test]
    fn a_faulting_walk_returns_and_the_next_one_runs() {
        let w = string_walker();
        let mut stack = WalkStack::new(8 << 20).expect("stack");
        let mut scratch = vec![0u64; (SCRATCH_BYTES / 8) as usize];
        // A heap string of 40 characters (its pointer is outside the object).
        let obj: [u64; 4] = [0x1000, 40, 40, 0];
        let good = obj.as_ptr() as u64;
        let (s, _, out) = walk(&w, &mut stack, &mut scratch, good);
        assert_eq!(
            (s, out),
            (STATUS_DONE, vec![2, 0, 0, 0, 0, 0, 0, 0, 40, 40])
        );
        // An address where nothing is mapped: the first load faults, the walk returns.
        // SAFETY: mapping and unmapping a fresh page to get an address nothing is at.
        let hole = unsafe {
            let p = libc::mmap(
                ptr::null_mut(),
                4096,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            libc::munmap(p, 4096);
            p as u64
        };
        let (s, fault, _) = walk(&w, &mut stack, &mut scratch, hole + 8);
        assert_eq!(s, STATUS_FAULT);
        assert!((hole..hole + 4096).contains(&(fault as u64)), "{fault:#x}");
        // Disarmed after the fault, armed again for the next walk.
        assert!(ACTIVE.get().is_none());
        let (s, _, out) = walk(&w, &mut stack, &mut scratch, good);
        assert_eq!(
            (s, out),
            (STATUS_DONE, vec![2, 0, 0, 0, 0, 0, 0, 0, 40, 40])
        );
        // Deep work runs on the walk stack too.
        let depth = on_stack(&mut stack, || {
            fn down(n: u32) -> u32 {
                let pad = std::hint::black_box([n; 64]);
                if n == 0 { pad[0] } else { down(n - 1) + 1 }
            }
            down(10_000)
        });
        assert_eq!(depth, 10_000);
    }
}
