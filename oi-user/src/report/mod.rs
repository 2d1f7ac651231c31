//! Decodes a data stream by replaying the plan that produced it, and hands each result node
//! (in pre-order, with its inclusive size already known) to a printer: streaming JSON
//! ([`json`]), OI's CSV ([`csv`]), a summarised tree ([`tree`]), or sums by member path
//! ([`totals`]) for pictures ([`picture`]) and growth over samples ([`growth`]); [`output`]
//! feeds several of them from one pass.
//!
//! Inclusive sizes come first in the JSON, before the children, so decoding is two passes
//! over the stream: the first computes the size of every dynamic node that has children (a
//! flat `Vec<u64>` in pre-order, one word per such node, none for leaves such as the strings
//! of a `vector<string>`), the second prints. No result tree is ever held for JSON.
//!
//! The stream (LEB128 words, `plan::stream`) is read where it lies: nothing is copied or
//! allocated per node.
//!
//! The stream is not trusted: the JIT walker writes it inside the target, whose threads could
//! overwrite it. Counts and nesting beyond the walker's own bounds are errors (never a loop of
//! 2^64 elements or a stack overflow), and sizes add up saturating.

pub mod csv;
pub mod flame;
pub mod growth;
pub mod json;
pub mod output;
pub mod picture;
mod sized;
pub mod totals;
pub mod tree;

use crate::plan::limits::{MAX_CAPTURED_KEY, MAX_DEPTH, MAX_ELEMENTS};
pub use crate::plan::totals::{static_total, static_unions};
use crate::plan::{Capture, Node, NodeId, Op, Plan, stream as words};
pub use sized::{Sized, size_root, total_size};
use std::borrow::Cow;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("data stream ended early (walker and plan disagree)")]
    Truncated,
    #[error("data stream is corrupt: {0}")]
    Corrupt(String),
    /// Every root of a sample of several roots failed (each one's reason, `label: why`).
    #[error("no argument could be measured: {0}")]
    NothingMeasured(String),
    #[error("cannot write the report: {0}")]
    Io(#[from] std::io::Error),
}

/// One result node as printers see it.
pub struct NodeOut<'a> {
    pub node: &'a Node,
    /// Name (for captured map entries, `[key]`).
    pub name: &'a str,
    /// Names from the root down to this node, inclusive.
    pub path: &'a [Cow<'a, str>],
    pub size: u64,
    pub exclusive: u64,
    pub pointer: Option<u64>,
    /// A chased raw pointer that charges the heap block it starts: the block's usable
    /// bytes (JSON `heapBlock`, after `pointer`; not an OI key).
    pub heap_block: Option<u64>,
    pub data: Option<&'a Data>,
    pub length_capacity: Option<(u64, u64)>,
    pub has_children: bool,
    /// With `--values`: the scalar's words (low, high; high is 0 below 16 bytes).
    pub value: Option<(u64, u64)>,
    /// A union not walked: opaque (`Node::opaque_union`), or discriminated by a value no
    /// case of its `[[union]]` rule names; or a container of a standard library oi-trace
    /// does not know (`Node::foreign`). JSON `notWalked`: its staticSize.
    pub not_walked: bool,
}

/// A captured key (docs/semantics.md, "Captured keys").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    Number(u64),
    Text(String),
    Address(u64),
}

impl Data {
    /// The text placed between brackets in the entry's name.
    pub fn label(&self) -> String {
        match self {
            Data::Number(n) => n.to_string(),
            Data::Text(s) => s.clone(),
            Data::Address(a) => format!("{a:#x}"),
        }
    }
}

/// Largest byte count a stream may claim (a string's capacity, a bucket array): beyond the
/// 47-bit user address space of x86-64, it cannot be a real allocation.
const MAX_BYTES: u64 = 1 << 47;

pub trait Sink {
    /// A root is about to be decoded; `label` says which (`this`, `arg0`, `retval`).
    fn root(&mut self, _label: &str) {}

    /// Root `label` (plan node `node`) has no result: its walk or its decoding failed, for
    /// the reason `why`; the other roots of the sample are printed as usual.
    fn failed_root(&mut self, _label: &str, _node: &Node, _why: &str) -> Result<(), ReportError> {
        Ok(())
    }

