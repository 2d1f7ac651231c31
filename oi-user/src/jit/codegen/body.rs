//! The dispatch of one plan node to the code that walks it (`Gen::body`): leaves, structs,
//! the std containers, smart pointers and described containers, each arm calling the
//! module that knows its layout.

use super::*;

impl Gen<'_, '_> {
    /// Node `id`'s own walk; its children start at nesting `k`. Only the children after
    /// which the node emits nothing more may inherit tail position ([`Self::last`]).
    pub(super) fn body(&mut self, id: NodeId, addr: Value, len: u64, k: u64) -> G {
        let tail = std::mem::replace(&mut self.tail, false);
        let r = self.body_inner(id, addr, len, k, tail);
        self.tail = tail;
        r
    }

    /// Runs `f` in tail position if the node is.
    pub(super) fn last(&mut self, tail: bool, f: impl FnOnce(&mut Self) -> G) -> G {
        self.tail = tail;
        let r = f(self);
        self.tail = false;
        r
    }

    pub(super) fn body_inner(
        &mut self,
        id: NodeId,
        addr: Value,
        len: u64,
        k: u64,
        tail: bool,
    ) -> G {
        let plan = self.plan;
        if let Some(v) = &plan.nodes[id].value {
            // `--values`: as the interpreter, a word at a time, checked to lie in the object.
            for w in 0..v.words() {
                let n = v.size.saturating_sub(8 * w).min(8);
                if (8 * w).checked_add(n).is_none_or(|e| e > len) {
                    return self.fail(ErrorCode::FieldOutside, addr);
                }
                let word = self.ld_uint(addr, 8 * w, n);
                self.emit(&[word]);
            }
        }
        let s = plan.nodes[id].static_size;
        match &plan.nodes[id].op {
            Op::Leaf => {
                self.tally_const(s);
                Ok(())
            }
            Op::Bitfield => Ok(()),
            Op::Struct {
                members, padding, ..
            } => {
                let ids: Vec<NodeId> = members.iter().map(|m| m.1).collect();
                let part = padding.wrapping_add(self.static_children(&ids));
                self.tally_const(part);
                let last = members.iter().rposition(|m| self.dynamic(m.1));
                for (i, &(off, m)) in members.iter().enumerate() {
                    if self.dynamic(m) {
                        let size = self.size(m);
                        let a = self.member(addr, len, off, size)?;
                        self.last(tail && Some(i) == last, |g| g.child(m, a, size, k))?;
                    }
                }
                Ok(())
            }
            Op::Array {
                elem,
                offset,
                count,
                stride,
                exclusive,
            } => {
                let part = if self.dynamic(*elem) {
                    *exclusive
                } else {
                    let each = self.st(*elem);
                    exclusive.wrapping_add(count.wrapping_mul(each))
                };
                self.tally_const(part);
                self.c_array(*elem, addr, len, *offset, *count, *stride, k)
            }
            Op::Pair { first, second }
            | Op::Entry {
                key: first,
                value: second,
                capture: None,
            } => {
                self.tally_pair(s, first.1, second.1);
                self.two(addr, len, *first, *second, k, tail)
            }
            Op::Entry {
                key,
                value,
                capture: Some(c),
            } => {
                self.tally_pair(s, key.1, value.1);
                let ks = self.size(key.1);
                let ka = self.member(addr, len, key.0, ks)?;
                self.capture(*c, ka, ks)?;
                self.two(addr, len, *key, *value, k, tail)
            }
            Op::String(l) => self.string(l, addr, len),
            Op::Vector { layout, elem }
                if self.reg.optimistic
                    && !self.dynamic(*elem)
                    && layout.elem_size > 0
                    && self.st(*elem) == layout.elem_size =>
            {
                self.optimistic_flat_vector(layout, addr, len)
            }
            Op::Vector { layout, elem } => {
                let l = *layout;
                let code = ErrorCode::Vector;
                let start = self.field(addr, len, l.start_off, code)?;
                let finish = self.field(addr, len, l.finish_off, code)?;
                let eos = self.field(addr, len, l.eos_off, code)?;
                let es = l.elem_size.max(1);
                let used = self.checked_sub(finish, start, code, addr);
                let n = self.div(used, es);
                let all = self.checked_sub(eos, start, code, addr);
                let cap = self.div(all, es);
                let cap = self.b.ins().umax(cap, n);
                self.check_count(n, addr);
                self.check_count(cap, addr);
                self.emit(&[addr, n, cap]);
                if self.reg.sizes {
                    let spare = self.b.ins().isub(cap, n);
                    let spare = self.b.ins().imul_imm_s(spare, l.elem_size as i64);
                    let e = self.b.ins().iadd_imm_s(spare, l.size as i64);
                    self.tally(e);
                    self.tally_static(*elem, n);
                }
                self.vector_elements(*elem, start, n, l.elem_size, k)
            }
            Op::VectorBool { layout, elem } => {
                let l = *layout;
                let code = ErrorCode::VectorBool;
                let (n, c) = if let Some(x) = l.libcxx {
                    // libc++: the size in bits, the capacity in words.
                    let n = self.field(addr, len, x.size_off, code)?;
                    let words = self.field(addr, len, x.cap_off, code)?;
                    let huge = self.icmp_imm(IntCC::UnsignedGreaterThan, words, u64::MAX / 64);
                    self.fail_if(huge, code, addr);
                    (n, self.b.ins().imul_imm_s(words, 64))
                } else {
                    let sp = self.field(addr, len, l.start_p, code)?;
                    let so = self.field(addr, len, l.start_bit, code)?;
                    let so = self.b.ins().band_imm_s(so, 0xffff_ffff);
                    let fp = self.field(addr, len, l.finish_p, code)?;
                    let fo = self.field(addr, len, l.finish_bit, code)?;
                    let fo = self.b.ins().band_imm_s(fo, 0xffff_ffff);
                    let eos = self.field(addr, len, l.eos_off, code)?;
                    let d = self.checked_sub(fp, sp, code, addr);
                    let d = self.b.ins().ushr_imm_s(d, 3);
                    let d = self.b.ins().imul_imm_s(d, 64);
                    let bits = self.b.ins().iadd(d, fo);
                    let n = self.checked_sub(bits, so, code, addr);
                    let c = self.checked_sub(eos, sp, code, addr);
                    let c = self.b.ins().ushr_imm_s(c, 3);
                    (n, self.b.ins().imul_imm_s(c, 64))
                };
                let cap = self.b.ins().umax(c, n);
                self.check_count(n, addr);
                self.check_count(cap, addr);
                self.emit(&[addr, n, cap]);
                if self.reg.sizes {
                    if self.dynamic(*elem) {
                        // The decoder would read elements nobody wrote (no real plan).
                        self.decoder_bound(n, 0, code, addr);
                    }
                    // `VectorBoolLayout::exclusive`.
                    let own = match self.plan.sizing {
                        Sizing::Oi => self.b.ins().isub(cap, n),
                        Sizing::Real => self.b.ins().ushr_imm_s(cap, 3),
                    };
                    let e = self.b.ins().iadd_imm_s(own, l.size as i64);
                    self.tally(e);
                    self.tally_static(*elem, n);
                }
                Ok(())
            }
            Op::Deque { layout, elem } => self.deque(layout, *elem, addr, len, k),
            Op::List { layout, elem } => {
                let l = *layout;
                let n = if l.counted {
                    let first =
                        self.field(addr, len, l.head_off + l.next_off, ErrorCode::FieldOutside)?;
                    self.count_links(first, l.next_off, addr)
                } else {
                    self.field(addr, len, l.size_off, ErrorCode::FieldOutside)?
                };
                self.check_count(n, addr);
                self.emit(&[addr, n]);
                self.tally_nodes(l.size, l.node_size.wrapping_sub(l.elem_size), n, *elem);
                if !self.dynamic(*elem) {
                    return Ok(());
                }
                let head = self.add(addr, l.head_off);
                let first =
                    self.field(addr, len, l.head_off + l.next_off, ErrorCode::FieldOutside)?;
                let node = self.b.declare_var(I64);
                self.b.def_var(node, first);
                let elem = *elem;
                self.loop_n(n, |g, _| {
                    let cur = g.b.use_var(node);
                    let at_head = g.b.ins().icmp(IntCC::Equal, cur, head);
                    let null = g.icmp_imm(IntCC::Equal, cur, 0);
                    let short = g.b.ins().bor(at_head, null);
                    g.fail_if(short, ErrorCode::ListShort, addr);
                    let v = g.member(cur, l.node_size, l.value_off, l.elem_size)?;
                    g.child(elem, v, l.elem_size, k)?;
                    let next = g.field(cur, l.node_size, l.next_off, ErrorCode::FieldOutside)?;
                    g.b.def_var(node, next);
                    Ok(())
                })
            }
            Op::RbTree {
                layout,
                elem,
                is_map,
            } => {
                let l = *layout;
                let n = self.field(addr, len, l.count_off, ErrorCode::FieldOutside)?;
                self.check_count(n, addr);
                self.emit(&[addr, n]);
                let per_node = if *is_map {
                    0
                } else {
                    l.node_size.wrapping_sub(l.value_size)
                };
                self.tally_nodes(l.size, per_node, n, *elem);
                if !self.dynamic(*elem) {
                    return Ok(());
                }
                let root = self.field(
                    addr,
                    len,
                    l.header_off + l.root_link,
                    ErrorCode::FieldOutside,
                )?;
                self.rb_elements(*elem, &l, root, n, addr, k)
            }
            Op::Hashtable {
                layout,
                elem,
                is_map,
            } => {
                let l = *layout;
                let n = self.field(addr, len, l.count_off, ErrorCode::FieldOutside)?;
                let buckets = self.field(addr, len, l.bucket_count_off, ErrorCode::FieldOutside)?;
                self.check_count(n, addr);
                self.emit(&[addr, n, buckets]);
                if self.reg.sizes {
                    self.decoder_bound(buckets, MAX_BYTES / 8, ErrorCode::FieldOutside, addr);
                    let key_size = match &plan.nodes[*elem].op {
                        Op::Entry { key, .. } if *is_map => self.size(key.1),
                        _ => l.value_size,
                    };
                    let table = self.b.ins().imul_imm_s(buckets, 8);
                    let per_node = match plan.sizing {
                        Sizing::Oi => l.node_size.wrapping_sub(key_size),
                        // Real: no bucket array for the one inline bucket, and a map's
                        // entries carry their nodes' overhead themselves.
                        Sizing::Real => {
                            let one = self.icmp_imm(IntCC::Equal, buckets, 1);
                            let zero = self.c(0);
                            let table = self.b.ins().select(one, zero, table);
                            self.tally(table);
                            if *is_map {
                                0
                            } else {
                                l.node_size.wrapping_sub(l.value_size)
                            }
                        }
                    };
                    if plan.sizing == Sizing::Oi {
                        self.tally(table);
                    }
                    self.tally_nodes(l.size, per_node, n, *elem);
                }
                if !self.dynamic(*elem) {
                    return Ok(());
                }
                let first = self.field(addr, len, l.before_begin_off, ErrorCode::FieldOutside)?;
                let node = self.b.declare_var(I64);
                self.b.def_var(node, first);
                let elem = *elem;
                let node_len = l.value_off + l.value_size;
                self.loop_n(n, |g, _| {
                    let cur = g.b.use_var(node);
                    let null = g.icmp_imm(IntCC::Equal, cur, 0);
                    g.fail_if(null, ErrorCode::HashShort, addr);
                    let v = g.member(cur, node_len, l.value_off, l.value_size)?;
                    g.child(elem, v, l.value_size, k)?;
                    let next = g.field(cur, node_len, 0, ErrorCode::FieldOutside)?;
                    g.b.def_var(node, next);
                    Ok(())
                })
            }
            Op::Optional { layout, elem } => {
                let l = *layout;
                if l.engaged_off.checked_add(1).is_none_or(|e| e > len) {
                    return self.fail(ErrorCode::Optional, addr);
                }
                let elem = *elem;
                let size = self.size(elem);
                let inside = l.value_off.checked_add(size).is_some_and(|e| e <= len);
                // A value no larger than its optional: engaged or not, the optional's size.
                let plain = inside && !self.dynamic(elem) && self.st(elem) == size && size <= s;
                if self.reg.optimistic && plain && self.covered_by_root_loads(addr, l.engaged_off) {
                    // The optimistic walk's loads around the flag fault wherever its read
                    // would (`Gen::covered_by_root_loads`): it is not read.
                    self.tally_const(s);
                    return Ok(());
                }
                let flag = self.ld_uint(addr, l.engaged_off, 1);
                if !self.reg.stream && plain {
                    // Engaged or not, the same size and nothing to walk: the flag is read (the
                    // exact walk's read, which may fault) and nothing else.
                    self.tally_const(s);
                    return Ok(());
                }
                let engaged = self.icmp_imm(IntCC::NotEqual, flag, 0);
                let word = self.b.ins().uextend(I64, engaged);
                self.emit(&[word]);
                if self.reg.sizes {
                    let with = s
                        .saturating_sub(size)
                        .wrapping_add(self.static_children(&[elem]));
                    let with = self.c(with);
                    let without = self.c(s);
                    let part = self.b.ins().select(engaged, with, without);
                    self.tally(part);
                }
                self.if_then(engaged, |g| {
                    let v = g.member(addr, len, l.value_off, size)?;
                    g.last(tail, |g| g.child(elem, v, size, k))
                })
            }
            Op::Variant {
                layout,
                alternatives,
            } => {
                let l = *layout;
                if l.index_off
                    .checked_add(l.index_size)
                    .is_none_or(|e| e > len)
                {
                    return self.fail(ErrorCode::Variant, addr);
                }
                let index = self.ld_uint(addr, l.index_off, l.index_size);
                // Valueless, or an index without an alternative: the one-of's none.
                let cases: Vec<_> = (0u64..)
                    .zip(alternatives)
                    .map(|(i, &alt)| (i, Some((l.storage_off, alt))))
                    .collect();
                self.one_of(index, &cases, addr, len, s, k, tail)
            }
            Op::Union { disc, width, cases } => {
                // The discriminator is in the class around the union: read from the target
                // (as the interpreter's `load`), at a signed distance from the union.
                let at = self.b.ins().iadd_imm_s(addr, *disc);
                let value = self.ld_uint(at, 0, u64::from(*width));
                self.one_of(value, cases, addr, len, s, k, tail)
            }
            Op::SmartPtr {
                offset,
                target,
                control,
            } => {
                let ptr = self.field(addr, len, *offset, ErrorCode::FieldOutside)?;
                let control = match control {
                    Some(c) => {
                        let cb = self.field(addr, len, c.offset, ErrorCode::FieldOutside)?;
                        Some((*c, cb))
                    }
                    None => None,
                };
                self.pointer(s, ptr, *target, target.is_some(), control, k, tail)
            }
            Op::RefWrap { offset, target } => {
                let ptr = self.field(addr, len, *offset, ErrorCode::FieldOutside)?;
                self.pointer(s, ptr, *target, target.is_some(), None, k, tail)
            }
            Op::RawPointer { target } => {
                let ptr = self.field(addr, len, 0, ErrorCode::FieldOutside)?;
                self.pointer(s, ptr, *target, true, None, k, tail)
            }
            Op::HeapPointer { target, lone } => {
                let ptr = self.field(addr, len, 0, ErrorCode::FieldOutside)?;
                self.heap_pointer(s, ptr, *target, *lone, k, tail)
            }
            Op::Described { layout: l, elem } => {
                // As the interpreter: every value, then `inline` zeroes the heap.
                let data = self.expr(&l.data, addr, len)?;
                let n = self.expr(&l.len, addr, len)?;
                let cap = self.expr(&l.cap, addr, len)?;
                let heap = self.expr(&l.heap, addr, len)?;
                let heap = match &l.inline {
                    Some(c) => {
                        let c = self.expr(c, addr, len)?;
                        let zero = self.c(0);
                        self.b.ins().select(c, zero, heap)
                    }
                    None => heap,
                };
                if let Some(sw) = &l.swiss {
                    return self.swiss(l, sw, *elem, [addr, data, n, cap, heap], len, k);
                }
                if let Some(ch) = &l.chains {
                    return self.chains(l, ch, *elem, [addr, data, n, cap, heap], k);
                }
                if let Some(bt) = &l.btree {
                    return self.btree(l, bt, *elem, [addr, data, n, cap], len, k);
                }
                self.check_count(n, addr);
                self.check_count(cap, addr);
                self.described_words(l, *elem, [addr, n, cap, heap]);
                self.vector_elements(*elem, data, n, l.elem_size, k)
            }
            Op::Poly {
                candidates,
                fallback,
            } => {
                let vptr = self.field(addr, len, 0, ErrorCode::FieldOutside)?;
                let bias = self.ld_ctx(CTX_BIAS);
                let elf = self.b.ins().isub(vptr, bias);
                let done = self.b.create_block();
                for (i, &(lo, hi, cand)) in candidates.iter().enumerate() {
                    let ge = self.icmp_imm(IntCC::UnsignedGreaterThanOrEqual, elf, lo);
                    let lt = self.icmp_imm(IntCC::UnsignedLessThan, elf, hi);
                    let is = self.b.ins().band(ge, lt);
                    let then = self.b.create_block();
                    let next = self.b.create_block();
                    self.b.ins().brif(is, then, &[], next, &[]);
                    self.b.switch_to_block(then);
                    self.then_join(done, |g| {
                        let iw = g.c(i as u64);
                        g.emit(&[iw]);
                        // The chosen class stands in this node's place.
                        let part = g.static_children(&[cand]);
                        g.tally_const(part);
                        // offset-to-top sits two words before the address point.
                        let top_at = g.b.ins().iadd_imm_s(vptr, -16);
                        let top = g.ld(top_at, 0);
                        let obj = g.b.ins().iadd(addr, top);
                        g.last(tail, |g| g.walk_at(cand, obj, k))
                    })?;
                    self.b.switch_to_block(next);
                }
                let none = self.c(u64::MAX);
                self.emit(&[none]);
                let fallback = *fallback;
                let part = self.static_children(&[fallback]);
                self.tally_const(part);
                self.then_join(done, |g| g.last(tail, |g| g.child(fallback, addr, len, k)))?;
                self.b.switch_to_block(done);
                Ok(())
            }
        }
    }

