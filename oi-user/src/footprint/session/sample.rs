//! One sample: the thread frozen at a probe is matched to its site, its registers read, its
//! arguments walked (interpreter or the walker inside the target), and it is let go with our
//! SIGSTOP suppressed; the reports are decoded and printed off this path (`reporter`).
//! Never leaves a sampled thread stopped, whatever fails.

use super::*;

impl Session {
    /// The sampled thread is frozen at the probe: walk the arguments, print the result, then
    /// let the thread go on with our SIGSTOP suppressed and allow the next sample.
    pub(super) fn sample(&mut self, ev: Event, tid: i32, tgid: i32) -> Result<()> {
        let mut timing = Timing::default();
        let last = self.last_sample(tgid);
        let located = self
            .site_of(tgid, ev.probe, ev.regs.rip)
            .and_then(|(site, bias)| {
                let regs = self.registers_of(&ev, tid, site)?;
                Ok((site, bias, regs))
            });
        let result = match located {
            Ok((site, bias, regs)) => {
                self.walk(&ev, &regs, (tgid, tid), (site, bias), last, &mut timing)
            }
            Err(e) => {
                if last {
                    self.trigger.hold_busy(tgid, true);
                } else {
                    self.trigger.clear_busy(tgid);
                }
                self.tracer.resume(tid, None);
                timing.resumed_ns = monotonic_ns();
                Err(Failure::Sample(e))
            }
        };
        let walk_us = timing.walk_us;
        // From the hit (the kernel's clock) to the moment the thread runs again.
        let pause_us = timing.resumed_ns.saturating_sub(ev.time_ns) / 1000;
        if self.verbose && result.is_ok() {
            let in_target = timing.in_target_ns.map_or_else(
                || "unknown".to_string(),
                |ns| format!("{:.3} ms", ns as f64 / 1e6),
            );
            // Where the pause went: from the hit to the tracer holding the thread (the trigger's
            // stop and the tracer's wake-up), the walks with the ptrace stops around them, and
            // giving the thread back.
            let parts = timing.phases.map_or_else(String::new, |p| {
                let ms = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e6;
                format!(
                    " (held after {:.3} ms, walked in {:.3} ms, resumed in {:.3} ms)",
                    ms(ev.time_ns, p.held_ns),
                    ms(p.held_ns, p.walked_ns),
                    ms(p.walked_ns, p.resumed_ns)
                )
            });
            // The hit's moment on CLOCK_MONOTONIC lets a target that times its own calls
            // (the bench's fixture) line a call up with its sample, part by part.
            eprintln!(
                "oi-trace: sample {} of pid {tgid}: walk in the target {in_target}, pause {:.3} ms, \
                 hit at {:.6} s{parts}",
                ev.hit,
                pause_us as f64 / 1e3,
                ev.time_ns as f64 / 1e9
            );
        }
        self.samples += 1;
        if result.is_err() {
            self.failures[ev.probe as usize].samples += 1;
        }
        match result {
            Ok(()) => {}
            Err(Failure::Sample(e)) => {
                self.failed_samples += 1;
                eprintln!("oi-trace: error: sample {} of pid {tgid}: {e}", ev.hit);
            }
            Err(Failure::Gone) => {
                self.failed_samples += 1;
                if !alive_after_exec(tgid) {
                    self.forget_process(tgid);
                    if matches!(self.scope, Scope::Pid(_)) {
                        return Err(Error::sample("target exited"));
                    }
                }
            }
            Err(Failure::Exec) => {
                self.failed_samples += 1;
                if let Some(End::TargetExec(program)) = self.on_exec(tgid) {
                    return Err(Error::sample(format!(
                        "target exited (it executed {program})"
                    )));
                }
            }
        }
        let probe = &self.probes[ev.probe as usize];
        self.logs.sample(&SampleRecord {
            probe: &probe.symbol,
            event: &ev,
            pause_us,
            walk_us,
            in_target_ns: timing.in_target_ns,
        })
    }

    /// Walks the probe's arguments in the stopped process, resumes the thread, and queues
    /// the report. Busy is cleared before the thread runs again (its next Nth hit must find
    /// the process free, or it would be dropped), unless reports are backed up or this is
    /// the `last` sample of the run (then the process stays busy for good).
    /// The registers of the hit: as the eBPF side captured them, plus the xmm registers when
    /// an argument (a float or a double) lives there. The eBPF side cannot read those, but the
    /// thread is stopped at the probe, so its FPU state still holds them.
    pub(super) fn registers_of(&self, ev: &Event, tid: i32, site: usize) -> Result<EntryRegs> {
        let mut regs = ev.regs;
        if self.probes[ev.probe as usize].measurers[site].needs_vector_registers() {
            regs.xmm = remote::xmm_low_halves(tid).map_err(|e| {
                Error::sample(format!("reading the vector registers of thread {tid}: {e}"))
            })?;
        }
        Ok(regs)
    }

