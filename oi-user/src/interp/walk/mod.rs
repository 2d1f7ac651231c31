//! Runs a plan over memory and appends the stream words (see `plan` for their meaning),
//! encoded by `plan::stream`.
//!
//! Subtrees whose plan node is not `dynamic` are skipped without reading anything. Every
//! count read from the target is bounded before it drives a loop or an allocation, so a
//! corrupt object yields an error, not a hang or an out-of-memory.

mod elements;

use std::collections::HashSet;

use super::memory::{MemoryReader, ReadError};
use crate::containers::{self, rbtree};
use crate::plan::{BLOCK_TAG, Capture, NodeId, Op, Plan, stream};

#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("corrupt object at {addr:#x}: {what}")]
    Corrupt { addr: u64, what: String },
}

/// Most addresses remembered for sharing / cycle detection (docs/semantics.md,
/// "Pointers, sharing and cycles").
pub const VISITED_CAPACITY: usize = 131_072;
/// Largest single read we agree to make (a bigger one means a corrupt length).
const MAX_ARRAY_BYTES: u64 = 1 << 30;
// The limits the walkers and the decoder share are the plan's.
pub use crate::plan::limits::{MAX_CAPTURED_KEY, MAX_DEPTH, MAX_ELEMENTS};
/// Elements read per chunk of a large array.
const CHUNK_BYTES: u64 = 32 << 20;
/// A Swiss table whose full control bytes do not number its `len` (the JIT's `SwissCount`).
pub const SWISS_COUNT: &str = "full slots differ from the table's size";
/// A node-chain map whose chains do not hold its `len` nodes (the JIT's `ChainCount`).
pub const CHAIN_COUNT: &str = "chained nodes differ from the map's size";
/// A b-tree whose nodes do not hold its `len` values in a plausible shape (the JIT's
/// `BtreeShape`): more nodes than values, deeper than [`BTREE_DEPTH`], a node's
/// `[start, finish)` beyond its slots, or a value count different from `len`.
pub const BTREE_SHAPE: &str = "b-tree nodes do not hold the tree's size";
/// Deepest b-tree walked (a node holds at least one value and a child per value, so 40
/// levels hold more than 2^40 values).
pub const BTREE_DEPTH: u64 = 40;
/// What a node-chain map's first pass found: its nodes in walk order, and the bytes and
/// count of the trees its bucket pairs share.
#[derive(Default)]
struct ChainsFound {
    nodes: Vec<u64>,
    tree_bytes: u64,
    tree_nodes: u64,
}

/// Most heap bytes a described container may claim (the decoder's bound on byte counts).
pub const MAX_DESCRIBED_HEAP: u64 = 1 << 47;

pub struct Walker<'a> {
    plan: &'a Plan,
    mem: &'a dyn MemoryReader,
    pub out: Vec<u8>,
    visited: HashSet<u64>,
    /// Runtime minus ELF addresses of the probed binary (to match vtables).
    bias: u64,
    depth: u32,
    /// Ranges that may hold heap chunks, read from `mem` at the first chased pointer.
    heaps: Option<Vec<(u64, u64)>>,
    /// Pointer nodes write their pointer against the last one (`stream::PointerDelta`).
    pointers: stream::PointerDelta,
}

/// Walks `root` (whose object is at `addr`) and returns the stream. `seed` puts the root's
/// address in the visited set (not for objects that arrived in registers).
pub fn run(
    plan: &Plan,
    root: NodeId,
    addr: u64,
    mem: &dyn MemoryReader,
    seed: bool,
    bias: u64,
) -> Result<Vec<u8>, WalkError> {
    // Node-based containers read node by node: serve them from cached blocks.
    let cached = super::memory::CachedReader::new(mem);
    let mut w = Walker {
        plan,
        mem: &cached,
        out: Vec::new(),
        visited: HashSet::new(),
        bias,
        depth: 0,
        pointers: stream::PointerDelta::default(),
        heaps: None,
    };
    if seed {
        w.visited.insert(addr ^ plan.visit_tag(Some(root)));
    }
    w.walk_at(root, addr)?;
    Ok(w.out)
}

fn corrupt(addr: u64, what: impl Into<String>) -> WalkError {
    WalkError::Corrupt {
        addr,
        what: what.into(),
    }
}

