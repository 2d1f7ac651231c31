//! ptrace bookkeeping for every thread of every process we hold.
//!
//! Threads are seized (not attached: nothing stops) before any probe is armed, new threads are
//! followed through PTRACE_O_TRACECLONE, and every ptrace-stop that is not one of our samples
//! is answered at once the way the kernel would have without us: signals are re-delivered,
//! group-stops are kept with PTRACE_LISTEN. `release` detaches so that no SIGSTOP of ours can
//! reach a thread after we are gone.

use std::{
    collections::{HashMap, HashSet},
    fs,
    thread::sleep,
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    sys::{
        ptrace::{self, Options},
        signal::Signal,
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::Pid,
};

use super::procfs::{self, ProcessInfo};
use crate::error::{Error, Result};

/// A ptrace-stop or exit that the session must decide about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// `tid` is in a signal-delivery-stop for `signal`; it stays stopped until `resume`.
    Signal { tid: i32, tgid: i32, signal: Signal },
    /// The last thread of `tgid` is gone.
    ProcessExited { tgid: i32 },
    /// `tgid` replaced its program (execve): the old mappings are gone, our segments and the
    /// probed file's text with them. Its threads are still held (the survivor runs on).
    Exec { tgid: i32 },
}

#[derive(Default)]
pub struct Tracer {
    /// tid → tgid of every thread we trace.
    threads: HashMap<i32, i32>,
    /// Processes seized, with their threads' count kept implicitly in `threads`.
    processes: HashSet<i32>,
}

// TRACESYSGOOD: syscall stops of remote syscalls and walks are told apart from SIGTRAPs.
// (No TRACEEXIT: with it, an exec during a sample can hang oi-trace, the case of
// races.rs::target_execs_while_a_sample_is_in_flight.)
const OPTIONS: Options = Options::PTRACE_O_TRACECLONE
    .union(Options::PTRACE_O_TRACEEXEC)
    .union(Options::PTRACE_O_TRACESYSGOOD);
const SIGSTOP_BIT: u64 = 1 << (libc::SIGSTOP - 1);

