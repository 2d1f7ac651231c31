//! The entry function: sets up the walker context from the `WalkFrame`, walks each root into
//! its own counted section of the output (or inline, for OIL's total-only walkers), and
//! leaves the status, the cursor and the total in the frame.
//!
//! The optimistic walker's entry (OIL's steady state, one root) takes no frame: its inputs
//! come in registers and it returns the status and the total in two (rax:rdx), so that a
//! small object's walk spends no loads and stores on a frame in memory.

use super::*;

/// `fn(frame) -> status`: sets up the context, then walks each root into its own
/// counted section of the output.
pub(super) fn gen_entry(
    plan: &Plan,
    roots: &[NodeId],
    reg: &mut Registry,
    fctx: &mut FunctionBuilderContext,
    fc: TargetFrontendConfig,
) -> Result<Function, JitError> {
    if reg.optimistic {
        return gen_optimistic_entry(plan, roots, reg, fctx, fc);
    }
    build(plan, FN_ENTRY, 1, reg, fctx, fc, |g, args| {
        let frame = args[0];
        let fl =
            |g: &mut Gen<'_, '_>, off: usize| g.b.ins().load(I64, trusted(), frame, frame_off(off));
        let stream = g.reg.stream;
        // Validate the frame first: nothing is written to `out` or `scratch` otherwise.
        let nargs = fl(g, offset_of!(WalkFrame, nargs));
        let wrong_n = g.icmp_imm(IntCC::NotEqual, nargs, roots.len() as u64);
        let scratch_len = fl(g, offset_of!(WalkFrame, scratch_len));
        let small = g.icmp_imm(IntCC::UnsignedLessThan, scratch_len, SCRATCH_BYTES);
        let bad = g.b.ins().bor(wrong_n, small);
        let bad_b = g.b.create_block();
        let ok = g.b.create_block();
        g.b.ins().brif(bad, bad_b, &[], ok, &[]);
        g.b.switch_to_block(bad_b);
        let s = g.c(STATUS_BAD_FRAME);
        g.b.ins().store(
            trusted(),
            s,
            frame,
            frame_off(offset_of!(WalkFrame, status)),
        );
        g.b.ins().return_(&[s]);
        g.b.switch_to_block(ok);

        let slot = g.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            CTX_SIZE,
            3,
        ));
        g.ctx = g.b.ins().stack_addr(I64, slot, 0);
        let zero = g.c(0);
        // A walker without a stream never reads `out` (its cursor stays at 0).
        let out = if stream {
            fl(g, offset_of!(WalkFrame, out))
        } else {
            zero
        };
        if stream {
            let out_len = fl(g, offset_of!(WalkFrame, out_len));
            g.end = g.b.ins().iadd(out, out_len);
            g.st_ctx(out, CTX_CUR);
            let end = g.end;
            g.st_ctx(end, CTX_END);
        }
        g.b.def_var(g.cur, out);
        let scratch = fl(g, offset_of!(WalkFrame, scratch));
        g.st_ctx(scratch, CTX_TABLE);
        let heaps =
            g.b.ins()
                .iadd_imm_s(frame, offset_of!(WalkFrame, heaps) as i64);
        g.st_ctx(heaps, CTX_HEAPS);
        let nheaps = fl(g, offset_of!(WalkFrame, heaps_len));
        let most = g.c(MAX_HEAPS as u64);
        let nheaps = g.b.ins().umin(nheaps, most);
        g.st_ctx(nheaps, CTX_NHEAPS);
        g.st_ctx(zero, CTX_COUNT);
        let bias = fl(g, offset_of!(WalkFrame, bias));
        g.st_ctx(bias, CTX_BIAS);
        g.st_ctx(zero, CTX_ERR_CODE);
        g.st_ctx(zero, CTX_ERR_ADDR);
        g.st_ctx(zero, CTX_TOTAL);
        let stack_len = fl(g, offset_of!(WalkFrame, stack_len));
        g.store_stack_limit(stack_len);

        let gen_v = g.b.declare_var(I64);
        let generation = fl(g, offset_of!(WalkFrame, generation));
        g.b.def_var(gen_v, generation);
        let root_v = g.b.declare_var(I64);
        g.b.def_var(root_v, zero);
        let unseeded = fl(g, offset_of!(WalkFrame, unseeded));
        // A stream walker's entry only calls (node functions check the stack; the entry does
        // not recurse). A walker without a stream walks the roots inline, as a node function
        // would (depth 0 is a constant here, so its depth checks fold away): the calls, the
        // context round trips and the frame of a node function are what a small object's walk
        // would otherwise spend most of its time on.
        g.budget = if stream { 0 } else { INLINE_BUDGET };

        // Error exits of the entry record the frame's out fields before returning.
        let real_ret = g.ret;
        let fail_ret = g.b.create_block();
        let status = g.b.append_block_param(fail_ret, I64);
        g.b.set_cold_block(fail_ret);
        g.ret = fail_ret;

        let mut walk_roots = || -> G {
            for (i, &root) in roots.iter().enumerate() {
                let ri = g.c(i as u64);
                g.b.def_var(root_v, ri);
                // Left in the frame if the walk faults: the tracer names the argument.
                g.b.ins().store(
                    trusted(),
                    ri,
                    frame,
                    frame_off(offset_of!(WalkFrame, err_root)),
                );
                let gv = g.b.use_var(gen_v);
                let next = g.b.ins().iadd_imm_s(gv, 1);
                g.b.def_var(gen_v, next);
                g.st_ctx(next, CTX_GEN);
                let zero = g.c(0);
                g.st_ctx(zero, CTX_COUNT);
                let header = g.b.use_var(g.cur);
                g.emit_raw_word(zero);
                // Each root's stream starts its pointer deltas afresh, as the interpreter's.
                g.b.def_var(g.last_pointer, zero);
                let addr = fl(g, offset_of!(WalkFrame, args) + 8 * i);
                let bit = g.b.ins().ushr_imm_s(unseeded, i as i64);
                let bit = g.b.ins().band_imm_s(bit, 1);
                let seed = g.icmp_imm(IntCC::Equal, bit, 0);
                let tag = g.plan.visit_tag(Some(root));
                g.if_then(seed, |g| {
                    g.visit_as(addr, tag);
                    Ok(())
                })?;
                if !g.dynamic(root) {
                    let part = g.st(root);
                    g.tally_const(part);
                }
                g.walk_at(root, addr, 0)?;
                if !stream {
                    continue;
                }
                let cur = g.b.use_var(g.cur);
                let bytes = g.b.ins().isub(cur, header);
                let bytes = g.b.ins().iadd_imm_s(bytes, -8);
                let end = g.end;
                let fits = g.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, cur, end);
                g.if_then(fits, |g| {
                    g.b.ins().store(trusted(), bytes, header, 0);
                    Ok(())
                })?;
            }
            Ok(())
        };
        let walked = walk_roots();
        let record = |g: &mut Gen<'_, '_>, status: Value| {
            g.b.ins().store(
                trusted(),
                status,
                frame,
                frame_off(offset_of!(WalkFrame, status)),
            );
            let cur = g.b.use_var(g.cur);
            let used = g.b.ins().isub(cur, out);
            g.b.ins().store(
                trusted(),
                used,
                frame,
                frame_off(offset_of!(WalkFrame, out_used)),
            );
            let gv = g.b.use_var(gen_v);
            g.b.ins().store(
                trusted(),
                gv,
                frame,
                frame_off(offset_of!(WalkFrame, generation)),
            );
        };
        match walked {
            Ok(()) => {
                if stream {
                    // Past the end: the output did not fit; `out_used` says what it needs.
                    let cur = g.b.use_var(g.cur);
                    let over = g.b.ins().icmp(IntCC::UnsignedGreaterThan, cur, g.end);
                    let full = g.c(STATUS_FULL);
                    let ok = g.b.create_block();
                    g.b.ins()
                        .brif(over, g.ret, &[BlockArg::Value(full)], ok, &[]);
                    g.b.switch_to_block(ok);
                }
                let done = g.c(STATUS_DONE);
                record(g, done);
                let total = g.b.use_var(g.total);
                g.b.ins().store(
                    trusted(),
                    total,
                    frame,
                    frame_off(offset_of!(WalkFrame, total)),
                );
                let e = g.c(0);
                for off in [
                    offset_of!(WalkFrame, err_root),
                    offset_of!(WalkFrame, err_code),
                    offset_of!(WalkFrame, err_addr),
                ] {
                    g.b.ins().store(trusted(), e, frame, frame_off(off));
                }
                g.b.ins().return_(&[done]);
            }
            Err(Stop::Dead) => {}
            Err(e) => return Err(e),
        }

        g.b.switch_to_block(fail_ret);
        record(g, status);
        let r = g.b.use_var(root_v);
        g.b.ins().store(
            trusted(),
            r,
            frame,
            frame_off(offset_of!(WalkFrame, err_root)),
        );
        let code = g.ld_ctx(CTX_ERR_CODE);
        g.b.ins().store(
            trusted(),
            code,
            frame,
            frame_off(offset_of!(WalkFrame, err_code)),
        );
        let a = g.ld_ctx(CTX_ERR_ADDR);
        g.b.ins().store(
            trusted(),
            a,
            frame,
            frame_off(offset_of!(WalkFrame, err_addr)),
        );
        g.b.ins().jump(real_ret, &[BlockArg::Value(status)]);
        g.ret = real_ret;
        Err(Stop::Dead)
    })
}