    fn begin(&mut self, n: &NodeOut<'_>) -> Result<(), ReportError>;
    fn end(&mut self) -> Result<(), ReportError>;

    /// Of `count` identical siblings about to be printed (elements that read nothing at
    /// runtime, all alike), how many this sink needs to see: all of them unless it
    /// summarises. A corrupt vector may claim 2^28 of them.
    fn wanted(&self, count: u64) -> u64 {
        count
    }

    /// The siblings beyond [`Sink::wanted`]: `count` more like the ones just printed, of
    /// `size` bytes each.
    fn skip(&mut self, _count: u64, _size: u64) -> Result<(), ReportError> {
        Ok(())
    }
}

/// The decoder's bound on a string's capacity word (the walkers' too).
fn check_string_capacity(cap: u64) -> Result<(), ReportError> {
    if cap > MAX_BYTES {
        return Err(ReportError::Corrupt(format!(
            "implausible string capacity {cap}"
        )));
    }
    Ok(())
}

fn run_error(e: words::RunError) -> ReportError {
    match e {
        words::RunError::Word(e) => stream_error(e),
        words::RunError::BadRun(n) => {
            ReportError::Corrupt(format!("implausible run of {n} string groups"))
        }
    }
}

fn stream_error(e: words::ReadError) -> ReportError {
    match e {
        words::ReadError::Truncated => ReportError::Truncated,
        words::ReadError::Overlong => ReportError::Corrupt("a word longer than 64 bits".into()),
    }
}

/// Decodes one root's stream into `sink`.
pub fn decode(
    plan: &Plan,
    root: NodeId,
    stream: &[u8],
    sink: &mut dyn Sink,
) -> Result<(), ReportError> {
    size_root(plan, root, stream)?.print(sink)
}

/// What a node's children are, once its own words are read.
enum Children<'p> {
    None,
    /// Struct members (offset, node), borrowed from the plan: no allocation per node.
    Members(&'p [(u64, NodeId)]),
    /// The two children of a pair or a map entry.
    Two(NodeId, NodeId),
    /// `count` times the same element node.
    Repeat(NodeId, u64),
    One(NodeId),
}

/// A node's own words, decoded.
struct Header<'p> {
    exclusive: u64,
    children: Children<'p>,
    pointer: Option<u64>,
    /// The usable size of the heap block a raw pointer starts, charged here.
    heap_block: Option<u64>,
    lc: Option<(u64, u64)>,
    data: Option<Data>,
    value: Option<(u64, u64)>,
    /// A discriminated union whose discriminator matched no case.
    not_walked: bool,
}

struct Decoder<'a, 's> {
    plan: &'a Plan,
    stream: &'a [u8],
    pos: usize,
    /// Pass 1 fills it; pass 2 reads it back in the same order.
    sizes: Vec<u64>,
    cursor: usize,
    sink: Option<&'s mut dyn Sink>,
    /// Names from the root down to the node being printed: borrowed from the plan, owned only
    /// for the few made here (captured keys, root labels), so printing allocates no name.
    path: Vec<Cow<'a, str>>,
    statics: &'s mut Vec<Option<u64>>,
    /// Dynamic nodes open above this one (counted as the walker counts its nesting).
    depth: u32,
    /// Pass 1 keeps the sizes for pass 2; a sizing alone ([`total_size`]) does not.
    record: bool,
    /// Bytes in opaque unions met so far (pass 1), and their memo per plan node.
    unions: u64,
    union_memo: Vec<Option<u64>>,
    /// The last pointer of a pointer node, against which the next one was written.
    pointers: words::PointerDelta,
    /// The words of the next string of a vector of strings, read by `print_children`.
    vector_string: Option<(u64, u64)>,
}

impl<'a, 's> Decoder<'a, 's> {
    /// A decoder at the start of `stream`: nothing read, sized or printed yet. `record`: keep
    /// the sizes for a second pass.
    fn start(
        plan: &'a Plan,
        stream: &'a [u8],
        statics: &'s mut Vec<Option<u64>>,
        record: bool,
    ) -> Self {
        Decoder {
            plan,
            stream,
            pos: 0,
            sizes: Vec::new(),
            cursor: 0,
            sink: None,
            path: Vec::new(),
            statics,
            depth: 0,
            record,
            unions: 0,
            union_memo: Vec::new(),
            pointers: words::PointerDelta::default(),
            vector_string: None,
        }
    }
}

