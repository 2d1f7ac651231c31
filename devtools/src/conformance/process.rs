//! Child processes with a deadline, and the interrupt that ends a run early.
//!
//! A command (g++, oi-trace) runs in a process group of its own, so that one that overruns can
//! be stopped with everything it started: the group gets SIGTERM (oi-trace then detaches from
//! its target), then SIGKILL after a grace period. Signals go to the group only while its
//! leader is not yet reaped, so its id cannot have been reused. Ctrl-C or SIGTERM to the
//! harness sets a flag instead of killing it: the running commands are stopped the same way,
//! no new work starts, and the run ends with an error.

use std::{
    io::{self, Read},
    os::unix::process::{CommandExt as _, ExitStatusExt as _},
    process::{Child, Command, ExitStatus, Stdio},
    sync::atomic::{AtomicBool, Ordering},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// How often a waiting loop looks at its child.
const POLL: Duration = Duration::from_millis(10);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Turns SIGINT and SIGTERM into [`interrupted`].
pub fn catch_interrupts() {
    let handler: extern "C" fn(libc::c_int) = on_interrupt;
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(signal, handler as libc::sighandler_t);
        }
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Why a command did not end by itself.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Stopped {
    TimedOut,
    Interrupted,
}

pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stopped: Option<Stopped>,
}

impl Finished {
    /// The exit code, or minus the signal that ended it.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .or_else(|| self.status.signal().map(|s| -s))
            .unwrap_or(-1)
    }
}

/// Runs `cmd` without input, collecting its output, for at most `timeout`.
pub fn run(cmd: &mut Command, timeout: Duration) -> io::Result<Finished> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let mut stopped = None;
    let mut status = wait_until(&mut child, || Instant::now() >= deadline || interrupted())?;
    if status.is_none() {
        stopped = Some(if interrupted() {
            Stopped::Interrupted
        } else {
            Stopped::TimedOut
        });
        for (signal, grace) in [
            (libc::SIGTERM, Duration::from_secs(3)),
            (libc::SIGKILL, Duration::from_secs(10)),
        ] {
            signal_group(&child, signal);
            let until = Instant::now() + grace;
            status = wait_until(&mut child, || Instant::now() >= until)?;
            if status.is_some() {
                break;
            }
        }
    }
    let status = match status {
        Some(status) => status,
        None => child.wait()?,
    };
    Ok(Finished {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
        stopped,
    })
}

/// Polls `child` until it exits (its status) or `give_up` says so (None).
fn wait_until(child: &mut Child, give_up: impl Fn() -> bool) -> io::Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if give_up() {
            return Ok(None);
        }
        thread::sleep(POLL);
    }
}

/// Signals the process group `child` leads; `child` must not have been reaped yet.
fn signal_group(child: &Child, signal: libc::c_int) {
    let Ok(group) = libc::pid_t::try_from(child.id()) else {
        return;
    };
    // SAFETY: killpg has no memory effects; the group is the one this harness created for
    // `child`, whose unreaped leader keeps the id from being reused.
    unsafe {
        libc::killpg(group, signal);
    }
}

/// Reads a pipe to its end on a thread of its own, so that a chatty child never blocks.
fn drain(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            // A read error ends the output; what was read is kept.
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// Runs `work` on each item with `jobs` threads, handing each result to `done` (on this
/// thread, in the order they finish). Once interrupted, no new item starts.
pub fn parallel<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    work: impl Fn(&T) -> R + Sync,
    mut done: impl FnMut(&T, R),
) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel();
    thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            let tx = tx.clone();
            let (next, work) = (&next, &work);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= items.len() || interrupted() {
                        break;
                    }
                    if tx.send((i, work(&items[i]))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, result) in rx {
            done(&items[i], result);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_output_and_status() {
        let finished = run(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(finished.stdout, b"out\n");
        assert_eq!(finished.stderr, b"err\n");
        assert_eq!(finished.code(), 3);
        assert_eq!(finished.stopped, None);
    }

    #[test]
    fn stops_an_overrunning_group() {
        let started = Instant::now();
        let finished = run(
            Command::new("sh").args(["-c", "sleep 30 & sleep 30; echo never"]),
            Duration::from_millis(200),
        )
        .unwrap();
        assert_eq!(finished.stopped, Some(Stopped::TimedOut));
        assert_eq!(finished.code(), -libc::SIGTERM);
        assert!(finished.stdout.is_empty());
        // The background sleep held the pipes: it was stopped with its group.
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn parallel_hands_back_every_result() {
        let items: Vec<u32> = (0..20).collect();
        let mut seen = Vec::new();
        parallel(&items, 3, |&i| i * 2, |&i, r| seen.push((i, r)));
        seen.sort();
        assert_eq!(seen, items.iter().map(|&i| (i, i * 2)).collect::<Vec<_>>());
    }
}