    pub(super) fn walk(
        &mut self,
        ev: &Event,
        regs: &EntryRegs,
        (tgid, tid): (i32, i32),
        (site, bias): (usize, u64),
        last: bool,
        timing: &mut Timing,
    ) -> Result<(), Failure> {
        let measurer = self.probes[ev.probe as usize].measurers[site].clone();
        let started = Instant::now();
        let (trigger, reporter, deferred) =
            (&mut self.trigger, &self.reporter, &mut self.deferred_busy);
        let mut before_resume = || {
            if last {
                trigger.hold_busy(tgid, true);
            } else if reporter.pending() < BACKLOG {
                trigger.clear_busy(tgid);
            } else {
                deferred.push(tgid);
            }
        };
        let streams = match &mut self.in_target {
            Some(in_target) => {
                let probe = (ev.probe as usize, site);
                in_target.sample(
                    (tgid, tid),
                    probe,
                    &measurer,
                    regs,
                    bias,
                    &mut before_resume,
                )
            }
            None => {
                let mem = RemoteReader::new(tgid);
                let walked = measurer.walk_streams(regs, bias, &mem);
                before_resume();
                self.tracer.resume(tid, None);
                walked.map_err(|e| Failure::Sample(Error::sample(e.to_string())))
            }
        };
        timing.resumed_ns = monotonic_ns();
        timing.walk_us = started.elapsed().as_micros() as u64;
        timing.in_target_ns = self.in_target.as_ref().and_then(InTarget::last_walk_ns);
        if let Some(in_target) = &self.in_target {
            let phases = in_target.last_phases();
            // The thread ran again before a large output was copied: that copy is no pause.
            if phases.resumed_ns != 0 {
                timing.resumed_ns = phases.resumed_ns;
            }
            timing.phases = Some(phases);
        }
        let probe = (ev.probe as usize, &*self.probes[ev.probe as usize].symbol);
        self.reporter
            .submit((tgid, tid, ev.hit), probe, measurer, streams?);
        Ok(())
    }

    /// Takes note of the reports written meanwhile; lifts busy marks kept for the backlog.
    pub(super) fn collect_reports(&mut self) {
        for written in self.reporter.written() {
            self.take_written(written);
        }
        if self.reporter.pending() < BACKLOG && !self.count_reached() {
            for tgid in self.deferred_busy.drain(..) {
                self.trigger.clear_busy(tgid);
            }
        }
    }

    /// Counts and says what a written report found: roots that could not be measured (a
    /// warning each: the sample's other roots were printed), or why nothing was printed.
    pub(super) fn take_written(&mut self, written: Written) {
        let probe = Some(written.probe).filter(|&p| p < self.failures.len());
        let (hit, tgid) = (written.hit, written.tgid);
        if self.verbose {
            eprintln!(
                "oi-trace: sample {hit} of pid {tgid}: decoded and printed in {:.3} ms of CPU",
                written.cpu_ns as f64 / 1e6
            );
        }
        match written.result {
            Ok(failed) => {
                for root in &failed {
                    eprintln!(
                        "oi-trace: warning: sample {hit} of pid {tgid}: not measured (`{{}}` in \
                         its place), {root}"
                    );
                }
                if let Some(p) = probe {
                    self.failures[p].roots += failed.len() as u64;
                    let u = &mut self.failures[p].unions;
                    *u = (*u).max(written.unions);
                }
            }
            Err(e) => {
                self.failed_samples += 1;
                if e.nothing_measured {
                    self.nothing_measured += 1;
                }
                if let Some(p) = probe {
                    self.failures[p].samples += 1;
                }
                eprintln!("oi-trace: error: sample {hit} of pid {tgid}: {}", e.why);
            }
        }
    }

    pub(super) fn forget_process(&mut self, tgid: i32) {
        self.tracer.forget_process(tgid);
        self.trigger.forget(tgid);
        if let Some(in_target) = &mut self.in_target {
            in_target.forget(tgid);
        }
        self.sites.retain(|&(pid, _, _), _| pid != tgid);
        self.pending.retain(|_, ev| ev.tgid as i32 != tgid);
    }

    /// Which of the probe's sites the hit at `rip` belongs to, and the load bias of its file
    /// in this process (cached per process and point).
    pub(super) fn site_of(&mut self, tgid: i32, probe: u32, rip: u64) -> Result<(usize, u64)> {
        if let Some(&found) = self.sites.get(&(tgid, probe, rip)) {
            return Ok(found);
        }
        let sites = &self.probes[probe as usize].sites;
        // The mapping that holds the hit: its file, opened as the process maps it (a deleted
        // or chrooted binary too, see `procfs::reachable_path`).
        let holding = procfs::mappings(tgid)?
            .into_iter()
            .filter(|m| m.start <= rip && rip < m.end);
        for mapping in holding {
            let Some(id) =
                procfs::reachable_path(tgid, &mapping.path, Some((mapping.start, mapping.end)))
                    .ok()
                    .and_then(|p| procfs::file_id(&p))
            else {
                continue;
            };
            for (index, site) in sites.iter().enumerate().filter(|(_, s)| s.file_id == id) {
                let Some(bias) = site.binary.load_bias(mapping.start, mapping.offset) else {
                    continue;
                };
                // The kernel reports a uprobe hit at the probed instruction's address.
                if site
                    .points
                    .iter()
                    .any(|p| p.address.wrapping_add(bias) == rip)
                {
                    self.sites.insert((tgid, probe, rip), (index, bias));
                    return Ok((index, bias));
                }
            }
        }
        Err(Error::sample(format!(
            "pid {tgid} does not map the probed file any more"
        )))
    }
}
