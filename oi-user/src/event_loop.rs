//! The one event loop of the profilers (`oi-trace allocs`, `oi-trace calls`): a current-thread
//! tokio runtime that waits on the tool's eBPF ring buffer (aya's `RingBuf` through
//! `AsyncFd`), its aya-log records under `-v`, SIGINT/SIGTERM/SIGHUP, the `--duration`
//! deadline, `--interval` reports, a housekeeping tick, and the exit of the traced process
//! (a pidfd), and hands each to the tool through [`Profiler`].
//!
//! One thread, no locks: the tool's state is only touched from the callbacks. Never stops or
//! ptraces anything; the profilers leave the target running at all times.

use std::{
    os::fd::{AsRawFd, FromRawFd as _, OwnedFd},
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use aya_log::EbpfLogger;
use tokio::{
    io::{Interest, unix::AsyncFd},
    signal::unix::{SignalKind, signal},
    time::{Instant, MissedTickBehavior, interval_at, sleep_until},
};

use crate::{
    error::{Error, Result},
    inferior::procfs,
};

/// How often [`Profiler::housekeeping`] runs: often enough that a `--count` or a new process is
/// noticed at once to a person, rarely enough to cost nothing.
pub const HOUSEKEEPING: Duration = Duration::from_millis(100);

/// Why a profiler's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// `--duration` passed.
    Duration,
    /// SIGINT (Ctrl-C), SIGTERM or SIGHUP: report and detach.
    Signal(&'static str),
    /// The traced process exited.
    TargetExited,
    /// The tool said it was done (its `--count` reached, say).
    Finished,
}

/// What a tool does with what the loop waits for. Every method runs on the loop's thread.
pub trait Profiler {
    /// One record of the tool's ring buffer.
    fn record(&mut self, _data: &[u8]) {}

    /// About every [`HOUSEKEEPING`]: read counters, notice new processes, decide whether the
    /// run is over (`Some(End::Finished)`).
    fn housekeeping(&mut self) -> Option<End> {
        None
    }

    /// Every `--interval`: print the report so far.
    fn interval(&mut self) {}

    /// Once, when the loop watches everything (SIGINT, SIGTERM and SIGHUP included): the
    /// moment to tell the user the tool is armed. Said earlier, a Ctrl-C that follows at once
    /// would meet the default action and end the tool without its report.
    fn armed(&mut self) {}
}

/// Log records of the eBPF side (aya-log), printed on stderr as `oi-trace: ebpf: …`.
pub struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        eprintln!(
            "oi-trace: ebpf: {}: {}",
            record.level().as_str().to_lowercase(),
            record.args()
        );
    }

    fn flush(&self) {}
}

/// What to wait on, built up by the tool, then [`run`](Self::run).
pub struct EventLoop {
    ring: Option<RingBuf<MapData>>,
    logger: Option<EbpfLogger<StderrLog>>,
    duration: Option<Duration>,
    interval: Option<Duration>,
    process: Option<i32>,
}

impl EventLoop {
    /// A loop that ends after `duration` (if any) and calls [`Profiler::interval`] every
    /// `interval` (if any).
    pub fn new(duration: Option<Duration>, interval: Option<Duration>) -> Self {
        Self {
            ring: None,
            logger: None,
            duration,
            interval,
            process: None,
        }
    }

    /// The ring buffer whose records go to [`Profiler::record`].
    pub fn ring(mut self, ring: RingBuf<MapData>) -> Self {
        self.ring = Some(ring);
        self
    }

    /// Prints the eBPF programs' aya-log records (`-v`).
    pub fn logger(mut self, logger: EbpfLogger<StderrLog>) -> Self {
        self.logger = Some(logger);
        self
    }

    /// Ends the run with [`End::TargetExited`] when process `pid` exits.
    pub fn watch_process(mut self, pid: i32) -> Self {
        self.process = Some(pid);
        self
    }

