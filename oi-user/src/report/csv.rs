//! `--format csv`: Object Introspection's CSV exporter (`oi/exporters/CSV.cpp`), for
//! spreadsheets. One row per node in pre-order, columns
//! `id,name,typePath,typeNames,staticSize,exclusiveSize,pointer,length,capacity,is_set,parent_id`,
//! with OI's conventions: text fields always quoted, a `"` inside written `\"`, lists (type
//! path, type names) joined by `;`, absent values empty, lines ended by CRLF, `id` counting
//! from 1 and `parent_id` 0 for a root. Type names are OI's, as in the JSON.
//!
//! OI prints the header once per result printed and keeps counting ids across results; we
//! print it once per run (the first sample) and number every node of every sample and root
//! in one sequence, so that a run is one table whose `parent_id`s form the forest of its
//! samples. Written by hand: the `csv` crate quotes only where needed and doubles quotes,
//! which is not OI's output.

use std::io::Write;

use super::{NodeOut, ReportError, Sink};
use crate::plan::Node;

pub const HEADER: &str =
    "id,name,typePath,typeNames,staticSize,exclusiveSize,pointer,length,capacity,is_set,parent_id";

/// Numbering that continues over the samples of a run.
#[derive(Debug, Default, Clone, Copy)]
pub struct CsvState {
    pub next_id: u64,
    pub header_written: bool,
}

pub struct CsvSink<'w> {
    out: &'w mut dyn Write,
    state: &'w mut CsvState,
    /// Ids of the open nodes (the last is the parent of the next row).
    open: Vec<u64>,
}

impl<'w> CsvSink<'w> {
    pub fn new(out: &'w mut dyn Write, state: &'w mut CsvState) -> Result<Self, ReportError> {
        if !state.header_written {
            write!(out, "{HEADER}\r\n")?;
            state.header_written = true;
        }
        Ok(Self {
            out,
            state,
            open: Vec::new(),
        })
    }
}

/// OI's `escapeField`: quoted, inner quotes backslash-escaped.
fn field(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\\\""))
}

fn list<S: AsRef<str>>(items: &[S]) -> String {
    let joined: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    field(&joined.join(";"))
}

impl Sink for CsvSink<'_> {
    /// One row for a root with no result: its name says which and why; its sizes are empty,
    /// so that sums over the table are those of what was measured.
    fn failed_root(&mut self, label: &str, node: &Node, why: &str) -> Result<(), ReportError> {
        self.state.next_id += 1;
        write!(
            self.out,
            "{},{},{},{},{},,,,,,0\r\n",
            self.state.next_id,
            field(&format!("{label} not measured: {why}")),
            field(label),
            list(&node.type_names),
            node.static_size,
        )?;
        Ok(())
    }

    fn begin(&mut self, n: &NodeOut<'_>) -> Result<(), ReportError> {
        self.state.next_id += 1;
        let id = self.state.next_id;
        let parent = self.open.last().copied().unwrap_or(0);
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let (len, cap) = match n.length_capacity {
            Some((l, c)) => (Some(l), Some(c)),
            None => (None, None),
        };
        write!(
            self.out,
            "{id},{},{},{},{},{},{},{},{},,{parent}\r\n",
            field(n.name),
            list(n.path),
            list(&n.node.type_names),
            n.node.static_size,
            n.exclusive,
            opt(n.pointer),
            opt(len),
            opt(cap),
        )?;
        self.open.push(id);
        Ok(())
    }

    fn end(&mut self) -> Result<(), ReportError> {
        self.open.pop();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_as_oi_quotes_them() {
        assert_eq!(field("a0"), "\"a0\"");
        assert_eq!(field("say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(list(&["a0", "m", "[]"]), "\"a0;m;[]\"");
        assert_eq!(list::<&str>(&[]), "\"\"");
    }
}
