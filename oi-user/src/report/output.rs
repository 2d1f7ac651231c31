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
use super::{NodeOut, ReportError, Sink, Sized, size_root};
use crate::plan::{Node, NodeId, Plan};

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

    fn failed_root(&mut self, label: &str, node: &Node, why: &str) -> Result<(), ReportError> {
        for s in &mut self.sinks {
            s.failed_root(label, node, why)?;
        }
        Ok(())
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

/// One measured root of a sample: its label (`this`, `arg0`), plan node and stream, or why
/// its walk failed.
#[derive(Clone, Copy)]
pub struct Root<'a> {
    pub label: &'a str,
    pub node: NodeId,
    pub stream: Result<&'a [u8], &'a str>,
}

/// Writes samples in one format, keeping what lasts over a run.
#[derive(Debug, Clone)]
pub struct SampleWriter {
    pub format: Format,
    csv: CsvState,
    /// Bytes of the last sample written that sat in unions not walked (opaque).
    pub unions: u64,
}

impl SampleWriter {
    pub fn new(format: Format) -> Self {
        Self {
            format,
            csv: CsvState::default(),
            unions: 0,
        }
    }

    /// Writes one sample's `roots` to `out`; `totals`, if given, is filled in the same pass.
    /// A root whose walk failed or whose stream cannot be decoded is printed as failed in its
    /// place (`{}` in JSON, a line saying why in the tree and CSV) and listed in the result
    /// (`label: why`); if no root is left, nothing is printed and that is the error.
    pub fn write(
        &mut self,
        plan: &Plan,
        roots: &[Root<'_>],
        out: &mut dyn Write,
        totals: Option<&mut Totals>,
    ) -> Result<Vec<String>, ReportError> {
        let sized = size_roots(plan, roots)?;
        self.unions = sized
            .iter()
            .filter_map(|s| s.as_ref().ok())
            .fold(0u64, |t, s| t.saturating_add(s.unions));
        let failed = roots
            .iter()
            .zip(&sized)
            .filter_map(|(r, s)| s.as_ref().err().map(|why| format!("{}: {why}", r.label)))
            .collect();
        let mut extra: Vec<&mut dyn Sink> = Vec::new();
        if let Some(t) = totals {
            extra.push(t);
        }
        match self.format {
            Format::Json { pretty } => {
                let mut sink = JsonSink::new(out, pretty);
                sink.start_sample()?;
                each_root(plan, roots, sized, &mut sink, extra)?;
                sink.end_sample()?;
            }
            Format::Tree(opts) => {
                let mut sink = TreeSink::new(plan, opts);
                each_root(plan, roots, sized, &mut sink, extra)?;
                sink.write(out)?;
                if self.unions > 0 {
                    // The footprint may be incomplete: say so under the tree.
                    writeln!(
                        out,
                        "{} in unions not walked (opaque: their members are not measured)",
                        tree::human(self.unions)
                    )?;
                }
            }
            Format::Csv => {
                let mut sink = CsvSink::new(out, &mut self.csv)?;
                each_root(plan, roots, sized, &mut sink, extra)?;
            }
        }
        Ok(failed)
    }
}

/// The first decoding pass of every root, before anything is printed: each root sized, or
/// why it has no result. A sample none of whose roots is left is an error: with one root,
/// that root's own error; with several, [`ReportError::NothingMeasured`].
fn size_roots<'a>(
    plan: &'a Plan,
    roots: &[Root<'a>],
) -> Result<Vec<Result<Sized<'a>, String>>, ReportError> {
    let mut sized = Vec::with_capacity(roots.len());
    let mut last_error = None;
    for r in roots {
        sized.push(match r.stream {
            Err(why) => Err(why.to_string()),
            Ok(stream) => size_root(plan, r.node, stream).map_err(|e| {
                let why = e.to_string();
                last_error = Some(e);
                why
            }),
        });
    }
    if roots.is_empty() || sized.iter().any(Result::is_ok) {
        return Ok(sized);
    }
    if let ([_], Some(e)) = (roots, last_error) {
        return Err(e);
    }
    let reasons: Vec<String> = roots
        .iter()
        .zip(&sized)
        .filter_map(|(r, s)| s.as_ref().err().map(|why| format!("{}: {why}", r.label)))
        .collect();
    Err(ReportError::NothingMeasured(reasons.join("; ")))
}

fn each_root<'s>(
    plan: &Plan,
    roots: &[Root<'_>],
    sized: Vec<Result<Sized<'_>, String>>,
    main: &'s mut dyn Sink,
    mut extra: Vec<&'s mut dyn Sink>,
) -> Result<(), ReportError> {
    let mut tee;
    let sink: &mut dyn Sink = if extra.is_empty() {
        main
    } else {
        extra.insert(0, main);
        tee = Tee { sinks: extra };
        &mut tee
    };
    for (r, s) in roots.iter().zip(sized) {
        match s {
            Ok(s) => {
                sink.root(r.label);
                s.print(sink)?;
            }
            Err(why) => sink.failed_root(r.label, &plan.nodes[r.node], &why)?,
        }
    }
    Ok(())
}
