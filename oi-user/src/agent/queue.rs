//! Delivery to a network backend without ever holding the profiler up: a bounded queue that
//! the targets' threads offer profiles to (a mutex held for a push, nothing more), and one
//! delivery thread that sends the oldest profile, retries a failed send with exponential
//! backoff, and counts everything it could not deliver.
//!
//! Policy: at most `capacity` profiles wait, and one more may be in flight. A profile offered
//! to a full queue pushes the oldest waiting one out (the freshest data is worth most), which
//! is counted as dropped. A send that the backend refuses for good (an HTTP 4xx other than
//! 408 and 429: a malformed request, bad credentials) is not retried: the profile is counted
//! as rejected. When the agent stops, the queue is given a few seconds to drain; what is left
//! then is counted as dropped too.

use std::{
    collections::VecDeque,
    sync::{Arc, Condvar, Mutex, MutexGuard},
    time::{Duration, Instant, SystemTime},
};

use super::labels::Labels;

/// One profile on its way: the target's labels, the interval it covers, the gzipped pprof.
#[derive(Debug)]
pub struct Profile {
    pub labels: Arc<Labels>,
    pub from: SystemTime,
    pub until: SystemTime,
    pub pprof_gz: Vec<u8>,
}

/// Why a send failed.
#[derive(Debug)]
pub enum SendError {
    /// Worth another attempt: no connection, a timeout, a 5xx, 408 or 429.
    Retry(String),
    /// Never worth another attempt: the backend refused this request.
    Reject(String),
}

/// A backend a profile is sent to (Pyroscope's ingest API, OTLP/HTTP).
pub trait Backend: Send {
    /// `pyroscope` or `otlp`, for the status line.
    fn kind(&self) -> &'static str;
    /// `pyroscope http://…`, for messages.
    fn describe(&self) -> String;
    /// Sends one profile, blocking the delivery thread (never a target's) until it is done.
    fn send(&mut self, profile: &Profile) -> Result<(), SendError>;
}

/// What the queue did, for the status line and the summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub offered: u64,
    pub delivered: u64,
    /// Pushed out of a full queue, or left in it when the agent stopped.
    pub dropped: u64,
    pub rejected: u64,
    /// Sends that failed and were tried again later.
    pub retries: u64,
    /// Waiting, plus the one in flight.
    pub queued: u64,
}

struct State {
    waiting: VecDeque<Arc<Profile>>,
    in_flight: bool,
    closed: bool,
    stats: Stats,
}

/// The bounded queue between the targets' threads and the delivery thread.
pub struct Queue {
    state: Mutex<State>,
    changed: Condvar,
    capacity: usize,
}

impl Queue {
    pub fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State {
                waiting: VecDeque::new(),
                in_flight: false,
                closed: false,
                stats: Stats::default(),
            }),
            changed: Condvar::new(),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere never leaves the queue's state half-changed: every change is one
        // push, pop or counter.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `profile`, pushing the oldest waiting one out when full. Never waits for the
    /// network.
    pub fn offer(&self, profile: Arc<Profile>) {
        let mut s = self.lock();
        s.stats.offered += 1;
        if s.waiting.len() >= self.capacity {
            s.waiting.pop_front();
            s.stats.dropped += 1;
        }
        s.waiting.push_back(profile);
        drop(s);
        self.changed.notify_all();
    }

    pub fn stats(&self) -> Stats {
        let s = self.lock();
        let mut stats = s.stats;
        stats.queued = s.waiting.len() as u64 + u64::from(s.in_flight);
        stats
    }

    /// No more offers: the delivery thread drains what is left, for `grace` at most.
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// The delivery thread: sends profiles in order until the queue is closed and empty, or
    /// closed and `grace` has passed (the rest counted as dropped). `verbose`: one stderr line
    /// per delivery.
    pub fn serve(
        &self,
        backend: &mut dyn Backend,
        retry_max: Duration,
        grace: Duration,
        verbose: bool,
    ) {
        let mut backoff = Backoff::new(retry_max);
        let mut rejected_said = false;
        let mut failing_said = false;
        let mut closed_at: Option<Instant> = None;
        loop {
            let profile = {
                let mut s = self.lock();
                loop {
                    if s.closed {
                        let since = *closed_at.get_or_insert_with(Instant::now);
                        if s.waiting.is_empty() || since.elapsed() >= grace {
                            s.stats.dropped += s.waiting.len() as u64;
                            s.waiting.clear();
                            return;
                        }
                    }
                    if let Some(p) = s.waiting.pop_front() {
                        s.in_flight = true;
                        break p;
                    }
                    s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
                }
            };
            let outcome = backend.send(&profile);
            let mut s = self.lock();
            s.in_flight = false;
            match outcome {
                Ok(()) => {
                    s.stats.delivered += 1;
                    backoff.reset();
                    if failing_said {
                        eprintln!("oi-trace: agent: {} answers again", backend.describe());
                        failing_said = false;
                    }
                    if verbose {
                        eprintln!(
                            "oi-trace: agent: delivered {} to {}",
                            profile.labels.pyroscope_name(),
                            backend.describe()
                        );
                    }
                }
                Err(SendError::Reject(why)) => {
                    s.stats.rejected += 1;
                    if !rejected_said || verbose {
                        eprintln!(
                            "oi-trace: agent: {} refused a profile (not retried; further \
                             refusals are counted): {why}",
                            backend.describe()
                        );
                        rejected_said = true;
                    }
                }
                Err(SendError::Retry(why)) => {
                    s.stats.retries += 1;
                    if !failing_said || verbose {
                        eprintln!(
                            "oi-trace: agent: sending to {} failed, retrying with backoff: {why}",
                            backend.describe()
                        );
                        failing_said = true;
                    }
                    // Back at the head, unless the queue filled up meanwhile: then it is the
                    // oldest, and the one pushed out.
                    if s.waiting.len() >= self.capacity {
                        s.stats.dropped += 1;
                    } else {
                        s.waiting.push_front(profile);
                    }
                    let wait = backoff.next_wait();
                    let until = Instant::now() + wait;
                    // The wait ends early only when the queue closes: then the grace period
                    // decides.
                    while !s.closed {
                        let left = until.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        s = self
                            .changed
                            .wait_timeout(s, left)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                    if s.closed {
                        // Draining: one more attempt after a short pause, until the grace
                        // period ends.
                        drop(s);
                        std::thread::sleep(wait.min(Duration::from_millis(250)));
                    }
                }
            }
        }
    }
}

