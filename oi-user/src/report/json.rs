//! OI-compatible JSON (SEMANTICS.md §1), written while decoding: keys in the fixed order, one
//! array per sample, one line unless pretty-printed. Two keys are ours, not OI's, and appear
//! only where they apply: `heapBlock` (a chased raw pointer that charges the heap block it
//! starts; its usable bytes), written right after `pointer`, and `notWalked` (a union that
//! was not walked, its members unmeasured: its staticSize), in the same place; OI's readers
//! ignore both.

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
    /// One node's text, composed here and written with one call: a million-element sample
    /// is a few hundred megabytes, and formatting machinery and a call per piece used to be
    /// most of the time it took.
    buf: Vec<u8>,
}

/// Appends `s` as a JSON string. Names and type names rarely need escaping: those are copied
/// as they are, without the allocation of a general encoder (a million-element sample writes
/// a few million of them).
fn push_string(buf: &mut Vec<u8>, s: &str) -> std::io::Result<()> {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
        return Ok(());
    }
    serde_json::to_writer(&mut *buf, s).map_err(std::io::Error::other)
}

/// Appends `v` in decimal.
fn push_u64(buf: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

/// Appends `[a,b,...]` of JSON strings.
fn push_list<'s>(
    buf: &mut Vec<u8>,
    sep: &str,
    items: impl Iterator<Item = &'s str>,
) -> std::io::Result<()> {
    buf.push(b'[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            buf.extend_from_slice(sep.as_bytes());
        }
        push_string(buf, item)?;
    }
    buf.push(b']');
    Ok(())
}

impl<'w> JsonSink<'w> {
    pub fn new(out: &'w mut dyn Write, pretty: bool) -> Self {
        Self {
            out,
            pretty,
            open: Vec::new(),
            roots: 0,
            buf: Vec::with_capacity(1024),
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

    fn indent(&mut self, extra: usize) {
        if self.pretty {
            let depth = self.open.len() * 2 + extra;
            self.buf.push(b'\n');
            self.buf.resize(self.buf.len() + depth * 2, b' ');
        }
    }

    /// `sep "key" colon`.
    fn key(&mut self, key: &str) {
        let (sep, colon): (&[u8], &[u8]) = if self.pretty {
            (b", ", b": ")
        } else {
            (b",", b":")
        };
        self.buf.extend_from_slice(sep);
        self.buf.push(b'"');
        self.buf.extend_from_slice(key.as_bytes());
        self.buf.push(b'"');
        self.buf.extend_from_slice(colon);
    }

    fn number(&mut self, key: &str, v: u64) {
        self.key(key);
        push_u64(&mut self.buf, v);
    }
}

impl Sink for JsonSink<'_> {
    /// OI's `{}` for an argument it could not measure, in that argument's place.
    fn failed_root(&mut self, _label: &str, _node: &Node, _why: &str) -> Result<(), ReportError> {
        self.buf.clear();
        if self.roots > 0 {
            self.buf.push(b',');
        }
        self.roots += 1;
        self.indent(1);
        self.buf.extend_from_slice(b"{}");
        self.out.write_all(&self.buf)?;
        Ok(())
    }

    fn begin(&mut self, n: &NodeOut<'_>) -> Result<(), ReportError> {
        self.buf.clear();
        match self.open.last_mut() {
            Some(first) => {
                if *first {
                    self.buf.push(b',');
                }
                *first = true;
            }
            None => {
                if self.roots > 0 {
                    self.buf.push(b',');
                }
                self.roots += 1;
            }
        }
        self.indent(1);
        let sep = if self.pretty { ", " } else { "," };
        let colon: &[u8] = if self.pretty { b": " } else { b":" };
        let node = n.node;
        self.buf.extend_from_slice(b"{\"size\"");
        self.buf.extend_from_slice(colon);
        push_u64(&mut self.buf, n.size);
        self.key("name");
        push_string(&mut self.buf, n.name)?;
        self.key("typePath");
        push_list(&mut self.buf, sep, n.path.iter().map(AsRef::as_ref))?;
        self.key("typeNames");
        push_list(
            &mut self.buf,
            sep,
            node.type_names.iter().map(String::as_str),
        )?;
        self.number("staticSize", node.static_size);
        self.number("exclusiveSize", n.exclusive);
        if let Some(p) = n.pointer {
            self.number("pointer", p);
        }
        if let Some(b) = n.heap_block {
            self.number("heapBlock", b);
        }
        if node.opaque_union {
            self.number("notWalked", node.static_size);
        }
        if let Some(d) = n.data {
            match d {
                Data::Number(v) => self.number("data", *v),
                Data::Text(t) => {
                    self.key("data");
                    push_string(&mut self.buf, t)?;
                }
                Data::Address(a) => {
                    self.key("data");
                    write!(self.buf, "\"{a:#x}\"")?;
                }
            }
        }
        if let Some((l, c)) = n.length_capacity {
            self.number("length", l);
            self.number("capacity", c);
        }
        self.key("is_primitive");
        let b: &[u8] = if node.is_primitive { b"true" } else { b"false" };
        self.buf.extend_from_slice(b);
        self.key("members");
        self.buf.push(b'[');
        self.open.push(false);
        self.out.write_all(&self.buf)?;
        Ok(())
    }

    fn end(&mut self) -> Result<(), ReportError> {
        let had_children = self.open.pop().unwrap_or(false);
        self.buf.clear();
        if had_children {
            self.indent(2);
        }
        self.buf.extend_from_slice(b"]}");
        self.out.write_all(&self.buf)?;
        Ok(())
    }
}