impl<'a> Decoder<'a, '_> {
    fn word(&mut self) -> Result<u64, ReportError> {
        words::read(self.stream, &mut self.pos).map_err(stream_error)
    }

    /// A pointer node's pointer (`stream::PointerDelta`).
    fn pointer(&mut self) -> Result<u64, ReportError> {
        let w = self.word()?;
        Ok(self.pointers.decode(w))
    }

    /// A word that is at most `max`: an element count or a size the walker bounds (or that
    /// no real object exceeds).
    fn bounded(&mut self, max: u64, what: &str) -> Result<u64, ReportError> {
        let w = self.word()?;
        if w > max {
            return Err(ReportError::Corrupt(format!("implausible {what} {w}")));
        }
        Ok(w)
    }

    fn count(&mut self) -> Result<u64, ReportError> {
        self.bounded(MAX_ELEMENTS, "element count")
    }

    /// Inclusive size of a non-dynamic subtree (no stream words), memoised per node.
    fn static_total(&mut self, id: NodeId) -> u64 {
        static_total(self.plan, id, self.statics)
    }

    /// Pass 1: adds the opaque-union bytes of `times` copies of static subtree `id`.
    fn count_unions(&mut self, id: NodeId, times: u64) {
        if self.sink.is_none() {
            let u = static_unions(self.plan, id, &mut self.union_memo);
            self.unions = self.unions.saturating_add(u.saturating_mul(times));
        }
    }

    fn read_capture(&mut self, c: Capture) -> Result<Data, ReportError> {
        Ok(match c {
            Capture::Scalar { .. } => Data::Number(self.word()?),
            Capture::Address => Data::Address(self.word()?),
            Capture::String(_) => {
                let n = self.word()?.min(MAX_CAPTURED_KEY) as usize;
                let mut bytes = Vec::with_capacity(n);
                for _ in 0..n.div_ceil(8) {
                    bytes.extend_from_slice(&self.word()?.to_le_bytes());
                }
                bytes.truncate(n);
                Data::Text(String::from_utf8_lossy(&bytes).into_owned())
            }
        })
    }

    /// Decodes node `id`; returns its inclusive size. `name` overrides the plan's name.
    fn node(&mut self, id: NodeId, name: Option<String>) -> Result<u64, ReportError> {
        if !self.plan.nodes[id].dynamic {
            return self.node_here(id, name);
        }
        // The walker nests at most MAX_DEPTH dynamic nodes: deeper is a forged stream, and
        // would overflow the stack.
        if self.depth >= MAX_DEPTH {
            return Err(ReportError::Corrupt(format!(
                "nested deeper than {MAX_DEPTH} levels"
            )));
        }
        self.depth += 1;
        let size = self.node_here(id, name);
        self.depth -= 1;
        size
    }

    fn node_here(&mut self, id: NodeId, name: Option<String>) -> Result<u64, ReportError> {
        let plan = self.plan;
        let n = &plan.nodes[id];
        let printing = self.sink.is_some();
        if !n.dynamic && !printing {
            self.count_unions(id, 1);
            return Ok(self.static_total(id));
        }
        if let Op::Poly {
            candidates,
            fallback,
        } = &n.op
        {
            // Transparent: the chosen class stands in this node's place.
            let i = self.word()?;
            let chosen = candidates.get(i as usize).map_or(*fallback, |c| c.2);
            return self.node(chosen, name);
        }
        let Header {
            exclusive,
            children,
            pointer,
            heap_block,
            lc,
            data,
            value,
            not_walked,
        } = self.header(n)?;
        let has_children = match &children {
            Children::None => false,
            Children::Members(m) => !m.is_empty(),
            Children::Two(..) => true,
            Children::Repeat(_, c) => *c > 0,
            Children::One(_) => true,
        };
        if !printing {
            // Pass 1: reserve this node's slot before its children's (pre-order).
            let slot = (self.record && has_children).then(|| {
                self.sizes.push(0);
                self.sizes.len() - 1
            });
            let size = exclusive.saturating_add(self.children_size(&children)?);
            if let Some(i) = slot {
                self.sizes[i] = size;
            }
            return Ok(size);
        }

        // Only printers see names: the sizing pass allocates nothing per node.
        let name: Cow<'a, str> = match (&data, name) {
            (Some(d), _) => Cow::Owned(format!("[{}]", d.label())),
            (None, Some(nm)) => Cow::Owned(nm),
            (None, None) => Cow::Borrowed(n.name.as_str()),
        };
        let size = if !n.dynamic {
            self.static_total(id)
        } else if has_children {
            let s = *self.sizes.get(self.cursor).ok_or(ReportError::Truncated)?;
            self.cursor += 1;
            s
        } else {
            exclusive
        };
        self.path.push(name);
        let out = NodeOut {
            node: n,
            name: self.path.last().map(Cow::as_ref).unwrap_or(""),
            path: &self.path,
            size,
            exclusive,
            pointer,
            heap_block,
            data: data.as_ref(),
            length_capacity: lc,
            has_children,
            value,
            not_walked: not_walked || n.opaque_union || n.foreign,
        };
        if let Some(sink) = self.sink.as_mut() {
            sink.begin(&out)?;
        }
        self.print_children(&children)?;
        if let Some(sink) = self.sink.as_mut() {
            sink.end()?;
        }
        self.path.pop();
        Ok(size)
    }

    /// Reads node `n`'s own words (its value, then what its op reads) and says what it is:
    /// exclusive size, children, pointer, length/capacity and captured key.
    fn header(&mut self, n: &'a Node) -> Result<Header<'a>, ReportError> {
        let plan = self.plan;
        let s = n.static_size;
        let mut pointer = None;
        let mut heap_block = None;
        let mut lc = None;
        let mut data = None;
        let mut not_walked = false;
        let value = match &n.value {
            Some(v) => {
                let low = self.word()?;
                let high = if v.words() > 1 { self.word()? } else { 0 };
                Some((low, high))
            }
            None => None,
        };
        let (exclusive, children) = match &n.op {
            Op::Leaf => (s, Children::None),
            Op::Bitfield => (0, Children::None),
            Op::Struct {
                members,
                padding,
                adapter,
            } => {
                if *adapter
                    && self.sink.is_some()
                    && let [(offset, c)] = members.as_slice()
                    && plan.nodes[*c].dynamic
                {
                    // The container's own words come next in the stream: read its header
                    // without consuming it (its node decodes them again).
                    let (at, pointers) = (self.pos, self.pointers);
                    let inner = self.header(&plan.nodes[*c]);
                    (self.pos, self.pointers) = (at, pointers);
                    let inner = inner?;
                    pointer = inner.pointer.map(|p| p.wrapping_sub(*offset));
                    lc = inner.lc;
                }
                (*padding, Children::Members(members))
            }
            Op::Array {
                elem,
                count,
                exclusive,
                ..
            } => {
                lc = Some((*count, *count));
                (*exclusive, Children::Repeat(*elem, *count))
            }
            Op::Pair { first, second } => {
                let e = s.saturating_sub(
                    plan.nodes[first.1]
                        .static_size
                        .saturating_add(plan.nodes[second.1].static_size),
                );
                (e, Children::Two(first.1, second.1))
            }
            Op::Entry {
                key,
                value,
                capture,
            } => {
                if let Some(c) = capture {
                    data = Some(self.read_capture(*c)?);
                }
                let e = s.saturating_sub(
                    plan.nodes[key.1]
                        .static_size
                        .saturating_add(plan.nodes[value.1].static_size),
                );
                (e, Children::Two(key.1, value.1))
            }
            Op::String(l) => {
                // An element of a vector of strings was read by `print_children`.
                let (len, cap) = match self.vector_string.take() {
                    Some(lc) => lc,
                    None => (self.word()?, self.bounded(MAX_BYTES, "string capacity")?),
                };
                let (e, l, c) = l.account(len, cap, plan.sizing);
                lc = Some((l, c));
                (e, Children::None)
            }
            Op::Vector { layout, elem } => {
                pointer = Some(self.word()?);
                let (len, cap) = (self.count()?, self.count()?);
                lc = Some((len, cap));
                (layout.exclusive(len, cap), Children::Repeat(*elem, len))
            }
            Op::Described { layout, elem } => {
                pointer = Some(self.word()?);
                let (len, cap) = (self.count()?, self.count()?);
                let heap = self.bounded(MAX_BYTES, "heap bytes")?;
                lc = Some((len, cap));
                (layout.exclusive(len, heap), Children::Repeat(*elem, len))
            }
            Op::VectorBool { layout, elem } => {
                pointer = Some(self.word()?);
                let (len, cap) = (self.count()?, self.count()?);
                lc = Some((len, cap));
                (
                    layout.exclusive(len, cap, plan.sizing),
                    Children::Repeat(*elem, len),
                )
            }
            Op::Deque { layout, elem } => {
                pointer = Some(self.word()?);
                let len = self.count()?;
                // As the walker checks: the map holds the blocks.
                let slots = self.bounded(MAX_ELEMENTS, "deque map size")?;
                let blocks = self.bounded(slots.max(1), "deque block count")?;
                let (e, cap) = layout.account(len, slots, blocks);
                lc = Some((len, cap));
                (e, Children::Repeat(*elem, len))
            }
            Op::List { layout, elem } => {
                pointer = Some(self.word()?);
                let len = self.count()?;
                lc = Some((len, len));
                (layout.exclusive(len), Children::Repeat(*elem, len))
            }
            Op::RbTree {
                layout,
                elem,
                is_map,
            } => {
                pointer = Some(self.word()?);
                let len = self.count()?;
                lc = Some((len, len));
                (layout.exclusive(len, *is_map), Children::Repeat(*elem, len))
            }
            Op::Hashtable {
                layout,
                elem,
                is_map,
            } => {
                pointer = Some(self.word()?);
                let len = self.count()?;
                let buckets = self.bounded(MAX_BYTES / 8, "bucket count")?;
                lc = Some((len, len));
                let key_size = match &plan.nodes[*elem].op {
                    Op::Entry { key, .. } if *is_map => plan.nodes[key.1].static_size,
                    _ => layout.value_size,
                };
                (
                    layout.charge(plan.sizing, len, buckets, key_size, *is_map),
                    Children::Repeat(*elem, len),
                )
            }
            Op::Optional { elem, .. } => {
                let engaged = self.word()? != 0;
                lc = Some((u64::from(engaged), 1));
                if engaged {
                    (
                        s.saturating_sub(plan.nodes[*elem].static_size),
                        Children::One(*elem),
                    )
                } else {
                    (s, Children::None)
                }
            }
            Op::Variant { alternatives, .. } => {
                let index = self.word()?;
                match alternatives.get(index as usize) {
                    Some(&alt) => {
                        lc = Some((1, 1));
                        (
                            s.saturating_sub(plan.nodes[alt].static_size),
                            Children::One(alt),
                        )
                    }
                    None => {
                        lc = Some((0, 1));
                        (s, Children::None)
                    }
                }
            }
            Op::Union { cases, .. } => {
                let i = self.word()?;
                match cases.get(i as usize) {
                    Some(&(_, Some((_, member)))) => (
                        s.saturating_sub(plan.nodes[member].static_size),
                        Children::One(member),
                    ),
                    Some((_, None)) => (s, Children::None),
                    // The discriminator matched no case: a union not walked (pass 1 counts).
                    None => {
                        if self.sink.is_none() {
                            self.unions = self.unions.saturating_add(s);
                        }
                        not_walked = true;
                        (s, Children::None)
                    }
                }
            }
            // Handled by `node_here` (transparent).
            Op::Poly { fallback, .. } => (s, Children::One(*fallback)),
            Op::SmartPtr {
                target, control, ..
            } => {
                let ptr = self.pointer()?;
                let descended = self.word()? != 0;
                // Real sizes: the shared_ptr's control block, charged with its object.
                let block = match control {
                    Some(c) => c.charge(self.word()?, descended && target.is_some()),
                    None => 0,
                };
                pointer = Some(ptr);
                lc = Some((u64::from(descended), 1));
                match (descended, target) {
                    (true, Some(t)) => (s.saturating_add(block), Children::One(*t)),
                    _ => (s, Children::None),
                }
            }
            Op::RefWrap { target, .. } | Op::RawPointer { target } => {
                let ptr = self.pointer()?;
                let descended = self.word()? != 0;
                pointer = Some(ptr);
                lc = Some((u64::from(descended), 1));
                match (descended, target) {
                    (true, Some(t)) => (s, Children::One(*t)),
                    _ => (s, Children::None),
                }
            }
            Op::HeapPointer { target, .. } => {
                let ptr = self.pointer()?;
                let descended = self.word()? != 0;
                let block = self.bounded(MAX_BYTES, "heap block size")?;
                pointer = Some(ptr);
                lc = Some((u64::from(descended), 1));
                // The block holds the pointee: the pointer is charged the rest of it.
                let (inside, children) = match (descended, target) {
                    (true, Some(t)) => (plan.nodes[*t].static_size, Children::One(*t)),
                    _ => (0, Children::None),
                };
                if block > 0 {
                    heap_block = Some(block);
                }
                (s.saturating_add(block.saturating_sub(inside)), children)
            }
        };
        Ok(Header {
            exclusive,
            children,
            pointer,
            heap_block,
            lc,
            data,
            value,
            not_walked,
        })
    }

    fn children_size(&mut self, c: &Children) -> Result<u64, ReportError> {
        Ok(match c {
            Children::None => 0,
            Children::Members(m) => {
                let mut t = 0u64;
                for &(_, id) in *m {
                    t = t.saturating_add(self.node(id, None)?);
                }
                t
            }
            Children::Two(a, b) => self.node(*a, None)?.saturating_add(self.node(*b, None)?),
            Children::Repeat(id, count) => {
                let plan = self.plan;
                if !plan.nodes[*id].dynamic {
                    self.count_unions(*id, *count);
                    self.static_total(*id).saturating_mul(*count)
                } else if let Op::String(l) = &plan.nodes[*id].op {
                    // Elements that are strings are leaves: sized in one loop, exactly as
                    // `node` would size each (same words, bounds and depth limit).
                    if *count > 0 && self.depth >= MAX_DEPTH {
                        return Err(ReportError::Corrupt(format!(
                            "nested deeper than {MAX_DEPTH} levels"
                        )));
                    }
                    let (s, mut pos) = (self.stream, self.pos);
                    let mut reader = words::StringRunReader::default();
                    let mut t = 0u64;
                    let mut i = 0;
                    while i < *count {
                        // A run of repeated groups is sized at once: its group's size times
                        // the run.
                        let groups = reader.run(s, &mut pos, *count).map_err(run_error)?;
                        if groups > 0 {
                            let group = reader.group().iter().fold(0u64, |g, &(len, cap)| {
                                g.saturating_add(l.account(len, cap, plan.sizing).0)
                            });
                            t = t.saturating_add(group.saturating_mul(groups));
                            reader.skip_run();
                            i += groups * words::STRING_GROUP as u64;
                            continue;
                        }
                        let (len, cap) = reader.next(s, &mut pos).map_err(stream_error)?;
                        check_string_capacity(cap)?;
                        t = t.saturating_add(l.account(len, cap, plan.sizing).0);
                        i += 1;
                    }
                    self.pos = pos;
                    t
                } else {
                    let mut t = 0u64;
                    for _ in 0..*count {
                        t = t.saturating_add(self.node(*id, None)?);
                    }
                    t
                }
            }
            Children::One(id) => self.node(*id, None)?,
        })
    }

    fn print_children(&mut self, c: &Children) -> Result<(), ReportError> {
        match c {
            Children::None => {}
            Children::Members(m) => {
                for &(_, id) in *m {
                    self.node(id, None)?;
                }
            }
            Children::Two(a, b) => {
                self.node(*a, None)?;
                self.node(*b, None)?;
            }
            Children::Repeat(id, count)
                if self.plan.nodes[*id].dynamic
                    && matches!(self.plan.nodes[*id].op, Op::String(_)) =>
            {
                // Strings with runs of repeated groups (`stream::StringRuns`): each is read
                // here and handed to `node` (its header takes it), a repeated one from the
                // run's group.
                let mut reader = words::StringRunReader::default();
                for _ in 0..*count {
                    reader
                        .run(self.stream, &mut self.pos, *count)
                        .map_err(run_error)?;
                    let (len, cap) = reader
                        .next(self.stream, &mut self.pos)
                        .map_err(stream_error)?;
                    check_string_capacity(cap)?;
                    self.vector_string = Some((len, cap));
                    self.node(*id, None)?;
                }
            }
            Children::Repeat(id, count) => {
                let alike = !self.plan.nodes[*id].dynamic;
                let shown = match &self.sink {
                    Some(sink) if alike => sink.wanted(*count).min(*count),
                    _ => *count,
                };
                for _ in 0..shown {
                    self.node(*id, None)?;
                }
                if shown < *count {
                    let size = self.static_total(*id);
                    if let Some(sink) = self.sink.as_mut() {
                        sink.skip(count - shown, size)?;
                    }
                }
            }
            Children::One(id) => {
                self.node(*id, None)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
