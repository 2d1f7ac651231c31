//! Pointers: smart and raw pointers, owned heap pointers measured by their glibc block, and
//! the capture of map keys.

use super::*;

impl Gen<'_, '_> {
    /// SmartPtr / RefWrap / RawPointer: `pointer, descended`, then (a shared_ptr under real
    /// sizes: `control` is its block and the block's pointer) the block's kind, then the
    /// target. `visits`: whether a non-null pointer is looked up in the visited set at all.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pointer(
        &mut self,
        s: u64,
        ptr: Value,
        target: Option<NodeId>,
        visits: bool,
        control: Option<(ControlBlock, Value)>,
        k: u64,
        tail: bool,
    ) -> G {
        if visits && self.reg.optimistic {
            return self.optimistic_pointer(s, ptr, target, control, k, tail);
        }
        let descend = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(descend, zero);
        if visits {
            // The two words written apart for a null and a non-null pointer: neither needs
            // the selects of a pointer that may be either (five instructions of every
            // element of an array of owned pointers).
            let tag = self.plan.visit_tag(target);
            let nonnull = self.icmp_imm(IntCC::NotEqual, ptr, 0);
            let seen = self.b.create_block();
            let null = self.b.create_block();
            let join = self.b.create_block();
            self.b.ins().brif(nonnull, seen, &[], null, &[]);
            self.b.switch_to_block(null);
            self.emit_null_pointer_and_flag();
            self.b.ins().jump(join, &[]);
            self.b.switch_to_block(seen);
            let v = self.visit_as(ptr, tag);
            self.b.def_var(descend, v);
            self.emit_nonnull_pointer_and_flag(ptr, v);
            self.b.ins().jump(join, &[]);
            self.b.switch_to_block(join);
        } else {
            self.emit_pointer_and_flag(ptr, zero);
        }
        let d = self.b.use_var(descend);
        if let Some((c, cb)) = control {
            let kind = self.control_kind(&c, ptr, cb);
            self.emit(&[kind]);
            if self.reg.sizes {
                let charge = self.control_charge(&c, kind);
                let zero = self.c(0);
                let charge = self.b.ins().select(d, charge, zero);
                self.tally(charge);
            }
        }
        self.tally_const(s);
        if let Some(t) = target {
            self.tally_static(t, d);
        }
        if let Some(t) = target
            && self.dynamic(t)
        {
            self.if_then(d, |g| g.last(tail, |g| g.walk_at(t, ptr, k)))?;
        }
        Ok(())
    }

    /// An optimistic walker's visited pointer (no stream): its visit only records, so a
    /// non-null pointer is always descended, under one branch.
    fn optimistic_pointer(
        &mut self,
        s: u64,
        ptr: Value,
        target: Option<NodeId>,
        control: Option<(ControlBlock, Value)>,
        k: u64,
        tail: bool,
    ) -> G {
        self.tally_const(s);
        let tag = self.plan.visit_tag(target);
        // In a register of its own, the place records before the null test (null is 0).
        let recorded = self.record_site(ptr, tag);
        let nonnull = self.icmp_imm(IntCC::NotEqual, ptr, 0);
        self.if_then(nonnull, |g| {
            if !recorded {
                g.visit_as(ptr, tag);
            }
            if let Some((c, cb)) = control {
                let kind = g.control_kind(&c, ptr, cb);
                let charge = g.control_charge(&c, kind);
                g.tally(charge);
            }
            let Some(t) = target else {
                return Ok(());
            };
            if g.dynamic(t) {
                g.last(tail, |g| g.walk_at(t, ptr, k))
            } else {
                let part = g.st(t);
                g.tally_const(part);
                Ok(())
            }
        })
    }

    /// `ControlBlock::kind` of block pointer `cb` beside object pointer `ptr`.
    fn control_kind(&mut self, c: &ControlBlock, ptr: Value, cb: Value) -> Value {
        let none = self.icmp_imm(IntCC::Equal, cb, 0);
        let at = self.b.ins().iadd_imm_s(cb, c.inplace_at as i64);
        let inplace = self.b.ins().icmp(IntCC::Equal, at, ptr);
        let (zero, one, two) = (self.c(0), self.c(1), self.c(2));
        let some = self.b.ins().select(inplace, one, two);
        self.b.ins().select(none, zero, some)
    }

    /// `ControlBlock::charge` of a block of `kind` whose object is descended into.
    fn control_charge(&mut self, c: &ControlBlock, kind: Value) -> Value {
        let is_inplace = self.icmp_imm(IntCC::Equal, kind, 1);
        let is_separate = self.icmp_imm(IntCC::Equal, kind, 2);
        let (inplace, separate, zero) = (self.c(c.inplace_extra), self.c(c.separate), self.c(0));
        let other = self.b.ins().select(is_separate, separate, zero);
        self.b.ins().select(is_inplace, inplace, other)
    }

    /// HeapPointer: `pointer, descended, block`, then the target (`Walker::heap_block`).
    pub(super) fn heap_pointer(
        &mut self,
        s: u64,
        ptr: Value,
        target: Option<NodeId>,
        lone: u64,
        k: u64,
        tail: bool,
    ) -> G {
        let descend = self.b.declare_var(I64);
        let block = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(descend, zero);
        self.b.def_var(block, zero);
        let tag = self.plan.visit_tag(target);
        let nonnull = self.icmp_imm(IntCC::NotEqual, ptr, 0);
        self.if_then(nonnull, |g| {
            let v = g.visit_as(ptr, tag);
            g.b.def_var(descend, v);
            g.if_then(v, |g| {
                let f = g.func_ref(FN_BLOCK, 2);
                let call = g.b.ins().call(f, &[g.ctx, ptr]);
                let usable = g.b.inst_results(call)[0];
                let big = g.icmp_imm(IntCC::UnsignedGreaterThan, usable, lone);
                g.if_then(big, |g| {
                    let fresh = g.visit_as(ptr, BLOCK_TAG << 48);
                    let zero = g.c(0);
                    let b = g.b.ins().select(fresh, usable, zero);
                    g.b.def_var(block, b);
                    Ok(())
                })
            })
        })?;
        let d = self.b.use_var(descend);
        let bl = self.b.use_var(block);
        self.emit_pointer(ptr);
        self.emit(&[d, bl]);
        // Sized walkers add what the decoder charges: the pointer, the block less the pointee
        // it holds (a block is only ever found for a pointer that descends), the pointee.
        if self.reg.sizes {
            self.tally_const(s);
            let inside = target.map_or(0, |t| self.plan.nodes[t].static_size);
            let over = self.icmp_imm(IntCC::UnsignedGreaterThan, bl, inside);
            let rest = self.b.ins().iadd_imm_s(bl, -(inside as i64));
            let zero = self.c(0);
            let extra = self.b.ins().select(over, rest, zero);
            self.tally(extra);
            if let Some(t) = target {
                self.tally_static(t, d);
            }
        }
        if let Some(t) = target
            && self.dynamic(t)
        {
            self.if_then(d, |g| g.last(tail, |g| g.walk_at(t, ptr, k)))?;
        }
        Ok(())
    }

    /// `Walker::capture` of a map key `ks` bytes long at `ka`.
    pub(super) fn capture(&mut self, c: Capture, ka: Value, ks: u64) -> G {
        match c {
            Capture::Scalar { size, signed } => {
                let n = size.min(8);
                if n > ks {
                    return self.fail(ErrorCode::Key, ka);
                }
                let mut v = self.ld_uint(ka, 0, n);
                if signed && (1..8).contains(&size) {
                    let sh = (64 - 8 * size) as i64;
                    let up = self.b.ins().ishl_imm_s(v, sh);
                    v = self.b.ins().sshr_imm_s(up, sh);
                }
                self.emit(&[v]);
                Ok(())
            }
            Capture::Address => {
                self.emit(&[ka]);
                Ok(())
            }
            Capture::String(l) => {
                let ptr = self.field(ka, ks, l.ptr_off, ErrorCode::FieldOutside)?;
                let chars = self.field(ka, ks, l.len_off, ErrorCode::FieldOutside)?;
                let cs = l.char_size.max(1);
                let over = self.icmp_imm(IntCC::UnsignedGreaterThan, chars, MAX_CAPTURED_KEY / cs);
                let bytes = self.b.ins().imul_imm_s(chars, cs as i64);
                let max = self.c(MAX_CAPTURED_KEY);
                let n = self.b.ins().select(over, max, bytes);
                self.emit(&[n]);
                let whole = self.b.ins().ushr_imm_s(n, 3);
                self.loop_n(whole, |g, i| {
                    let off = g.b.ins().ishl_imm_s(i, 3);
                    let p = g.b.ins().iadd(ptr, off);
                    let w = g.ld(p, 0);
                    g.emit(&[w]);
                    Ok(())
                })?;
                let rest = self.b.ins().band_imm_s(n, 7);
                self.if_then(rest, |g| {
                    let acc = g.b.declare_var(I64);
                    let zero = g.c(0);
                    g.b.def_var(acc, zero);
                    let off = g.b.ins().ishl_imm_s(whole, 3);
                    let tail = g.b.ins().iadd(ptr, off);
                    g.loop_n(rest, |g, j| {
                        let p = g.b.ins().iadd(tail, j);
                        let byte = g.b.ins().uload8(I64, target(), p, 0);
                        let sh = g.b.ins().ishl_imm_s(j, 3);
                        let byte = g.b.ins().ishl(byte, sh);
                        let a = g.b.use_var(acc);
                        let a = g.b.ins().bor(a, byte);
                        g.b.def_var(acc, a);
                        Ok(())
                    })?;
                    let w = g.b.use_var(acc);
                    g.emit(&[w]);
                    Ok(())
                })
            }
        }
    }
}
