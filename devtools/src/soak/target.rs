//! The soak's view of its target: the fixture's per-thread progress and timings, each
//! thread's state from /proc, and the mappings that must be as they were.

use super::*;

/// The number a field of /proc/PID/status starts with (its kB are KiB).
pub(crate) fn status_number(pid: i32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub(super) fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect()
}

/// The target's threads: per-thread progress and timings from the fixture, states from /proc.
pub(super) struct Target {
    pub(super) pid: i32,
    /// The last progress line: (milliseconds since the fixture started, calls per thread).
    pub(super) last: Option<(u64, Vec<u64>)>,
    pub(super) last_progress: Instant,
    pub(super) intervals: u64,
    pub(super) min_delta: u64,
    pub(super) max_delta: u64,
    pub(super) total_calls: u64,
    /// Per thread: consecutive progress intervals without a call.
    pub(super) idle_streak: Vec<u32>,
    pub(super) idle_intervals: u64,
    pub(super) longest_idle: u32,
    pub(super) idle_examples: Vec<String>,
    /// From the fixture's timing lines: the longest call of soak::inspect, the worst wake-up
    /// lateness (µs), and how many seconds had one above `SLOW_US`.
    pub(super) max_call_us: u64,
    pub(super) slow_call_seconds: u64,
    pub(super) max_late_us: u64,
    pub(super) late_seconds: u64,
    pub(super) corrupt: Vec<String>,
    /// Since when each thread has been seen stopped ('t' or 'T') in every poll, without a
    /// context switch between the polls, and its count of context switches then.
    pub(super) stopped_since: HashMap<i32, (Instant, u64)>,
    pub(super) stopped_seen: u64,
    pub(super) longest_stopped: Duration,
    pub(super) threads_seen: usize,
}

impl Target {
    pub(super) fn new(pid: i32) -> Self {
        Self {
            pid,
            last: None,
            last_progress: Instant::now(),
            intervals: 0,
            min_delta: u64::MAX,
            max_delta: 0,
            total_calls: 0,
            idle_streak: vec![0; THREADS],
            idle_intervals: 0,
            longest_idle: 0,
            idle_examples: Vec::new(),
            max_call_us: 0,
            slow_call_seconds: 0,
            max_late_us: 0,
            late_seconds: 0,
            corrupt: Vec::new(),
            stopped_since: HashMap::new(),
            stopped_seen: 0,
            longest_stopped: Duration::ZERO,
            threads_seen: 0,
        }
    }

    pub(super) fn on_line(&mut self, line: &str) {
        if line.starts_with("CORRUPT") {
            self.corrupt.push(line.to_string());
        }
        let numbers = |rest: &str| -> Vec<u64> {
            rest.split_whitespace()
                .map(|w| w.parse().unwrap_or(0))
                .collect()
        };
        if let Some(rest) = line.strip_prefix("progress ") {
            self.on_progress(&numbers(rest));
        } else if let Some(rest) = line.strip_prefix("timing ") {
            self.on_timing(&numbers(rest));
        }
    }

    /// `SECOND MS C0 C1 ...`
    pub(super) fn on_progress(&mut self, fields: &[u64]) {
        let [second, ms, counts @ ..] = fields else {
            return;
        };
        self.last_progress = Instant::now();
        self.total_calls = counts.iter().sum();
        if let Some((last_ms, last)) = &self.last {
            self.intervals += 1;
            for (t, (now, before)) in counts.iter().zip(last).enumerate() {
                let delta = now.saturating_sub(*before);
                self.min_delta = self.min_delta.min(delta);
                self.max_delta = self.max_delta.max(delta);
                let streak = &mut self.idle_streak[t.min(THREADS - 1)];
                if delta > 0 {
                    *streak = 0;
                    continue;
                }
                *streak += 1;
                self.idle_intervals += 1;
                self.longest_idle = self.longest_idle.max(*streak);
                if self.idle_examples.len() < 10 {
                    self.idle_examples.push(format!(
                        "thread {t} made no call in second {second} ({} ms)",
                        ms.saturating_sub(*last_ms)
                    ));
                }
            }
        }
        self.last = Some((*ms, counts.to_vec()));
    }

    /// `SECOND CALL_US LATE_US`
    pub(super) fn on_timing(&mut self, fields: &[u64]) {
        let [_, call_us, late_us] = fields else {
            return;
        };
        self.max_call_us = self.max_call_us.max(*call_us);
        self.max_late_us = self.max_late_us.max(*late_us);
        self.slow_call_seconds += u64::from(*call_us > SLOW_US);
        self.late_seconds += u64::from(*late_us > SLOW_US);
    }

    /// Notes which threads are stopped now; returns false when the process is gone.
    pub(super) fn poll_states(&mut self) -> bool {
        let states = thread_states(self.pid);
        if states.is_empty() || states.iter().any(|t| t.tid == self.pid && t.state == 'Z') {
            return false;
        }
        self.threads_seen = self.threads_seen.max(states.len());
        for ThreadState {
            tid,
            state,
            switches,
        } in states
        {
            if matches!(state, 't' | 'T') {
                self.stopped_seen += 1;
                let since = self
                    .stopped_since
                    .entry(tid)
                    .or_insert((Instant::now(), switches));
                // It ran (and stopped again) since the last poll: another stop.
                if since.1 != switches {
                    *since = (Instant::now(), switches);
                }
                self.longest_stopped = self.longest_stopped.max(since.0.elapsed());
            } else {
                self.stopped_since.remove(&tid);
            }
        }
        true
    }
}

/// One thread of the fixture as /proc shows it.
pub(super) struct ThreadState {
    pub(super) tid: i32,
    /// The one-letter state of `stat`.
    pub(super) state: char,
    /// Voluntary and involuntary context switches so far: unchanged between two looks only
    /// if the thread did not run (or stop again) in between.
    pub(super) switches: u64,
}

/// Every thread of `pid`.
pub(super) fn thread_states(pid: i32) -> Vec<ThreadState> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(|tid: i32| {
            let dir = format!("/proc/{pid}/task/{tid}");
            let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
            let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
            let switches = status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum();
            Some(ThreadState {
                tid,
                state: stat.rsplit_once(')')?.1.trim_start().chars().next()?,
                switches,
            })
        })
        .collect()
}

/// The mappings a tracer could leave behind and the fixture never changes: every file-backed
/// one and every executable one (oi-trace's walker code is anonymous r-x). Anonymous data
/// mappings are left out: the fixture's malloc arenas and heap grow as its containers do.
pub(super) fn lasting(maps: &[String]) -> Vec<&String> {
    maps.iter()
        .filter(|l| {
            let mut fields = l.split_whitespace();
            let perms = fields.nth(1).unwrap_or("");
            let path = fields.nth(3).unwrap_or("");
            path.starts_with('/') || perms.contains('x')
        })
        .collect()
}

/// Lines only in `a`, as a short list for the log.
pub(super) fn only_in<'a>(a: &'a [String], b: &[String]) -> Vec<&'a String> {
    a.iter().filter(|l| !b.contains(l)).collect()
}