/// Exponential backoff: 250 ms, 500 ms, 1 s, … up to a maximum.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

const FIRST_WAIT: Duration = Duration::from_millis(250);

impl Backoff {
    pub fn new(max: Duration) -> Self {
        Self {
            next: FIRST_WAIT.min(max),
            max,
        }
    }

    /// The wait before the next attempt.
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }

    pub fn reset(&mut self) {
        self.next = FIRST_WAIT.min(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(n: u8) -> Arc<Profile> {
        Arc::new(Profile {
            labels: Arc::new(Labels {
                service_name: "s".into(),
                pairs: vec![],
            }),
            from: SystemTime::UNIX_EPOCH,
            until: SystemTime::UNIX_EPOCH,
            pprof_gz: vec![n],
        })
    }

    /// A backend that fails while `down` holds, and records what it received.
    struct Flaky {
        down: Arc<Mutex<bool>>,
        got: Arc<Mutex<Vec<u8>>>,
    }

    impl Backend for Flaky {
        fn kind(&self) -> &'static str {
            "flaky"
        }
        fn describe(&self) -> String {
            "flaky".into()
        }
        fn send(&mut self, p: &Profile) -> Result<(), SendError> {
            if *self.down.lock().unwrap() {
                return Err(SendError::Retry("down".into()));
            }
            if p.pprof_gz[0] == 99 {
                return Err(SendError::Reject("bad".into()));
            }
            self.got.lock().unwrap().push(p.pprof_gz[0]);
            Ok(())
        }
    }

    #[test]
    fn backoff_doubles_to_its_maximum() {
        let mut b = Backoff::new(Duration::from_secs(1));
        let waits: Vec<u128> = (0..5).map(|_| b.next_wait().as_millis()).collect();
        assert_eq!(waits, [250, 500, 1000, 1000, 1000]);
        b.reset();
        assert_eq!(b.next_wait().as_millis(), 250);
    }

    #[test]
    fn full_queue_drops_the_oldest_and_a_backend_that_returns_gets_the_rest() {
        let queue = Arc::new(Queue::new(3));
        let down = Arc::new(Mutex::new(true));
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut backend = Flaky {
            down: down.clone(),
            got: got.clone(),
        };
        let q = queue.clone();
        let server = std::thread::spawn(move || {
            q.serve(
                &mut backend,
                Duration::from_millis(20),
                Duration::from_secs(5),
                false,
            )
        });
        // The first is taken at once and fails; then 1..=5 arrive while it waits, and the
        // queue keeps the newest three (and pushes the in-flight one out when it comes back).
        queue.offer(profile(0));
        std::thread::sleep(Duration::from_millis(50));
        for n in 1..=5 {
            queue.offer(profile(n));
        }
        std::thread::sleep(Duration::from_millis(100));
        *down.lock().unwrap() = false;
        std::thread::sleep(Duration::from_millis(200));
        queue.offer(profile(99));
        queue.offer(profile(6));
        std::thread::sleep(Duration::from_millis(200));
        queue.close();
        server.join().unwrap();
        let stats = queue.stats();
        let got = got.lock().unwrap().clone();
        assert_eq!(stats.offered, 8);
        assert_eq!(stats.rejected, 1);
        assert_eq!(stats.delivered, got.len() as u64);
        assert_eq!(
            stats.delivered + stats.dropped + stats.rejected,
            stats.offered
        );
        assert!(stats.retries >= 1);
        assert_eq!(stats.queued, 0);
        // In order, the newest always delivered.
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        assert_eq!(got.last(), Some(&6));
        assert!(
            got.contains(&5) && got.contains(&4) && got.contains(&3),
            "{got:?}"
        );
    }

    #[test]
    fn a_closed_queue_drains_for_its_grace_period_then_counts_the_rest() {
        let queue = Arc::new(Queue::new(8));
        let mut backend = Flaky {
            down: Arc::new(Mutex::new(true)),
            got: Arc::new(Mutex::new(Vec::new())),
        };
        for n in 0..4 {
            queue.offer(profile(n));
        }
        queue.close();
        let started = Instant::now();
        queue.serve(
            &mut backend,
            Duration::from_millis(10),
            Duration::from_millis(300),
            false,
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        let stats = queue.stats();
        assert_eq!((stats.delivered, stats.dropped), (0, 4));
    }
}
