//! The container walks of `Walker`: node-chain maps (`chains`, with red-black trees of
//! nodes), red-black trees in order, b-trees, counted elements, swiss tables, arrays, deques.
//! Each bounds what it reads from the target as the parent module says.

use super::*;

impl Walker<'_> {
    /// A node-chain map (`node_chains`): every bucket's chain followed (at most `len` nodes
    /// in all, so a cycle ends), the count checked against `len`, then `address, len,
    /// bucket_count, heap + len · node_size` and the nodes' values in bucket, chain order.
    /// With a `tree`, buckets b and b^1 (b even) holding one pointer share a red-black tree:
    /// walked once, at b, in order, each tree node's chain in turn; the heap adds the tree
    /// object and its nodes (`chain_tree`).
    pub(super) fn chains(
        &mut self,
        ch: &crate::describe::compile::Chains,
        elem: NodeId,
        [addr, buckets, len, cap, heap]: [u64; 5],
    ) -> Result<(), WalkError> {
        if cap > MAX_ELEMENTS || len > MAX_ELEMENTS {
            return Err(corrupt(
                addr,
                format!("implausible element count {}", cap.max(len)),
            ));
        }
        let mut found = ChainsFound::default();
        // Even, so that a bucket pair never straddles two chunks.
        let per_chunk = CHUNK_BYTES / 8;
        let mut b = 0;
        while b < cap {
            let n = (cap - b).min(per_chunk);
            let table = self.read(buckets.wrapping_add(b * 8), n * 8)?;
            let at = |i: u64| containers::word(&table, i * 8).unwrap_or(0);
            for i in 0..n {
                let p = at(i);
                if p == 0 {
                    continue;
                }
                if let Some(t) = &ch.tree
                    && (b + i) ^ 1 < cap
                    && at(i ^ 1) == p
                {
                    if i & 1 == 0 {
                        self.chain_tree(t, ch, p, [addr, len], &mut found)?;
                    }
                    continue;
                }
                self.chain(ch, p, [addr, len], &mut found.nodes)?;
            }
            b += n;
        }
        if found.nodes.len() as u64 != len {
            return Err(corrupt(addr, CHAIN_COUNT));
        }
        let heap = heap
            .wrapping_add(len.wrapping_mul(ch.node_size))
            .wrapping_add(found.tree_bytes);
        let values = found
            .nodes
            .into_iter()
            .map(|p| p.wrapping_add(ch.value_off));
        self.counted_elements(elem, [addr, len, cap, heap], values)
    }

    /// One chain from `p`, its nodes appended to `nodes` (at most `len` in all).
    pub(super) fn chain(
        &self,
        ch: &crate::describe::compile::Chains,
        mut p: u64,
        [addr, len]: [u64; 2],
        nodes: &mut Vec<u64>,
    ) -> Result<(), WalkError> {
        while p != 0 {
            if nodes.len() as u64 == len {
                return Err(corrupt(addr, CHAIN_COUNT));
            }
            nodes.push(p);
            let next = self.read(p.wrapping_add(ch.next_off), 8)?;
            p = containers::word(&next, 0).unwrap_or(0);
        }
        Ok(())
    }

    /// The red-black tree at `tree` that a bucket pair shares: in order ([`Self::rb_in_order`]),
    /// at most `len` tree nodes in all; each tree node's chain appended, the tree object and
    /// each node charged once.
    pub(super) fn chain_tree(
        &mut self,
        t: &crate::describe::compile::ChainTree,
        ch: &crate::describe::compile::Chains,
        tree: u64,
        [addr, len]: [u64; 2],
        found: &mut ChainsFound,
    ) -> Result<(), WalkError> {
        found.tree_bytes = found.tree_bytes.wrapping_add(t.size);
        let root = self.load(tree.wrapping_add(t.root_off), 8)?;
        self.rb_in_order(
            root,
            addr,
            |w, node| Ok((w.load(node.wrapping_add(rbtree::LEFT), 8)?, ())),
            |w, node, ()| {
                found.tree_nodes += 1;
                if found.tree_nodes > len {
                    return Err(corrupt(addr, CHAIN_COUNT));
                }
                found.tree_bytes = found.tree_bytes.wrapping_add(t.node_size);
                let head = w.load(node.wrapping_add(t.chain_off), 8)?;
                w.chain(ch, head, [addr, len], &mut found.nodes)?;
                w.load(node.wrapping_add(rbtree::RIGHT), 8)
            },
        )
    }

    /// The in-order walk of a red-black tree from `root` that `std::map`s and the tree
    /// buckets of node chains share, with a descent stack of at most 129 nodes (as the JIT's):
    /// `descend` reads a node on the way down and gives its left child and what `visit`
    /// needs of it; `visit` takes the nodes in key order and gives each one's right child.
    pub(super) fn rb_in_order<N>(
        &mut self,
        root: u64,
        addr: u64,
        mut descend: impl FnMut(&Self, u64) -> Result<(u64, N), WalkError>,
        mut visit: impl FnMut(&mut Self, u64, N) -> Result<u64, WalkError>,
    ) -> Result<(), WalkError> {
        let mut stack: Vec<(u64, N)> = Vec::new();
        let mut cur = root;
        loop {
            while cur != 0 {
                if stack.len() > 128 {
                    return Err(corrupt(addr, "red-black tree too deep"));
                }
                let (left, of_node) = descend(self, cur)?;
                stack.push((cur, of_node));
                cur = left;
            }
            let Some((node, of_node)) = stack.pop() else {
                return Ok(());
            };
            cur = visit(self, node, of_node)?;
        }
    }

    /// A b-tree (`btree`): its nodes visited in key order (an explicit stack of
    /// `(node, next child)`, as the JIT's), each node's bytes added to the heap, the shape
    /// checked ([`BTREE_SHAPE`]), then `address, len, cap, heap` and the values in order.
    pub(super) fn btree(
        &mut self,
        bt: &crate::describe::compile::Btree,
        elem: NodeId,
        elem_size: u64,
        obj: &[u8],
        [addr, root, len, cap]: [u64; 4],
    ) -> Result<(), WalkError> {
        if len > MAX_ELEMENTS {
            return Err(corrupt(addr, format!("implausible element count {len}")));
        }
        let shape = || corrupt(addr, BTREE_SHAPE);
        let ev = |e: &crate::describe::expr::Expr, node: u64, w: &Self| -> Result<u64, WalkError> {
            e.eval_arg(addr, obj, node, &mut |a, n| w.load(a, n))?
                .ok_or_else(|| corrupt(addr, "field outside its object"))
        };
        let (mut values, mut heap, mut nodes) = (Vec::new(), 0u64, 0u64);
        let mut stack: Vec<(u64, u64)> = Vec::new();
        // Entering a node: counted (at most one per value), sized, its range checked.
        let mut enter = |node: u64, w: &Self, stack: &mut Vec<(u64, u64)>| {
            nodes += 1;
            if nodes > len || stack.len() as u64 >= BTREE_DEPTH {
                return Err(shape());
            }
            let (start, finish) = (ev(&bt.start, node, w)?, ev(&bt.finish, node, w)?);
            if start > finish || finish > bt.node_slots {
                return Err(shape());
            }
            heap = heap.wrapping_add(ev(&bt.node_size, node, w)?);
            stack.push((node, start));
            Ok(())
        };
        if len > 0 {
            enter(root, self, &mut stack)?;
        }
        while let Some(&(node, i)) = stack.last() {
            let (start, finish) = (ev(&bt.start, node, self)?, ev(&bt.finish, node, self)?);
            let value = |j: u64| node.wrapping_add(bt.values_off + j * elem_size);
            if ev(&bt.leaf, node, self)? != 0 {
                values.extend((start..finish).map(value));
                stack.pop();
            } else if i > finish {
                stack.pop();
            } else {
                if i > start {
                    values.push(value(i - 1));
                }
                if let Some(top) = stack.last_mut() {
                    top.1 = i + 1;
                }
                let child = self.load(node.wrapping_add(bt.children_off + 8 * i), 8)?;
                enter(child, self, &mut stack)?;
            }
            if values.len() as u64 > len {
                return Err(shape());
            }
        }
        if values.len() as u64 != len {
            return Err(shape());
        }
        self.counted_elements(elem, [addr, len, cap, heap], values)
    }

    /// The tail of a described container whose elements were found and counted first (node
    /// chains, Swiss tables): the heap's plausibility, `address, len, cap, heap`, then the
    /// element of `elem` at each address, in order.
    pub(super) fn counted_elements(
        &mut self,
        elem: NodeId,
        [addr, len, cap, heap]: [u64; 4],
        at: impl IntoIterator<Item = u64>,
    ) -> Result<(), WalkError> {
        if heap > MAX_DESCRIBED_HEAP {
            return Err(corrupt(addr, format!("implausible heap bytes {heap}")));
        }
        self.emit(addr);
        self.emit(len);
        self.emit(cap);
        self.emit(heap);
        if self.dynamic(elem) {
            for a in at {
                self.walk_at(elem, a)?;
            }
        }
        Ok(())
    }

    /// The indexes of a Swiss table's full slots among its `cap` (`control_bytes`): each
    /// control byte read through a chunk of the control bytes read at once, from slot `i`'s
    /// byte up to at most the byte of the last slot (as `ctrl_at` grows by at least 1).
    pub(super) fn swiss_full(
        &self,
        sw: &crate::describe::compile::Swiss,
        addr: u64,
        obj: &[u8],
        cap: u64,
    ) -> Result<Vec<u64>, WalkError> {
        let ev = |e: &crate::describe::expr::Expr, arg: u64| -> Result<u64, WalkError> {
            e.eval_arg(addr, obj, arg, &mut |a, n| self.load(a, n))?
                .ok_or_else(|| corrupt(addr, "field outside its object"))
        };
        let mut full = Vec::new();
        let (mut base, mut chunk) = (0u64, Vec::new());
        for i in 0..cap {
            let at = ev(&sw.ctrl_at, i)?;
            let off = at.wrapping_sub(base);
            let c = match chunk.get(off as usize) {
                Some(c) if off < chunk.len() as u64 => *c,
                _ => {
                    let n = (cap - i).min(CHUNK_BYTES);
                    chunk = self.read(at, n)?;
                    base = at;
                    chunk[0]
                }
            };
            if ev(&sw.full, u64::from(c))? != 0 {
                full.push(i);
            }
        }
        Ok(full)
    }

    /// Walks `count` elements of node `elem`, `stride` apart from `addr`, reading them in
    /// large chunks.
    pub(super) fn walk_array(
        &mut self,
        elem: NodeId,
        addr: u64,
        count: u64,
        stride: u64,
    ) -> Result<(), WalkError> {
        if !self.dynamic(elem) || count == 0 {
            return Ok(());
        }
        count
            .checked_mul(stride)
            .filter(|t| *t <= MAX_ARRAY_BYTES)
            .ok_or_else(|| corrupt(addr, format!("implausible element count {count}")))?;
        let per_chunk = (CHUNK_BYTES / stride.max(1)).max(1);
        // Strings whose three words lie in the element go with runs of repeated groups
        // (`stream::StringRuns`), as the JIT's loop writes them; others one by one.
        let mut runs = match &self.plan.nodes[elem].op {
            Op::String(l)
                if [l.ptr_off, l.len_off, l.cap_off]
                    .iter()
                    .all(|off| off.checked_add(8).is_some_and(|e| e <= stride)) =>
            {
                Some(stream::StringRuns::default())
            }
            _ => None,
        };
        let mut i = 0;
        while i < count {
            let n = per_chunk.min(count - i);
            let base = addr + i * stride;
            let bytes = self.read(base, n * stride)?;
            // Hot path (vector<string> and friends): no per-element dispatch.
            if let Op::String(l) = &self.plan.nodes[elem].op {
                self.out.reserve(2 * n as usize);
                for (j, e) in bytes.chunks_exact(stride as usize).enumerate() {
                    let at = base + j as u64 * stride;
                    let (len, cap) = l.words(at, e).ok_or_else(|| corrupt(at, "string"))?;
                    match &mut runs {
                        Some(r) => r.push(&mut self.out, len, cap),
                        None => {
                            stream::push(&mut self.out, len);
                            stream::push(&mut self.out, cap);
                        }
                    }
                }
                i += n;
                continue;
            }
            for j in 0..n {
                let e = sub(&bytes, j * stride, stride, base)?;
                self.walk(elem, base + j * stride, e)?;
            }
            i += n;
        }
        if let Some(r) = &mut runs {
            r.finish(&mut self.out);
        }
        Ok(())
    }

    pub(super) fn deque_elements(
        &mut self,
        elem: NodeId,
        l: &containers::deque::DequeLayout,
        st: &containers::deque::DequeState,
        addr: u64,
    ) -> Result<(), WalkError> {
        let es = l.elem_size;
        let mut ranges: Vec<(u64, u64)> = Vec::new(); // (address, element count)
        if l.libcxx.is_some() {
            // libc++: `len` elements from index `first_index` of the block in `first_slot`,
            // each block full but the first and the last.
            let touched = l
                .libcxx_touched(st)
                .ok_or_else(|| corrupt(addr, "deque block out of order"))?;
            let slots = self.read(st.first_slot, touched.saturating_mul(8))?;
            let mut left = st.len;
            for t in 0..touched {
                let block = word(&slots, t * 8, addr)?;
                let skip = if t == 0 { st.first_index } else { 0 };
                let n = (l.block_elems() - skip).min(left);
                left -= n;
                ranges.push((block.wrapping_add(skip.wrapping_mul(es)), n));
            }
        } else {
            let nodes = self.read(st.start[3], st.blocks.saturating_mul(8))?;
            for b in 0..st.blocks {
                let block = word(&nodes, b * 8, addr)?;
                let first = if b == 0 { st.start[0] } else { block };
                let end = if b + 1 == st.blocks {
                    st.finish[0]
                } else if b == 0 {
                    st.start[2]
                } else {
                    block + l.block_bytes()
                };
                let n = end
                    .checked_sub(first)
                    .ok_or_else(|| corrupt(addr, "deque block out of order"))?
                    / es;
                if n > 0 {
                    ranges.push((first, n));
                }
            }
        }
        let mut bufs: Vec<Vec<u8>> = ranges
            .iter()
            .map(|r| vec![0u8; (r.1 * es) as usize])
            .collect();
        {
            let mut reqs: Vec<(u64, &mut [u8])> = ranges
                .iter()
                .zip(bufs.iter_mut())
                .map(|(r, b)| (r.0, b.as_mut_slice()))
                .collect();
            self.mem.read_many(&mut reqs)?;
        }
        for ((start, n), buf) in ranges.iter().zip(&bufs) {
            for i in 0..*n {
                self.walk(elem, start + i * es, sub(buf, i * es, es, *start)?)?;
            }
        }
        Ok(())
    }

    /// In-order walk of a red-black tree from `root` ([`Self::rb_in_order`]), each node read
    /// once, at most `len` of them.
    pub(super) fn rb_elements(
        &mut self,
        elem: NodeId,
        l: &rbtree::RbLayout,
        root: u64,
        len: u64,
        addr: u64,
    ) -> Result<(), WalkError> {
        let mut seen = 0u64;
        self.rb_in_order(
            root,
            addr,
            |w, cur| {
                let node = w.read(cur, l.node_size)?;
                Ok((word(&node, l.left_off, cur)?, node))
            },
            |w, n, node| {
                seen += 1;
                if seen > len {
                    return Err(corrupt(addr, "tree larger than its node count"));
                }
                let v = sub(&node, l.value_off, l.value_size, n)?;
                w.walk(elem, n + l.value_off, v)?;
                word(&node, l.right_off, n)
            },
        )
    }
}
