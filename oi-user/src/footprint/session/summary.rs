//! The end of a run: disarm, detach every thread, and print the per-probe summary lines (hits,
//! samples, drops, failures) and the places each probe was put. Never touches a thread after
//! `shutdown` has let it go.

use super::*;

impl Session {
    /// Disarms the probes, swallows SIGSTOPs already on their way, detaches every thread.
    pub(super) fn shutdown(&mut self) {
        self.trigger.disarm();
        for written in self.reporter.finish() {
            self.take_written(written);
        }
        self.drain_events();
        let processes: Vec<i32> = self.tracer.processes().collect();
        for tgid in processes {
            let busy = self.trigger.busy_thread(tgid);
            let pending: Vec<i32> = self.pending.keys().copied().collect();
            let is_ours = |tid| busy == Some(tid) || pending.contains(&tid);
            let mut held = None;
            let in_target = &mut self.in_target;
            let mut unmap = |tid| {
                if let Some(in_target) = in_target.as_mut() {
                    held = in_target.unmap(tgid, tid).map(|h| (tid, h));
                }
            };
            self.tracer.release_with(tgid, &is_ours, &mut unmap);
            if let Some(in_target) = self.in_target.as_mut()
                && in_target.holds(tgid)
                && procfs::state(tgid).is_some()
            {
                // No thread reached a quiet stop in time: say so rather than leave silently.
                eprintln!(
                    "oi-trace: warning: pid {tgid}: no thread stopped in time to unmap \
                     oi-trace's segments; they stay mapped (inert, never run again)"
                );
                in_target.forget(tgid);
            }
            // Signals that arrived while we unmapped, now that the thread is detached.
            if let Some((tid, mut signals)) = held {
                signals.redeliver(tgid, tid);
            }
            self.trigger.forget(tgid);
        }
        // Samples started that no walk will take: their SIGSTOPs were swallowed above.
        for ev in self.pending.values() {
            self.cancelled[ev.probe as usize] += 1;
        }
        self.pending.clear();
        if let Some(guardian) = &mut self.guardian {
            guardian.clean();
        }
    }

    pub(super) fn print_summary(&mut self) -> Result<()> {
        let counters: Vec<_> = (0..self.probes.len())
            .map(|i| {
                let mut c = self.trigger.counters(i as u32);
                // A cancelled sample was an Nth hit that came while the run was ending.
                let cancelled = self.cancelled[i].min(c.sampled);
                c.sampled -= cancelled;
                c.dropped += cancelled;
                c
            })
            .collect();
        for ((probe, c), f) in self.probes.iter().zip(&counters).zip(&self.failures) {
            let mut line = summary_line(c);
            if let Some(m) = probe.measurers.first() {
                line += &format!("; {} sizes", m.plan().sizing.name());
            }
            if f.unions > 0 {
                line += &format!(
                    "; up to {} per sample in unions not walked",
                    crate::report::tree::human(f.unions)
                );
            }
            eprintln!("oi-trace: {}: {line}", probe.symbol);
        }
        self.logs.summary(&self.probes, &counters, &self.failures)
    }
}

/// `H hits, S sampled, D dropped, F filtered` (and the unseen ones, when there are any).
pub(super) fn summary_line(c: &ProbeCounters) -> String {
    let mut line = format!(
        "{} hits, {} sampled, {} dropped, {} filtered",
        c.hits, c.sampled, c.dropped, c.filtered
    );
    if c.unseen > 0 {
        line += &format!(
            ", {} unseen (returned through a tail call: no result to measure)",
            c.unseen
        );
    }
    line
}

/// `shop::f(long) [1 entry]`, `shop::g(long) [3 return points, 1 a tail call]`,
/// `shop::weigh [3 entries: 1 out of line, 2 inlined]`: what the `attached` line says of one
/// probe.
pub(super) fn describe_points(probe: &Probe) -> String {
    let points: Vec<_> = probe.sites.iter().flat_map(|s| &s.points).collect();
    let n = points.len();
    let tails = points
        .iter()
        .filter(|p| p.kind == PointKind::TailCall)
        .count();
    let what = match (probe.is_return, n) {
        (false, 1) => "1 entry".to_string(),
        (false, n) => format!("{n} entries"),
        (true, 1) => "1 return point".to_string(),
        (true, n) => format!("{n} return points"),
    };
    let tails = match tails {
        0 => String::new(),
        1 if n == 1 => ", a tail call".to_string(),
        1 => ", 1 a tail call".to_string(),
        t => format!(", {t} of them tail calls"),
    };
    // Which copies: only when there is more than the function's own code.
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for site in &probe.sites {
        let kind = match &site.copy {
            resolve::Copy::OutOfLine => "out of line".to_string(),
            resolve::Copy::Clone(suffix) => format!("clone .{suffix}"),
            resolve::Copy::Inlined { .. } => "inlined".to_string(),
        };
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, count)) => *count += site.points.len(),
            None => kinds.push((kind, site.points.len())),
        }
    }
    let copies = if kinds.len() == 1 && kinds[0].0 == "out of line" {
        String::new()
    } else {
        let list: Vec<String> = kinds.iter().map(|(k, c)| format!("{c} {k}")).collect();
        format!(": {}", list.join(", "))
    };
    let name = probe
        .sites
        .iter()
        .find(|s| !matches!(s.copy, resolve::Copy::Inlined { .. }))
        .map_or_else(
            || crate::debuginfo::symbols::demangle(&probe.sites[0].function),
            |s| s.symbol.demangled.clone(),
        );
    format!("{name} [{what}{tails}{copies}]")
}
