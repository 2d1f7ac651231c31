//! `std::string` and arrays of strings: the SSO check, and `vector<string>`'s unrolled loop
//! that writes each string's length and capacity as one two-byte store while both are small.

use super::*;

impl Gen<'_, '_> {
    /// `StringLayout::words`: `len, heap_capacity`.
    pub(super) fn string(&mut self, l: &StringLayout, addr: Value, len: u64) -> G {
        let in_obj = |off: u64| off.checked_add(8).is_some_and(|e| e <= len);
        if !in_obj(l.ptr_off) || !in_obj(l.len_off) {
            return self.fail(ErrorCode::String, addr);
        }
        if self.reg.optimistic && in_obj(l.cap_off) {
            return self.optimistic_string(l, addr);
        }
        let ptr = self.ld(addr, l.ptr_off);
        // A walker without a stream never uses the length (and the word lies between the two
        // it does read: it cannot fault alone).
        let n = if self.reg.stream {
            self.ld(addr, l.len_off)
        } else {
            self.c(0)
        };
        // Inline iff `addr <= ptr < addr + size`: one unsigned comparison of `ptr - addr`
        // (a pointer below the object wraps far above `size`).
        let from = self.b.ins().isub(ptr, addr);
        let inline = self.icmp_imm(IntCC::UnsignedLessThan, from, l.size);
        let zero = self.c(0);
        let cap = if in_obj(l.cap_off) {
            // Inside the object either way, so reading it when inline is harmless.
            let c = self.ld(addr, l.cap_off);
            let one = self.c(1);
            let c = self.b.ins().umax(c, one);
            self.b.ins().select(inline, zero, c)
        } else {
            let heap = self.icmp_imm(IntCC::Equal, inline, 0);
            self.fail_if(heap, ErrorCode::String, addr);
            zero
        };
        self.emit(&[n, cap]);
        if self.reg.sizes {
            self.decoder_bound(cap, MAX_BYTES, ErrorCode::String, addr);
            let heap = self.b.ins().imul_imm_s(cap, l.char_size as i64);
            let e = self.b.ins().iadd_imm_s(heap, l.size as i64);
            self.tally(e);
        }
        Ok(())
    }

    /// An optimistic walker's string (its capacity inside the object): `size`, plus the
    /// capacity when the characters are on the heap, with one branch on where they are
    /// and one bound check on the heap side: a heap capacity of 0 (which the exact walk
    /// counts as 1) or beyond the decoder's bound ends the walk as corrupt, and its caller
    /// asks the exact walker. An inline string costs its pointer's load and a compare.
    fn optimistic_string(&mut self, l: &StringLayout, addr: Value) -> G {
        self.tally_const(l.size);
        let ptr = self.ld(addr, l.ptr_off);
        let from = self.b.ins().isub(ptr, addr);
        let inline = self.icmp_imm(IntCC::UnsignedLessThan, from, l.size);
        let heap = self.b.create_block();
        let join = self.b.create_block();
        self.b.ins().brif(inline, join, &[], heap, &[]);
        self.b.switch_to_block(heap);
        let cap = self.ld(addr, l.cap_off);
        let less = self.b.ins().iadd_imm_s(cap, -1);
        // MAX_BYTES is 2^47: the entry's suspicion checks it with no branch here.
        if !self.suspect(less) {
            let bad = self.icmp_imm(IntCC::UnsignedGreaterThan, less, MAX_BYTES - 1);
            self.fail_if(bad, ErrorCode::String, addr);
        }
        let bytes = self.b.ins().imul_imm_s(cap, l.char_size as i64);
        self.tally(bytes);
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(join);
        Ok(())
    }

    /// The string at `p + off` as the stream has it: (length, heap capacity or 0).
    pub(super) fn load_string(&mut self, l: &StringLayout, p: Value, off: u64) -> (Value, Value) {
        let ptr = self.ld(p, off + l.ptr_off);
        let len = self.ld(p, off + l.len_off);
        let cap = self.ld(p, off + l.cap_off);
        // ptr in [obj, obj + size) ⟺ ptr − obj < size (the object does not wrap around).
        let obj = self.add(p, off);
        let rel = self.b.ins().isub(ptr, obj);
        let inline = self.icmp_imm(IntCC::UnsignedLessThan, rel, l.size);
        let one = self.c(1);
        let cap = self.b.ins().umax(cap, one);
        let zero = self.c(0);
        let cap = self.b.ins().select(inline, zero, cap);
        (len, cap)
    }

    /// The running sum and largest of heap capacities, with sizes.
    pub(super) fn sum_max(&mut self, sum: Value, max: Value, caps: &[Value]) -> (Value, Value) {
        let (mut sum, mut max) = (sum, max);
        if self.reg.sizes {
            for &c in caps {
                sum = self.b.ins().iadd(sum, c);
                max = self.b.ins().umax(max, c);
            }
        }
        (sum, max)
    }

