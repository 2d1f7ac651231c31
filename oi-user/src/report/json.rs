//! OI-compatible JSON (docs/semantics.md, "JSON shape"), written while decoding: keys in the fixed
//! order, one array per sample, one line unless pretty-printed. Two keys are ours, not OI's, and
//! appear only where they apply: `heapBlock` (a chased raw pointer that charges the heap block it
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
    /// The text of many nodes, composed here and written with one call per [`FLUSH_AT`]
    /// bytes: a million-element sample is a few hundred megabytes, and formatting machinery,
    /// a call per piece and a copy through the writer's own buffer would be most of the time
    /// it takes. Written out when full, at the end of the sample and on drop.
    buf: Vec<u8>,
    /// Per depth, the last node's text from `"name"` to `"exclusiveSize":` (see [`Middle`]).
    middles: Vec<Middle>,
}

/// Bytes composed before they are handed to the writer.
const FLUSH_AT: usize = 1 << 20;

/// The part of a node's text that depends only on its name, path, type names and static
/// size: `,"name":…,"typePath":[…],"typeNames":[…],"staticSize":S,"exclusiveSize":`. The
/// elements of a container all share it, so it is composed once per run of alike siblings
/// and copied for the others (comparing those few strings costs a fraction of writing them
/// out piece by piece, which would be most of the printing of a big sample).
///
/// It also keeps the last node's whole opening text (`{"size":…` to `"members":[`) and the
/// numbers it was made of ([`Repeat`]): the next alike sibling with the same numbers (the
/// strings of a vector that have the same length and capacity, mostly) is one copy.
#[derive(Default)]
struct Middle {
    name: String,
    path: Vec<String>,
    type_names: Vec<String>,
    static_size: u64,
    /// Address of the plan node the text was composed for: the same node has the same type
    /// names and static size (the plan does not change while a sample is printed), so
    /// siblings of one node skip comparing those.
    node: usize,
    text: Vec<u8>,
    repeat: Option<Repeat>,
    whole: Vec<u8>,
}

/// What a node's opening text depends on besides its [`Middle`] and its plan node.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Repeat {
    size: u64,
    exclusive: u64,
    pointer: Option<u64>,
    heap_block: Option<u64>,
    length_capacity: Option<(u64, u64)>,
}

impl Repeat {
    /// None for a node with captured data (its text is composed every time).
    fn of(n: &NodeOut<'_>) -> Option<Self> {
        n.data.is_none().then_some(Self {
            size: n.size,
            exclusive: n.exclusive,
            pointer: n.pointer,
            heap_block: n.heap_block,
            length_capacity: n.length_capacity,
        })
    }
}

impl Middle {
    fn matches(&self, n: &NodeOut<'_>) -> bool {
        let same_node = self.node == std::ptr::from_ref(n.node) as usize
            || (self.static_size == n.node.static_size && self.type_names == n.node.type_names);
        same_node
            && self.name == n.name
            && self.path.len() == n.path.len()
            && self.path.iter().zip(n.path).all(|(a, b)| a == b.as_ref())
    }

    /// Composes the text of `n` into `self`.
    fn compose(&mut self, n: &NodeOut<'_>, pretty: bool) -> std::io::Result<()> {
        let sep = if pretty { ", " } else { "," };
        self.text.clear();
        let buf = &mut self.text;
        push_key(buf, pretty, "name");
        push_string(buf, n.name)?;
        push_key(buf, pretty, "typePath");
        push_list(buf, sep, n.path.iter().map(AsRef::as_ref))?;
        push_key(buf, pretty, "typeNames");
        push_list(buf, sep, n.node.type_names.iter().map(String::as_str))?;
        push_key(buf, pretty, "staticSize");
        push_u64(buf, n.node.static_size);
        push_key(buf, pretty, "exclusiveSize");
        self.name.clear();
        self.name.push_str(n.name);
        self.path.clear();
        self.path.extend(n.path.iter().map(|p| p.to_string()));
        self.type_names.clone_from(&n.node.type_names);
        self.static_size = n.node.static_size;
        self.node = std::ptr::from_ref(n.node) as usize;
        self.repeat = None;
        Ok(())
    }
}