fn sub(obj: &[u8], off: u64, len: u64, addr: u64) -> Result<&[u8], WalkError> {
    let s = usize::try_from(off).map_err(|_| corrupt(addr, "offset"))?;
    let e = s
        .checked_add(usize::try_from(len).map_err(|_| corrupt(addr, "length"))?)
        .ok_or_else(|| corrupt(addr, "length"))?;
    obj.get(s..e)
        .ok_or_else(|| corrupt(addr, "member outside its object"))
}

fn word(obj: &[u8], off: u64, addr: u64) -> Result<u64, WalkError> {
    containers::word(obj, off).ok_or_else(|| corrupt(addr, "field outside its object"))
}

impl Walker<'_> {
    fn emit(&mut self, w: u64) {
        stream::push(&mut self.out, w);
    }

    /// A pointer node's pointer, as its distance from the last one.
    fn emit_pointer(&mut self, p: u64) {
        let w = self.pointers.encode(p);
        self.emit(w);
    }

    /// Emits a container's element count after checking it is plausible.
    fn emit_len(&mut self, len: u64, addr: u64) -> Result<(), WalkError> {
        if len > MAX_ELEMENTS {
            return Err(corrupt(addr, format!("implausible element count {len}")));
        }
        self.emit(len);
        Ok(())
    }

    /// The nodes of a null-terminated list from `first`, each linking the next at `next_off`
    /// (a `forward_list`). A cycle is corrupt, found by Brent's method (the node saved at each
    /// power of two steps met again) within twice its length, and so is a list longer than
    /// `MAX_ELEMENTS`.
    fn count_links(&self, first: u64, next_off: u64, addr: u64) -> Result<u64, WalkError> {
        let (mut cur, mut n) = (first, 0u64);
        let (mut saved, mut power, mut steps) = (first, 1u64, 0u64);
        while cur != 0 {
            n += 1;
            if n > MAX_ELEMENTS {
                return Err(corrupt(addr, format!("implausible element count {n}")));
            }
            cur = self.load(cur.wrapping_add(next_off), 8)?;
            if cur == saved {
                return Err(corrupt(addr, "implausible element count (a cycle)"));
            }
            steps += 1;
            if steps == power {
                (saved, power, steps) = (cur, power << 1, 0);
            }
        }
        Ok(n)
    }

    /// A description's `load(addr, width)`: 0 at address 0 (an absent block), else the
    /// unsigned integer read from the target.
    fn load(&self, addr: u64, width: u8) -> Result<u64, WalkError> {
        if addr == 0 {
            return Ok(0);
        }
        let b = self.read(addr, u64::from(width))?;
        Ok(containers::uint(&b, 0, u64::from(width)).unwrap_or(0))
    }

    fn read(&self, addr: u64, len: u64) -> Result<Vec<u8>, WalkError> {
        if len > MAX_ARRAY_BYTES {
            return Err(corrupt(addr, format!("implausible size {len}")));
        }
        let mut buf = vec![0u8; len as usize];
        self.mem.read(addr, &mut buf)?;
        Ok(buf)
    }

    /// Inserts `addr` into the visited set; false if already there or the set is full.
    fn visit(&mut self, addr: u64) -> bool {
        if self.visited.len() >= VISITED_CAPACITY {
            return false;
        }
        self.visited.insert(addr)
    }

    /// The usable size of the heap block starting at `ptr` if it is larger than a lone
    /// object (`lone`) and not charged yet in this walk (its key is [`BLOCK_TAG`]); else 0.
    fn heap_block(&mut self, ptr: u64, lone: u64) -> Result<u64, WalkError> {
        let heaps = self.heaps.get_or_insert_with(|| self.mem.heap_ranges());
        let usable = super::heap::block_usable(self.mem, heaps, ptr)?;
        Ok(if usable > lone && self.visit(ptr ^ (BLOCK_TAG << 48)) {
            usable
        } else {
            0
        })
    }

    fn dynamic(&self, id: NodeId) -> bool {
        self.plan.nodes[id].dynamic
    }

    /// Reads the object of node `id` at `addr` and walks it.
    pub fn walk_at(&mut self, id: NodeId, addr: u64) -> Result<(), WalkError> {
        if !self.dynamic(id) {
            return Ok(());
        }
        let bytes = self.read(addr, self.plan.nodes[id].static_size)?;
        self.walk(id, addr, &bytes)
    }

    /// Walks node `id` whose object (of its static size) is `obj`, at `addr`.
    pub fn walk(&mut self, id: NodeId, addr: u64, obj: &[u8]) -> Result<(), WalkError> {
        if !self.dynamic(id) {
            return Ok(());
        }
        if self.depth >= MAX_DEPTH {
            return Err(corrupt(
                addr,
                format!("nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        self.depth += 1;
        let r = self.walk_node(id, addr, obj);
        self.depth -= 1;
        r
    }

    fn walk_node(&mut self, id: NodeId, addr: u64, obj: &[u8]) -> Result<(), WalkError> {
        let plan = self.plan;
        let node = &plan.nodes[id];
        if !node.dynamic {
            return Ok(());
        }
        if let Some(v) = &node.value {
            // `--values`: the scalar's bytes, a word at a time (zero-extended).
            for w in 0..v.words() {
                let n = v.size.saturating_sub(8 * w).min(8);
                let word = containers::uint(obj, 8 * w, n)
                    .ok_or_else(|| corrupt(addr, "field outside its object"))?;
                self.emit(word);
            }
        }
        match &node.op {
            Op::Leaf | Op::Bitfield => {}
            Op::Struct { members, .. } => {
                for &(off, m) in members {
                    if self.dynamic(m) {
                        let size = plan.nodes[m].static_size;
                        self.walk(m, addr + off, sub(obj, off, size, addr)?)?;
                    }
                }
            }
            Op::Array {
                elem,
                offset,
                count,
                stride,
                ..
            } => {
                if self.dynamic(*elem) {
                    for i in 0..*count {
                        let off = offset + i * stride;
                        self.walk(*elem, addr + off, sub(obj, off, *stride, addr)?)?;
                    }
                }
            }
            Op::Pair { first, second }
            | Op::Entry {
                key: first,
                value: second,
                capture: None,
            } => {
                for &(off, m) in [first, second] {
                    let size = plan.nodes[m].static_size;
                    self.walk(m, addr + off, sub(obj, off, size, addr)?)?;
                }
            }
            Op::Entry {
                key,
                value,
                capture: Some(c),
            } => {
                self.capture(
                    *c,
                    addr + key.0,
                    sub(obj, key.0, plan.nodes[key.1].static_size, addr)?,
                )?;
                for &(off, m) in [key, value] {
                    let size = plan.nodes[m].static_size;
                    self.walk(m, addr + off, sub(obj, off, size, addr)?)?;
                }
            }
            Op::String(l) => {
                let (len, cap) = l.words(addr, obj).ok_or_else(|| corrupt(addr, "string"))?;
                self.emit(len);
                self.emit(cap);
            }
            Op::Vector { layout, elem } => {
                let (start, len, cap) = layout
                    .read(obj)
                    .ok_or_else(|| corrupt(addr, "vector pointers out of order"))?;
                self.emit(addr);
                self.emit_len(len, addr)?;
                self.emit_len(cap, addr)?;
                self.walk_array(*elem, start, len, layout.elem_size)?;
            }
            Op::VectorBool { layout, .. } => {
                let (len, cap) = layout
                    .read(obj)
                    .ok_or_else(|| corrupt(addr, "vector<bool> pointers out of order"))?;
                self.emit(addr);
                self.emit_len(len, addr)?;
                self.emit_len(cap, addr)?;
            }
            Op::Deque { layout, elem } => {
                let st = layout
                    .read(obj)
                    .ok_or_else(|| corrupt(addr, "deque iterators out of order"))?;
                if st.blocks > st.map_slots.max(1) || st.map_slots > MAX_ELEMENTS {
                    return Err(corrupt(addr, "deque map smaller than its blocks"));
                }
                self.emit(addr);
                self.emit_len(st.len, addr)?;
                self.emit(st.map_slots);
                self.emit(st.blocks);
                if self.dynamic(*elem) && st.len > 0 {
                    self.deque_elements(*elem, layout, &st, addr)?;
                }
            }
            Op::List { layout, elem } => {
                let len = if layout.counted {
                    self.count_links(
                        word(obj, layout.head_off + layout.next_off, addr)?,
                        layout.next_off,
                        addr,
                    )?
                } else {
                    word(obj, layout.size_off, addr)?
                };
                self.emit(addr);
                self.emit_len(len, addr)?;
                if self.dynamic(*elem) {
                    let head = addr + layout.head_off;
                    let mut cur = word(obj, layout.head_off + layout.next_off, addr)?;
                    for _ in 0..len {
                        if cur == head || cur == 0 {
                            return Err(corrupt(addr, "list shorter than its size"));
                        }
                        let node = self.read(cur, layout.node_size)?;
                        let v = sub(&node, layout.value_off, layout.elem_size, cur)?;
                        self.walk(*elem, cur + layout.value_off, v)?;
                        cur = word(&node, layout.next_off, cur)?;
                    }
                }
            }
            Op::RbTree { layout, elem, .. } => {
                let len = word(obj, layout.count_off, addr)?;
                self.emit(addr);
                self.emit_len(len, addr)?;
                if self.dynamic(*elem) {
                    let root = word(obj, layout.header_off + layout.root_link, addr)?;
                    self.rb_elements(*elem, layout, root, len, addr)?;
                }
            }
            Op::Hashtable { layout, elem, .. } => {
                let len = word(obj, layout.count_off, addr)?;
                let buckets = word(obj, layout.bucket_count_off, addr)?;
                self.emit(addr);
                self.emit_len(len, addr)?;
                self.emit(buckets);
                if self.dynamic(*elem) {
                    let mut cur = word(obj, layout.before_begin_off, addr)?;
                    for _ in 0..len {
                        if cur == 0 {
                            return Err(corrupt(addr, "hash table shorter than its size"));
                        }
                        let node = self.read(cur, layout.value_off + layout.value_size)?;
                        let v = sub(&node, layout.value_off, layout.value_size, cur)?;
                        self.walk(*elem, cur + layout.value_off, v)?;
                        cur = word(&node, 0, cur)?;
                    }
                }
            }
            Op::Optional { layout, elem } => {
                let engaged = containers::uint(obj, layout.engaged_off, 1)
                    .ok_or_else(|| corrupt(addr, "optional"))?
                    != 0;
                self.emit(u64::from(engaged));
                if engaged {
                    let size = plan.nodes[*elem].static_size;
                    self.walk(
                        *elem,
                        addr + layout.value_off,
                        sub(obj, layout.value_off, size, addr)?,
                    )?;
                }
            }
            Op::Variant {
                layout,
                alternatives,
            } => {
                let index = layout.index(obj).ok_or_else(|| corrupt(addr, "variant"))?;
                match index.and_then(|i| alternatives.get(i as usize).map(|a| (i, *a))) {
                    Some((i, alt)) => {
                        self.emit(i);
                        let size = plan.nodes[alt].static_size;
                        let off = layout.storage_off;
                        self.walk(alt, addr + off, sub(obj, off, size, addr)?)?;
                    }
                    None => self.emit(u64::MAX),
                }
            }
            Op::Union { disc, width, cases } => {
                // The discriminator is in the class around the union: read from the target.
                let value = self.load(addr.wrapping_add(*disc as u64), *width)?;
                match cases.iter().position(|c| c.0 == value) {
                    Some(i) => {
                        self.emit(i as u64);
                        if let Some((off, member)) = cases[i].1 {
                            let size = plan.nodes[member].static_size;
                            self.walk(member, addr + off, sub(obj, off, size, addr)?)?;
                        }
                    }
                    None => self.emit(u64::MAX),
                }
            }
            Op::SmartPtr {
                offset,
                target,
                control,
            } => {
                let ptr = word(obj, *offset, addr)?;
                let tag = plan.visit_tag(*target);
                let descend = ptr != 0 && target.is_some() && self.visit(ptr ^ tag);
                self.emit_pointer(ptr);
                self.emit(u64::from(descend));
                if let Some(c) = control {
                    self.emit(c.kind(ptr, word(obj, c.offset, addr)?));
                }
                if let (true, Some(t)) = (descend, target) {
                    self.walk_at(*t, ptr)?;
                }
            }
            Op::RefWrap { offset, target } => {
                let ptr = word(obj, *offset, addr)?;
                let tag = plan.visit_tag(*target);
                let descend = ptr != 0 && target.is_some() && self.visit(ptr ^ tag);
                self.emit_pointer(ptr);
                self.emit(u64::from(descend));
                if let (true, Some(t)) = (descend, target) {
                    self.walk_at(*t, ptr)?;
                }
            }
            Op::Described { layout: l, elem } => {
                let ev = |e: &crate::describe::expr::Expr, w: &Self| -> Result<u64, WalkError> {
                    e.eval(addr, obj, &mut |a, n| w.load(a, n))?
                        .ok_or_else(|| corrupt(addr, "field outside its object"))
                };
                let data = ev(&l.data, self)?;
                let len = ev(&l.len, self)?;
                let cap = ev(&l.cap, self)?;
                let heap = ev(&l.heap, self)?;
                let inline = match &l.inline {
                    Some(c) => ev(c, self)? != 0,
                    None => false,
                };
                let heap = if inline { 0 } else { heap };
                if let Some(ch) = &l.chains {
                    return self.chains(ch, *elem, [addr, data, len, cap, heap]);
                }
                if let Some(bt) = &l.btree {
                    return self.btree(bt, *elem, l.elem_size, obj, [addr, data, len, cap]);
                }
                if let Some(sw) = &l.swiss {
                    if cap > MAX_ELEMENTS {
                        return Err(corrupt(addr, format!("implausible element count {cap}")));
                    }
                    let full = self.swiss_full(sw, addr, obj, cap)?;
                    if full.len() as u64 != len {
                        return Err(corrupt(addr, SWISS_COUNT));
                    }
                    let slots = full
                        .into_iter()
                        .map(|i| data.wrapping_add(i.wrapping_mul(l.elem_size)));
                    return self.counted_elements(*elem, [addr, len, cap, heap], slots);
                }
                self.emit(addr);
                self.emit_len(len, addr)?;
                self.emit_len(cap, addr)?;
                if heap > MAX_DESCRIBED_HEAP {
                    return Err(corrupt(addr, format!("implausible heap bytes {heap}")));
                }
                self.emit(heap);
                self.walk_array(*elem, data, len, l.elem_size)?;
            }
            Op::Poly {
                candidates,
                fallback,
            } => {
                let vptr = word(obj, 0, addr)?;
                let elf = vptr.wrapping_sub(self.bias);
                match candidates.iter().position(|c| c.0 <= elf && elf < c.1) {
                    Some(i) => {
                        self.emit(i as u64);
                        // offset-to-top sits two words before the address point.
                        let top = self.read(vptr.wrapping_sub(16), 8)?;
                        let top = containers::word(&top, 0).unwrap_or(0);
                        self.walk_at(candidates[i].2, addr.wrapping_add(top))?;
                    }
                    None => {
                        self.emit(u64::MAX);
                        self.walk(*fallback, addr, obj)?;
                    }
                }
            }
            Op::RawPointer { target } => {
                let ptr = word(obj, 0, addr)?;
                let descend = ptr != 0 && self.visit(ptr ^ plan.visit_tag(*target));
                self.emit_pointer(ptr);
                self.emit(u64::from(descend));
                if let (true, Some(t)) = (descend, target) {
                    self.walk_at(*t, ptr)?;
                }
            }
            Op::HeapPointer { target, lone } => {
                let ptr = word(obj, 0, addr)?;
                let descend = ptr != 0 && self.visit(ptr ^ plan.visit_tag(*target));
                let block = if descend {
                    self.heap_block(ptr, *lone)?
                } else {
                    0
                };
                self.emit_pointer(ptr);
                self.emit(u64::from(descend));
                self.emit(block);
                if let (true, Some(t)) = (descend, target) {
                    self.walk_at(*t, ptr)?;
                }
            }
        }
        Ok(())
    }

    fn capture(&mut self, c: Capture, key_addr: u64, key: &[u8]) -> Result<(), WalkError> {
        match c {
            Capture::Scalar { size, signed } => {
                let mut v =
                    containers::uint(key, 0, size).ok_or_else(|| corrupt(key_addr, "key"))?;
                if signed && (1..8).contains(&size) && v >> (size * 8 - 1) & 1 == 1 {
                    v |= u64::MAX << (size * 8);
                }
                self.emit(v);
            }
            Capture::Address => self.emit(key_addr),
            Capture::String(l) => {
                let ptr = word(key, l.ptr_off, key_addr)?;
                let len = word(key, l.len_off, key_addr)?;
                let n = len.saturating_mul(l.char_size).min(MAX_CAPTURED_KEY);
                let bytes = self.read(ptr, n)?;
                self.emit(n);
                for chunk in bytes.chunks(8) {
                    let mut w = [0u8; 8];
                    w[..chunk.len()].copy_from_slice(chunk);
                    self.emit(u64::from_le_bytes(w));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
