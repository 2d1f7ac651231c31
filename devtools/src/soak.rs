//! `cargo xtask soak --minutes N`: oi-trace samples an 8-thread fixture (`soak_target`) about
//! every 10 ms for N minutes, and the run passes only if
//!
//! - every sample is exact: its top-level `size` equals the footprint the fixture computed for
//!   that very call and passed as arg1 (read back as rsi from the sample log's entry registers);
//! - oi-trace's memory (VmRSS) does not grow beyond its value after the first minute;
//! - every target thread makes calls in every second, is never left stopped, and the fixture's
//!   own checks (checksum of its objects, registers, FPU) hold to the end;
//! - oi-trace exits 0 with no error line, leaving the target untraced, running, with its
//!   file-backed and executable mappings as before (no walker code left, nothing RWX), and
//!   the fixture exits 0 when told to.
//!
//! It prints a table of the figures and fails when any check does. It signals only the two
//! processes it started, by pid (both are killed when dropped, on errors too).

pub mod agent;
mod samples;
mod target;

pub(crate) use target::status_number;

use std::{
    collections::{HashMap, HashSet, VecDeque},
    fs::File,
    io::{BufRead as _, BufReader, Read as _},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc::{Receiver, channel},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use oi_e2e::{Fixture, FixtureBuild, TempDir, maps_of};
use samples::*;
use serde_json::Value;
use target::*;

/// Target threads and the period of each one's calls: 8 × 125 calls/s = 1,000 calls/s.
const THREADS: usize = 8;
const PERIOD_US: u64 = 8_000;
/// Every 10th call is sampled, one sample per ~10 ms; the nine between exercise the kernel's
/// counting and the not-sampled path of the probe.
const EVERY: u64 = 10;
const POLL: Duration = Duration::from_secs(1);
/// Allowed RSS growth after minute 1. A leak of 40 bytes per sample (100 samples/s) reaches it
/// within 9 minutes; allocator and page-cache noise stay far below it.
const RSS_TOLERANCE_KIB: u64 = 2048;
/// A thread seen stopped ('t') in every poll over this long is stuck: a sample stops it for
/// well under a millisecond, a slow walk is cut off after oi-trace's --walk-timeout (2 s).
/// Measured between observations, not counted in polls: polls a starved xtask makes late
/// come in bursts and would see one pause twice. And only while the thread's count of context
/// switches stays the same: the workers' fixed cadence and the sampling of every 10th hit
/// lock in phase with the 1 s polls, so the same thread can be caught in a different sample
/// of ~0.2 ms at poll after poll and look stopped for seconds when it never was.
const STUCK_STOPPED: Duration = Duration::from_secs(3);
/// A thread without a call for this many consecutive seconds is stuck. Not one: on a loaded
/// machine the scheduler alone can keep a runnable thread waiting for a large part of a
/// second (the fixture reports that lateness; see `SLOW_US`).
const STUCK_SECONDS: u32 = 3;
/// Calls and wake-up delays longer than this are counted, to tell oi-trace's pauses (a long
/// call of soak::inspect) from the machine's (a late wake-up from the pacing sleep).
const SLOW_US: u64 = 100_000;
/// The fixture prints progress every second.
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(5);
/// Time oi-trace may take to exit after its --duration (RCU grace periods, detaching).
const EXIT_GRACE: Duration = Duration::from_secs(60);

pub fn run(minutes: u64) -> Result<()> {
    if minutes == 0 {
        bail!("--minutes must be at least 1");
    }
    let bin = oi_e2e::oi_trace_bin();
    if !bin.exists() {
        bail!("{} missing (the build step makes it)", bin.display());
    }
    let binary = FixtureBuild::new("soak_target").build();
    let mut fixture = Fixture::start(&binary, &[&THREADS.to_string(), &PERIOD_US.to_string()]);
    let dir = TempDir::new("soak");
    // Two seconds in, the threads' malloc arenas exist; only then are the maps final.
    for _ in 0..2 {
        fixture.stdout.expect("progress", Duration::from_secs(20));
    }
    let maps_before = maps_of(fixture.pid);
    let seconds = minutes * 60;
    println!(
        "soak: {} (pid {}), {THREADS} threads × {} calls/s, oi-trace --every {EVERY} for {seconds} s",
        binary.display(),
        fixture.pid,
        1_000_000 / PERIOD_US
    );
    let mut tracer = Tracer::start(&bin, fixture.pid, seconds, &dir)?;
    let mut soak = Soak::new(fixture.pid, seconds, &dir);
    let status = soak.watch(&mut fixture, &mut tracer)?;
    soak.after_exit(status, tracer, &dir);
    soak.check_target_after(&mut fixture, &maps_before);
    let exit = fixture.finish();
    if !exit.success() {
        soak.failures
            .push(format!("the fixture exited with {exit} when told to stop"));
    }
    soak.report()
}

/// The running oi-trace: top-level sizes from its stdout and its stderr lines, each read on
/// a thread as they come (a pipe nobody drains makes oi-trace skip samples).
struct Tracer {
    child: Child,
    sizes: Receiver<Result<u64, String>>,
    stderr: Receiver<String>,
    stdout_reader: Option<thread::JoinHandle<()>>,
}

impl Tracer {
    fn start(bin: &Path, pid: i32, seconds: u64, dir: &TempDir) -> Result<Self> {
        let mut cmd = Command::new(bin);
        cmd.args(["--pid", &pid.to_string(), "--uprobe", "soak::inspect"])
            .args([
                "--arg",
                "arg0",
                "--format",
                "json",
                "--every",
                &EVERY.to_string(),
            ])
            .args(["--duration", &seconds.to_string()])
            .arg("--sample-log")
            .arg(dir.file("samples.jsonl"))
            .arg("--summary")
            .arg(dir.file("summary.json"));
        println!("soak: $ {cmd:?}");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().context("oi-trace stdout")?;
        let errors = child.stderr.take().context("oi-trace stderr")?;
        let (size_tx, sizes) = channel();
        let stdout_reader = thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if size_tx.send(top_size(&line)).is_err() {
                    break;
                }
            }
        });
        let (err_tx, stderr) = channel();
        thread::spawn(move || {
            for line in BufReader::new(errors).lines().map_while(Result::ok) {
                eprintln!("{line}");
                if err_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let tracer = Self {
            child,
            sizes,
            stderr,
            stdout_reader: Some(stdout_reader),
        };
        tracer.wait_attached()
    }

    /// Waits for "oi-trace: attached" (the probes are armed).
    fn wait_attached(mut self) -> Result<Self> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.stderr.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.starts_with("oi-trace: attached") => return Ok(self),
                Ok(_) | Err(_) => {}
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("oi-trace exited before attaching: {status}");
            }
            if Instant::now() > deadline {
                bail!("oi-trace did not attach within 60 s");
            }
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// oi-trace's resources over time.
#[derive(Default)]
struct Memory {
    /// (seconds since attach, VmRSS KiB)
    rss: Vec<(f64, u64)>,
    /// (threads, open fds) at the baseline and at the last poll before oi-trace's --duration
    /// is nearly over (it closes files as it shuts down).
    at_baseline: Option<(u64, u64)>,
    last: Option<(u64, u64)>,
    guardian_rss: Option<u64>,
}

impl Memory {
    fn poll(&mut self, pid: i32, elapsed: f64, (baseline_s, steady_s): (f64, f64)) {
        let Some(rss) = status_number(pid, "VmRSS:") else {
            return;
        };
        self.rss.push((elapsed, rss));
        let counts = (
            status_number(pid, "Threads:").unwrap_or(0),
            std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64),
        );
        if self.at_baseline.is_none() && elapsed >= baseline_s {
            self.at_baseline = Some(counts);
        }
        if elapsed <= steady_s {
            self.last = Some(counts);
        }
        // The guardian oi-trace forks at start (it resumes a target left stopped).
        self.guardian_rss = children(pid)
            .into_iter()
            .filter_map(|c| status_number(c, "VmRSS:"))
            .max();
    }

    /// RSS at the first poll at or after `baseline_s`.
    fn baseline(&self, baseline_s: f64) -> Option<u64> {
        self.rss.iter().find(|(t, _)| *t >= baseline_s).map(|r| r.1)
    }

    fn max_in(&self, from: f64, to: f64) -> Option<u64> {
        self.rss
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .map(|r| r.1)
            .max()
    }

    /// Least-squares slope of RSS after the baseline, KiB per minute.
    fn slope_after(&self, baseline_s: f64) -> f64 {
        let pts: Vec<(f64, f64)> = self
            .rss
            .iter()
            .filter(|(t, _)| *t >= baseline_s)
            .map(|&(t, r)| (t, r as f64))
            .collect();
        let n = pts.len() as f64;
        if pts.len() < 2 {
            return 0.0;
        }
        let (mt, mr) = (
            pts.iter().map(|p| p.0).sum::<f64>() / n,
            pts.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let cov: f64 = pts.iter().map(|p| (p.0 - mt) * (p.1 - mr)).sum();
        let var: f64 = pts.iter().map(|p| (p.0 - mt).powi(2)).sum();
        if var > 0.0 { cov / var * 60.0 } else { 0.0 }
    }
}

/// Everything the run observed, and what went wrong.
struct Soak {
    seconds: u64,
    /// Memory growth is measured from here: the end of minute 1 (half the run if it is shorter).
    baseline_s: f64,
    samples: Samples,
    memory: Memory,
    target: Target,
    log: Tail,
    wall_s: f64,
    /// When the last sample-log line was seen (seconds since attach).
    last_sample_s: f64,
    summary: Option<Value>,
    exit: Option<ExitStatus>,
    failures: Vec<String>,
    after: Vec<(String, bool)>,
}

impl Soak {
    fn new(pid: i32, seconds: u64, dir: &TempDir) -> Self {
        Self {
            seconds,
            baseline_s: (seconds as f64 / 2.0).min(60.0),
            samples: Samples::default(),
            memory: Memory::default(),
            target: Target::new(pid),
            log: Tail::new(dir.file("samples.jsonl")),
            wall_s: 0.0,
            last_sample_s: 0.0,
            summary: None,
            exit: None,
            failures: Vec::new(),
            after: Vec::new(),
        }
    }

    /// Polls every second until oi-trace exits; returns its exit status.
    fn watch(&mut self, fixture: &mut Fixture, tracer: &mut Tracer) -> Result<ExitStatus> {
        let started = Instant::now();
        let mut next = started;
        let mut last_report = 0;
        let mut dumped = false;
        loop {
            next += POLL;
            thread::sleep(next.saturating_duration_since(Instant::now()));
            let elapsed = started.elapsed().as_secs_f64();
            let steady_s = self.seconds as f64 - 2.0;
            self.memory
                .poll(tracer.pid(), elapsed, (self.baseline_s, steady_s));
            let logged = self.samples.logged_total;
            self.drain(fixture, tracer);
            if self.samples.logged_total > logged {
                self.last_sample_s = elapsed;
            }
            if !self.target.poll_states() {
                self.fail("the target died".into());
            }
            if let Some(status) = tracer.child.try_wait()? {
                self.wall_s = elapsed;
                return Ok(status);
            }
            // A slow exit: show where oi-trace's threads wait, once.
            if !dumped && elapsed > (self.seconds + 5) as f64 {
                dumped = true;
                dump_threads(tracer.pid());
            }
            if started.elapsed() > Duration::from_secs(self.seconds) + EXIT_GRACE {
                self.fail("oi-trace did not exit after its --duration".into());
                let _ = tracer.child.kill();
            }
            if elapsed as u64 / 60 > last_report {
                last_report = elapsed as u64 / 60;
                self.progress_line(elapsed);
            }
        }
    }

    /// Takes in what arrived: samples, sample-log lines, stderr, the fixture's lines.
    fn drain(&mut self, fixture: &mut Fixture, tracer: &Tracer) {
        self.take_output(tracer);
        for line in fixture.stdout.take() {
            self.target.on_line(&line);
        }
        if self.target.last_progress.elapsed() > PROGRESS_TIMEOUT {
            self.fail(format!(
                "no progress line from the fixture for {} s",
                self.target.last_progress.elapsed().as_secs()
            ));
            self.target.last_progress = Instant::now();
        }
    }

    fn progress_line(&self, elapsed: f64) {
        println!(
            "soak: {:>4.0} s  samples {:>6} checked {:>6} mismatches {}  oi-trace RSS {} KiB  target calls {}",
            elapsed,
            self.samples.logged_total,
            self.samples.checked,
            self.samples.mismatches,
            self.memory.rss.last().map_or(0, |r| r.1),
            self.target.total_calls
        );
    }

    fn fail(&mut self, what: String) {
        if !self.failures.contains(&what) {
            eprintln!("soak: FAIL: {what}");
            self.failures.push(what);
        }
    }

    /// oi-trace's stderr, printed samples and sample-log lines so far, paired and checked.
    fn take_output(&mut self, tracer: &Tracer) {
        for line in tracer.stderr.try_iter() {
            self.samples.on_stderr(&line);
        }
        for size in tracer.sizes.try_iter() {
            self.samples.on_printed(size);
        }
        for line in self.log.new_lines() {
            self.samples.on_logged(&line);
        }
        self.samples.check();
    }

    /// Collects the rest of oi-trace's output and its summary once it has exited.
    fn after_exit(&mut self, status: ExitStatus, mut tracer: Tracer, dir: &TempDir) {
        self.exit = Some(status);
        if let Some(reader) = tracer.stdout_reader.take() {
            let _ = reader.join();
        }
        // The stderr thread ends with the pipe; give it a moment to pass the last lines on.
        thread::sleep(Duration::from_millis(200));
        self.take_output(&tracer);
        let text = std::fs::read_to_string(dir.file("summary.json")).unwrap_or_default();
        self.summary = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.get(0).cloned());
    }

    /// After oi-trace: the target runs on, untraced, unstopped, with no mapping of ours left.
    fn check_target_after(&mut self, fixture: &mut Fixture, maps_before: &[String]) {
        // Two more progress lines show every thread still calling.
        thread::sleep(Duration::from_millis(2_500));
        for line in fixture.stdout.take() {
            self.target.on_line(&line);
        }
        let pid = fixture.pid;
        let untraced = status_number(pid, "TracerPid:") == Some(0);
        let states = thread_states(pid);
        let running = states.len() == THREADS + 2
            && states.iter().all(|t| matches!(t.state, 'R' | 'S' | 'D'));
        let maps_now = maps_of(pid);
        let maps_same = lasting(&maps_now) == lasting(maps_before);
        if maps_now != maps_before {
            println!(
                "soak: anonymous data mappings changed (the fixture's heap): gone {:?}, new {:?}",
                only_in(maps_before, &maps_now),
                only_in(&maps_now, maps_before)
            );
        }
        let progressing = self.target.last_progress.elapsed() < Duration::from_secs(2);
        self.after = vec![
            ("not traced (TracerPid 0)".into(), untraced),
            (
                format!("all {} threads running or sleeping", THREADS + 2),
                running,
            ),
            (
                "file-backed and executable maps as before, no RWX".into(),
                maps_same && !maps_now.iter().any(|l| l.contains(" rwx")),
            ),
            ("still making progress".into(), progressing),
        ];
    }

    fn report(mut self) -> Result<()> {
        let rows = self.rows();
        println!("\n| figure | value | limit | ok |\n|---|---|---|---|");
        for (figure, value, limit, ok) in &rows {
            println!(
                "| {figure} | {value} | {limit} | {} |",
                if *ok { "yes" } else { "NO" }
            );
            if !ok {
                self.failures.push(figure.clone());
            }
        }
        let notes = self.samples.examples.iter().chain(&self.samples.errors);
        for e in notes.chain(&self.target.idle_examples).take(20) {
            println!("soak: {e}");
        }
        if self.failures.is_empty() {
            println!("\nsoak: passed");
            Ok(())
        } else {
            bail!("soak failed: {}", self.failures.join("; "))
        }
    }

    fn rows(&self) -> Vec<(String, String, String, bool)> {
        let mut rows = self.run_rows();
        rows.extend(self.sample_rows());
        rows.extend(self.memory_rows());
        rows.extend(self.target_rows());
        rows
    }

    fn run_rows(&self) -> Vec<(String, String, String, bool)> {
        let exit = self.exit.map_or("none".into(), |s| s.to_string());
        vec![
            (
                "--duration / last sample seen at / oi-trace exited at".into(),
                format!(
                    "{} s / {:.0} s / {:.0} s",
                    self.seconds, self.last_sample_s, self.wall_s
                ),
                format!("exit ≤ duration + {} s", EXIT_GRACE.as_secs()),
                self.wall_s <= (self.seconds + EXIT_GRACE.as_secs()) as f64,
            ),
            (
                "oi-trace exit status".into(),
                exit,
                "0".into(),
                self.exit.is_some_and(|s| s.success()),
            ),
            (
                "oi-trace error lines".into(),
                self.samples.errors.len().to_string(),
                "0".into(),
                self.samples.errors.is_empty(),
            ),
        ]
    }

    fn sample_rows(&self) -> Vec<(String, String, String, bool)> {
        let s = &self.samples;
        let count = |key: &str| self.summary.as_ref().and_then(|v| v[key].as_u64());
        let (hits, sampled, dropped) = (count("hits"), count("sampled"), count("dropped"));
        let show = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
        let interval_ms = self.seconds as f64 * 1e3 / s.logged_total.max(1) as f64;
        let mut pauses = s.pauses_us.clone();
        let mut walks = s.walks_us.clone();
        vec![
            (
                "hits / sampled / dropped (summary)".into(),
                format!("{} / {} / {}", show(hits), show(sampled), show(dropped)),
                format!("sampled = logged = {}", s.logged_total),
                sampled == Some(s.logged_total),
            ),
            (
                "mean interval between samples (--duration / sampled)".into(),
                format!("{interval_ms:.2} ms"),
                "≈ 10 ms".into(),
                interval_ms < 20.0,
            ),
            (
                "samples printed / checked".into(),
                format!("{} / {}", s.printed_total, s.checked),
                format!("all {} logged", s.logged_total),
                s.checked == s.logged_total && s.printed_total == s.checked && s.checked > 0,
            ),
            (
                "samples whose size differs from the fixture's".into(),
                s.mismatches.to_string(),
                "0".into(),
                s.mismatches == 0,
            ),
            (
                format!(
                    "pause per sample: median / p99 / max; samples > {} ms",
                    SLOW_US / 1000
                ),
                format!(
                    "{} / {} / {} µs; {}",
                    percentile(&mut pauses, 50.0),
                    percentile(&mut pauses, 99.0),
                    pauses.last().copied().unwrap_or(0),
                    pauses.iter().filter(|&&p| p > SLOW_US).count()
                ),
                "report".into(),
                true,
            ),
            (
                "walk per sample: median / max".into(),
                format!(
                    "{} / {} µs",
                    percentile(&mut walks, 50.0),
                    walks.last().copied().unwrap_or(0)
                ),
                "report".into(),
                true,
            ),
        ]
    }

    fn memory_rows(&self) -> Vec<(String, String, String, bool)> {
        let m = &self.memory;
        let b = self.baseline_s;
        let first = m.rss.first().map_or(0, |r| r.1);
        let base = m.baseline(b).unwrap_or(0);
        let end = m.rss.last().map_or(0, |r| r.1);
        let max_before = m.max_in(0.0, b).unwrap_or(0);
        let max_after = m.max_in(b, f64::MAX).unwrap_or(0);
        let growth = end as i64 - base as i64;
        let peak_growth = max_after as i64 - max_before.max(base) as i64;
        let tol = RSS_TOLERANCE_KIB as i64;
        let counts =
            |c: Option<(u64, u64)>| c.map_or("?".into(), |(t, f)| format!("{t} threads, {f} fds"));
        vec![
            (
                format!("oi-trace VmRSS: first poll / at {b:.0} s / end"),
                format!("{first} / {base} / {end} KiB"),
                "report".into(),
                base > 0,
            ),
            (
                format!("oi-trace VmRSS growth after {b:.0} s (end − at {b:.0} s)"),
                format!("{growth} KiB"),
                format!("≤ {tol} KiB"),
                base > 0 && growth <= tol,
            ),
            (
                format!("oi-trace VmRSS peak: until {b:.0} s / after"),
                format!("{max_before} / {max_after} KiB (+{peak_growth})"),
                format!("after ≤ before + {tol} KiB"),
                peak_growth <= tol,
            ),
            (
                format!("oi-trace VmRSS trend after {b:.0} s (least squares)"),
                format!("{:.1} KiB/min", m.slope_after(b)),
                "report".into(),
                true,
            ),
            (
                format!("oi-trace threads and fds: at {b:.0} s / 2 s before the end"),
                format!("{} / {}", counts(m.at_baseline), counts(m.last)),
                "no more at the end".into(),
                m.at_baseline
                    .zip(m.last)
                    .is_some_and(|(b, l)| l.0 <= b.0 && l.1 <= b.1),
            ),
            (
                "guardian process VmRSS at end".into(),
                m.guardian_rss
                    .map_or("none seen".into(), |r| format!("{r} KiB")),
                "report".into(),
                true,
            ),
        ]
    }

    fn target_rows(&self) -> Vec<(String, String, String, bool)> {
        let t = &self.target;
        let mut rows = vec![
            (
                "target calls, all threads".into(),
                t.total_calls.to_string(),
                "report".into(),
                t.total_calls > 0,
            ),
            (
                format!(
                    "calls per thread per second, min / max ({} intervals)",
                    t.intervals
                ),
                format!("{} / {}", t.min_delta.min(t.max_delta), t.max_delta),
                "report".into(),
                t.intervals > 0,
            ),
            (
                "thread-seconds without a call / longest run".into(),
                format!("{} / {} s", t.idle_intervals, t.longest_idle),
                format!("run < {STUCK_SECONDS} s"),
                t.longest_idle < STUCK_SECONDS,
            ),
            (
                format!(
                    "target: longest soak::inspect call / seconds with one > {} ms",
                    SLOW_US / 1000
                ),
                format!("{} µs / {}", t.max_call_us, t.slow_call_seconds),
                "report".into(),
                true,
            ),
            (
                format!(
                    "target: worst wake-up lateness (machine load) / seconds > {} ms",
                    SLOW_US / 1000
                ),
                format!("{} µs / {}", t.max_late_us, t.late_seconds),
                "report".into(),
                true,
            ),
            (
                format!(
                    "threads seen stopped: observations / longest span ({} threads)",
                    t.threads_seen
                ),
                format!("{} / {} ms", t.stopped_seen, t.longest_stopped.as_millis()),
                format!("span < {} s", STUCK_STOPPED.as_secs()),
                t.longest_stopped < STUCK_STOPPED,
            ),
            (
                "fixture's own checks (checksums, registers, FPU)".into(),
                if t.corrupt.is_empty() {
                    "all held".into()
                } else {
                    t.corrupt.join("; ")
                },
                "no CORRUPT".into(),
                t.corrupt.is_empty(),
            ),
        ];
        for (what, ok) in &self.after {
            rows.push((
                format!("target after oi-trace: {what}"),
                if *ok { "yes".into() } else { "no".into() },
                "yes".into(),
                *ok,
            ));
        }
        rows
    }
}

/// Prints each thread of `pid` with its state, wait channel and kernel stack.
fn dump_threads(pid: i32) {
    println!("soak: oi-trace still running 5 s after its --duration; its threads:");
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        println!(
            "soak:   {} {} wchan {}\n{}",
            task.file_name().to_string_lossy(),
            read("comm").trim(),
            read("wchan"),
            read("stack")
        );
    }
}

/// The p-th percentile (sorts `v`; 0 when empty).
fn percentile(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    if v.is_empty() {
        return 0;
    }
    let i = ((v.len() - 1) as f64 * p / 100.0).round() as usize;
    v[i]
}
