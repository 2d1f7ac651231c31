//! Acting inside a stopped thread: its registers, its memory, and system calls made on its
//! behalf ("remote syscalls"), which is how segments are mapped into a process without
//! loading anything into it.
//!
//! A remote syscall borrows a `syscall` instruction that already exists in the target's
//! executable memory and runs it under PTRACE_SYSCALL: nothing of the target is written.
//! Registers are restored exactly afterwards, including the state the kernel needs to restart
//! a system call the thread was blocked in.

use std::{
    io::{IoSlice, IoSliceMut},
    time::Duration,
};

use nix::{
    errno::Errno,
    sys::{
        ptrace,
        signal::Signal,
        uio::{RemoteIoVec, process_vm_readv, process_vm_writev},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::Pid,
};

pub type Regs = libc::user_regs_struct;

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("the target thread {0} exited")]
    Gone(i32),
    /// The process replaced its program meanwhile (execve); the thread runs the new one.
    #[error("the target executed a new program (thread {0})")]
    Exec(i32),
    #[error("ptrace on thread {tid}: {what}: {errno}")]
    Ptrace {
        tid: i32,
        what: &'static str,
        errno: Errno,
    },
    #[error("{what} in the target failed: {errno}")]
    Syscall { what: &'static str, errno: Errno },
    #[error("no syscall instruction found in the target's code")]
    NoSyscallInstruction,
    #[error("target memory at {addr:#x}: {errno}")]
    Memory { addr: u64, errno: Errno },
    #[error("the walk's output needs {needed} bytes, more than the {limit}-byte buffer")]
    OutputTooLarge { needed: u64, limit: u64 },
    #[error("thread {tid} stopped unexpectedly ({status}) during {what}")]
    Unexpected {
        tid: i32,
        what: &'static str,
        status: String,
    },
}

fn ptrace_err(tid: i32, what: &'static str) -> impl Fn(Errno) -> RemoteError {
    move |errno| {
        if errno == Errno::ESRCH {
            RemoteError::Gone(tid)
        } else {
            RemoteError::Ptrace { tid, what, errno }
        }
    }
}

pub fn get_regs(tid: i32) -> Result<Regs, RemoteError> {
    ptrace::getregs(Pid::from_raw(tid)).map_err(ptrace_err(tid, "GETREGS"))
}

pub fn set_regs(tid: i32, regs: &Regs) -> Result<(), RemoteError> {
    ptrace::setregs(Pid::from_raw(tid), *regs).map_err(ptrace_err(tid, "SETREGS"))
}

/// Sets the x87/SSE state from a 512-byte FXSAVE image (as the walk stub saves it).
pub fn set_fpregs_image(tid: i32, image: &[u8; 512]) -> Result<(), RemoteError> {
    const _: () = assert!(size_of::<libc::user_fpregs_struct>() == 512);
    // SAFETY: user_fpregs_struct is the FXSAVE layout, 512 bytes of plain integers: any
    // bytes are a valid value, and read_unaligned needs no alignment of the source.
    let fp: libc::user_fpregs_struct = unsafe { std::ptr::read_unaligned(image.as_ptr().cast()) };
    // SAFETY: PTRACE_SETFPREGS reads one user_fpregs_struct from the pointer.
    let rc = unsafe { libc::ptrace(libc::PTRACE_SETFPREGS, tid, 0usize, &fp as *const _) };
    if rc < 0 {
        return Err(ptrace_err(tid, "SETFPREGS")(Errno::last()));
    }
    Ok(())
}

/// The low eightbyte of each of xmm0–xmm15 of a stopped thread (float and double arguments).
pub fn xmm_low_halves(tid: i32) -> Result<[u64; 16], RemoteError> {
    // SAFETY: an all-zero user_fpregs_struct (plain integers) is a valid value.
    let mut fp: libc::user_fpregs_struct = unsafe { std::mem::zeroed() };
    // SAFETY: PTRACE_GETFPREGS writes one user_fpregs_struct to the pointer, which we own.
    let rc = unsafe { libc::ptrace(libc::PTRACE_GETFPREGS, tid, 0usize, &mut fp as *mut _) };
    if rc < 0 {
        return Err(ptrace_err(tid, "GETFPREGS")(Errno::last()));
    }
    // Each xmm register is four 32-bit words of xmm_space, lowest first.
    Ok(std::array::from_fn(|i| {
        u64::from(fp.xmm_space[4 * i]) | u64::from(fp.xmm_space[4 * i + 1]) << 32
    }))
}