    /// The hot loop of `vector<string>` (the interpreter's fast path too): while the output
    /// has room for the elements at their longest (two ten-byte words each), stores need no
    /// check. [`STRING_GROUP`] strings an iteration: two compares (elements left, room left),
    /// then per string its loads and a two-byte store of (length, capacity) as if both were
    /// below 128, and one compare for the group that they were (else the group is written
    /// again word by word, over those bytes); then one string an iteration for the last.
    /// With sizes, the heap capacities are summed in registers and added once. The last
    /// elements, once the room is short, are emitted checked.
    pub(super) fn string_array(
        &mut self,
        l: &StringLayout,
        start: Value,
        n: Value,
        stride: u64,
    ) -> G {
        const K: u64 = STRING_GROUP;
        let bytes = self.b.ins().imul_imm_s(n, stride as i64);
        let stop = self.b.ins().iadd(start, bytes);
        // A group starts below `stop - (K-1)·stride`. Saturated at 0: the empty vector that
        // never allocated has start = stop = 0, where the subtraction would wrap around and
        // send the loop to read at address 0.
        let tail = (K - 1) * stride;
        let tail_v = self.c(tail);
        let floor = self.b.ins().umax(stop, tail_v);
        let last_group = self.b.ins().iadd_imm_s(floor, -(tail as i64));
        let w = 2 * MAX_WORD_BYTES as i64;
        // Room limits for one and for a group of elements; an `end` below a group's longest
        // (no real buffer) has none.
        let end = self.end;
        let zero = self.c(0);
        let (lim1, limk) = if self.reg.stream {
            let big = self.icmp_imm(IntCC::UnsignedGreaterThanOrEqual, end, K * w as u64);
            let l1 = self.b.ins().iadd_imm_s(end, -w);
            let lim1 = self.b.ins().select(big, l1, zero);
            let lk = self.b.ins().iadd_imm_s(end, -(K as i64) * w);
            let limk = self.b.ins().select(big, lk, zero);
            (lim1, limk)
        } else {
            // Nothing is written: always room.
            let all = self.c(u64::MAX);
            (all, all)
        };
        let cur = self.b.use_var(self.cur);
        let args = |vs: [Value; 4]| vs.map(BlockArg::Value);
        let args5 = |vs: [Value; 5]| vs.map(BlockArg::Value);

        // (element, cursor, sum of heap capacities, largest capacity[, last group's bound])
        let head_k = self.b.create_block();
        let body_k = self.b.create_block();
        let store_k = self.b.create_block();
        let long_k = self.b.create_block();
        let head = self.b.create_block();
        let check = self.b.create_block();
        let body = self.b.create_block();
        let two = self.b.create_block();
        let long = self.b.create_block();
        let next = self.b.create_block();
        let done = self.b.create_block();
        let spill = self.b.create_block();
        let join = self.b.create_block();
        let [pk, qk, sumk, maxk, bk] = [(); 5].map(|()| self.b.append_block_param(head_k, I64));
        let [p, q, sum, max] = [(); 4].map(|()| self.b.append_block_param(head, I64));
        let qn = self.b.append_block_param(next, I64);
        let bound = self.group_bound(start, cur, limk, last_group, stride);
        self.b
            .ins()
            .jump(head_k, &args5([start, cur, zero, zero, bound]));

        // Groups: one compare, against the bound of groups that have room at two bytes a
        // string (what a fast group writes); a long group computes the bound again.
        self.b.switch_to_block(head_k);
        let group = self.b.ins().icmp(IntCC::UnsignedLessThan, pk, bk);
        self.b
            .ins()
            .brif(group, body_k, &[], head, &args([pk, qk, sumk, maxk]));
        self.b.switch_to_block(body_k);
        // Each string's two bytes are stored as soon as it is loaded, before anyone knows
        // that they are right (the room is there for the group at its longest): its values
        // die at once instead of living until a store after the branch (cranelift computes
        // a pure value where it is first used; eight of them and the loop's do not fit in
        // registers). If a word turns out to need two bytes or more, the long path writes
        // the group again from the same cursor, over them. Fewer, wider stores (one 16-bit
        // store a string, one 8-byte word a group) were measured no faster: what the stores
        // cost is the fresh stream lines they fill, not their number (README, Performance).
        let mut all = None;
        let mut caps = Vec::with_capacity(K as usize);
        for i in 0..K {
            let (len, cap) = self.load_string(l, pk, i * stride);
            caps.push(cap);
            if self.reg.stream {
                self.b.ins().istore8(trusted(), len, qk, 2 * i as i32);
                self.b.ins().istore8(trusted(), cap, qk, 2 * i as i32 + 1);
            }
            let either = self.b.ins().bor(len, cap);
            all = Some(match all {
                Some(a) => self.b.ins().bor(a, either),
                None => either,
            });
        }
        let all = all.expect("K > 0");
        let small = self.icmp_imm(IntCC::UnsignedLessThan, all, 0x80);
        let (sumkb, maxkb) = self.sum_max(sumk, maxk, &caps);
        self.b
            .ins()
            .brif(small, store_k, &[], long_k, &[BlockArg::Value(pk)]);
        self.b.switch_to_block(store_k);
        let fast = if self.reg.stream {
            self.b.ins().iadd_imm_s(qk, 2 * K as i64)
        } else {
            qk
        };
        let pn = self.b.ins().iadd_imm_s(pk, (K * stride) as i64);
        self.b
            .ins()
            .jump(head_k, &args5([pn, fast, sumkb, maxkb, bk]));
        // A word of two bytes or more (rare): the strings loaded again, word by word, from
        // a pointer that is a block parameter, so that none of the fast path's values (the
        // objects' addresses) is shared with this path and kept alive across the branch.
        self.b.switch_to_block(long_k);
        let pl = self.b.append_block_param(long_k, I64);
        let mut at = qk;
        for i in 0..K {
            let (len, cap) = self.load_string(l, pl, i * stride);
            at = self.varint_unchecked(len, at);
            at = self.varint_unchecked(cap, at);
        }
        let pn = self.b.ins().iadd_imm_s(pl, (K * stride) as i64);
        let bound = self.group_bound(pn, at, limk, last_group, stride);
        self.b
            .ins()
            .jump(head_k, &args5([pn, at, sumkb, maxkb, bound]));

        // One at a time.
        self.b.switch_to_block(head);
        let more = self.b.ins().icmp(IntCC::NotEqual, p, stop);
        self.b.ins().brif(more, check, &[], done, &[]);
        self.b.switch_to_block(check);
        let room = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, q, lim1);
        self.b.ins().brif(room, body, &[], spill, &[]);
        self.b.switch_to_block(body);
        let (len, cap) = self.load_string(l, p, 0);
        let (sum1, max1) = self.sum_max(sum, max, &[cap]);
        let both = self.b.ins().bor(len, cap);
        let small = self.icmp_imm(IntCC::UnsignedLessThan, both, 0x80);
        self.b.ins().brif(small, two, &[], long, &[]);
        self.b.switch_to_block(two);
        let hi = self.b.ins().ishl_imm_s(cap, 8);
        let v = self.b.ins().bor(len, hi);
        let q2b = if self.reg.stream {
            self.b.ins().istore16(trusted(), v, q, 0);
            self.b.ins().iadd_imm_s(q, 2)
        } else {
            q
        };
        self.b.ins().jump(next, &[BlockArg::Value(q2b)]);
        self.b.switch_to_block(long);
        let q1 = self.varint_unchecked(len, q);
        let q2b = self.varint_unchecked(cap, q1);
        self.b.ins().jump(next, &[BlockArg::Value(q2b)]);
        self.b.switch_to_block(next);
        let p1 = self.b.ins().iadd_imm_s(p, stride as i64);
        self.b.ins().jump(head, &args([p1, qn, sum1, max1]));

