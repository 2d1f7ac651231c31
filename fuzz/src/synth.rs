//! Well-formed data streams for a plan, without a process: replays the plan the way a walker
//! does (the words per `Op` are documented in `oi_trace::plan`) and invents small runtime
//! values. They seed the stream decoder with inputs that reach deep into the plan, and feed
//! the plans built from corrupted binaries.

use oi_trace::plan::{Capture, NodeId, Op, Plan};

/// Longest stream generated; a plan that needs more (a huge static array of dynamic
/// elements, say) gets no stream.
const MAX_WORDS: usize = 1 << 16;
/// Pointers are descended this deep, so that cycles in the plan end.
const MAX_POINTER_DEPTH: u32 = 3;
/// Most elements per container.
const MAX_LEN: u64 = 3;
/// Containers deeper than this are empty (a `vector<Node>` inside `Node` recurses).
const MAX_DEPTH: u32 = 24;

struct Synth<'p> {
    plan: &'p Plan,
    out: Vec<u64>,
    rng: u64,
    pointer_depth: u32,
    depth: u32,
}

/// A stream for `root` of `plan`, varied by `seed`; `None` if it would be too long.
/// The words are encoded as a walker writes them (`plan::stream`).
pub fn stream(plan: &Plan, root: NodeId, seed: u64) -> Option<Vec<u8>> {
    let mut s = Synth {
        plan,
        out: Vec::new(),
        rng: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
        pointer_depth: 0,
        depth: 0,
    };
    s.node(root).then(|| oi_trace::plan::stream::encode(&s.out))
}

impl Synth<'_> {
    /// xorshift64: deterministic per seed.
    fn next(&mut self, below: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % below.max(1)
    }

    fn emit(&mut self, words: &[u64]) -> bool {
        self.out.extend_from_slice(words);
        self.out.len() <= MAX_WORDS
    }

    /// An element count: small, and 0 deep down.
    fn len(&mut self) -> u64 {
        if self.depth > MAX_DEPTH {
            0
        } else {
            self.next(MAX_LEN + 1)
        }
    }

    fn address(&mut self) -> u64 {
        0x5555_0000_0000 + self.next(1 << 20) * 16
    }

    /// Appends the words of node `id`; false once the stream is too long.
    fn node(&mut self, id: NodeId) -> bool {
        self.depth += 1;
        let ok = self.node_words(id);
        self.depth -= 1;
        ok
    }

    fn node_words(&mut self, id: NodeId) -> bool {
        let plan = self.plan;
        let Some(n) = plan.nodes.get(id) else {
            return false;
        };
        if !n.dynamic {
            return true;
        }
        match &n.op {
            Op::Leaf | Op::Bitfield => true,
            Op::Struct { members, .. } => members.iter().all(|m| self.node(m.1)),
            Op::Array { elem, count, .. } => self.repeat(*elem, *count),
            Op::Pair { first, second } => self.node(first.1) && self.node(second.1),
            Op::Entry {
                key,
                value,
                capture,
            } => capture.is_none_or(|c| self.capture(c)) && self.node(key.1) && self.node(value.1),
            Op::String(_) => {
                let len = self.next(40);
                let cap = if len < 16 { 0 } else { len + self.next(8) };
                self.emit(&[len, cap])
            }
            Op::Vector { elem, .. } => {
                let (a, len) = (self.address(), self.len());
                let cap = len + self.next(3);
                self.emit(&[a, len, cap]) && self.repeat(*elem, len)
            }
            Op::VectorBool { .. } => {
                let (a, len) = (self.address(), self.next(200));
                self.emit(&[a, len, len.div_ceil(64) * 64])
            }
            Op::Deque { elem, .. } => {
                let (a, len) = (self.address(), self.len());
                self.emit(&[a, len, 8, 1]) && self.repeat(*elem, len)
            }
            Op::List { elem, .. } | Op::RbTree { elem, .. } => {
                let (a, len) = (self.address(), self.len());
                self.emit(&[a, len]) && self.repeat(*elem, len)
            }
            Op::Hashtable { elem, .. } => {
                let (a, len) = (self.address(), self.len());
                self.emit(&[a, len, 13]) && self.repeat(*elem, len)
            }
            Op::Described { elem, .. } => {
                let (a, len) = (self.address(), self.len());
                let (cap, heap) = (len + self.next(3), self.next(4096));
                self.emit(&[a, len, cap, heap]) && self.repeat(*elem, len)
            }
            Op::Optional { elem, .. } => {
                let engaged = self.next(2);
                self.emit(&[engaged]) && (engaged == 0 || self.node(*elem))
            }
            Op::Variant { alternatives, .. } => {
                let i = self.next(alternatives.len() as u64 + 1);
                match alternatives.get(i as usize) {
                    Some(&alt) => self.emit(&[i]) && self.node(alt),
                    None => self.emit(&[u64::MAX]),
                }
            }
            Op::SmartPtr { target, .. }
            | Op::RefWrap { target, .. }
            | Op::RawPointer { target } => self.pointer(*target),
            Op::Poly {
                candidates,
                fallback,
            } => {
                let i = self.next(candidates.len() as u64 + 1);
                match candidates.get(i as usize) {
                    Some(c) => self.emit(&[i]) && self.node(c.2),
                    None => self.emit(&[u64::MAX]) && self.node(*fallback),
                }
            }
        }
    }

    fn repeat(&mut self, elem: NodeId, count: u64) -> bool {
        count <= MAX_WORDS as u64 && (0..count).all(|_| self.node(elem))
    }

    fn capture(&mut self, c: Capture) -> bool {
        match c {
            Capture::Scalar { .. } => {
                let v = self.next(1000);
                self.emit(&[v])
            }
            Capture::Address => {
                let a = self.address();
                self.emit(&[a])
            }
            Capture::String(_) => {
                let n = self.next(20);
                let text: Vec<u64> = (0..n.div_ceil(8)).map(|_| 0x6161_6161_6161_6161).collect();
                self.emit(&[n]) && self.emit(&text)
            }
        }
    }

    fn pointer(&mut self, target: Option<NodeId>) -> bool {
        let descend =
            target.is_some() && self.pointer_depth < MAX_POINTER_DEPTH && self.next(3) > 0;
        let ptr = if self.next(4) == 0 { 0 } else { self.address() };
        let descend = descend && ptr != 0;
        if !self.emit(&[ptr, u64::from(descend)]) {
            return false;
        }
        match (descend, target) {
            (true, Some(t)) => {
                self.pointer_depth += 1;
                let ok = self.node(t);
                self.pointer_depth -= 1;
                ok
            }
            _ => true,
        }
    }
}