/// Writes several pieces of target memory with one system call (in order; all or error).
pub fn write_parts(pid: i32, parts: &[(u64, &[u8])]) -> Result<(), RemoteError> {
    let local: Vec<IoSlice<'_>> = parts.iter().map(|(_, b)| IoSlice::new(b)).collect();
    let remote = remote_iovecs(parts);
    complete(
        process_vm_writev(Pid::from_raw(pid), &local, &remote),
        parts,
    )
}

/// Reads several pieces of target memory with one system call (all or error).
pub fn read_parts(pid: i32, parts: &mut [(u64, &mut [u8])]) -> Result<(), RemoteError> {
    let remote = remote_iovecs(parts);
    let moved = {
        let mut local: Vec<IoSliceMut<'_>> =
            parts.iter_mut().map(|(_, b)| IoSliceMut::new(b)).collect();
        process_vm_readv(Pid::from_raw(pid), &mut local, &remote)
    };
    complete(moved, parts)
}

pub fn write_memory(pid: i32, addr: u64, bytes: &[u8]) -> Result<(), RemoteError> {
    write_parts(pid, &[(addr, bytes)])
}

pub fn read_memory(pid: i32, addr: u64, buf: &mut [u8]) -> Result<(), RemoteError> {
    read_parts(pid, &mut [(addr, buf)])
}

/// The target's side of a transfer of `parts`.
fn remote_iovecs<B: AsRef<[u8]>>(parts: &[(u64, B)]) -> Vec<RemoteIoVec> {
    parts
        .iter()
        .map(|(addr, b)| RemoteIoVec {
            base: *addr as usize,
            len: b.as_ref().len(),
        })
        .collect()
}

/// A transfer of `parts` that moved `moved` bytes: all of them, or an error at the first
/// part's address (a short transfer is EFAULT: part of the range is not mapped).
fn complete<B: AsRef<[u8]>>(
    moved: nix::Result<usize>,
    parts: &[(u64, B)],
) -> Result<(), RemoteError> {
    let total: usize = parts.iter().map(|(_, b)| b.as_ref().len()).sum();
    let addr = parts.first().map_or(0, |p| p.0);
    match moved {
        Ok(n) if n == total => Ok(()),
        Ok(_) => Err(RemoteError::Memory {
            addr,
            errno: Errno::EFAULT,
        }),
        Err(errno) => Err(RemoteError::Memory { addr, errno }),
    }
}

/// Address of a `syscall` instruction (0f 05) in the target's executable memory.
pub fn find_syscall_instruction(pid: i32) -> Result<u64, RemoteError> {
    let maps =
        std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|_| RemoteError::Gone(pid))?;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        // The target's own code only (files and the vDSO): an anonymous executable mapping
        // may be a leftover segment of ours, whose `syscall` falls into a stale restore.
        let path = fields.nth(3).unwrap_or("");
        if perms.as_bytes().get(2) != Some(&b'x') || !(path.starts_with('/') || path == "[vdso]") {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        let mut chunk = vec![0u8; 64 * 1024];
        let mut addr = start;
        while addr < end {
            let len = chunk.len().min((end - addr) as usize);
            if read_memory(pid, addr, &mut chunk[..len]).is_err() {
                break;
            }
            if let Some(i) = chunk[..len].windows(2).position(|w| w == [0x0f, 0x05]) {
                return Ok(addr + i as u64);
            }
            // Overlap by one byte so a pair split across chunks is still found.
            addr += len.saturating_sub(1).max(1) as u64;
        }
    }
    Err(RemoteError::NoSyscallInstruction)
}