impl Tracer {
    pub fn processes(&self) -> impl Iterator<Item = i32> + '_ {
        self.processes.iter().copied()
    }

    /// The threads of `tgid` we trace.
    pub fn threads_of(&self, tgid: i32) -> Vec<i32> {
        self.threads
            .iter()
            .filter(|&(_, &g)| g == tgid)
            .map(|(&t, _)| t)
            .collect()
    }

    pub fn holds(&self, tgid: i32) -> bool {
        self.processes.contains(&tgid)
    }

    /// Seizes every thread of `tgid`, looping until no thread appears that we do not hold
    /// (threads created meanwhile by a not-yet-seized thread are not followed by the kernel).
    pub fn seize(&mut self, tgid: i32) -> Result<()> {
        loop {
            let fresh: Vec<i32> = procfs::threads(tgid)
                .into_iter()
                .filter(|t| !self.threads.contains_key(t))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for tid in fresh {
                match ptrace::seize(Pid::from_raw(tid), OPTIONS) {
                    Ok(()) => {
                        self.threads.insert(tid, tgid);
                    }
                    // The thread exited between listing and seizing.
                    Err(Errno::ESRCH) => {}
                    Err(Errno::EPERM) => {
                        self.release(tgid);
                        return Err(match ProcessInfo::tracer_of(tgid) {
                            Some((pid, name)) => Error::input(format!(
                                "pid {tgid} is already traced by pid {pid} ({name})"
                            )),
                            None => Error::input(format!(
                                "not permitted to trace pid {tgid}: CAP_SYS_PTRACE is missing \
                                 or ptrace is restricted (kernel.yama.ptrace_scope)"
                            )),
                        });
                    }
                    Err(e) => {
                        self.release(tgid);
                        return Err(Error::internal(format!("ptrace seize of {tid}: {e}")));
                    }
                }
            }
        }
        if !self.threads.values().any(|&g| g == tgid) {
            return Err(Error::sample(format!(
                "pid {tgid} exited before it could be seized"
            )));
        }
        self.processes.insert(tgid);
        Ok(())
    }

    /// Collects all stops that are ready, answering the routine ones itself.
    pub fn poll(&mut self) -> Vec<Stop> {
        let mut stops = Vec::new();
        loop {
            let status = match waitpid(None, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(status) => status,
            };
            if let Some(stop) = self.handle(status) {
                stops.push(stop);
            }
        }
        stops
    }

    fn handle(&mut self, status: WaitStatus) -> Option<Stop> {
        match status {
            WaitStatus::Stopped(pid, signal) => {
                let tid = pid.as_raw();
                let tgid = self.tgid_of(tid)?;
                Some(Stop::Signal { tid, tgid, signal })
            }
            WaitStatus::PtraceEvent(pid, signal, event) => {
                let tid = pid.as_raw();
                let tgid = self.tgid_of(tid);
                if event == libc::PTRACE_EVENT_CLONE {
                    if let (Ok(new), Some(tgid)) = (ptrace::getevent(pid), tgid) {
                        self.threads.insert(new as i32, tgid);
                    }
                } else if event == libc::PTRACE_EVENT_EXEC {
                    // Other threads vanished in the exec; the survivor may have a new tid.
                    if let Some(tgid) = tgid {
                        self.threads.retain(|_, g| *g != tgid);
                        self.threads.insert(tgid, tgid);
                        let _ = ptrace::cont(pid, None);
                        return Some(Stop::Exec { tgid });
                    }
                } else if event == libc::PTRACE_EVENT_STOP && is_stop_signal(signal) {
                    // A group-stop: keep the thread stopped as it would be without us.
                    listen(tid);
                    return None;
                }
                let _ = ptrace::cont(pid, None);
                None
            }
            WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _) => {
                let tgid = self.threads.remove(&pid.as_raw())?;
                if !self.threads.values().any(|&g| g == tgid) && self.processes.remove(&tgid) {
                    return Some(Stop::ProcessExited { tgid });
                }
                None
            }
            _ => None,
        }
    }

    /// Tids seen stopping before their clone event arrived belong to a known process.
    fn tgid_of(&mut self, tid: i32) -> Option<i32> {
        if let Some(&tgid) = self.threads.get(&tid) {
            return Some(tgid);
        }
        let tgid = fs::read_to_string(format!("/proc/{tid}/status"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))?
            .trim()
            .parse()
            .ok()?;
        self.processes.contains(&tgid).then(|| {
            self.threads.insert(tid, tgid);
            tgid
        })
    }

    /// Brings thread `tid` (of a seized process) to a quiet ptrace-stop with an interrupt,
    /// delivering any signal that arrives first and following new threads; for a walk with
    /// no probe behind it (`--global`). Errors when the thread exits or execs meanwhile.
    pub fn stop_thread(&mut self, tid: i32) -> Result<()> {
        let pid = Pid::from_raw(tid);
        ptrace::interrupt(pid).map_err(|e| Error::sample(format!("interrupting {tid}: {e}")))?;
        self.wait_quiet_stop(tid)
    }

    /// After an interrupt of `tid`: waits for its quiet stop (see [`Self::stop_thread`]).
    fn wait_quiet_stop(&mut self, tid: i32) -> Result<()> {
        let pid = Pid::from_raw(tid);
        let gone = |this: &mut Self| {
            this.threads.remove(&tid);
            Err(Error::sample(format!("thread {tid} exited")))
        };
        // Without blocking: a dying process's leader reports nothing while its other threads
        // are still being torn down, and a blocking wait would never return.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match waitpid(pid, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => {
                    let alive = !matches!(procfs::state(tid), None | Some('Z' | 'X'));
                    if !alive || Instant::now() > deadline {
                        return gone(self);
                    }
                    sleep(Duration::from_micros(200));
                }
                Ok(WaitStatus::PtraceEvent(_, _, event)) if event == libc::PTRACE_EVENT_STOP => {
                    return Ok(());
                }
                Ok(WaitStatus::PtraceEvent(_, _, event)) => {
                    if event == libc::PTRACE_EVENT_CLONE
                        && let (Ok(new), Some(&tgid)) =
                            (ptrace::getevent(pid), self.threads.get(&tid))
                    {
                        self.threads.insert(new as i32, tgid);
                    }
                    if event == libc::PTRACE_EVENT_EXEC {
                        return Err(Error::sample(format!(
                            "thread {tid} executed a new program"
                        )));
                    }
                    let _ = ptrace::cont(pid, None);
                    let _ = ptrace::interrupt(pid);
                }
                // A signal on its way: delivered now, then the interrupt's stop comes.
                Ok(WaitStatus::Stopped(_, signal)) => {
                    let _ = ptrace::cont(pid, Some(signal));
                    let _ = ptrace::interrupt(pid);
                }
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_) => {
                    return gone(self);
                }
                Ok(_) => {}
            }
        }
    }

    /// A thread of `tgid` brought to a quiet stop in user code, not inside a system call (a
    /// walk cannot start there: the stub could not restart the call): its threads are
    /// interrupted in turn, and let go again when caught in a call, until one is caught
    /// outside one or `budget` runs out (`None`: every thread sits in system calls).
    pub fn stop_outside_syscall(&mut self, tgid: i32, budget: Duration) -> Result<Option<i32>> {
        let deadline = Instant::now() + budget;
        let mut round: u64 = 0;
        loop {
            let mine = self.threads_of(tgid);
            if mine.is_empty() {
                return Err(Error::sample(format!("pid {tgid} exited")));
            }
            for tid in mine {
                if self.stop_thread(tid).is_err() {
                    continue;
                }
                match super::remote::get_regs(tid) {
                    Ok(regs) if regs.orig_rax == u64::MAX => return Ok(Some(tid)),
                    _ => {
                        let _ = ptrace::cont(Pid::from_raw(tid), None);
                    }
                }
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            // A pause of varying length, so that interrupts do not keep landing in the same
            // phase of a loop that mostly sleeps.
            round += 1;
            sleep(Duration::from_micros(50 + (round * 7919) % 450));
        }
    }

    /// Every thread of `tgid` in a quiet ptrace-stop (`--global --stop-all`): a consistent
    /// snapshot. Threads that exit meanwhile are forgotten.
    /// Every thread is interrupted before the first is waited for: on a busy machine a thread
    /// may wait a scheduler slice to take its stop, and those waits overlap.
    pub fn stop_all(&mut self, tgid: i32) -> Result<()> {
        self.seize(tgid)?;
        let mine = self.threads_of(tgid);
        let mut interrupted = Vec::with_capacity(mine.len());
        for tid in mine {
            match ptrace::interrupt(Pid::from_raw(tid)) {
                Ok(()) => interrupted.push(tid),
                Err(_) => {
                    self.threads.remove(&tid);
                }
            }
        }
        let mut stopped = 0;
        for tid in interrupted {
            if self.wait_quiet_stop(tid).is_ok() {
                stopped += 1;
            }
        }
        if stopped == 0 {
            return Err(Error::sample(format!("pid {tgid} exited")));
        }
        Ok(())
    }

    /// Lets every thread of `tgid` run on from its quiet stop (after [`Self::stop_all`]).
    pub fn resume_all(&mut self, tgid: i32) {
        for tid in self.threads_of(tgid) {
            let _ = ptrace::cont(Pid::from_raw(tid), None);
        }
    }

    /// Lets a thread in a signal-delivery-stop go on, delivering `signal` (None suppresses).
    pub fn resume(&self, tid: i32, signal: Option<Signal>) {
        // ESRCH: the thread was killed while stopped; nothing left to resume.
        let _ = ptrace::cont(Pid::from_raw(tid), signal);
    }

    /// Detaches every thread of `tgid`, leaving each running. `is_ours(tid)` says whether a
    /// SIGSTOP pending on that thread was sent by our trigger (then it is swallowed, never
    /// delivered: an untraced SIGSTOP would stop the whole process). `cleanup(tid)` runs once,
    /// on the first thread found in a quiet ptrace-stop (a thread in a signal's stop is
    /// brought to one first), before it is detached: the moment to undo what we did to the
    /// process (unmap our segments).
    pub fn release_with(
        &mut self,
        tgid: i32,
        is_ours: &dyn Fn(i32) -> bool,
        cleanup: &mut dyn FnMut(i32),
    ) {
        let mut cleanup = Some(cleanup);
        let started = Instant::now();
        // Threads answer an interrupt within microseconds; a loaded machine may take longer.
        // While our segments are still mapped, wait longer for the quiet stop that unmaps them.
        let deadline =
            |cleaning: bool| started + Duration::from_secs(if cleaning { 10 } else { 3 });
        let mut interrupted: HashSet<i32> = HashSet::new();
        loop {
            let mine = self.threads_of(tgid);
            if mine.is_empty() || Instant::now() > deadline(cleanup.is_some()) {
                break;
            }
            for &tid in &mine {
                if interrupted.insert(tid)
                    && ptrace::interrupt(Pid::from_raw(tid)) == Err(Errno::ESRCH)
                {
                    self.threads.remove(&tid);
                }
            }
            let mut progressed = false;
            for tid in mine {
                let Ok(status) = waitpid(
                    Pid::from_raw(tid),
                    Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG),
                ) else {
                    self.threads.remove(&tid);
                    continue;
                };
                progressed |= status != WaitStatus::StillAlive;
                self.detach_at(tid, status, is_ours, &mut cleanup);
            }
            if !progressed {
                sleep(Duration::from_millis(1));
            }
        }
        self.threads.retain(|_, g| *g != tgid);
        self.processes.remove(&tgid);
    }

    /// One thread of a process being released has reported `status`.
    fn detach_at(
        &mut self,
        tid: i32,
        status: WaitStatus,
        is_ours: &dyn Fn(i32) -> bool,
        cleanup: &mut Option<&mut dyn FnMut(i32)>,
    ) {
        let pid = Pid::from_raw(tid);
        // Cleaning up takes a quiet stop (a remote syscall from a signal's stop would meet the
        // interrupt still queued for the thread). So while nobody has cleaned up yet, a
        // thread found in a signal's stop is let go past it (our SIGSTOP swallowed, another
        // signal delivered now, while we still trace it) and interrupted again: its next
        // stop is the quiet one. Without this, a process whose only thread stops with our
        // own SIGSTOP (a sample started as the run ended) would keep our segments.
        let cleaning = cleanup.is_some();
        let pass_and_interrupt = |signal: Option<Signal>| {
            let _ = ptrace::cont(pid, signal);
            let _ = ptrace::interrupt(pid);
        };
        match status {
            WaitStatus::Stopped(_, Signal::SIGSTOP) if is_ours(tid) => {
                if cleaning {
                    pass_and_interrupt(None);
                } else {
                    self.detach(tid, None);
                }
            }
            WaitStatus::Stopped(_, signal) if is_ours(tid) && pending_sigstop(tid) => {
                // Deliver this signal while still attached; our SIGSTOP comes next.
                let _ = ptrace::cont(pid, Some(signal));
            }
            WaitStatus::Stopped(_, signal) if cleaning => pass_and_interrupt(Some(signal)),
            WaitStatus::Stopped(_, signal) => self.detach(tid, Some(signal)),
            WaitStatus::PtraceEvent(_, _, event) => {
                if event == libc::PTRACE_EVENT_CLONE
                    && let (Ok(new), Some(&tgid)) = (ptrace::getevent(pid), self.threads.get(&tid))
                {
                    // The new thread reports its own stop; it is released in the next round.
                    self.threads.insert(new as i32, tgid);
                }
                if pending_sigstop(tid) {
                    // Our SIGSTOP is still queued: let it arrive while we can still swallow it.
                    let _ = ptrace::cont(pid, None);
                } else {
                    if let Some(cleanup) = cleanup.take() {
                        cleanup(tid);
                    }
                    self.detach(tid, None);
                }
            }
            WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                self.threads.remove(&tid);
            }
            _ => {}
        }
    }

    fn detach(&mut self, tid: i32, signal: Option<Signal>) {
        let _ = ptrace::detach(Pid::from_raw(tid), signal);
        self.threads.remove(&tid);
    }

    /// Detaches from one process, assuming no SIGSTOP of ours is pending for it.
    pub fn release(&mut self, tgid: i32) {
        self.release_with(tgid, &|_| false, &mut |_| {});
    }

    /// Forgets a process that vanished while one of its threads was held elsewhere.
    pub fn forget_process(&mut self, tgid: i32) {
        self.threads.retain(|_, g| *g != tgid);
        self.processes.remove(&tgid);
    }
}

/// Whether SIGSTOP is queued for this very thread (SigPnd is per thread).
fn pending_sigstop(tid: i32) -> bool {
    fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("SigPnd:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|mask| mask & SIGSTOP_BIT != 0)
}

fn is_stop_signal(signal: Signal) -> bool {
    matches!(
        signal,
        Signal::SIGSTOP | Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU
    )
}

fn listen(tid: i32) {
    // SAFETY: PTRACE_LISTEN takes no pointers; an invalid tid only yields ESRCH.
    unsafe {
        libc::ptrace(libc::PTRACE_LISTEN, tid, 0usize, 0usize);
    }
}
