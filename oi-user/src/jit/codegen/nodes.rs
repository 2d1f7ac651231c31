//! Node-based containers: pairs and map entries, red-black trees (`std::map`/`set`); the
//! node chains of described hash maps are `chains`.
//!
//! A tree walk is a chain of dependent loads: each node's address comes from the node before.
//! When a walk reads one cache line in two (a map of 72-byte nodes with 48-byte strings
//! between them, 128 bytes apart, whose left/right/value words share a line), the hardware
//! prefetchers do not follow it and each node costs a trip to memory: without a prefetch
//! such a walk is several times slower than the C++ walk, which also reads the parent
//! pointers in the other line. So the in-order walk prefetches twice:
//! - as it pushes a node, the right child it will visit after the left subtree (the tree's
//!   own shape: the only help when the nodes lie in no order);
//! - as it visits a node, the node [`STRIDE_AHEAD`] visits on when the last two steps between
//!   visited nodes were the same distance (a tree filled in key order has its nodes in key
//!   order in memory, a constant stride): a software stride prefetcher, as the hardware's
//!   but over the walk's visits, where the hardware sees the left/right loads' irregular
//!   steps. It fetches the node's first line, which at the bench's layout is not the one
//!   the walk reads there, yet makes the walk faster than fetching that one would
//!   (`jit::tests::map_walk_cost` measures the walk): the hardware then brings both.
//!
//! Cranelift has no prefetch instruction: the blob's function [`FN_PREFETCH`] is the four
//! bytes of [`PREFETCH_CODE`], called with `preserve_all`. A prefetch never faults, so a
//! corrupt pointer or a wrong guess costs time, never a different result.

use super::*;
use cranelift_codegen::ir::StackSlot;

/// How many visits ahead the stride prefetch of an in-order walk reaches: 16 nodes of the
/// bench's map are 2 KiB and about 250 ns of a cold walk, beyond a trip to memory. Half as
/// far does not hide the trip; twice as far gains nothing (`jit::tests::map_walk_cost`
/// measures the walk).
const STRIDE_AHEAD: i64 = 16;

/// `prefetcht0 [rdi]; ret`: a hint that never faults and changes no register.
pub(in crate::jit) const PREFETCH_CODE: [u8; 4] = [0x0f, 0x18, 0x0f, 0xc3];

