//! One sample's report in the format asked for (JSON, tree, CSV), optionally also summed by
//! member path ([`Totals`], for pictures and growth) in the same decoding pass: the sinks
//! are fed together by a [`Tee`].
//!
//! [`SampleWriter`] keeps what must last over the samples of a run (CSV ids). Never touches
//! a process.

use std::io::Write;

use super::csv::{CsvSink, CsvState};
use super::json::JsonSink;
use super::totals::Totals;
use super::tree::{self, TreeSink};
use super::{NodeOut, ReportError, Sink, decode};
use crate::plan::{NodeId, Plan};

/// How samples are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json { pretty: bool },
    Tree(tree::Options),
    Csv,
}

/// Several sinks fed by one decoding: each sees every node; of identical elements, as many
/// as the most demanding wants (the others count the rest from [`Sink::skip`]).
pub struct Tee<'a> {
    pub sinks: Vec<&'a mut dyn Sink>,
}

impl Sink for Tee<'_> {
    fn root(&mut self, label: &str) {
        for s in &mut self.sinks {
            s.root(label);
        }
    }

    fn begin(&mut self, n: &NodeOut<'_>) -> Result<(), ReportError> {
        for s in &mut self.sinks {
            s.begin(n)?;
        }
        Ok(())
    }

    fn end(&mut self) -> Result<(), ReportError> {
        for s in &mut self.sinks {
            s.end()?;
        }
        Ok(())
    }

    fn wanted(&self, count: u64) -> u64 {
        // Every sink is asked: asking is how a sink learns identical elements come.
        self.sinks
            .iter()
            .map(|s| s.wanted(count))
            .max()
            .unwrap_or(count)
    }

    fn skip(&mut self, count: u64, size: u64) -> Result<(), ReportError> {
        for s in &mut self.sinks {
            s.skip(count, size)?;
        }
        Ok(())
    }
}

/// One measured root of a sample: its label (`this`, `arg0`), plan node and stream.
pub struct Root<'a> {
    pub label: &'a str,
    pub node: NodeId,
    pub stream: &'a [u8],
}

/// Writes samples in one format, keeping what lasts over a run.
#[derive(Debug, Clone)]
pub struct SampleWriter {
    pub format: Format,
    csv: CsvState,
}

impl SampleWriter {
    pub fn new(format: Format) -> Self {
        Self {
            format,
            csv: CsvState::default(),
        }
    }

    /// Writes one sample's `roots` to `out`; `totals`, if given, is filled in the same pass.
    pub fn write(
        &mut self,
        plan: &Plan,
        roots: &[Root<'_>],
        out: &mut dyn Write,
        totals: Option<&mut Totals>,
    ) -> Result<(), ReportError> {
        let mut extra: Vec<&mut dyn Sink> = Vec::new();
        if let Some(t) = totals {
            extra.push(t);
        }
        match self.format {
            Format::Json { pretty } => {
                let mut sink = JsonSink::new(out, pretty);
                sink.start_sample()?;
                each_root(plan, roots, &mut sink, extra)?;
                sink.end_sample()
            }
            Format::Tree(opts) => {
                let mut sink = TreeSink::new(plan, opts);
                each_root(plan, roots, &mut sink, extra)?;
                sink.write(out)
            }
            Format::Csv => {
                let mut sink = CsvSink::new(out, &mut self.csv)?;
                each_root(plan, roots, &mut sink, extra)
            }
        }
    }
}

fn each_root<'s>(
    plan: &Plan,
    roots: &[Root<'_>],
    main: &'s mut dyn Sink,
    mut extra: Vec<&'s mut dyn Sink>,
) -> Result<(), ReportError> {
    if extra.is_empty() {
        for r in roots {
            main.root(r.label);
            decode(plan, r.node, r.stream, main)?;
        }
        return Ok(());
    }
    extra.insert(0, main);
    let mut tee = Tee { sinks: extra };
    for r in roots {
        tee.root(r.label);
        decode(plan, r.node, r.stream, &mut tee)?;
    }
    Ok(())
}
