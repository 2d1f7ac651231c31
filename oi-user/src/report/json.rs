//! OI-compatible JSON (SEMANTICS.md §1), written while decoding: keys in the fixed order, one
//! array per sample, one line unless pretty-printed.

use std::io::Write;

use super::{Data, NodeOut, ReportError, Sink};

pub struct JsonSink<'w> {
    out: &'w mut dyn Write,
    pretty: bool,
    /// Per open node: whether a child has been written yet.
    open: Vec<bool>,
    /// Whether a root has been written yet (roots are separated by commas).
    roots: usize,
}

fn string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

impl<'w> JsonSink<'w> {
    pub fn new(out: &'w mut dyn Write, pretty: bool) -> Self {
        Self {
            out,
            pretty,
            open: Vec::new(),
            roots: 0,
        }
    }

    pub fn start_sample(&mut self) -> Result<(), ReportError> {
        self.out.write_all(b"[")?;
        Ok(())
    }

    pub fn end_sample(&mut self) -> Result<(), ReportError> {
        if self.pretty {
            self.out.write_all(b"\n")?;
        }
        self.out.write_all(b"]\n")?;
        self.roots = 0;
        Ok(())
    }

    fn indent(&mut self, extra: usize) -> Result<(), ReportError> {
        if self.pretty {
            let depth = self.open.len() * 2 + extra;
            write!(self.out, "\n{:width$}", "", width = depth * 2)?;
        }
        Ok(())
    }
}

impl Sink for JsonSink<'_> {
    fn begin(&mut self, n: &NodeOut<'_>) -> Result<(), ReportError> {
        match self.open.last_mut() {
            Some(first) => {
                if *first {
                    self.out.write_all(b",")?;
                }
                *first = true;
            }
            None => {
                if self.roots > 0 {
                    self.out.write_all(b",")?;
                }
                self.roots += 1;
            }
        }
        self.indent(1)?;
        let sep = if self.pretty { ", " } else { "," };
        let colon = if self.pretty { ": " } else { ":" };
        let list =
            |v: &mut dyn Iterator<Item = String>| format!("[{}]", v.collect::<Vec<_>>().join(sep));
        let node = n.node;
        write!(self.out, "{{\"size\"{colon}{}", n.size)?;
        write!(self.out, "{sep}\"name\"{colon}{}", string(n.name))?;
        write!(
            self.out,
            "{sep}\"typePath\"{colon}{}",
            list(&mut n.path.iter().map(|p| string(p)))
        )?;
        write!(
            self.out,
            "{sep}\"typeNames\"{colon}{}",
            list(&mut node.type_names.iter().map(|p| string(p)))
        )?;
        write!(self.out, "{sep}\"staticSize\"{colon}{}", node.static_size)?;
        write!(self.out, "{sep}\"exclusiveSize\"{colon}{}", n.exclusive)?;
        if let Some(p) = n.pointer {
            write!(self.out, "{sep}\"pointer\"{colon}{p}")?;
        }
        if let Some(d) = n.data {
            match d {
                Data::Number(v) => write!(self.out, "{sep}\"data\"{colon}{v}")?,
                Data::Text(t) => write!(self.out, "{sep}\"data\"{colon}{}", string(t))?,
                Data::Address(a) => write!(self.out, "{sep}\"data\"{colon}\"{a:#x}\"")?,
            }
        }
        if let Some((l, c)) = n.length_capacity {
            write!(
                self.out,
                "{sep}\"length\"{colon}{l}{sep}\"capacity\"{colon}{c}"
            )?;
        }
        write!(
            self.out,
            "{sep}\"is_primitive\"{colon}{}",
            node.is_primitive
        )?;
        write!(self.out, "{sep}\"members\"{colon}[")?;
        self.open.push(false);
        Ok(())
    }

    fn end(&mut self) -> Result<(), ReportError> {
        let had_children = self.open.pop().unwrap_or(false);
        if had_children {
            self.indent(2)?;
        }
        self.out.write_all(b"]}")?;
        Ok(())
    }
}