/// Signals that arrived for a thread while we held it, to be delivered again afterwards.
#[derive(Debug, Default)]
pub struct HeldSignals(pub Vec<Signal>);

impl HeldSignals {
    /// Re-sends the held signals to `tid`, in the order they arrived.
    pub fn redeliver(&mut self, tgid: i32, tid: i32) {
        for sig in self.0.drain(..) {
            // SAFETY: tgkill takes plain integers.
            unsafe {
                libc::syscall(libc::SYS_tgkill, tgid, tid, sig as i32);
            }
        }
    }
}

/// Waits for the next stop of `tid` that matters to a remote operation; other signals are
/// held for later delivery and the thread is continued with `resume`.
pub fn wait_for(
    tid: i32,
    held: &mut HeldSignals,
    resume: fn(Pid, Option<Signal>) -> nix::Result<()>,
) -> Result<WaitStatus, RemoteError> {
    loop {
        let status = match waitpid(
            Pid::from_raw(tid),
            Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG),
        ) {
            Ok(WaitStatus::StillAlive) => {
                // Killed meanwhile: a dead thread-group leader is reported only once the other
                // threads are reaped, so a blocking wait for it alone would never end.
                if !super::procfs::is_alive(tid) {
                    return Err(RemoteError::Gone(tid));
                }
                wait_sigchld(Duration::from_millis(1));
                continue;
            }
            Ok(status) => status,
            Err(_) => return Err(RemoteError::Gone(tid)),
        };
        match status {
            WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                return Err(RemoteError::Gone(tid));
            }
            WaitStatus::PtraceEvent(pid, _, ev) if ev == libc::PTRACE_EVENT_EXEC => {
                // Nothing of ours or of the old program is left to restore: let it run.
                let _ = ptrace::cont(pid, None);
                return Err(RemoteError::Exec(tid));
            }
            WaitStatus::Stopped(pid, sig)
                if !matches!(
                    sig,
                    Signal::SIGSEGV
                        | Signal::SIGBUS
                        | Signal::SIGILL
                        | Signal::SIGFPE
                        | Signal::SIGTRAP
                ) =>
            {
                held.0.push(sig);
                resume(pid, None).map_err(ptrace_err(tid, "resume"))?;
            }
            WaitStatus::PtraceEvent(pid, sig, ev) if ev == libc::PTRACE_EVENT_STOP => {
                // A group-stop began meanwhile: keep the stop signal for afterwards. With
                // SIGTRAP it is an interrupt of ours that was still queued (a release sends one
                // to every thread, and again to one it lets past a signal): it means nothing
                // here, and a remote syscall met by it would otherwise fail and leave our
                // segments mapped.
                if sig != Signal::SIGTRAP {
                    held.0.push(sig);
                }
                resume(pid, None).map_err(ptrace_err(tid, "resume"))?;
            }
            other => return Ok(other),
        }
    }
}

pub fn ptrace_syscall(pid: Pid, sig: Option<Signal>) -> nix::Result<()> {
    ptrace::syscall(pid, sig)
}

/// Runs one system call in `tid`, which must be in a ptrace-stop with registers `saved`.
/// Leaves the thread stopped with `saved` restored (restart state adjusted, see
/// [`restorable`]); returns the raw result.
pub fn syscall(
    tid: i32,
    saved: &Regs,
    insn: u64,
    nr: i64,
    args: [u64; 6],
    held: &mut HeldSignals,
) -> Result<i64, RemoteError> {
    let mut regs = *saved;
    regs.rip = insn;
    regs.rax = nr as u64;
    // -1: "not in a syscall", so the kernel applies no restart logic to our registers.
    regs.orig_rax = u64::MAX;
    (regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9) =
        (args[0], args[1], args[2], args[3], args[4], args[5]);
    set_regs(tid, &regs)?;
    let pid = Pid::from_raw(tid);
    // Entry stop, then exit stop.
    for _ in 0..2 {
        ptrace::syscall(pid, None).map_err(ptrace_err(tid, "SYSCALL"))?;
        match wait_for(tid, held, ptrace_syscall)? {
            WaitStatus::PtraceSyscall(_) => {}
            other => {
                let _ = set_regs(tid, &restorable(saved));
                return Err(RemoteError::Unexpected {
                    tid,
                    what: "a remote syscall",
                    status: format!("{other:?}"),
                });
            }
        }
    }
    let result = get_regs(tid)?.rax as i64;
    set_regs(tid, &restorable(saved))?;
    Ok(result)
}