/// Appends `sep "key" colon`.
fn push_key(buf: &mut Vec<u8>, pretty: bool, key: &str) {
    let (sep, colon): (&[u8], &[u8]) = if pretty { (b", ", b": ") } else { (b",", b":") };
    buf.extend_from_slice(sep);
    buf.push(b'"');
    buf.extend_from_slice(key.as_bytes());
    buf.push(b'"');
    buf.extend_from_slice(colon);
}

/// Appends `s` as a JSON string. Names and type names rarely need escaping: those are copied
/// as they are, without the allocation of a general encoder (a million-element sample writes
/// a few million of them).
fn push_string(buf: &mut Vec<u8>, s: &str) -> std::io::Result<()> {
    // Without early exit, so that the check is vectorised.
    let plain = !s.bytes().fold(false, |bad, b| {
        bad | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if plain {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
        return Ok(());
    }
    serde_json::to_writer(&mut *buf, s).map_err(std::io::Error::other)
}

/// Appends `v` in decimal, two digits at a time (a big sample writes millions of numbers).
fn push_u64(buf: &mut Vec<u8>, mut v: u64) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    while v >= 100 {
        let pair = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if v >= 10 {
        let pair = v as usize * 2;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        digits[i] = b'0' + v as u8;
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
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            middles: Vec::new(),
        }
    }

    pub fn start_sample(&mut self) -> Result<(), ReportError> {
        self.buf.push(b'[');
        Ok(())
    }

    pub fn end_sample(&mut self) -> Result<(), ReportError> {
        if self.pretty {
            self.buf.push(b'\n');
        }
        self.buf.extend_from_slice(b"]\n");
        self.roots = 0;
        self.write_out()
    }

    /// Hands what was composed to the writer.
    fn write_out(&mut self) -> Result<(), ReportError> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Hands what was composed to the writer once there is enough of it.
    fn composed(&mut self) -> Result<(), ReportError> {
        if self.buf.len() >= FLUSH_AT {
            self.write_out()?;
        }
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
        push_key(&mut self.buf, self.pretty, key);
    }

    fn number(&mut self, key: &str, v: u64) {
        self.key(key);
        push_u64(&mut self.buf, v);
    }
}

impl Sink for JsonSink<'_> {
    /// OI's `{}` for an argument it could not measure, in that argument's place.
    fn failed_root(&mut self, _label: &str, _node: &Node, _why: &str) -> Result<(), ReportError> {
        if self.roots > 0 {
            self.buf.push(b',');
        }
        self.roots += 1;
        self.indent(1);
        self.buf.extend_from_slice(b"{}");
        self.composed()
    }

    fn begin(&mut self, n: &NodeOut<'_>) -> Result<(), ReportError> {
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
        let depth = self.open.len();
        if self.middles.len() <= depth {
            self.middles.resize_with(depth + 1, Middle::default);
        }
        let middle = &mut self.middles[depth];
        let repeat = Repeat::of(n);
        let node_at = std::ptr::from_ref(n.node) as usize;
        if !middle.matches(n) {
            middle.compose(n, self.pretty)?;
        } else if repeat.is_some() && middle.repeat == repeat && middle.node == node_at {
            self.buf.extend_from_slice(&middle.whole);
            self.open.push(false);
            return self.composed();
        }
        let start = self.buf.len();
        let colon: &[u8] = if self.pretty { b": " } else { b":" };
        let node = n.node;
        self.buf.extend_from_slice(b"{\"size\"");
        self.buf.extend_from_slice(colon);
        push_u64(&mut self.buf, n.size);
        self.buf.extend_from_slice(&middle.text);
        push_u64(&mut self.buf, n.exclusive);
        if let Some(p) = n.pointer {
            self.number("pointer", p);
        }
        if let Some(b) = n.heap_block {
            self.number("heapBlock", b);
        }
        if n.not_walked {
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
        if self.pretty {
            self.key("is_primitive");
            let b: &[u8] = if node.is_primitive { b"true" } else { b"false" };
            self.buf.extend_from_slice(b);
            self.key("members");
            self.buf.push(b'[');
        } else {
            let tail: &[u8] = if node.is_primitive {
                b",\"is_primitive\":true,\"members\":["
            } else {
                b",\"is_primitive\":false,\"members\":["
            };
            self.buf.extend_from_slice(tail);
        }
        let middle = &mut self.middles[depth];
        middle.node = node_at;
        middle.repeat = repeat;
        if repeat.is_some() {
            middle.whole.clear();
            middle.whole.extend_from_slice(&self.buf[start..]);
        }
        self.open.push(false);
        self.composed()
    }

    fn end(&mut self) -> Result<(), ReportError> {
        let had_children = self.open.pop().unwrap_or(false);
        if had_children {
            self.indent(2);
        }
        self.buf.extend_from_slice(b"]}");
        self.composed()
    }
}

impl Drop for JsonSink<'_> {
    /// What a caller that never ended the sample composed still reaches its writer.
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            let _ = self.out.write_all(&self.buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::{Data, JsonSink, NodeOut, Sink};
    use crate::plan::{Node, Op};

    fn node(is_primitive: bool) -> Node {
        Node {
            name: "[]".into(),
            type_names: vec!["std::string".into()],
            static_size: 32,
            is_primitive,
            op: Op::Leaf,
            dynamic: false,
            readable: String::new(),
            value: None,
            opaque_union: false,
            foreign: false,
        }
    }

    /// Alike siblings whose text is copied from the one before: every element still says
    /// its own numbers, data and node (two nodes of the same type names and size differ in
    /// `is_primitive` here), in both layouts.
    #[test]
    fn repeated_siblings_keep_their_own_numbers() {
        let (a, b, root) = (node(false), node(true), node(false));
        let seven = Data::Number(7);
        // (node, size, length and capacity, data)
        type Kid<'a> = (&'a Node, u64, (u64, u64), Option<&'a Data>);
        let kids: [Kid; 7] = [
            (&a, 40, (3, 8), None),
            (&a, 40, (3, 8), None),
            (&a, 45, (4, 13), None),
            (&a, 45, (4, 13), Some(&seven)),
            (&a, 45, (4, 13), None),
            (&b, 45, (4, 13), None),
            (&a, 45, (4, 13), None),
        ];
        let path = [Cow::from("a0"), Cow::from("[]")];
        for pretty in [false, true] {
            let mut out = Vec::new();
            let mut sink = JsonSink::new(&mut out, pretty);
            sink.start_sample().unwrap();
            let top = NodeOut {
                node: &root,
                name: "a0",
                path: &path[..1],
                size: 0,
                exclusive: 0,
                pointer: None,
                heap_block: None,
                data: None,
                length_capacity: None,
                has_children: true,
                value: None,
                not_walked: false,
            };
            sink.begin(&top).unwrap();
            for &(n, size, lc, data) in &kids {
                sink.begin(&NodeOut {
                    node: n,
                    name: "[]",
                    path: &path,
                    size,
                    exclusive: size,
                    pointer: None,
                    heap_block: None,
                    data,
                    length_capacity: Some(lc),
                    has_children: false,
                    value: None,
                    not_walked: false,
                })
                .unwrap();
                sink.end().unwrap();
            }
            sink.end().unwrap();
            sink.end_sample().unwrap();
            drop(sink);
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            let members = v[0]["members"].as_array().unwrap();
            assert_eq!(members.len(), kids.len());
            for (m, &(n, size, (len, cap), data)) in members.iter().zip(&kids) {
                assert_eq!(m["size"], size);
                assert_eq!(m["exclusiveSize"], size);
                assert_eq!(m["length"], len);
                assert_eq!(m["capacity"], cap);
                assert_eq!(m["is_primitive"], n.is_primitive);
                assert_eq!(m["typePath"], serde_json::json!(["a0", "[]"]));
                assert_eq!(m.get("data").and_then(|d| d.as_u64()), data.map(|_| 7));
            }
        }
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for v in [
            0,
            7,
            10,
            99,
            100,
            101,
            999,
            1000,
            12345,
            u64::MAX / 3,
            u64::MAX,
        ] {
            let mut buf = Vec::new();
            super::push_u64(&mut buf, v);
            assert_eq!(String::from_utf8(buf).unwrap(), v.to_string());
        }
    }
}
