//! The machine-readable files a run leaves: `--sample-log` (a JSON line per sample) and
//! `--summary` (per-probe counters at exit).

use std::{
    fs::File,
    io::{BufWriter, Write as _},
    path::PathBuf,
};

use oi_common::{Event, ProbeCounters};
use serde_json::json;

use super::{Failures, Probe};
use crate::{
    cli::Args,
    error::{Error, Result},
};

pub struct SampleRecord<'a> {
    pub probe: &'a str,
    pub event: &'a Event,
    pub pause_us: u64,
    pub walk_us: u64,
    /// `--mode jit`: the walk alone, timed inside the target (null: not known).
    pub in_target_ns: Option<u64>,
}

pub struct Logs {
    samples: Option<(PathBuf, BufWriter<File>)>,
    summary: Option<PathBuf>,
}

fn create(path: &PathBuf) -> Result<BufWriter<File>> {
    File::create(path)
        .map(BufWriter::new)
        .map_err(|e| Error::input(format!("cannot create {}: {e}", path.display())))
}

impl Logs {
    /// Creates the files up front so a bad path fails before anything is attached.
    pub fn open(args: &Args) -> Result<Self> {
        let samples = match &args.sample_log {
            Some(p) => Some((p.clone(), create(p)?)),
            None => None,
        };
        if let Some(p) = &args.summary {
            create(p)?;
        }
        Ok(Self {
            samples,
            summary: args.summary.clone(),
        })
    }

    pub fn sample(&mut self, r: &SampleRecord<'_>) -> Result<()> {
        let Some((path, out)) = &mut self.samples else {
            return Ok(());
        };
        let e = r.event;
        let regs = &e.regs;
        let line = json!({
            "probe": r.probe, "pid": e.tgid, "tid": e.tid, "hit": e.hit,
            "pause_us": r.pause_us, "walk_us": r.walk_us, "in_target_ns": r.in_target_ns,
            "regs": {
                "rdi": regs.rdi, "rsi": regs.rsi, "rdx": regs.rdx, "rcx": regs.rcx,
                "r8": regs.r8, "r9": regs.r9, "rsp": regs.rsp, "rip": regs.rip, "rax": regs.rax,
                "rbx": regs.rbx, "rbp": regs.rbp, "r10": regs.r10, "r11": regs.r11,
                "r12": regs.r12, "r13": regs.r13, "r14": regs.r14, "r15": regs.r15,
            },
        });
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| Error::internal(format!("writing {}: {e}", path.display())))
    }

    pub fn summary(
        &mut self,
        probes: &[Probe],
        counters: &[ProbeCounters],
        failures: &[Failures],
    ) -> Result<()> {
        let Some(path) = &self.summary else {
            return Ok(());
        };
        let rows: Vec<_> = probes
            .iter()
            .zip(counters)
            .zip(failures)
            .map(|((p, c), f)| {
                json!({
                    "probe": p.symbol, "hits": c.hits, "sampled": c.sampled,
                    "dropped": c.dropped, "filtered": c.filtered, "unseen": c.unseen,
                    "sites": p.sites.len(),
                    "points": p.sites.iter().map(|s| s.points.len()).sum::<usize>(),
                    "plans_cached": p.plans_cached, "walkers_cached": p.walkers_cached,
                    "samples_failed": f.samples, "roots_failed": f.roots,
                    "union_bytes_not_walked": f.unions,
                    "sizes": p.measurers.first().map(|m| m.plan().sizing.name()),
                })
            })
            .collect();
        let mut out = create(path)?;
        writeln!(out, "{}", serde_json::Value::Array(rows))
            .and_then(|()| out.flush())
            .map_err(|e| Error::internal(format!("writing {}: {e}", path.display())))
    }
}
