//! The fault handler of walks and what keeps it in front: installing it for SIGSEGV and
//! SIGBUS (`ensure_handlers`), recognising a fault of this thread's walk and making the walk
//! return [`STATUS_FAULT`] (`recover`), chaining every other signal to the handler installed
//! before ours, and the interposed `sigaction`/`signal` that note a change of those actions
//! (see the parent module's doc for why each is sound).
//!
//! Never touches a signal other than SIGSEGV and SIGBUS, never changes what the program's
//! own `sigaction`/`signal` calls do.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use oi_trace::jit::frame_chain::frame_chain;

use super::{
    GuardError, LEAF_ENTRIES, PerThread, STATUS_FAULT, THREAD, in_walker_code,
    oil_walk_direct_resume, oil_walk_direct_return,
};

/// The handlers that were installed before ours (leaked boxes, swapped atomically so the
/// signal handler can read them at any moment).
static PREV_SEGV: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
static PREV_BUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
/// Serialises installations (two threads' first walks).
static INSTALL: Mutex<()> = Mutex::new(());
/// The action of SIGSEGV or SIGBUS may have changed since our handler was last seen in
/// front (set by the interposed `sigaction`/`signal` and by `chain`; true until the first
/// installation).
pub(super) static MAYBE_REPLACED: AtomicBool = AtomicBool::new(true);

/// Walks of a thread between two reads of the installed actions (for changes made without
/// libc's `sigaction`/`signal`).
pub const RECHECK_EVERY: usize = 4096;

fn prev_of(sig: c_int) -> &'static AtomicPtr<libc::sigaction> {
    if sig == libc::SIGBUS {
        &PREV_BUS
    } else {
        &PREV_SEGV
    }
}

// libc's own entry points, under names that are not interposed (glibc exports both).
unsafe extern "C" {
    fn __sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int;
    fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t;
}

/// `sigaction(2)` as libc does it, and a note that SIGSEGV's or SIGBUS's action may have
/// changed (see the module doc).
///
/// # Safety
/// As libc's `sigaction`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let r = unsafe { __sigaction(sig, act, old) };
    if !act.is_null() && (sig == libc::SIGSEGV || sig == libc::SIGBUS) {
        MAYBE_REPLACED.store(true, Ordering::Release);
    }
    r
}

/// `signal(2)` as libc does it (glibc's BSD semantics), noting a change as [`sigaction`].
///
/// # Safety
/// As libc's `signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: the caller's arguments, passed on unchanged.
    let r = unsafe { bsd_signal(sig, handler) };
    if sig == libc::SIGSEGV || sig == libc::SIGBUS {
        MAYBE_REPLACED.store(true, Ordering::Release);
    }
    r
}

/// Makes sure our handler is the one installed for SIGSEGV and SIGBUS: reads the installed
/// actions (two system calls) and installs ours where it is not. Walks call it only after a
/// `sigaction`/`signal` call on them, at a thread's first walk, and every [`RECHECK_EVERY`]
/// walks of a thread (the countdown in [`ThreadState`] or in the coroutine path's caller).
#[cold]
pub(super) fn ensure_handlers() -> Result<(), GuardError> {
    {
        let _serial = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
        // Cleared before reading: a change made while we check raises it again.
        MAYBE_REPLACED.store(false, Ordering::Release);
        for sig in [libc::SIGSEGV, libc::SIGBUS] {
            if current_handler(sig)
                .inspect_err(|_| MAYBE_REPLACED.store(true, Ordering::Release))?
                != handler as *const () as usize
            {
                install(sig).inspect_err(|_| MAYBE_REPLACED.store(true, Ordering::Release))?;
            }
        }
    }
    Ok(())
}

