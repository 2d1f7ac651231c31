//! Contiguous containers: vectors (and OIL's optimistic flat vector), C arrays, element
//! loops and `std::deque`'s map of blocks.

use super::*;

impl Gen<'_, '_> {
    /// An optimistic walker's vector of elements that read nothing and count their own
    /// size (ints, doubles, plain structs): `size + capacity · sizeof(T)`, which is what the
    /// exact walk adds up (`size + (cap − len)·sizeof T + len·sizeof T`) when
    /// `start ≤ finish ≤ end_of_storage` and the capacity is within `MAX_ELEMENTS`. Anything
    /// else (a corrupt vector, or a `finish` past the storage, which the exact walk takes as
    /// the capacity) ends the walk as corrupt: its caller then asks the exact walker. The
    /// two orders are compared on the words themselves, so that only the capacity is
    /// subtracted (with both, `eos − start` cannot wrap, and its bound is the capacity's):
    /// three fused compare-and-branches, a subtraction, a mask and an add beside the loads,
    /// where the exact arm needs four checks and two divisions. Branches, not flags ORed
    /// together: a branch adds nothing to the chains of the total or the suspicion, which
    /// cost more (ORing `start` into the suspicion makes `bench::Outer`'s seven vectors
    /// measurably slower).
    pub(super) fn optimistic_flat_vector(
        &mut self,
        l: &crate::containers::vector::VectorLayout,
        addr: Value,
        len: u64,
    ) -> G {
        let code = ErrorCode::Vector;
        let start = self.field(addr, len, l.start_off, code)?;
        let finish = self.field(addr, len, l.finish_off, code)?;
        let eos = self.field(addr, len, l.eos_off, code)?;
        let es = l.elem_size;
        let under = self.b.ins().icmp(IntCC::UnsignedLessThan, finish, start);
        self.fail_if(under, code, addr);
        let over = self.b.ins().icmp(IntCC::UnsignedGreaterThan, finish, eos);
        self.fail_if(over, code, addr);
        let all = self.b.ins().isub(eos, start);
        let most = MAX_ELEMENTS.saturating_add(1).saturating_mul(es) - 1;
        let big = self.icmp_imm(IntCC::UnsignedGreaterThan, all, most);
        self.fail_if(big, code, addr);
        let cap_bytes = if es.is_power_of_two() {
            self.b.ins().band_imm_s(all, !(es as i64 - 1))
        } else {
            let cap = self.div(all, es);
            self.b.ins().imul_imm_s(cap, es as i64)
        };
        self.tally(cap_bytes);
        self.tally_const(l.size);
        Ok(())
    }

    /// `Walker::walk_array` for a vector's elements (strings take the interpreter's fast
    /// path, which skips the per-element depth accounting).
    pub(super) fn vector_elements(
        &mut self,
        elem: NodeId,
        start: Value,
        n: Value,
        stride: u64,
        k: u64,
    ) -> G {
        if !self.dynamic(elem) {
            return Ok(());
        }
        if stride == 0 {
            return Err(unsupported(self.plan, elem, "dynamic elements of size 0"));
        }
        let big = self.icmp_imm(IntCC::UnsignedGreaterThan, n, MAX_READ / stride);
        self.fail_if(big, ErrorCode::ElementCount, start);
        let string = match &self.plan.nodes[elem].op {
            Op::String(l) => Some(*l),
            _ => None,
        };
        if let Some(l) = &string {
            let in_obj = |off: u64| off.checked_add(8).is_some_and(|e| e <= stride);
            if in_obj(l.ptr_off) && in_obj(l.len_off) && in_obj(l.cap_off) {
                return self.string_array(l, start, n, stride);
            }
        }
        self.loop_n(n, |g, i| {
            let off = g.b.ins().imul_imm_s(i, stride as i64);
            let at = g.b.ins().iadd(start, off);
            match &string {
                Some(l) => g.string(l, at, stride),
                None => g.child(elem, at, stride, k),
            }
        })
    }