    /// Waits and dispatches until the duration passes, a signal comes, the watched process
    /// exits or the tool finishes; then drains what the ring buffer still holds.
    pub fn run(self, profiler: &mut dyn Profiler) -> Result<End> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| Error::internal(format!("starting the event loop: {e}")))?;
        runtime.block_on(self.serve(profiler))
    }

    async fn serve(mut self, profiler: &mut dyn Profiler) -> Result<End> {
        let registered = |what: &str, e: std::io::Error| {
            Error::internal(format!("event loop: watching {what}: {e}"))
        };
        let mut ring = self
            .ring
            .take()
            .map(register)
            .transpose()
            .map_err(|e| registered("the ring buffer", e))?;
        let mut logger = self
            .logger
            .take()
            .map(register)
            .transpose()
            .map_err(|e| registered("the eBPF log", e))?;
        let exit = match self.process {
            Some(pid) => Some(ProcessExit::watch(pid).map_err(|e| registered("the process", e))?),
            None => None,
        };
        let mut sigint = signal(SignalKind::interrupt()).map_err(|e| registered("SIGINT", e))?;
        let mut sigterm = signal(SignalKind::terminate()).map_err(|e| registered("SIGTERM", e))?;
        let mut sighup = signal(SignalKind::hangup()).map_err(|e| registered("SIGHUP", e))?;

        let start = Instant::now();
        // Far enough to never fire when there is no deadline or interval.
        let never = start + Duration::from_secs(100 * 365 * 24 * 3600);
        let deadline = self.duration.map_or(never, |d| start + d);
        let period = self.interval.unwrap_or(Duration::from_secs(3600));
        let mut reports = interval_at(start + period, period);
        reports.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut housekeeping = interval_at(start + HOUSEKEEPING, HOUSEKEEPING);
        housekeeping.set_missed_tick_behavior(MissedTickBehavior::Skip);

        profiler.armed();
        let end = loop {
            tokio::select! {
                biased;
                _ = sigint.recv() => break End::Signal("SIGINT"),
                _ = sigterm.recv() => break End::Signal("SIGTERM"),
                _ = sighup.recv() => break End::Signal("SIGHUP"),
                ready = readable(&mut ring) => {
                    let mut guard = ready.map_err(|e| registered("the ring buffer", e))?;
                    let ring = guard.get_inner_mut();
                    while let Some(item) = ring.next() {
                        profiler.record(&item);
                    }
                    guard.clear_ready();
                }
                ready = readable(&mut logger) => {
                    let mut guard = ready.map_err(|e| registered("the eBPF log", e))?;
                    guard.get_inner_mut().flush();
                    guard.clear_ready();
                }
                () = exited(&exit) => break End::TargetExited,
                () = sleep_until(deadline) => break End::Duration,
                _ = reports.tick(), if self.interval.is_some() => profiler.interval(),
                _ = housekeeping.tick() => {
                    if let Some(end) = profiler.housekeeping() {
                        break end;
                    }
                    // Without a pidfd (kernels before 5.3), look at /proc.
                    if let (Some(pid), None) = (self.process, &exit)
                        && !procfs::is_alive(pid)
                    {
                        break End::TargetExited;
                    }
                }
            }
        };
        // Records already in the ring belong to the run.
        if let Some(ring) = ring.as_mut() {
            let ring = ring.get_mut();
            while let Some(item) = ring.next() {
                profiler.record(&item);
            }
        }
        if let Some(logger) = logger.as_mut() {
            logger.get_mut().flush();
        }
        Ok(end)
    }
}

/// Registers an object that owns its descriptor with the runtime, for readability.
fn register<T: AsRawFd>(inner: T) -> std::io::Result<AsyncFd<T>> {
    // SAFETY: every `T` passed here (aya's `RingBuf`, aya-log's `EbpfLogger`, an `OwnedFd`)
    // owns its descriptor, keeps it open while it lives, and always returns that same one from
    // `as_raw_fd`; the `AsyncFd` owns the object, so the descriptor outlives the registration.
    unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) }.map_err(|e| e.into())
}

/// Readiness of an optional descriptor; pending for ever when there is none.
async fn readable<T: AsRawFd>(
    fd: &mut Option<AsyncFd<T>>,
) -> std::io::Result<tokio::io::unix::AsyncFdReadyMutGuard<'_, T>> {
    match fd {
        Some(fd) => fd.readable_mut().await,
        None => std::future::pending().await,
    }
}

async fn exited(exit: &Option<ProcessExit>) {
    match exit {
        Some(exit) => exit.wait().await,
        None => std::future::pending().await,
    }
}

/// A pidfd: readable once the process has exited.
struct ProcessExit {
    fd: Option<AsyncFd<OwnedFd>>,
}

impl ProcessExit {
    /// `Ok` with no descriptor where the kernel has no pidfd_open (then /proc is polled).
    fn watch(pid: i32) -> std::io::Result<Self> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if raw < 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENOSYS) => Ok(Self { fd: None }),
                Some(libc::ESRCH) => Err(std::io::Error::other(format!("pid {pid} is gone"))),
                _ => Err(err),
            };
        }
        // SAFETY: `raw` is a descriptor pidfd_open just created and nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
        Ok(Self {
            fd: Some(register(fd)?),
        })
    }

    async fn wait(&self) {
        match &self.fd {
            Some(fd) => {
                // A pidfd stays readable once the process is gone: no need to clear.
                let _ = fd.readable().await;
            }
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Ticks {
        housekeeping: u32,
        intervals: u32,
        finish_after: u32,
    }

    impl Profiler for Ticks {
        fn housekeeping(&mut self) -> Option<End> {
            self.housekeeping += 1;
            (self.housekeeping >= self.finish_after).then_some(End::Finished)
        }

        fn interval(&mut self) {
            self.intervals += 1;
        }
    }

    #[test]
    fn ends_at_the_deadline_with_interval_ticks() {
        let mut ticks = Ticks {
            housekeeping: 0,
            intervals: 0,
            finish_after: u32::MAX,
        };
        let end = EventLoop::new(
            Some(Duration::from_millis(350)),
            Some(Duration::from_millis(100)),
        )
        .run(&mut ticks)
        .unwrap();
        assert_eq!(end, End::Duration);
        assert!(ticks.intervals >= 2, "{} interval ticks", ticks.intervals);
        assert!(ticks.housekeeping >= 2, "{}", ticks.housekeeping);
    }

    #[test]
    fn the_tool_can_finish_the_run() {
        let mut ticks = Ticks {
            housekeeping: 0,
            intervals: 0,
            finish_after: 2,
        };
        let end = EventLoop::new(None, None).run(&mut ticks).unwrap();
        assert_eq!(end, End::Finished);
        assert_eq!(ticks.housekeeping, 2);
    }

    #[test]
    fn notices_the_exit_of_the_watched_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Reaped by a thread so the pidfd sees a real exit, as with a process we do not own.
        let reaper = std::thread::spawn(move || child.wait());
        let mut ticks = Ticks {
            housekeeping: 0,
            intervals: 0,
            finish_after: u32::MAX,
        };
        let end = EventLoop::new(Some(Duration::from_secs(10)), None)
            .watch_process(pid)
            .run(&mut ticks)
            .unwrap();
        reaper.join().unwrap().unwrap();
        assert_eq!(end, End::TargetExited);
    }
}
