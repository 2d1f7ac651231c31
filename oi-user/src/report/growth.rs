//! `--growth FILE`: how each member of a sampled object changes over many samples. Fed one
//! sample's [`Totals`] at a time (by the report thread), it keeps, per process, probe and
//! member path (element paths folded to `[]`, as in the tree), the inclusive bytes at the
//! first and the last sample, the least and the most, and the number of samples. A path
//! absent from a sample (a vector that became empty has no `[]`) counts 0 bytes there, so
//! `last − first` is the growth since the first sample for every path.
//!
//! The table is JSON at exit, sorted by `last − first`, largest first, and readable text on
//! stderr (at exit and every `--interval`). At most [`MAX_ROWS`] paths are tracked; samples
//! whose paths did not fit are counted and said. Never touches a process.

use std::collections::HashMap;
use std::io::Write;

use super::totals::Totals;
use super::tree::{human, thousands};

/// Most paths tracked over a run.
pub const MAX_ROWS: usize = 100_000;
/// Rows printed on stderr (the file has all of them).
pub const SHOWN: usize = 20;

/// One member path of one probe in one process.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub pid: i32,
    pub probe: String,
    /// `this.items[].name`
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Row {
    pub pid: i32,
    pub probe: String,
    pub path: String,
    /// Readable type at the path (the last seen).
    #[serde(rename = "type")]
    pub ty: String,
    pub first: u64,
    pub last: u64,
    pub min: u64,
    pub max: u64,
    pub samples: u64,
}

impl Row {
    pub fn change(&self) -> i128 {
        i128::from(self.last) - i128::from(self.first)
    }
}

#[derive(Default)]
pub struct Growth {
    rows: HashMap<Key, Row>,
    /// Samples so far per (pid, probe).
    samples: HashMap<(i32, String), u64>,
    /// Paths not tracked because the table was full.
    dropped_paths: u64,
}

/// `this.items[].name` from a path's names.
pub fn path_text<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for (i, n) in names.into_iter().enumerate() {
        if i > 0 && !n.starts_with('[') && n != "*" {
            out.push('.');
        }
        out.push_str(n);
    }
    out
}

impl Growth {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one sample of `probe` in `pid`.
    pub fn add(&mut self, pid: i32, probe: &str, totals: &Totals) {
        // Paths of this sample: inclusive bytes summed over the types a path has.
        let mut now: HashMap<String, (u64, String)> = HashMap::new();
        totals.walk(|path| {
            let names = path.iter().map(|&i| totals.nodes[i].name.as_str());
            let Some(&last) = path.last() else { return };
            let node = &totals.nodes[last];
            let e = now.entry(path_text(names)).or_insert((0, node.ty.clone()));
            e.0 = e.0.saturating_add(node.inclusive);
        });
        let seen = self.samples.entry((pid, probe.to_string())).or_insert(0);
        *seen += 1;
        let n = *seen;
        // Paths known from earlier samples and absent now: 0 bytes.
        for (key, row) in self.rows.iter_mut() {
            if key.pid == pid && key.probe == probe && !now.contains_key(&key.path) {
                row.last = 0;
                row.min = 0;
                row.samples = n;
            }
        }
        for (path, (bytes, ty)) in now {
            let key = Key {
                pid,
                probe: probe.to_string(),
                path,
            };
            if let Some(row) = self.rows.get_mut(&key) {
                row.last = bytes;
                row.min = row.min.min(bytes);
                row.max = row.max.max(bytes);
                row.samples = n;
                row.ty = ty;
                continue;
            }
            if self.rows.len() >= MAX_ROWS {
                self.dropped_paths += 1;
                continue;
            }
            // A path first seen now had 0 bytes in the samples before.
            let earlier = n > 1;
            self.rows.insert(
                key.clone(),
                Row {
                    pid,
                    probe: key.probe,
                    path: key.path,
                    ty,
                    first: if earlier { 0 } else { bytes },
                    last: bytes,
                    min: if earlier { 0 } else { bytes },
                    max: bytes,
                    samples: n,
                },
            );
        }
    }

    /// Every row, largest `last − first` first (then by process, probe and path).
    pub fn rows(&self) -> Vec<Row> {
        let mut rows: Vec<Row> = self.rows.values().cloned().collect();
        rows.sort_by(|a, b| {
            b.change()
                .cmp(&a.change())
                .then_with(|| (a.pid, &a.probe, &a.path).cmp(&(b.pid, &b.probe, &b.path)))
        });
        rows
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The table as JSON (an array of rows).
    pub fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, &self.rows())?;
        out.write_all(b"\n")
    }

    /// The table for people: the [`SHOWN`] largest changes, then how many rows more.
    pub fn write_text(&self, out: &mut dyn Write, file: Option<&str>) -> std::io::Result<()> {
        let rows = self.rows();
        let samples: u64 = self.samples.values().sum();
        writeln!(
            out,
            "oi-trace: growth over {} sample(s), by member path, largest change first:",
            thousands(samples)
        )?;
        writeln!(
            out,
            "  {:>12} {:>12} {:>12} {:>12} {:>12} {:>8}  path",
            "change", "first", "last", "min", "max", "samples"
        )?;
        let several = self.samples.len() > 1;
        for r in rows.iter().take(SHOWN) {
            let change = r.change();
            let sign = if change < 0 { "-" } else { "+" };
            let who = if several {
                format!("pid {} {}: ", r.pid, r.probe)
            } else {
                String::new()
            };
            writeln!(
                out,
                "  {:>12} {:>12} {:>12} {:>12} {:>12} {:>8}  {who}{} ({})",
                format!("{sign}{}", human(change.unsigned_abs() as u64)),
                human(r.first),
                human(r.last),
                human(r.min),
                human(r.max),
                thousands(r.samples),
                r.path,
                r.ty
            )?;
        }
        if rows.len() > SHOWN {
            let whole = file.map(|f| format!(" (all in {f})")).unwrap_or_default();
            writeln!(
                out,
                "  … {} more path(s){whole}",
                thousands((rows.len() - SHOWN) as u64)
            )?;
        }
        if self.dropped_paths > 0 {
            writeln!(
                out,
                "  ({} path(s) not tracked: more than {} paths)",
                thousands(self.dropped_paths),
                thousands(MAX_ROWS as u64)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_as_cpp() {
        assert_eq!(
            path_text(["this", "items", "[]", "name"]),
            "this.items[].name"
        );
        assert_eq!(path_text(["arg0", "next", "*", "v"]), "arg0.next*.v");
    }
}
