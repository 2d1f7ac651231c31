//! B-trees (Abseil `btree_map`, described as `btree`): nodes visited in key order with an
//! explicit stack of `(node, next child)` in the frame, as `interp::walk`'s `btree`.

use super::*;
use crate::describe::compile::Btree;
use crate::interp::walk::BTREE_DEPTH;

/// What a traversal does at each node it enters and at each value, in key order.
type OnNode<'f, 'a, 'b> = &'f mut dyn FnMut(&mut Gen<'a, 'b>, Value) -> G;

impl<'a, 'b> Gen<'a, 'b> {
    /// A b-tree, as the interpreter: a first traversal enters every node (counted, at most
    /// one per value; its `[start, finish)` checked; its bytes added to the heap) and counts
    /// the values, which must number `n`; then `address, len, cap, heap`, and a second
    /// traversal walks the values.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn btree(
        &mut self,
        l: &DescribedArray,
        bt: &Btree,
        elem: NodeId,
        [addr, root, n, cap]: [Value; 4],
        len: u64,
        k: u64,
    ) -> G {
        self.check_count(n, addr);
        self.rb_stacks += 1;
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (BTREE_DEPTH * 16) as u32,
            3,
        ));
        let nodes = self.b.declare_var(I64);
        let values = self.b.declare_var(I64);
        let heap = self.b.declare_var(I64);
        let zero = self.c(0);
        for v in [nodes, values, heap] {
            self.b.def_var(v, zero);
        }
        let mut enter = |g: &mut Self, node: Value| {
            g.count_within(nodes, n, ErrorCode::BtreeShape, addr);
            let start = g.expr_arg(&bt.start, addr, len, Some(node))?;
            let finish = g.expr_arg(&bt.finish, addr, len, Some(node))?;
            let back = g.b.ins().icmp(IntCC::UnsignedGreaterThan, start, finish);
            g.fail_if(back, ErrorCode::BtreeShape, addr);
            let over = g.icmp_imm(IntCC::UnsignedGreaterThan, finish, bt.node_slots);
            g.fail_if(over, ErrorCode::BtreeShape, addr);
            let size = g.expr_arg(&bt.node_size, addr, len, Some(node))?;
            let h = g.b.use_var(heap);
            let h = g.b.ins().iadd(h, size);
            g.b.def_var(heap, h);
            Ok(())
        };
        let mut count = |g: &mut Self, _: Value| {
            g.count_within(values, n, ErrorCode::BtreeShape, addr);
            Ok(())
        };
        self.btree_nodes(
            bt,
            slot,
            [addr, root, n],
            len,
            l.elem_size,
            &mut enter,
            &mut count,
        )?;
        let found = self.b.use_var(values);
        let differ = self.b.ins().icmp(IntCC::NotEqual, found, n);
        self.fail_if(differ, ErrorCode::BtreeShape, addr);
        let heap = self.b.use_var(heap);
        self.described_words(l, elem, [addr, n, cap, heap]);
        if !self.dynamic(elem) {
            return Ok(());
        }
        let mut nothing = |_: &mut Self, _: Value| Ok(());
        let mut walk = |g: &mut Self, at: Value| g.walk_at(elem, at, k);
        self.btree_nodes(
            bt,
            slot,
            [addr, root, n],
            len,
            l.elem_size,
            &mut nothing,
            &mut walk,
        )
    }

    /// The in-order traversal: `enter(node)` before a node is pushed (not when `n` is 0:
    /// the root is then not read), `value(address)` for each value in key order. A stack
    /// entry is `(node, i)`: an internal node's next child is `i`, and value `i − 1` comes
    /// before it.
    #[allow(clippy::too_many_arguments)]
    fn btree_nodes(
        &mut self,
        bt: &Btree,
        slot: cranelift_codegen::ir::StackSlot,
        [addr, root, n]: [Value; 3],
        len: u64,
        elem_size: u64,
        enter: OnNode<'_, 'a, 'b>,
        value: OnNode<'_, 'a, 'b>,
    ) -> G {
        let sp = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(sp, zero);
        // Enter `node` and push `(node, start)`; the stack holds at most BTREE_DEPTH.
        let push = |g: &mut Self, node: Value, enter: OnNode<'_, 'a, 'b>| -> G {
            let s = g.b.use_var(sp);
            let deep = g.icmp_imm(IntCC::UnsignedGreaterThanOrEqual, s, BTREE_DEPTH);
            g.fail_if(deep, ErrorCode::BtreeShape, addr);
            enter(g, node)?;
            let start = g.expr_arg(&bt.start, addr, len, Some(node))?;
            let base = g.b.ins().stack_addr(I64, slot, 0);
            let off = g.b.ins().imul_imm_s(s, 16);
            let top = g.b.ins().iadd(base, off);
            g.b.ins().store(trusted(), node, top, 0);
            g.b.ins().store(trusted(), start, top, 8);
            let s1 = g.b.ins().iadd_imm_s(s, 1);
            g.b.def_var(sp, s1);
            Ok(())
        };
        self.if_then(n, |g| push(g, root, enter))?;
        let head = self.b.create_block();
        let visit = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(head, &[]);

        self.b.switch_to_block(head);
        let s = self.b.use_var(sp);
        self.b.ins().brif(s, visit, &[], exit, &[]);

        self.b.switch_to_block(visit);
        self.loops += 1;
        let r = (|| {
            let base = self.b.ins().stack_addr(I64, slot, 0);
            let s1 = self.b.ins().iadd_imm_s(s, -1);
            let off = self.b.ins().imul_imm_s(s1, 16);
            let top = self.b.ins().iadd(base, off);
            let node = self.b.ins().load(I64, trusted(), top, 0);
            let i = self.b.ins().load(I64, trusted(), top, 8);
            let start = self.expr_arg(&bt.start, addr, len, Some(node))?;
            let finish = self.expr_arg(&bt.finish, addr, len, Some(node))?;
            let leaf = self.expr_arg(&bt.leaf, addr, len, Some(node))?;
            let values = self.add(node, bt.values_off);
            let value_at = |g: &mut Self, j: Value| {
                let o = g.b.ins().imul_imm_s(j, elem_size as i64);
                g.b.ins().iadd(values, o)
            };
            let leaf_b = self.b.create_block();
            let inner = self.b.create_block();
            let pop = self.b.create_block();
            let descend = self.b.create_block();
            self.b.ins().brif(leaf, leaf_b, &[], inner, &[]);

            self.b.switch_to_block(leaf_b);
            self.then_join(pop, |g| {
                let m = g.b.ins().isub(finish, start);
                g.loop_n(m, |g, j| {
                    let j = g.b.ins().iadd(start, j);
                    let at = value_at(g, j);
                    value(g, at)
                })
            })?;

            self.b.switch_to_block(inner);
            let done = self.b.ins().icmp(IntCC::UnsignedGreaterThan, i, finish);
            self.b.ins().brif(done, pop, &[], descend, &[]);

            self.b.switch_to_block(pop);
            self.b.def_var(sp, s1);
            self.b.ins().jump(head, &[]);

            self.b.switch_to_block(descend);
            self.then_join(head, |g| {
                let after = g.b.ins().icmp(IntCC::UnsignedGreaterThan, i, start);
                g.if_then(after, |g| {
                    let j = g.b.ins().iadd_imm_s(i, -1);
                    let at = value_at(g, j);
                    value(g, at)
                })?;
                let next = g.b.ins().iadd_imm_s(i, 1);
                g.b.ins().store(trusted(), next, top, 8);
                let o = g.b.ins().imul_imm_s(i, 8);
                let at = g.b.ins().iadd(node, o);
                let child = g.ld(at, bt.children_off);
                push(g, child, enter)
            })
        })();
        self.loops -= 1;
        match r {
            Ok(()) | Err(Stop::Dead) => {}
            Err(e) => return Err(e),
        }
        self.b.switch_to_block(exit);
        Ok(())
    }
}
