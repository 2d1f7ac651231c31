//! The serve loop: poll the trigger's ring buffer, the tracer's stops and the signals until the
//! count, the duration, a signal or the targets' exit ends the run; execs and exits of a target
//! are handled here. The sampling itself is `sample`'s; never measures anything here.

use super::*;

impl Session {
    /// One line per probe that has had no hit since it was armed: what may keep it silent.
    pub(super) fn hint_if_silent(&mut self) {
        self.hinted = true;
        let waited = self.armed_at.elapsed().as_secs_f64();
        for (i, probe) in self.probes.iter().enumerate() {
            if self.trigger.counters(i as u32).hits > 0 {
                continue;
            }
            let points: usize = probe.sites.iter().map(|s| s.points.len()).sum();
            let why = if probe.hints.is_empty() {
                format!(
                    "all {points} point(s) are armed; the code may not be running (check that \
                     the process reaches it)"
                )
            } else {
                probe.hints.join("; ")
            };
            eprintln!(
                "oi-trace: hint: {}: no hits in {waited:.0} s: {why}; probing a caller may see \
                 its work",
                probe.symbol
            );
        }
    }

    pub(super) fn count_reached(&self) -> bool {
        self.count.is_some_and(|c| self.samples >= c)
    }

    /// The sample about to be taken in `tgid` is the last one `--count` allows: from here on
    /// no process may start another (each stays marked busy, so its Nth hits are dropped and
    /// no SIGSTOP of ours is sent after this one), and the run ends once it is printed.
    pub(super) fn last_sample(&mut self, tgid: i32) -> bool {
        if self.count.is_none_or(|c| self.samples + 1 < c) {
            return false;
        }
        let processes: Vec<i32> = self.tracer.processes().collect();
        for other in processes {
            if other != tgid {
                self.trigger.hold_busy(other, false);
            }
        }
        true
    }

    /// The event loop: ring buffer, ptrace stops (SIGCHLD), our own signals, the deadline.
    pub(super) fn serve(&mut self, signals: &SignalSet, deadline: Option<Instant>) -> Result<End> {
        self.armed_at = Instant::now();
        loop {
            if self.count_reached() {
                return Ok(End::Done);
            }
            if !self.hinted && self.armed_at.elapsed() >= HINT_AFTER {
                self.hint_if_silent();
            }
            let timeout = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        if !self.hinted {
                            self.hint_if_silent();
                        }
                        return Ok(End::Done);
                    }
                    left.min(Duration::from_millis(100))
                }
                None => Duration::from_millis(100),
            };
            let events_fd = self.trigger.events_fd();
            // SAFETY: the ring buffer's fd stays open for the life of `self.trigger`.
            let ring = unsafe { BorrowedFd::borrow_raw(events_fd) };
            let mut fds = [
                PollFd::new(signals.fd.as_fd(), PollFlags::POLLIN),
                PollFd::new(ring, PollFlags::POLLIN),
                PollFd::new(self.reporter.wake_fd(), PollFlags::POLLIN),
            ];
            let ms = u16::try_from(timeout.as_millis().max(1)).unwrap_or(u16::MAX);
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(Error::internal(format!("poll: {e}"))),
            }
            if signals.take_termination() {
                return Ok(End::Done);
            }
            self.collect_reports();
            self.drain_events();
            if let Some(end) = self.handle_stops()? {
                return Ok(end);
            }
            if let Scope::Pid(info) = &self.scope
                && !self.sampling
                && !procfs::is_alive(info.pid)
            {
                return Ok(End::TargetExited);
            }
        }
    }

    pub(super) fn drain_events(&mut self) {
        while let Some(ev) = self.trigger.next_event() {
            match ev.kind {
                event::SAMPLE => {
                    self.pending.insert(ev.tid as i32, ev);
                }
                event::NEW_PROCESS if self.sampling => {
                    let tgid = ev.tgid as i32;
                    if !self.tracer.holds(tgid)
                        && let Err(e) = self.seize(tgid)
                    {
                        eprintln!("oi-trace: warning: new process {tgid} not traced: {e}");
                    }
                }
                _ => {}
            }
        }
    }

    pub(super) fn handle_stops(&mut self) -> Result<Option<End>> {
        for stop in self.tracer.poll() {
            match stop {
                Stop::Signal {
                    tid,
                    tgid,
                    signal: Signal::SIGSTOP,
                } => {
                    if !self.pending.contains_key(&tid) {
                        // The event is always submitted before the signal is delivered.
                        self.drain_events();
                    }
                    match self.pending.remove(&tid) {
                        // A sample started before the count was reached, seen after: let
                        // its thread go unmeasured (our SIGSTOP suppressed).
                        Some(ev) if self.count_reached() => {
                            self.cancelled[ev.probe as usize] += 1;
                            self.tracer.resume(tid, None);
                        }
                        Some(ev) => self.sample(ev, tid, tgid)?,
                        // Somebody else's SIGSTOP: deliver it (the process stops, as it should).
                        None => self.tracer.resume(tid, Some(Signal::SIGSTOP)),
                    }
                }
                Stop::Signal { tid, signal, .. } => self.tracer.resume(tid, Some(signal)),
                Stop::ProcessExited { tgid } => {
                    self.forget_process(tgid);
                    if matches!(self.scope, Scope::Pid(_)) {
                        return Ok(Some(End::TargetExited));
                    }
                }
                Stop::Exec { tgid } => {
                    if let Some(end) = self.on_exec(tgid) {
                        return Ok(Some(end));
                    }
                }
            }
        }
        Ok(None)
    }

    /// `tgid` replaced its program: what we knew of the old one is void. With --pid that
    /// ends the run (the probe is gone with the old program).
    pub(super) fn on_exec(&mut self, tgid: i32) -> Option<End> {
        // Our segments went with the old program: nothing to unmap at release.
        if let Some(in_target) = &mut self.in_target {
            in_target.forget(tgid);
        }
        self.sites.retain(|&(pid, _, _), _| pid != tgid);
        // The threads our SIGSTOPs were meant for are gone.
        self.pending.retain(|_, ev| ev.tgid as i32 != tgid);
        self.trigger.clear_busy(tgid);
        matches!(self.scope, Scope::Pid(_)).then(|| {
            let program = std::fs::read_link(format!("/proc/{tgid}/exe"))
                .map_or_else(|_| "another program".into(), |p| p.display().to_string());
            End::TargetExec(program)
        })
    }
}

/// How long a probe may stay without hits before the hint (unless `--duration` ends first).
pub(super) const HINT_AFTER: Duration = Duration::from_secs(10);

/// Whether `tgid` is alive, allowing for an execve in progress: while a non-leader thread
/// execs, the old leader is briefly a zombie before the exec'ing thread takes its pid.
pub(super) fn alive_after_exec(tgid: i32) -> bool {
    for _ in 0..20 {
        if procfs::is_alive(tgid) {
            return true;
        }
        if procfs::threads(tgid).len() <= 1 {
            // No other thread could be taking the leader's place.
            return procfs::is_alive(tgid);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}