fn current_handler(sig: c_int) -> Result<usize, GuardError> {
    // SAFETY: a zeroed sigaction is a valid out-parameter; reading the current action only.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { __sigaction(sig, ptr::null(), &mut cur) } != 0 {
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
        if __sigaction(sig, &act, old) != 0 {
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
    // Only a fault the walk itself caused (the kernel's si_code > 0), never one sent by
    // kill() or sigqueue() while it runs.
    // SAFETY: `info` is the kernel's siginfo (SA_SIGINFO), or null.
    let synchronous = !info.is_null() && unsafe { (*info).si_code } > 0;
    if synchronous && !ctx.is_null() && THREAD.with(|t| recover(t, info, ctx)) {
        return;
    }
    // SAFETY: forwarding the signal exactly as the kernel delivered it to us.
    unsafe { chain(sig, info, ctx) }
}

/// Makes the interrupted walk of this thread return [`STATUS_FAULT`] if the fault is its own
/// (the instruction in walker code, and, for a direct walk, a chain of walker frames up to
/// the trampoline; for a walk on a stack of its own, the stack pointer on that stack); false
/// if not.
fn recover(t: &PerThread, info: *mut libc::siginfo_t, ctx: *mut c_void) -> bool {
    // SAFETY: with SA_SIGINFO, `ctx` is the interrupted thread's ucontext_t.
    let uc = unsafe { &mut *ctx.cast::<libc::ucontext_t>() };
    let gregs = &mut uc.uc_mcontext.gregs;
    let rip = gregs[libc::REG_RIP as usize] as usize;
    let rsp = gregs[libc::REG_RSP as usize] as usize;
    let rbp = gregs[libc::REG_RBP as usize] as usize;
    if in_walker_code(rip)
        && let Some(resume_sp) = direct_walk_frame(rsp, rbp)
    {
        // SAFETY: `info` is the kernel's siginfo for this synchronous fault.
        let addr = unsafe { (*info).si_addr() } as usize;
        // The fault is in generated walker code entered by the trampoline, whose call left
        // the stack pointer `resume_sp` (checked just above): resume in its return path,
        // which restores the caller's registers and returns (STATUS_FAULT, addr).
        gregs[libc::REG_RSP as usize] = resume_sp as i64;
        gregs[libc::REG_RIP as usize] = oil_walk_direct_resume as *const () as i64;
        gregs[libc::REG_RAX as usize] = STATUS_FAULT as i64;
        gregs[libc::REG_RDX as usize] = addr as i64;
        return true;
    }
    if let Some(a) = t.active.get()
        && (a.code_start..a.code_end).contains(&rip)
        && a.trap.stack_ptr_in_bounds(rsp)
    {
        t.active.set(None);
        // SAFETY: `info` is the kernel's siginfo for this synchronous fault.
        t.fault_addr.set(unsafe { (*info).si_addr() } as usize);
        // SAFETY: the fault is in generated walker code running on this coroutine's stack
        // (checked just above); that code writes memory only through raw stores the
        // compiler of the Rust caller cannot see, as corosensei requires, and we update the
        // interrupted context exactly as the returned registers say.
        let regs = unsafe { a.trap.setup_trap_handler(|| STATUS_FAULT) };
        gregs[libc::REG_RIP as usize] = regs.rip as i64;
        gregs[libc::REG_RSP as usize] = regs.rsp as i64;
        gregs[libc::REG_RBP as usize] = regs.rbp as i64;
        gregs[libc::REG_RDI as usize] = regs.rdi as i64;
        gregs[libc::REG_RSI as usize] = regs.rsi as i64;
        return true;
    }
    if LEAF_ENTRIES.contains(rip) && rbp >= rsp && rbp.is_multiple_of(8) {
        // A leaf entry called directly (`oil.h`'s steady state): the fault is in its body
        // (only the body reads the object; its prologue and epilogue touch only its own
        // frame, on a stack checked to have room before the call), where `rbp` is its frame
        // pointer. It saves no callee-saved register (`LocalWalker::leaf_entry`), so every
        // one still holds its caller's value: returning from its frame, as its epilogue
        // would, with (STATUS_FAULT, addr) in rax:rdx, is a return of the call.
        // SAFETY: `rbp` is the entry's frame pointer on this thread's stack, at or above
        // the interrupted stack pointer: its two words (the caller's rbp, the return
        // address) are live stack.
        let (caller_fp, ret) = unsafe { (*(rbp as *const usize), *((rbp + 8) as *const usize)) };
        // SAFETY: `info` is the kernel's siginfo for this synchronous fault.
        let addr = unsafe { (*info).si_addr() } as usize;
        gregs[libc::REG_RSP as usize] = (rbp + 16) as i64;
        gregs[libc::REG_RBP as usize] = caller_fp as i64;
        gregs[libc::REG_RIP as usize] = ret as i64;
        gregs[libc::REG_RAX as usize] = STATUS_FAULT as i64;
        gregs[libc::REG_RDX as usize] = addr as i64;
        return true;
    }
    false
}

/// The stack pointer the trampoline's call left, if the walker frame at `rbp` (the
/// interrupted frame pointer of walker code, `rsp` its stack pointer) was entered by it: the
/// frame chain is followed up through walker frames only ([`frame_chain`]), to the entry's
/// frame, whose return address is `oil_walk_direct_return`. Needs no record of the walk:
/// the steady state stores nothing for the handler.
fn direct_walk_frame(rsp: usize, rbp: usize) -> Option<usize> {
    let back = oil_walk_direct_return as *const () as usize;
    // SAFETY: called for a fault whose instruction is in walker code (`recover` checks it
    // first), with that thread's interrupted registers: what `frame_chain` requires.
    unsafe { frame_chain(rsp, rbp, in_walker_code, |ret| ret == back) }
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
            __sigaction(sig, &dfl, ptr::null_mut());
            MAYBE_REPLACED.store(true, Ordering::Release);
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