/// The optimistic walker's entry, `fn(obj, bias, stack_len) -> (status, total)` (System V,
/// the pair in rax:rdx): the walk of the one root at `obj` (seeded, as a frame with
/// `unseeded == 0` says), with `bias` as `WalkFrame::bias` and `stack_len` as
/// `WalkFrame::stack_len` (0: the default; read by the `Calls` shape only, so a leaf may be
/// called with two arguments, as `oil.h` does). The total is 0 unless the status is
/// `STATUS_DONE`. Writes nothing but its own stack.
///
/// First generated as a leaf: when the whole walk is inline (no node function is called,
/// as for a struct of strings, vectors and `unique_ptr`s), nothing is kept in the context
/// for a callee: no stack limit (nothing recurses), no total, and each visit keeps its
/// address in a register of its own (`Shape::LeafSites`), or, when a visit is inside a loop
/// or there are too many, the count of recorded keys lives in a register. If the walk needs
/// a node function, the entry is generated again with the context set up for its callees.
/// Every shape ends with one check of the suspicion (`Gen::suspect`), then the visits'.
fn gen_optimistic_entry(
    plan: &Plan,
    roots: &[NodeId],
    reg: &mut Registry,
    fctx: &mut FunctionBuilderContext,
    fc: TargetFrontendConfig,
) -> Result<Function, JitError> {
    let &[root] = roots else {
        return Err(JitError::Codegen(format!(
            "an optimistic walker takes one root, not {}",
            roots.len()
        )));
    };
    reg.sites_overflow = false;
    let (leaf, ctx_uses) = optimistic_entry(plan, root, Shape::LeafSites, true, reg, fctx, fc)?;
    if reg.ids.is_empty() && reg.pending.is_empty() {
        if !reg.sites_overflow {
            if ctx_uses > 1 {
                return Ok(leaf);
            }
            // The context's only use is the store of the bias, which nothing reads: the
            // same walk again with no context (no stack slot to set up and release).
            let (bare, uses) =
                optimistic_entry(plan, root, Shape::LeafSites, false, reg, fctx, fc)?;
            return Ok(if uses == 0 { bare } else { leaf });
        }
        let (leaf, _) = optimistic_entry(plan, root, Shape::Leaf, true, reg, fctx, fc)?;
        if reg.ids.is_empty() && reg.pending.is_empty() {
            return Ok(leaf);
        }
    }
    reg.ids.clear();
    reg.pending.clear();
    Ok(optimistic_entry(plan, root, Shape::Calls, true, reg, fctx, fc)?.0)
}