    /// C array / std::array: elements inside the object; the first one that does not fit
    /// is the interpreter's `sub` error after the ones that do.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn c_array(
        &mut self,
        elem: NodeId,
        addr: Value,
        len: u64,
        offset: u64,
        count: u64,
        stride: u64,
        k: u64,
    ) -> G {
        if !self.dynamic(elem) || count == 0 {
            return Ok(());
        }
        let fits = |i: u64| {
            i.checked_mul(stride)
                .and_then(|o| o.checked_add(offset))
                .and_then(|o| o.checked_add(stride))
                .is_some_and(|e| e <= len)
        };
        // Elements that fit form a prefix: find its length.
        let ok = if fits(count - 1) {
            count
        } else if !fits(0) {
            0
        } else {
            // fits(lo) && !fits(hi)
            let (mut lo, mut hi) = (0u64, count - 1);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if fits(mid) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            lo + 1
        };
        if ok <= 4 {
            for i in 0..ok {
                let a = self.add(addr, offset + i * stride);
                self.child(elem, a, stride, k)?;
            }
        } else {
            let n = self.c(ok);
            self.loop_n(n, |g, i| {
                let off = g.b.ins().imul_imm_s(i, stride as i64);
                let base = g.add(addr, offset);
                let at = g.b.ins().iadd(base, off);
                g.child(elem, at, stride, k)
            })?;
        }
        if ok < count {
            return self.fail(ErrorCode::MemberOutside, addr);
        }
        Ok(())
    }

    pub(super) fn deque(
        &mut self,
        l: &crate::containers::deque::DequeLayout,
        elem: NodeId,
        addr: Value,
        len: u64,
        k: u64,
    ) -> G {
        if let Some(c) = l.libcxx {
            return self.deque_libcxx(l, &c, elem, addr, len, k);
        }
        let code = ErrorCode::Deque;
        let mut s = [addr; 4];
        let mut f = [addr; 4];
        for (v, &off) in s.iter_mut().zip(&l.start) {
            *v = self.field(addr, len, off, code)?;
        }
        for (v, &off) in f.iter_mut().zip(&l.finish) {
            *v = self.field(addr, len, off, code)?;
        }
        let map = self.field(addr, len, l.map_off, code)?;
        let n_v = self.b.declare_var(I64);
        let slots_v = self.b.declare_var(I64);
        let blocks_v = self.b.declare_var(I64);
        let zero = self.c(0);
        for v in [n_v, slots_v, blocks_v] {
            self.b.def_var(v, zero);
        }
        let es = l.elem_size.max(1);
        let block_elems = l.block_elems();
        let has_map = self.icmp_imm(IntCC::NotEqual, map, 0);
        self.if_then(has_map, |g| {
            let d = g.checked_sub(f[3], s[3], code, addr);
            let nodes = g.b.ins().ushr_imm_s(d, 3);
            let d = g.checked_sub(f[0], f[1], code, addr);
            let tail = g.div(d, es);
            let full = g.b.ins().imul_imm_s(nodes, block_elems as i64);
            let total = g.b.ins().iadd(full, tail);
            let d = g.checked_sub(s[0], s[1], code, addr);
            let head = g.div(d, es);
            let n = g.checked_sub(total, head, code, addr);
            let slots = g.field(addr, len, l.map_size_off, code)?;
            let blocks = g.b.ins().iadd_imm_s(nodes, 1);
            g.b.def_var(n_v, n);
            g.b.def_var(slots_v, slots);
            g.b.def_var(blocks_v, blocks);
            Ok(())
        })?;
        let n = self.b.use_var(n_v);
        let slots = self.b.use_var(slots_v);
        let blocks = self.b.use_var(blocks_v);
        self.deque_words(l, elem, addr, [n, slots, blocks]);
        if !self.dynamic(elem) {
            return Ok(());
        }
        let nonempty = self.icmp_imm(IntCC::NotEqual, n, 0);
        self.if_then(nonempty, |g| {
            let big = g.icmp_imm(IntCC::UnsignedGreaterThan, blocks, MAX_READ / 8);
            g.fail_if(big, ErrorCode::ReadSize, s[3]);
            let block_bytes = l.block_bytes();
            // The element range of block `b` (`Walker::deque_elements`).
            let range = |g: &mut Self, b: Value| -> (Value, Value) {
                let off = g.b.ins().imul_imm_s(b, 8);
                let slot = g.b.ins().iadd(s[3], off);
                let block = g.ld(slot, 0);
                let is_first = g.icmp_imm(IntCC::Equal, b, 0);
                let b1 = g.b.ins().iadd_imm_s(b, 1);
                let is_last = g.b.ins().icmp(IntCC::Equal, b1, blocks);
                let first = g.b.ins().select(is_first, s[0], block);
                let block_end = g.b.ins().iadd_imm_s(block, block_bytes as i64);
                let mid_end = g.b.ins().select(is_first, s[2], block_end);
                let end = g.b.ins().select(is_last, f[0], mid_end);
                (first, end)
            };
            // All ranges are checked before any element is walked, as the interpreter does.
            g.loop_n(blocks, |g, b| {
                let (first, end) = range(g, b);
                let back = g.b.ins().icmp(IntCC::UnsignedLessThan, end, first);
                g.fail_if(back, ErrorCode::DequeBlock, addr);
                Ok(())
            })?;
            let walked = g.b.declare_var(I64);
            let zero = g.c(0);
            g.b.def_var(walked, zero);
            g.loop_n(blocks, |g, b| {
                let (first, end) = range(g, b);
                let d = g.b.ins().isub(end, first);
                let count = g.div(d, es);
                let w = g.b.use_var(walked);
                let w = g.b.ins().iadd(w, count);
                g.b.def_var(walked, w);
                g.loop_n(count, |g, j| {
                    let off = g.b.ins().imul_imm_s(j, es as i64);
                    let at = g.b.ins().iadd(first, off);
                    g.child(elem, at, es, k)
                })
            })?;
            if g.reg.sizes {
                // Other than `n` elements in the blocks: the decoder finds the stream short
                // (or longer than the plan).
                let w = g.b.use_var(walked);
                let other = g.b.ins().icmp(IntCC::NotEqual, w, n);
                g.fail_if(other, ErrorCode::DequeBlock, addr);
            }
            Ok(())
        })
    }

    /// What both deques do once their element count `n`, map slots and blocks are known:
    /// fail on a map with more blocks than slots or too many slots, check the count, emit the
    /// four words, and under real sizes charge the map and the blocks less the elements'
    /// bytes (`DequeLayout::account`).
    fn deque_words(
        &mut self,
        l: &crate::containers::deque::DequeLayout,
        elem: NodeId,
        addr: Value,
        [n, slots, blocks]: [Value; 3],
    ) {
        let one = self.c(1);
        let min_slots = self.b.ins().umax(slots, one);
        let over = self
            .b
            .ins()
            .icmp(IntCC::UnsignedGreaterThan, blocks, min_slots);
        let huge = self.icmp_imm(IntCC::UnsignedGreaterThan, slots, MAX_ELEMENTS);
        let bad = self.b.ins().bor(over, huge);
        self.fail_if(bad, ErrorCode::DequeMap, addr);
        self.check_count(n, addr);
        self.emit(&[addr, n, slots, blocks]);
        if self.reg.sizes {
            let map_bytes = self.b.ins().imul_imm_s(slots, 8);
            let block_bytes = self.b.ins().imul_imm_s(blocks, l.block_bytes() as i64);
            let all = self.b.ins().iadd(map_bytes, block_bytes);
            let all = self.b.ins().iadd_imm_s(all, l.size as i64);
            let used = self.b.ins().imul_imm_s(n, l.elem_size as i64);
            let under = self.b.ins().icmp(IntCC::UnsignedLessThan, all, used);
            let e = self.b.ins().isub(all, used);
            let zero = self.c(0);
            let e = self.b.ins().select(under, zero, e);
            self.tally(e);
            self.tally_static(elem, n);
        }
    }

    /// libc++'s deque (`DequeLayout::read`'s libc++ branch, `Walker::deque_elements`): the
    /// same words and charge as libstdc++'s, the elements found from `__start_`.
    fn deque_libcxx(
        &mut self,
        l: &crate::containers::deque::DequeLayout,
        c: &crate::containers::deque::LibcxxDeque,
        elem: NodeId,
        addr: Value,
        len: u64,
        k: u64,
    ) -> G {
        let code = ErrorCode::Deque;
        let first = self.field(addr, len, c.first, code)?;
        let n_v = self.b.declare_var(I64);
        let slots_v = self.b.declare_var(I64);
        let blocks_v = self.b.declare_var(I64);
        let begin_v = self.b.declare_var(I64);
        let start_v = self.b.declare_var(I64);
        let zero = self.c(0);
        for v in [n_v, slots_v, blocks_v, begin_v, start_v] {
            self.b.def_var(v, zero);
        }
        let has_map = self.icmp_imm(IntCC::NotEqual, first, 0);
        self.if_then(has_map, |g| {
            let begin = g.field(addr, len, c.begin, code)?;
            let end = g.field(addr, len, c.end, code)?;
            let end_cap = g.field(addr, len, c.end_cap, code)?;
            let start = g.field(addr, len, c.start, code)?;
            let d = g.checked_sub(end_cap, first, code, addr);
            let slots = g.b.ins().ushr_imm_s(d, 3);
            let d = g.checked_sub(end, begin, code, addr);
            let blocks = g.b.ins().ushr_imm_s(d, 3);
            let n = g.field(addr, len, c.count, code)?;
            g.b.def_var(n_v, n);
            g.b.def_var(slots_v, slots);
            g.b.def_var(blocks_v, blocks);
            g.b.def_var(begin_v, begin);
            g.b.def_var(start_v, start);
            Ok(())
        })?;
        let n = self.b.use_var(n_v);
        let slots = self.b.use_var(slots_v);
        let blocks = self.b.use_var(blocks_v);
        self.deque_words(l, elem, addr, [n, slots, blocks]);
        if !self.dynamic(elem) {
            return Ok(());
        }
        let es = l.elem_size.max(1);
        let bs = l.block_elems();
        let nonempty = self.icmp_imm(IntCC::NotEqual, n, 0);
        self.if_then(nonempty, |g| {
            let start = g.b.use_var(start_v);
            let begin = g.b.use_var(begin_v);
            let q = g.b.ins().udiv_imm_s(start, bs as i64);
            let skip = g.b.ins().urem_imm_s(start, bs as i64);
            // `DequeLayout::libcxx_touched`: the blocks the elements lie in, inside the map's.
            let reach = g.b.ins().iadd(skip, n);
            let reach = g.b.ins().iadd_imm_s(reach, (bs - 1) as i64);
            let touched = g.b.ins().udiv_imm_s(reach, bs as i64);
            let need = g.b.ins().iadd(q, touched);
            let past = g.b.ins().icmp(IntCC::UnsignedGreaterThan, need, blocks);
            g.fail_if(past, ErrorCode::DequeBlock, addr);
            let big = g.icmp_imm(IntCC::UnsignedGreaterThan, touched, MAX_READ / 8);
            g.fail_if(big, ErrorCode::ReadSize, addr);
            let q8 = g.b.ins().imul_imm_s(q, 8);
            let first_slot = g.b.ins().iadd(begin, q8);
            let left = g.b.declare_var(I64);
            g.b.def_var(left, n);
            g.loop_n(touched, |g, t| {
                let off = g.b.ins().imul_imm_s(t, 8);
                let slot = g.b.ins().iadd(first_slot, off);
                let block = g.ld(slot, 0);
                let is_first = g.icmp_imm(IntCC::Equal, t, 0);
                let zero = g.c(0);
                let i0 = g.b.ins().select(is_first, skip, zero);
                let full = g.c(bs);
                let avail = g.b.ins().isub(full, i0);
                let rest = g.b.use_var(left);
                let count = g.b.ins().umin(avail, rest);
                let rest = g.b.ins().isub(rest, count);
                g.b.def_var(left, rest);
                let at0 = g.b.ins().imul_imm_s(i0, es as i64);
                let at0 = g.b.ins().iadd(block, at0);
                g.loop_n(count, |g, j| {
                    let off = g.b.ins().imul_imm_s(j, es as i64);
                    let at = g.b.ins().iadd(at0, off);
                    g.child(elem, at, es, k)
                })
            })
        })
    }
}
