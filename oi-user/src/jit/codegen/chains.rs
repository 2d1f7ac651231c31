//! Node-chain maps (`node_chains`, protobuf's `Map`), as `interp::walk`'s `chains`: every
//! bucket's chain and, with a `tree`, the red-black tree that buckets b and b^1 (b even)
//! share when they hold one pointer, walked once, in order, with a descent stack in the
//! frame; each tree node holds the head of a chain. Two passes over the same nodes: the
//! first counts them (and the trees' bytes) against the map's size, the second walks the
//! values once the container's words are written.

use super::*;
use crate::describe::compile::ChainTree;
use cranelift_codegen::ir::StackSlot;

/// What a pass does at each chained node (its address).
type OnNode<'f, 'a, 'b> = &'f mut dyn FnMut(&mut Gen<'a, 'b>, Value) -> G;

impl<'a, 'b> Gen<'a, 'b> {
    /// A node-chain map, as the interpreter: both counts checked, the chains counted (at
    /// most `n` nodes, so a cycle ends) and checked against `n`, the heap plus `n` nodes
    /// plus the trees' bytes checked, then the nodes' values walked in a second pass.
    pub(super) fn chains(
        &mut self,
        l: &DescribedArray,
        ch: &Chains,
        elem: NodeId,
        [addr, buckets, n, cap, heap]: [Value; 5],
        k: u64,
    ) -> G {
        self.check_count(cap, addr);
        self.check_count(n, addr);
        let stack = ch.tree.map(|_| {
            self.rb_stacks += 1;
            self.b.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                (RB_STACK * 8) as u32,
                3,
            ))
        });
        let count = self.b.declare_var(I64);
        let tree_bytes = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(count, zero);
        self.b.def_var(tree_bytes, zero);
        // One more node than `n` is corrupt; so is one fewer at the end.
        let tick = |g: &mut Self| {
            let c = g.b.use_var(count);
            let full = g.b.ins().icmp(IntCC::Equal, c, n);
            g.fail_if(full, ErrorCode::ChainCount, addr);
            let c = g.b.ins().iadd_imm_s(c, 1);
            g.b.def_var(count, c);
        };
        let walk = [addr, buckets, n, cap];
        self.chain_nodes(ch, stack, walk, Some(tree_bytes), &mut |g, _| {
            tick(g);
            Ok(())
        })?;
        let found = self.b.use_var(count);
        let differ = self.b.ins().icmp(IntCC::NotEqual, found, n);
        self.fail_if(differ, ErrorCode::ChainCount, addr);
        let nodes = self.b.ins().imul_imm_s(n, ch.node_size as i64);
        let heap = self.b.ins().iadd(heap, nodes);
        let trees = self.b.use_var(tree_bytes);
        let heap = self.b.ins().iadd(heap, trees);
        self.described_words(l, elem, [addr, n, cap, heap]);
        if !self.dynamic(elem) {
            return Ok(());
        }
        let zero = self.c(0);
        self.b.def_var(count, zero);
        let value_off = ch.value_off;
        self.chain_nodes(ch, stack, walk, None, &mut |g, node| {
            tick(g);
            let at = g.add(node, value_off);
            g.walk_at(elem, at, k)
        })
    }

    /// `for b in 0..cap { for node in chain(buckets[b]) { body(node) } }`, where a bucket
    /// pair sharing a tree is its tree's chains, once (`chain_tree`); `tree_bytes`, when
    /// given, adds up the trees' bytes.
    fn chain_nodes(
        &mut self,
        ch: &Chains,
        stack: Option<StackSlot>,
        [addr, buckets, n, cap]: [Value; 4],
        tree_bytes: Option<Variable>,
        body: OnNode<'_, 'a, 'b>,
    ) -> G {
        let tree_nodes = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(tree_nodes, zero);
        self.loop_n(cap, |g, b| {
            let off = g.b.ins().imul_imm_s(b, 8);
            let slot = g.b.ins().iadd(buckets, off);
            let first = g.ld(slot, 0);
            let (Some(t), Some(stack)) = (ch.tree, stack) else {
                return g.chain(ch, first, body);
            };
            // A tree: not null, the partner bucket inside the table and holding the same.
            let partner_b = g.b.create_block();
            let same_b = g.b.create_block();
            let tree_b = g.b.create_block();
            let walk_b = g.b.create_block();
            let chain_b = g.b.create_block();
            let done = g.b.create_block();
            g.b.ins().brif(first, partner_b, &[], done, &[]);
            g.b.switch_to_block(partner_b);
            let partner = g.b.ins().bxor_imm_s(b, 1);
            let inside = g.b.ins().icmp(IntCC::UnsignedLessThan, partner, cap);
            g.b.ins().brif(inside, same_b, &[], chain_b, &[]);
            g.b.switch_to_block(same_b);
            let poff = g.b.ins().imul_imm_s(partner, 8);
            let pslot = g.b.ins().iadd(buckets, poff);
            let other = g.ld(pslot, 0);
            let same = g.b.ins().icmp(IntCC::Equal, other, first);
            g.b.ins().brif(same, tree_b, &[], chain_b, &[]);
            // Walked at the even bucket of the pair only.
            g.b.switch_to_block(tree_b);
            let odd = g.b.ins().band_imm_s(b, 1);
            g.b.ins().brif(odd, done, &[], walk_b, &[]);
            g.b.switch_to_block(walk_b);
            g.then_join(done, |g| {
                g.chain_tree(
                    &t,
                    ch,
                    stack,
                    first,
                    [addr, n],
                    tree_nodes,
                    tree_bytes,
                    body,
                )
            })?;
            g.b.switch_to_block(chain_b);
            g.then_join(done, |g| g.chain(ch, first, body))?;
            g.b.switch_to_block(done);
            Ok(())
        })
    }

    /// One chain from `first` (null: none).
    fn chain(&mut self, ch: &Chains, first: Value, body: OnNode<'_, 'a, 'b>) -> G {
        let node = self.b.declare_var(I64);
        self.b.def_var(node, first);
        let head = self.b.create_block();
        let body_b = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(head);
        let p = self.b.use_var(node);
        self.b.ins().brif(p, body_b, &[], exit, &[]);
        self.b.switch_to_block(body_b);
        self.loops += 1;
        let r = body(self, p);
        self.loops -= 1;
        match r {
            Ok(()) => {
                let next = self.ld(p, ch.next_off);
                self.b.def_var(node, next);
                self.b.ins().jump(head, &[]);
            }
            Err(Stop::Dead) => {}
            Err(e) => return Err(e),
        }
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// The red-black tree at `tree`, in order: a descent stack of at most `RB_STACK` nodes
    /// in `stack`, at most `n` tree nodes in all (`tree_nodes` counts them across trees),
    /// each node's chain in turn; `tree_bytes` adds the tree object and each node.
    #[allow(clippy::too_many_arguments)]
    fn chain_tree(
        &mut self,
        t: &ChainTree,
        ch: &Chains,
        stack: StackSlot,
        tree: Value,
        [addr, n]: [Value; 2],
        tree_nodes: Variable,
        tree_bytes: Option<Variable>,
        body: OnNode<'_, 'a, 'b>,
    ) -> G {
        if let Some(v) = tree_bytes {
            let bytes = self.b.use_var(v);
            let bytes = self.b.ins().iadd_imm_s(bytes, t.size as i64);
            self.b.def_var(v, bytes);
        }
        let root = self.ld(tree, t.root_off);
        self.rb_in_order(
            stack,
            root,
            addr,
            |g, c| Ok(g.ld(c, rbtree::LEFT)),
            |g, node| {
                g.count_within(tree_nodes, n, ErrorCode::ChainCount, addr);
                if let Some(v) = tree_bytes {
                    let bytes = g.b.use_var(v);
                    let bytes = g.b.ins().iadd_imm_s(bytes, t.node_size as i64);
                    g.b.def_var(v, bytes);
                }
                let head = g.ld(node, t.chain_off);
                g.chain(ch, head, &mut *body)?;
                Ok(g.ld(node, rbtree::RIGHT))
            },
        )
    }
}