/// How an optimistic entry is generated, from the cheapest.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// A leaf whose visits each have a register of their own (none in a loop, at most
    /// `visited::MAX_SITES`): the final check compares only places of one visit tag.
    LeafSites,
    /// A leaf with the recorded keys in its frame, counted in a register.
    Leaf,
    /// An entry that calls node functions: the context set up for them.
    Calls,
}

/// One optimistic entry of `shape`, and how many instructions use its context: with
/// `ctx`, a stack slot that holds the bias and the recorded keys; without, a constant that
/// nothing may use (then a count other than 0 says that the walk needed the context).
fn optimistic_entry(
    plan: &Plan,
    root: NodeId,
    shape: Shape,
    ctx: bool,
    reg: &mut Registry,
    fctx: &mut FunctionBuilderContext,
    fc: TargetFrontendConfig,
) -> Result<(Function, usize), JitError> {
    let mut ctx_value = None;
    let f = build(plan, FN_ENTRY, 3, reg, fctx, fc, |g, args| {
        let (addr, bias, stack_len) = (args[0], args[1], args[2]);
        g.ctx = if ctx {
            let slot = g.b.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                CTX_KEYS as u32 + 8 * OPTIMISTIC_KEYS as u32,
                3,
            ));
            g.b.ins().stack_addr(I64, slot, 0)
        } else {
            g.c(0)
        };
        ctx_value = Some(g.ctx);
        let zero = g.c(0);
        if ctx {
            g.st_ctx(bias, CTX_BIAS);
        }
        let consts = g.b.declare_var(I64);
        g.b.def_var(consts, zero);
        g.consts = Some(consts);
        let suspect = g.b.declare_var(I64);
        g.b.def_var(suspect, zero);
        g.suspect = Some(suspect);
        if shape == Shape::LeafSites {
            g.reg.sites = Some(visited::Sites::new(&mut g.b));
        }
        if shape != Shape::Calls {
            let n = g.b.declare_var(I64);
            g.b.def_var(n, zero);
            g.reg.leaf_keys = Some(n);
        } else {
            g.st_ctx(zero, CTX_NKEYS);
            g.st_ctx(zero, CTX_TOTAL);
            g.store_stack_limit(stack_len);
        }
        g.root_rel.insert(addr, 0);
        root_loads(plan, root, 0, &mut g.root_loads);
        // The root's walk inline, as in the frame's entry.
        g.budget = INLINE_BUDGET;
        let tag = g.plan.visit_tag(Some(root));
        g.visit_as(addr, tag);
        if !g.dynamic(root) {
            let part = g.st(root);
            g.tally_const(part);
        }
        g.walk_at(root, addr, 0)?;
        // The suspicion first: a recorded address at 2^47 or above could make keys of
        // different tags equal, which the pair check below would not see.
        let acc = g.b.use_var(suspect);
        let high = g.b.ins().ushr_imm_s(acc, SUSPECT_BITS);
        g.exit_cold_if(high, STATUS_CORRUPT);
        g.check_recorded()?;
        let done = g.c(STATUS_DONE);
        let total = g.whole_total();
        g.b.ins().return_(&[done, total]);
        Err(Stop::Dead)
    });
    reg.leaf_keys = None;
    reg.sites = None;
    let f = f?;
    let uses = ctx_value.map_or(0, |v| {
        f.layout
            .blocks()
            .flat_map(|b| f.layout.block_insts(b))
            .map(|i| f.dfg.inst_values(i).filter(|&a| a == v).count())
            .sum()
    });
    Ok((f, uses))
}