/// The IR of [`FN_PREFETCH`]: a signature for its callers; `link` and the in-process
/// backend put [`PREFETCH_CODE`] in its place.
pub(super) fn gen_prefetch(
    fctx: &mut FunctionBuilderContext,
    fc: TargetFrontendConfig,
) -> Function {
    let mut func = new_function(FN_PREFETCH, 1);
    {
        let mut b = FunctionBuilder::new(&mut func, fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(fc);
    }
    func
}

impl Gen<'_, '_> {
    /// Asks the CPU to fetch the line at `p` (any address: a prefetch never faults).
    fn prefetch(&mut self, p: Value) {
        let f = self.func_ref(FN_PREFETCH, 1);
        self.b.ins().call(f, &[p]);
    }

    /// Prefetches what the in-order walk visits after the left subtree of `node`: its right
    /// child. (Not its left child too, even when in the page of a word already read: that
    /// makes the walk no faster, in order or shuffled, and costs eleven instructions a node.)
    fn prefetch_right(&mut self, node: Value, l: &rbtree::RbLayout) {
        if l.right_off + 8 > l.node_size {
            return;
        }
        let right = self.ld(node, l.right_off);
        self.prefetch(right);
    }

    /// The stride prefetch of an in-order walk at `node` (module doc): `last` is the node
    /// visited before it and `stride` the step before that; both move on.
    fn prefetch_stride(&mut self, node: Value, last: Variable, stride: Variable) {
        let before = self.b.use_var(last);
        let step = self.b.ins().isub(node, before);
        let was = self.b.use_var(stride);
        self.b.def_var(stride, step);
        self.b.def_var(last, node);
        let steady = self.b.ins().icmp(IntCC::Equal, step, was);
        let fetch = self.b.create_block();
        let next = self.b.create_block();
        self.b.ins().brif(steady, fetch, &[], next, &[]);
        self.b.switch_to_block(fetch);
        let ahead = self.b.ins().imul_imm_s(step, STRIDE_AHEAD);
        let at = self.b.ins().iadd(node, ahead);
        self.prefetch(at);
        self.b.ins().jump(next, &[]);
        self.b.switch_to_block(next);
    }

    /// A pair's or map entry's part: its own bytes beside the two children, and the
    /// children that read nothing.
    pub(super) fn tally_pair(&mut self, s: u64, a: NodeId, b: NodeId) {
        if self.reg.sizes {
            let own = s.saturating_sub(self.size(a).saturating_add(self.size(b)));
            let part = own.wrapping_add(self.static_children(&[a, b]));
            self.tally_const(part);
        }
    }

    /// A node-based container's part: `size + n × per_node`, and `n` elements that read
    /// nothing.
    pub(super) fn tally_nodes(&mut self, size: u64, per_node: u64, n: Value, elem: NodeId) {
        if self.reg.sizes {
            let nodes = self.b.ins().imul_imm_s(n, per_node as i64);
            let e = self.b.ins().iadd_imm_s(nodes, size as i64);
            self.tally(e);
            self.tally_static(elem, n);
        }
    }

    /// The nodes of a null-terminated list from `first` (a `forward_list`,
    /// `Walker::count_links`): a cycle (Brent's method) or more than `MAX_ELEMENTS` fails as
    /// an implausible count.
    pub(super) fn count_links(&mut self, first: Value, next_off: u64, addr: Value) -> Value {
        let count = self.b.declare_var(I64);
        let cur = self.b.declare_var(I64);
        let saved = self.b.declare_var(I64);
        let power = self.b.declare_var(I64);
        let steps = self.b.declare_var(I64);
        let zero = self.c(0);
        let one = self.c(1);
        self.b.def_var(count, zero);
        self.b.def_var(cur, first);
        self.b.def_var(saved, first);
        self.b.def_var(power, one);
        self.b.def_var(steps, zero);
        let head = self.b.create_block();
        let body = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(head);
        let c = self.b.use_var(cur);
        self.b.ins().brif(c, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        let limit = self.c(MAX_ELEMENTS);
        self.count_within(count, limit, ErrorCode::ElementCount, addr);
        let next = self.ld(c, next_off);
        self.b.def_var(cur, next);
        let s = self.b.use_var(saved);
        let cycle = self.b.ins().icmp(IntCC::Equal, next, s);
        self.fail_if(cycle, ErrorCode::ElementCount, addr);
        let n = self.b.use_var(steps);
        let n = self.b.ins().iadd_imm_s(n, 1);
        let p = self.b.use_var(power);
        let hit = self.b.ins().icmp(IntCC::Equal, n, p);
        let s = self.b.ins().select(hit, next, s);
        let twice = self.b.ins().ishl_imm_s(p, 1);
        let p = self.b.ins().select(hit, twice, p);
        let zero = self.c(0);
        let n = self.b.ins().select(hit, zero, n);
        self.b.def_var(saved, s);
        self.b.def_var(power, p);
        self.b.def_var(steps, n);
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(exit);
        self.b.use_var(count)
    }

    /// Pair and map entry: both children, each checked to lie inside the object.
    pub(super) fn two(
        &mut self,
        addr: Value,
        len: u64,
        a: (u64, NodeId),
        b: (u64, NodeId),
        k: u64,
        tail: bool,
    ) -> G {
        // `a` is last only if `b` reads nothing and its bounds check cannot fail.
        let b_fits = b.0.checked_add(self.size(b.1)).is_some_and(|e| e <= len);
        for (i, (off, m)) in [a, b].into_iter().enumerate() {
            let size = self.size(m);
            let v = self.member(addr, len, off, size)?;
            let last = i == 1 || (!self.dynamic(b.1) && b_fits);
            self.last(tail && last, |g| g.child(m, v, size, k))?;
        }
        Ok(())
    }

    /// `Walker::rb_elements`: in-order walk with an explicit stack of node addresses.
    pub(super) fn rb_elements(
        &mut self,
        elem: NodeId,
        l: &rbtree::RbLayout,
        root: Value,
        len: Value,
        addr: Value,
        k: u64,
    ) -> G {
        self.rb_stacks += 1;
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (RB_STACK * 8) as u32,
            3,
        ));
        let seen = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(seen, zero);
        // The stride prefetch's last node and step: no step is steady before two visits.
        let (last, stride) = (self.b.declare_var(I64), self.b.declare_var(I64));
        self.b.def_var(last, zero);
        self.b.def_var(stride, zero);
        self.rb_in_order(
            slot,
            root,
            addr,
            |g, c| {
                let left = g.field(c, l.node_size, l.left_off, ErrorCode::FieldOutside)?;
                g.prefetch_right(c, l);
                Ok(left)
            },
            |g, node| {
                g.prefetch_stride(node, last, stride);
                g.count_within(seen, len, ErrorCode::RbLarge, addr);
                let v = g.member(node, l.node_size, l.value_off, l.value_size)?;
                g.child(elem, v, l.value_size, k)?;
                g.field(node, l.node_size, l.right_off, ErrorCode::FieldOutside)
            },
        )?;
        if self.reg.sizes {
            // Fewer nodes than the count: the decoder finds the stream short.
            let seen_v = self.b.use_var(seen);
            let short = self.b.ins().icmp(IntCC::NotEqual, seen_v, len);
            self.fail_if(short, ErrorCode::RbLarge, addr);
        }
        Ok(())
    }

    /// The in-order walk of a libstdc++ red-black tree from `root`, with an explicit descent
    /// stack of at most `RB_STACK` node addresses in `stack` (deeper fails as `RbDeep` at
    /// `addr`): `left(g, node)` reads a node's left child as the node is pushed, `visit(g,
    /// node)` does the node's work as it is popped and reads its right child. What they emit
    /// runs once per node (`Gen::loops`; an error ends the whole generation).
    pub(super) fn rb_in_order(
        &mut self,
        stack: StackSlot,
        root: Value,
        addr: Value,
        mut left: impl FnMut(&mut Self, Value) -> Result<Value, Stop>,
        mut visit: impl FnMut(&mut Self, Value) -> Result<Value, Stop>,
    ) -> G {
        let base = self.b.ins().stack_addr(I64, stack, 0);
        let sp = self.b.declare_var(I64);
        let cur = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(sp, zero);
        self.b.def_var(cur, root);
        let descend = self.b.create_block();
        let push = self.b.create_block();
        let after = self.b.create_block();
        let pop = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(descend, &[]);
        self.loops += 1;

        self.b.switch_to_block(descend);
        let c = self.b.use_var(cur);
        self.b.ins().brif(c, push, &[], after, &[]);

        self.b.switch_to_block(push);
        let pushed = self.then_join(descend, |g| {
            let s = g.b.use_var(sp);
            let deep = g.icmp_imm(IntCC::UnsignedGreaterThan, s, RB_STACK - 1);
            g.fail_if(deep, ErrorCode::RbDeep, addr);
            let l = left(g, c)?;
            let off = g.b.ins().imul_imm_s(s, 8);
            let p = g.b.ins().iadd(base, off);
            g.b.ins().store(trusted(), c, p, 0);
            let s1 = g.b.ins().iadd_imm_s(s, 1);
            g.b.def_var(sp, s1);
            g.b.def_var(cur, l);
            Ok(())
        });

        let popped = pushed.and_then(|()| {
            self.b.switch_to_block(after);
            let s = self.b.use_var(sp);
            self.b.ins().brif(s, pop, &[], exit, &[]);

            self.b.switch_to_block(pop);
            self.then_join(descend, |g| {
                let s1 = g.b.ins().iadd_imm_s(s, -1);
                g.b.def_var(sp, s1);
                let off = g.b.ins().imul_imm_s(s1, 8);
                let p = g.b.ins().iadd(base, off);
                let node = g.b.ins().load(I64, trusted(), p, 0);
                let right = visit(g, node)?;
                g.b.def_var(cur, right);
                Ok(())
            })
        });
        self.loops -= 1;
        popped?;
        self.b.switch_to_block(exit);
        Ok(())
    }
}
