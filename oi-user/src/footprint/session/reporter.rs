//! Decoding and printing samples on a thread of their own, so that a slow reader of our
//! output (a pipe nobody drains, a terminal) never keeps a target thread frozen: the tracer
//! resumes the sampled thread first and hands the walk's streams over here.
//!
//! Backpressure goes to the kernel instead: while too many reports wait, the sampled process
//! stays marked busy, so its next Nth hits are dropped rather than frozen.
//!
//! Besides the report of each sample (JSON, tree or CSV on stdout), this thread keeps what
//! outlives a sample: the last sample summed by member path, drawn at exit (`--svg`,
//! `--folded`), and the growth of every member over the samples (`--growth`, printed on
//! stderr every `--interval` and at exit). Their files are opened at start, so that a path
//! that cannot be written is an error before anything is armed.

use std::{
    fs::File,
    io::Write,
    os::fd::{AsFd, BorrowedFd},
    path::{Path, PathBuf},
    sync::{
        Arc,
        mpsc::{Receiver, RecvTimeoutError, Sender, channel},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::cli::{self, Args};
use crate::footprint::measure::MeasureError;
use crate::footprint::measure::{Measurer, RootStream, WALK_STACK};
use crate::report::ReportError;
use crate::report::growth::Growth;
use crate::report::output::{Format, SampleWriter};
use crate::report::picture;
use crate::report::totals::Totals;
use crate::report::tree;

/// A file given on the command line, opened (created, truncated) at start.
pub struct OutputFile {
    pub path: PathBuf,
    file: File,
}

impl OutputFile {
    /// Opens `path` for writing, or says in one line why it cannot be (`flag`: the option).
    pub fn create(flag: &str, path: &Path) -> Result<Self, String> {
        File::create(path)
            .map(|file| Self {
                path: path.to_path_buf(),
                file,
            })
            .map_err(|e| format!("cannot write {flag} {}: {e}", path.display()))
    }
}

/// What the report thread writes.
pub struct Outputs {
    pub format: Format,
    pub svg: Option<OutputFile>,
    pub folded: Option<OutputFile>,
    pub growth: Option<OutputFile>,
    /// With `growth`: print the table so far this often.
    pub interval: Option<Duration>,
    /// `--framed`: each JSON sample wrapped in an object naming its probe, thread, hit and
    /// sizing.
    pub framed: bool,
}

impl Outputs {
    /// The outputs the command line asks for, their files opened.
    pub fn from_args(args: &Args) -> Result<Self, String> {
        let format = match (args.format, args.pretty) {
            (cli::Format::Json, pretty) => Format::Json { pretty },
            (cli::Format::Csv, _) => Format::Csv,
            (cli::Format::Tree, _) => Format::Tree(tree::Options {
                top: args.top.unwrap_or(tree::Options::default().top),
                names: match args.names {
                    Some(cli::Names::Oi) => tree::Names::Oi,
                    _ => tree::Names::Readable,
                },
                values: args.values,
            }),
        };
        let open = |flag: &str, p: &Option<PathBuf>| {
            p.as_deref()
                .map(|p| OutputFile::create(flag, p))
                .transpose()
        };
        Ok(Self {
            format,
            svg: open("--svg", &args.svg)?,
            folded: open("--folded", &args.folded)?,
            growth: open("--growth", &args.growth)?,
            interval: args.interval.map(Duration::from_secs_f64),
            framed: args.framed,
        })
    }
}

/// Reports waiting beyond which sampled processes stay busy until the writer catches up.
pub const BACKLOG: usize = 4;

struct Job {
    tgid: i32,
    tid: i32,
    hit: u64,
    index: usize,
    /// The probed function, as the user named it.
    probe: Arc<str>,
    measurer: Arc<Measurer>,
    streams: Vec<RootStream>,
}

/// A report that was written, or why it could not be.
pub struct Written {
    pub tgid: i32,
    pub hit: u64,
    /// The probe's index, as given to [`Reporter::submit`].
    pub probe: usize,
    /// The roots printed as failed (`label: why`; the others were measured).
    pub result: Result<Vec<String>, Unwritten>,
    /// CPU time the report thread spent decoding and printing the sample.
    pub cpu_ns: u64,
    /// Bytes of the sample in unions that were not walked (opaque).
    pub unions: u64,
}

/// Why a sample's report was not written.
pub struct Unwritten {
    pub why: String,
    /// None of the sample's several roots could be measured (OI's "nothing to output").
    pub nothing_measured: bool,
}

impl From<MeasureError> for Unwritten {
    fn from(e: MeasureError) -> Self {
        Self {
            nothing_measured: matches!(e, MeasureError::Report(ReportError::NothingMeasured(_))),
            why: e.to_string(),
        }
    }
}

impl From<String> for Unwritten {
    fn from(why: String) -> Self {
        Self {
            why,
            nothing_measured: false,
        }
    }
}

pub struct Reporter {
    jobs: Option<Sender<Job>>,
    written: Receiver<Written>,
    wake: Arc<EventFd>,
    pending: usize,
    thread: Option<JoinHandle<Result<(), String>>>,
    /// Why the files written at exit could not be (after [`Self::finish`]).
    outputs: Result<(), String>,
}

impl Reporter {
    pub fn start(outputs: Outputs) -> std::io::Result<Self> {
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
                let mut state = State::new(outputs);
                while let Some(job) = state.next(&queue) {
                    let started = thread_cpu_ns();
                    let result = state.report(&job);
                    let cpu_ns = thread_cpu_ns().saturating_sub(started);
                    let _ = done.send(Written {
                        tgid: job.tgid,
                        hit: job.hit,
                        probe: job.index,
                        unions: if result.is_ok() {
                            state.writer.unions
                        } else {
                            0
                        },
                        result,
                        cpu_ns,
                    });
                    let _ = wake_writer.write(1);
                }
                state.finish()
            })?;
        Ok(Self {
            jobs: Some(jobs),
            written,
            wake,
            pending: 0,
            thread: Some(thread),
            outputs: Ok(()),
        })
    }

    /// Queues the report of one sample of `probe` (its index, given back in [`Written`], and
    /// its name).
    pub fn submit(
        &mut self,
        (tgid, tid, hit): (i32, i32, u64),
        (index, probe): (usize, &str),
        measurer: Arc<Measurer>,
        streams: Vec<RootStream>,
    ) {
        if let Some(jobs) = &self.jobs
            && jobs
                .send(Job {
                    tgid,
                    tid,
                    hit,
                    index,
                    probe: Arc::from(probe),
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

    /// Writes what is still queued and the files written at exit, then stops the thread.
    pub fn finish(&mut self) -> Vec<Written> {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            self.outputs = thread
                .join()
                .unwrap_or_else(|_| Err("the report thread panicked".into()));
        }
        self.written()
    }

    /// After [`Self::finish`]: whether the pictures and the growth table were written.
    pub fn outputs(&self) -> Result<(), String> {
        self.outputs.clone()
    }
}

/// CPU time of the calling thread (user and system), in ns.
fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// File descriptor 1 written directly, with std's stdout locked for as long as it lives (so
/// nothing else interleaves; nothing is written through it before). std's stdout is line
/// buffered: it searches every megabyte handed to it for its last newline, a twentieth of
/// the printing of a big sample, for a buffer this writer does not need.
///
/// A pipe on fd 1 is widened to [`PIPE_BYTES`]: a million-element sample is hundreds of MB
/// of JSON, which a 64 KiB pipe takes in thousands of turns of writer and reader, each a
/// wake-up of the other side (on a quiet VM, a halted vCPU coming back, which would make the
/// printing slower on a quiet machine than on a busy one).
struct RawStdout {
    _lock: std::io::StdoutLock<'static>,
    fd: std::io::Stdout,
}

/// Pipe buffer asked for on fd 1 (the most an unprivileged process may ask:
/// `/proc/sys/fs/pipe-max-size`'s default).
const PIPE_BYTES: i32 = 1 << 20;

impl RawStdout {
    fn new() -> Self {
        // SAFETY: fcntl on fd 1 with an integer argument; it fails harmlessly (EBADF, or
        // EINVAL when fd 1 is not a pipe, EPERM above the limit) and the pipe stays as it was.
        unsafe {
            libc::fcntl(libc::STDOUT_FILENO, libc::F_SETPIPE_SZ, PIPE_BYTES);
        }
        Self {
            _lock: std::io::stdout().lock(),
            fd: std::io::stdout(),
        }
    }
}

impl Write for RawStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        loop {
            match nix::unistd::write(self.fd.as_fd(), buf) {
                Err(nix::errno::Errno::EINTR) => continue,
                r => return r.map_err(std::io::Error::from),
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The report thread's own state.
struct State {
    outputs: Outputs,
    writer: SampleWriter,
    /// stdout through a large buffer: a sample of a million elements is hundreds of MB of
    /// JSON, which stdout's own line buffer would hand to the kernel 1 KiB at a time.
    out: std::io::BufWriter<RawStdout>,
    growth: Option<Growth>,
    /// The last sample summed by member path, and its title, for the pictures.
    last: Option<(Totals, String)>,
    next_tick: Option<Instant>,
}

impl State {
    fn new(outputs: Outputs) -> Self {
        Self {
            writer: SampleWriter::new(outputs.format),
            out: std::io::BufWriter::with_capacity(1 << 20, RawStdout::new()),
            growth: outputs.growth.as_ref().map(|_| Growth::new()),
            last: None,
            next_tick: outputs.interval.map(|i| Instant::now() + i),
            outputs,
        }
    }

    /// The next job; meanwhile, the growth table every `--interval`. None: no more jobs.
    fn next(&mut self, queue: &Receiver<Job>) -> Option<Job> {
        loop {
            let Some(tick) = self.next_tick else {
                return queue.recv().ok();
            };
            match queue.recv_timeout(tick.saturating_duration_since(Instant::now())) {
                Ok(job) => return Some(job),
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => {
                    let every = self.outputs.interval.unwrap_or(Duration::from_secs(1));
                    self.next_tick = Some(tick + every);
                    self.print_growth();
                }
            }
        }
    }

    /// `--framed`: the sample's OI array inside an object that says whose sample it is.
    fn framed(&mut self, job: &Job, totals: Option<&mut Totals>) -> Result<Vec<String>, Unwritten> {
        let mut roots = Vec::new();
        let failed = job
            .measurer
            .report(&job.streams, &mut self.writer, &mut roots, totals)?;
        let roots = roots.strip_suffix(b"\n").unwrap_or(&roots);
        let text = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        let args: Vec<String> = job.measurer.arg_names().iter().map(|a| text(a)).collect();
        let write = |out: &mut dyn Write| -> std::io::Result<()> {
            write!(
                out,
                "{{\"probe\":{},\"pid\":{},\"tid\":{},\"hit\":{},\"args\":[{}],\"sizes\":{},\
                 \"roots\":",
                text(&job.probe),
                job.tgid,
                job.tid,
                job.hit,
                args.join(","),
                text(job.measurer.plan().sizing.name())
            )?;
            out.write_all(roots)?;
            out.write_all(b"}\n")
        };
        write(&mut self.out).map_err(|e| format!("writing the report: {e}"))?;
        Ok(failed)
    }

    fn wants_totals(&self) -> bool {
        self.outputs.svg.is_some() || self.outputs.folded.is_some() || self.growth.is_some()
    }

    fn report(&mut self, job: &Job) -> Result<Vec<String>, Unwritten> {
        // JSON and CSV rows speak for themselves; trees of several samples need a title.
        if matches!(self.writer.format, Format::Tree(_)) {
            writeln!(self.out, "# pid {}, hit {}", job.tgid, job.hit)
                .map_err(|e| format!("writing the report: {e}"))?;
        }
        let mut totals = self.wants_totals().then(Totals::new);
        let failed = if self.outputs.framed {
            self.framed(job, totals.as_mut())?
        } else {
            job.measurer.report(
                &job.streams,
                &mut self.writer,
                &mut self.out,
                totals.as_mut(),
            )?
        };
        self.out
            .flush()
            .map_err(|e| format!("writing the report: {e}"))?;
        if let Some(t) = totals {
            if let Some(g) = &mut self.growth {
                g.add(job.tgid, &job.probe, &t);
            }
            let title = format!("{} in pid {}, hit {}", job.probe, job.tgid, job.hit);
            self.last = Some((t, title));
        }
        Ok(failed)
    }

    fn print_growth(&self) {
        if let (Some(g), Some(file)) = (&self.growth, &self.outputs.growth) {
            print_growth(g, &file.path);
        }
    }

    /// Writes the files of the run (pictures of the last sample, the growth table).
    fn finish(mut self) -> Result<(), String> {
        let mut errors = Vec::new();
        let mut note = |flag: &str, f: &OutputFile, r: std::io::Result<()>| {
            if let Err(e) = r {
                errors.push(format!("writing {flag} {}: {e}", f.path.display()));
            }
        };
        let (svg, folded, growth_file) = (
            self.outputs.svg.take(),
            self.outputs.folded.take(),
            self.outputs.growth.take(),
        );
        let none = (Totals::new(), "no sample was taken".to_string());
        let (totals, title) = self.last.as_ref().unwrap_or(&none);
        if let Some(f) = &svg {
            note("--svg", f, picture::write_svg(totals, title, &f.file));
            eprintln!("oi-trace: picture of the last sample: {}", f.path.display());
        }
        if let Some(f) = &folded {
            note("--folded", f, picture::write_folded(totals, &f.file));
        }
        if let (Some(g), Some(f)) = (&self.growth, &growth_file) {
            let mut w = std::io::BufWriter::new(&f.file);
            note("--growth", f, g.write_json(&mut w).and_then(|()| w.flush()));
            print_growth(g, &f.path);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// The growth table so far, on stderr.
fn print_growth(g: &Growth, file: &Path) {
    if !g.is_empty() {
        let path = file.display().to_string();
        let _ = g.write_text(&mut std::io::stderr().lock(), Some(&path));
    }
}