/// The offsets from the root (at `base` of it) of words that every walk of node `id` loads,
/// whatever it finds, as the walk emits them (`body`): a string's pointer, a vector's three
/// words, a smart pointer, and those of the dynamic members of structs, recursively. Not
/// those behind a pointer or a branch. An `optional`'s flag between two of them, at most a
/// page apart, need not be read (`Gen::covered_by_root_loads`).
fn root_loads(plan: &Plan, id: NodeId, base: u64, out: &mut Vec<u64>) {
    let node = &plan.nodes[id];
    let len = node.static_size;
    let mut word = |off: u64| {
        if off.checked_add(8).is_some_and(|e| e <= len) {
            out.push(base.wrapping_add(off));
        }
    };
    match &node.op {
        Op::Struct { members, .. } => {
            for &(off, m) in members {
                let fits = off
                    .checked_add(plan.nodes[m].static_size)
                    .is_some_and(|e| e <= len);
                if plan.nodes[m].dynamic && fits {
                    root_loads(plan, m, base.wrapping_add(off), out);
                }
            }
        }
        Op::String(l) => {
            let fits = |off: u64| off.checked_add(8).is_some_and(|e| e <= len);
            if fits(l.ptr_off) && fits(l.len_off) {
                word(l.ptr_off);
            }
        }
        Op::Vector { layout, .. } => {
            let l = layout;
            if [l.start_off, l.finish_off, l.eos_off]
                .iter()
                .all(|o| o.checked_add(8).is_some_and(|e| e <= len))
            {
                word(l.start_off);
                word(l.finish_off);
                word(l.eos_off);
            }
        }
        Op::SmartPtr { offset, .. } | Op::RefWrap { offset, .. } => word(*offset),
        _ => {}
    }
}

impl Gen<'_, '_> {
    /// Sets the context's stack limit, read by every node function before it recurses:
    /// `stack_len` (0: `DEFAULT_STACK`) below this entry's stack pointer, less
    /// `STACK_MARGIN` kept free for the last frame's own spills.
    fn store_stack_limit(&mut self, stack_len: Value) {
        let sp = self.b.ins().get_stack_pointer(I64);
        let is_default = self.icmp_imm(IntCC::Equal, stack_len, 0);
        let default = self.c(DEFAULT_STACK);
        let stack_len = self.b.ins().select(is_default, default, stack_len);
        let margin = self.c(STACK_MARGIN);
        let stack_len = self.b.ins().umax(stack_len, margin);
        let usable = self.b.ins().iadd_imm_s(stack_len, -(STACK_MARGIN as i64));
        let limit = self.b.ins().isub(sp, usable);
        self.st_ctx(limit, CTX_LIMIT);
    }
}
