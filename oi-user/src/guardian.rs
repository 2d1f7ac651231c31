//! A last line of defence for when oi-trace is killed with SIGKILL.
//!
//! The in-target walk restores itself (see `hijack`), and the kernel drops a signal-delivery
//! stop's signal when the tracer dies. One case remains: a SIGSTOP that the eBPF trigger sent
//! an instant before the tracer died and that the thread had not yet taken. Untraced, it
//! stops the whole process. So a small child process, forked before anything else exists
//! (no eBPF fds, no threads), watches a pipe from oi-trace; if the pipe closes without a
//! "clean" word, it resumes every watched process that it finds stopped.
//!
//! It also holds, for each process with patched code (`inject`), the plan that undoes it:
//! sent before the first byte is patched, dropped once oi-trace has undone it itself. If
//! oi-trace dies with plans left, the guardian seizes each process and runs the very same
//! undo (`inject::patch::undo`: original bytes back, threads moved out of relocated
//! prologues, the return addresses call stubs hooked put back, the segment unmapped once no
//! thread is inside), then lets it go.

use std::{
    fs::File,
    io::{BufRead as _, BufReader, Write as _},
    os::fd::{FromRawFd as _, OwnedFd},
    time::Duration,
};

use crate::inferior::{Tracer, procfs};
use crate::inject::patch::{self, Undo};

pub struct Guardian {
    pipe: File,
    pid: i32,
}

impl Guardian {
    /// Forks the guardian. Call while the process is single-threaded and holds no eBPF fds.
    pub fn spawn() -> std::io::Result<Self> {
        Self::spawn_keeping(crate::privileges::GUARDIAN)
    }

    /// [`Self::spawn`] for a run that patches code: the guardian keeps what undoing the
    /// patches takes (`privileges::GUARDIAN_INJECT`).
    pub fn spawn_for_inject() -> std::io::Result<Self> {
        Self::spawn_keeping(crate::privileges::GUARDIAN_INJECT)
    }

    fn spawn_keeping(caps: &[crate::privileges::Cap]) -> std::io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two fds into the array we own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both fds were just created and are owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the caller guarantees a single-threaded process, so the child may run
        // ordinary code; it never returns into the parent's code paths (it _exits).
        match unsafe { libc::fork() } {
            -1 => Err(std::io::Error::last_os_error()),
            0 => {
                drop(write);
                // Resuming a stopped process (and undoing patches) is all it ever does.
                crate::privileges::keep_only(caps);
                detach_stdio();
                watch(File::from(read));
                // SAFETY: ends the child without running the parent's destructors.
                unsafe { libc::_exit(0) }
            }
            child => Ok(Self {
                pipe: File::from(write),
                pid: child,
            }),
        }
    }

    /// The guardian's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// From now on, resume `pid` if oi-trace dies without saying "clean".
    pub fn watch(&mut self, pid: i32) {
        let _ = writeln!(self.pipe, "watch {pid}");
    }

    /// From now on, undo `plan` if oi-trace dies first (replaces an earlier plan for the same
    /// segment, `Undo::key`).
    pub fn inject(&mut self, plan: &Undo) {
        if let Ok(json) = serde_json::to_string(plan) {
            let _ = writeln!(self.pipe, "inject {json}");
        }
    }

    /// oi-trace has undone the plan with this key itself.
    pub fn uninjected(&mut self, (pid, segment): (i32, u64)) {
        let _ = writeln!(self.pipe, "uninjected {pid} {segment}");
    }

    /// oi-trace has let every process go: nothing to repair.
    pub fn clean(&mut self) {
        let _ = writeln!(self.pipe, "clean");
    }
}

/// The guardian's stdio goes to /dev/null, so that it never holds a pipe of the user's open.
fn detach_stdio() {
    // SAFETY: plain open/dup2 calls on fds 0-2.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
    }
}

fn watch(pipe: File) {
    let mut watched: Vec<i32> = Vec::new();
    let mut plans: Vec<Undo> = Vec::new();
    let mut clean = false;
    for line in BufReader::new(pipe).lines() {
        let Ok(line) = line else { break };
        if let Some(pid) = line.strip_prefix("watch ").and_then(|p| p.parse().ok()) {
            watched.push(pid);
            clean = false;
        } else if let Some(plan) = line
            .strip_prefix("inject ")
            .and_then(|j| serde_json::from_str::<Undo>(j).ok())
        {
            plans.retain(|p| p.key() != plan.key());
            plans.push(plan);
        } else if let Some(key) = line.strip_prefix("uninjected ").and_then(|k| {
            let (pid, segment) = k.split_once(' ')?;
            Some((pid.parse::<i32>().ok()?, segment.parse::<u64>().ok()?))
        }) {
            plans.retain(|p| p.key() != key);
        } else if line == "clean" {
            clean = true;
        }
    }
    if clean && plans.is_empty() {
        return;
    }
    resume_stopped(&watched);
    let mut pids: Vec<i32> = plans.iter().map(|p| p.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let of_pid: Vec<&Undo> = plans.iter().filter(|p| p.pid == pid).collect();
        let Some(plan) = Undo::merged(&of_pid) else {
            continue;
        };
        // oi-trace died after its own unpatch but before it could say so: nothing is left,
        // and seizing would only hold the process from whoever traces it next.
        if !patch::remains(&plan) {
            continue;
        }
        let mut tracer = Tracer::default();
        // oi-trace's pipe closes before the kernel has detached its tracees: until then a
        // seize is refused.
        let deadline = std::time::Instant::now() + Duration::from_millis(500);
        while tracer.seize(pid).is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if tracer.holds(pid) {
            let _ = patch::undo(&mut tracer, &plan, &mut None, patch::DRAIN);
            tracer.release(pid);
        }
    }
    // oi-trace is gone; the kernel has detached its tracees. A SIGSTOP in flight still lands
    // when its thread next runs, which a loaded machine can delay by a good part of a second:
    // watch for two seconds.
    for _ in 0..if watched.is_empty() { 0 } else { 200 } {
        resume_stopped(&watched);
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn resume_stopped(watched: &[i32]) {
    for &pid in watched {
        if procfs::state(pid) == Some('T') {
            // SAFETY: kill with plain integers.
            unsafe {
                libc::kill(pid, libc::SIGCONT);
            }
        }
    }
}