        // Every element done unchecked.
        self.b.switch_to_block(done);
        self.b.def_var(self.cur, q);
        self.tally_strings(l, n, sum, max, start);
        self.b.ins().jump(join, &[]);

        // The room ran short at element `p`: the rest, checked.
        self.b.switch_to_block(spill);
        self.b.def_var(self.cur, q);
        if self.reg.sizes {
            let walked = self.b.ins().isub(p, start);
            let walked = self.div(walked, stride);
            self.tally_strings(l, walked, sum, max, start);
        }
        let left = self.b.ins().isub(stop, p);
        let left = self.div(left, stride);
        let layout = *l;
        self.loop_n(left, |g, i| {
            let off = g.b.ins().imul_imm_s(i, stride as i64);
            let at = g.b.ins().iadd(p, off);
            g.string(&layout, at, stride)
        })?;
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(join);
        Ok(())
    }

    /// Where the groups from `p` (cursor `q`) must stop: at `last_group`, or earlier where
    /// a group written at two bytes a string would start past `limk` (the last cursor with
    /// room for a group at its longest). Without a stream there is always room.
    fn group_bound(
        &mut self,
        p: Value,
        q: Value,
        limk: Value,
        last_group: Value,
        stride: u64,
    ) -> Value {
        if !self.reg.stream {
            return last_group;
        }
        let k = STRING_GROUP;
        // Groups at q, q + 2K, … up to limk: (limk − q) / 2K + 1 of them, none when q > limk.
        let room = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, q, limk);
        let left = self.b.ins().isub(limk, q);
        let groups = self.div(left, 2 * k);
        let groups = self.b.ins().iadd_imm_s(groups, 1);
        let span = self.b.ins().imul_imm_s(groups, (k * stride) as i64);
        let reach = self.b.ins().iadd(p, span);
        let bound = self.b.ins().umin(reach, last_group);
        self.b.ins().select(room, bound, p)
    }

    /// `count` strings of the unchecked loop: their objects and heap capacities (`sum`), after
    /// the decoder's check of the largest capacity.
    pub(super) fn tally_strings(
        &mut self,
        l: &StringLayout,
        count: Value,
        sum: Value,
        max: Value,
        at: Value,
    ) {
        if self.reg.sizes {
            self.decoder_bound(max, MAX_BYTES, ErrorCode::String, at);
            let heap = self.b.ins().imul_imm_s(sum, l.char_size as i64);
            let objects = self.b.ins().imul_imm_s(count, l.size as i64);
            let part = self.b.ins().iadd(heap, objects);
            self.tally(part);
        }
    }
}
