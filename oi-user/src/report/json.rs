//! OI-compatible JSON (SEMANTICS.md §1), written while decoding: keys in the fixed order, one
//! array per sample, one line unless pretty-printed. One key is ours, not OI's: `heapBlock`
//! (a chased raw pointer that charges the heap block it starts; its usable bytes), written
//! right after `pointer`; OI's readers ignore it.

use std::io::Write;

use super::{Data, NodeOut, ReportError, Sink};
use crate::plan::Node;

pub struct JsonSink<'w> {
    out: &'w mut dyn Write,
    pretty: bool,
    /// Per open node: whether a child has been written yet.
    open: Vec<bool>,
    /// Whether a root has been written yet (roots are separated by commas).
    roots: usize,
}

/// Writes `s` as a JSON string. Names and type names rarely need escaping: those are copied
/// as they are, without the allocation of a general encoder (a million-element sample writes
/// a few million of them).
fn write_string(out: &mut dyn Write, s: &str) -> std::io::Result<()> {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.write_all(b"\"")?;
        out.write_all(s.as_bytes())?;
        return out.write_all(b"\"");
    }
    serde_json::to_writer(&mut *out, s).map_err(std::io::Error::other)
}

/// Writes `[a,b,...]` of JSON strings.
fn write_list<'s>(
    out: &mut dyn Write,
    sep: &str,
    items: impl Iterator<Item = &'s str>,
) -> std::io::Result<()> {
    out.write_all(b"[")?;
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.write_all(sep.as_bytes())?;
        }
        write_string(out, item)?;
    }
    out.write_all(b"]")
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
    /// OI's `{}` for an argument it could not measure, in that argument's place.
    fn failed_root(&mut self, _label: &str, _node: &Node, _why: &str) -> Result<(), ReportError> {
        if self.roots > 0 {
            self.out.write_all(b",")?;
        }
        self.roots += 1;
        self.indent(1)?;
        self.out.write_all(b"{}")?;
        Ok(())
    }

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
        let node = n.node;
        write!(self.out, "{{\"size\"{colon}{}", n.size)?;
        write!(self.out, "{sep}\"name\"{colon}")?;
        write_string(self.out, n.name)?;
        write!(self.out, "{sep}\"typePath\"{colon}")?;
        write_list(self.out, sep, n.path.iter().map(AsRef::as_ref))?;
        write!(self.out, "{sep}\"typeNames\"{colon}")?;
        write_list(self.out, sep, node.type_names.iter().map(String::as_str))?;
        write!(self.out, "{sep}\"staticSize\"{colon}{}", node.static_size)?;
        write!(self.out, "{sep}\"exclusiveSize\"{colon}{}", n.exclusive)?;
        if let Some(p) = n.pointer {
            write!(self.out, "{sep}\"pointer\"{colon}{p}")?;
        }
        if let Some(b) = n.heap_block {
            write!(self.out, "{sep}\"heapBlock\"{colon}{b}")?;
        }
        if let Some(d) = n.data {
            match d {
                Data::Number(v) => write!(self.out, "{sep}\"data\"{colon}{v}")?,
                Data::Text(t) => {
                    write!(self.out, "{sep}\"data\"{colon}")?;
                    write_string(self.out, t)?;
                }
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