    /// The one-of-N of a variant or a discriminated union: the first case whose value
    /// `value` equals writes its index and walks its member (at an offset in the object,
    /// E = S − its size), or nothing (a case of none, E = S); no case: u64::MAX, E = S.
    #[allow(clippy::too_many_arguments)]
    fn one_of(
        &mut self,
        value: Value,
        cases: &[(u64, Option<(u64, NodeId)>)],
        addr: Value,
        len: u64,
        s: u64,
        k: u64,
        tail: bool,
    ) -> G {
        let done = self.b.create_block();
        for (i, &(case, member)) in cases.iter().enumerate() {
            let is = self.icmp_imm(IntCC::Equal, value, case);
            let then = self.b.create_block();
            let next = self.b.create_block();
            self.b.ins().brif(is, then, &[], next, &[]);
            self.b.switch_to_block(then);
            self.then_join(done, |g| {
                let iw = g.c(i as u64);
                g.emit(&[iw]);
                let Some((off, m)) = member else {
                    g.tally_const(s);
                    return Ok(());
                };
                let size = g.size(m);
                let part = s.saturating_sub(size).wrapping_add(g.static_children(&[m]));
                g.tally_const(part);
                let v = g.member(addr, len, off, size)?;
                g.last(tail, |g| g.child(m, v, size, k))
            })?;
            self.b.switch_to_block(next);
        }
        let none = self.c(u64::MAX);
        self.emit(&[none]);
        self.tally_const(s);
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(done);
        Ok(())
    }

    /// What every described layout ends with once its elements are counted: the heap bound
    /// the decoder checks, the four words (`addr, len, cap, heap`) and, for walkers with
    /// sizes, the container's own part, `size + heap − len · sizeof(elem)` (at least 0, as
    /// the decoder adds it), and the elements that read nothing.
    pub(super) fn described_words(
        &mut self,
        l: &DescribedArray,
        elem: NodeId,
        [addr, n, cap, heap]: [Value; 4],
    ) {
        let big = self.icmp_imm(IntCC::UnsignedGreaterThan, heap, MAX_DESCRIBED_HEAP);
        self.fail_if(big, ErrorCode::Described, addr);
        self.emit(&[addr, n, cap, heap]);
        if self.reg.sizes {
            let t = self.b.ins().iadd_imm_s(heap, l.size as i64);
            let m = self.b.ins().imul_imm_s(n, l.elem_size as i64);
            let d = self.b.ins().isub(t, m);
            let ge = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, t, m);
            let zero = self.c(0);
            let e = self.b.ins().select(ge, d, zero);
            self.tally(e);
            self.tally_static(elem, n);
        }
    }
}