const ERESTARTSYS: i64 = -512;
const ERESTARTNOINTR: i64 = -513;
const ERESTARTNOHAND: i64 = -514;
const ERESTART_RESTARTBLOCK: i64 = -516;

/// The registers to put back into a thread we interrupted. If it was stopped inside a system
/// call that the kernel would restart, the restart is done here, as the kernel does when no
/// signal handler runs: back up over the `syscall` instruction and re-issue the call. (After
/// we run code in the thread, the kernel no longer knows it was in a syscall.)
pub fn restorable(saved: &Regs) -> Regs {
    let mut regs = *saved;
    if saved.orig_rax as i64 >= 0 {
        match saved.rax as i64 {
            ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => {
                regs.rax = saved.orig_rax;
                regs.rip -= 2;
                regs.orig_rax = u64::MAX;
            }
            ERESTART_RESTARTBLOCK => {
                regs.rax = libc::SYS_restart_syscall as u64;
                regs.rip -= 2;
                regs.orig_rax = u64::MAX;
            }
            _ => {}
        }
    }
    regs
}

/// mmap of anonymous private memory in the target; returns the address.
/// `at`: the address wanted (with MAP_FIXED_NOREPLACE among `extra_flags`), or 0.
#[allow(clippy::too_many_arguments)]
pub fn mmap(
    tid: i32,
    saved: &Regs,
    insn: u64,
    at: u64,
    len: u64,
    prot: i32,
    extra_flags: i32,
    held: &mut HeldSignals,
) -> Result<u64, RemoteError> {
    let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags) as u64;
    let args = [at, len, prot as u64, flags, u64::MAX, 0];
    let r = syscall(tid, saved, insn, libc::SYS_mmap, args, held)?;
    check("mmap", r).map(|v| v as u64)
}

pub fn mprotect(
    tid: i32,
    saved: &Regs,
    insn: u64,
    addr: u64,
    len: u64,
    prot: i32,
    held: &mut HeldSignals,
) -> Result<(), RemoteError> {
    let r = syscall(
        tid,
        saved,
        insn,
        libc::SYS_mprotect,
        [addr, len, prot as u64, 0, 0, 0],
        held,
    )?;
    check("mprotect", r).map(drop)
}

pub fn munmap(
    tid: i32,
    saved: &Regs,
    insn: u64,
    addr: u64,
    len: u64,
    held: &mut HeldSignals,
) -> Result<(), RemoteError> {
    let r = syscall(
        tid,
        saved,
        insn,
        libc::SYS_munmap,
        [addr, len, 0, 0, 0, 0],
        held,
    )?;
    check("munmap", r).map(drop)
}

/// A raw system call result as a value, or its errno as an error naming `what`.
pub fn check(what: &'static str, r: i64) -> Result<i64, RemoteError> {
    if (-4095..0).contains(&r) {
        Err(RemoteError::Syscall {
            what,
            errno: Errno::from_raw(-r as i32),
        })
    } else {
        Ok(r)
    }
}

/// Sleeps until a SIGCHLD (a ptrace stop somewhere), `timeout`, or 1 ms. SIGCHLD is blocked
/// by the session and read through its signalfd, so it wakes us at once; taking it here is
/// harmless, the session polls every thread's status anyway. Where it is not blocked (a
/// library caller) it may never be seen, hence the 1 ms bound.
pub fn wait_sigchld(timeout: Duration) {
    let timeout = timeout.clamp(Duration::from_micros(10), Duration::from_millis(1));
    // SAFETY: plain libc calls on stack values we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: timeout.subsec_nanos() as i64,
        };
        libc::sigtimedwait(&set, std::ptr::null_mut(), &ts);
    }
}
