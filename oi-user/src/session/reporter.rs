//! Decoding and printing samples on a thread of their own, so that a slow reader of our
//! output (a pipe nobody drains, a terminal) never keeps a target thread frozen: the tracer
//! resumes the sampled thread first and hands the walk's streams over here.
//!
//! Backpressure goes to the kernel instead: while too many reports wait, the sampled process
//! stays marked busy, so its next Nth hits are dropped rather than frozen.

use std::{
    io::Write,
    os::fd::{AsFd, BorrowedFd},
    sync::{
        Arc,
        mpsc::{Receiver, Sender, channel},
    },
    thread::JoinHandle,
};

use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::measure::{Measurer, OutputFormat, WALK_STACK};

/// Reports waiting beyond which sampled processes stay busy until the writer catches up.
pub const BACKLOG: usize = 4;

struct Job {
    tgid: i32,
    hit: u64,
    measurer: Arc<Measurer>,
    streams: Vec<Vec<u64>>,
}

/// A report that was written, or why it could not be.
pub struct Written {
    pub tgid: i32,
    pub hit: u64,
    pub result: Result<(), String>,
}

pub struct Reporter {
    jobs: Option<Sender<Job>>,
    written: Receiver<Written>,
    wake: Arc<EventFd>,
    pending: usize,
    thread: Option<JoinHandle<()>>,
}

impl Reporter {
    pub fn start(format: OutputFormat) -> std::io::Result<Self> {
        let (jobs, queue) = channel::<Job>();
        let (done, written) = channel();
        let wake = Arc::new(EventFd::from_flags(
            EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC,
        )?);
        let wake_writer = wake.clone();
        let thread = std::thread::Builder::new()
            .name("oi-report".into())
            .stack_size(WALK_STACK)
            .spawn(move || {
                let mut out = std::io::stdout().lock();
                for job in queue {
                    // JSON lines speak for themselves; trees of several samples need a title.
                    let title = if format == OutputFormat::Tree {
                        writeln!(out, "# pid {}, hit {}", job.tgid, job.hit)
                    } else {
                        Ok(())
                    };
                    let result = title
                        .map_err(|e| format!("writing the report: {e}"))
                        .and_then(|()| {
                            job.measurer
                                .write_report(&job.streams, format, &mut out)
                                .map_err(|e| e.to_string())
                        })
                        .and_then(|()| out.flush().map_err(|e| format!("writing the report: {e}")));
                    let _ = done.send(Written {
                        tgid: job.tgid,
                        hit: job.hit,
                        result,
                    });
                    let _ = wake_writer.write(1);
                }
            })?;
        Ok(Self {
            jobs: Some(jobs),
            written,
            wake,
            pending: 0,
            thread: Some(thread),
        })
    }

    /// Queues the report of one sample.
    pub fn submit(&mut self, tgid: i32, hit: u64, measurer: Arc<Measurer>, streams: Vec<Vec<u64>>) {
        if let Some(jobs) = &self.jobs
            && jobs
                .send(Job {
                    tgid,
                    hit,
                    measurer,
                    streams,
                })
                .is_ok()
        {
            self.pending += 1;
        }
    }

    /// Reports queued and not yet written.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Reports written since the last call.
    pub fn written(&mut self) -> Vec<Written> {
        let _ = self.wake.read();
        let done: Vec<Written> = self.written.try_iter().collect();
        self.pending -= done.len();
        done
    }

    /// Readable when a report was written; for poll(2).
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Writes what is still queued, then stops the thread.
    pub fn finish(&mut self) -> Vec<Written> {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.written()
    }
}
