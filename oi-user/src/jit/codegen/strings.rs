//! `std::string` and arrays of strings: the SSO check, and `vector<string>`'s unrolled loop
//! that writes each string's length and capacity as one two-byte store while both are small.

use super::*;
use crate::containers::string;

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
        let word = self.cap_word(cap);
        self.emit(&[n, word]);
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

    /// `string::cap_word` of a heap capacity (0 when inline): one more unless 0.
    fn cap_word(&mut self, cap: Value) -> Value {
        let heap = self.icmp_imm(IntCC::NotEqual, cap, 0);
        let heap = self.b.ins().uextend(I64, heap);
        self.b.ins().iadd(cap, heap)
    }

    /// The string at `p + off`: (length, heap capacity or 0, its capacity word).
    pub(super) fn load_string(
        &mut self,
        l: &StringLayout,
        p: Value,
        off: u64,
    ) -> (Value, Value, Value) {
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
        let real = self.b.ins().select(inline, zero, cap);
        let word = self.b.ins().iadd_imm_s(cap, 1);
        let word = self.b.ins().select(inline, zero, word);
        (len, real, word)
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

    /// The hot loop of `vector<string>` (the interpreter's fast path too): a string with the
    /// length and capacity word of the one before is not written but counted, and the count
    /// is written as a run (`string::RUN`) when a different string comes or the array ends.
    /// [`STRING_GROUP`] strings an iteration while the output has room for a group at its
    /// longest: the loads and one compare that all of them repeat the last pair (the run
    /// grows by a group, nothing is written); otherwise the group is loaded again and
    /// written string by string, unchecked. The last strings (fewer than a group, or all of
    /// them once the room is short) are written checked. With sizes, the heap capacities
    /// are summed in registers and added once.
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
        // At its longest a group ends a run from before it (a word and the code) and writes
        // its K pairs; an `end` below that (no real buffer) has no room for any group.
        let w = (2 * K + 2) * MAX_WORD_BYTES as u64;
        let end = self.end;
        let zero = self.c(0);
        let limk = if self.reg.stream {
            let big = self.icmp_imm(IntCC::UnsignedGreaterThanOrEqual, end, w);
            let lk = self.b.ins().iadd_imm_s(end, -(w as i64));
            self.b.ins().select(big, lk, zero)
        } else {
            self.c(u64::MAX)
        };
        let cur = self.b.use_var(self.cur);
        // No string has the capacity word of a run: the first one is always written.
        let never = self.c(string::RUN);

        // (element, cursor, sum of heap capacities, largest capacity, last length, last
        // capacity word, strings since that repeated them)
        let head_k = self.b.create_block();
        let body_k = self.b.create_block();
        let run_k = self.b.create_block();
        let slow_k = self.b.create_block();
        let rest = self.b.create_block();
        let [pk, qk, sumk, maxk, plen, pword, run] =
            [(); 7].map(|()| self.b.append_block_param(head_k, I64));
        let args = |vs: [Value; 7]| vs.map(BlockArg::Value);
        self.b
            .ins()
            .jump(head_k, &args([start, cur, zero, zero, zero, never, zero]));

        self.b.switch_to_block(head_k);
        let in_range = self.b.ins().icmp(IntCC::UnsignedLessThan, pk, last_group);
        let room = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, qk, limk);
        let group = self.b.ins().band(in_range, room);
        self.b.ins().brif(
            group,
            body_k,
            &[],
            rest,
            &args([pk, qk, sumk, maxk, plen, pword, run]),
        );

        self.b.switch_to_block(body_k);
        let mut diff = None;
        let mut caps = Vec::with_capacity(K as usize);
        for i in 0..K {
            let (len, cap, word) = self.load_string(l, pk, i * stride);
            caps.push(cap);
            if self.reg.stream {
                let dl = self.b.ins().bxor(len, plen);
                let dw = self.b.ins().bxor(word, pword);
                let d = self.b.ins().bor(dl, dw);
                diff = Some(match diff {
                    Some(a) => self.b.ins().bor(a, d),
                    None => d,
                });
            }
        }
        let (sumkb, maxkb) = self.sum_max(sumk, maxk, &caps);
        match diff {
            Some(d) => {
                let same = self.icmp_imm(IntCC::Equal, d, 0);
                self.b
                    .ins()
                    .brif(same, run_k, &[], slow_k, &[BlockArg::Value(pk)]);
            }
            // Nothing is written: every group is a run.
            None => {
                self.b.ins().jump(run_k, &[]);
            }
        }

        // The whole group repeats the last pair.
        self.b.switch_to_block(run_k);
        let pn = self.b.ins().iadd_imm_s(pk, (K * stride) as i64);
        let grown = self.b.ins().iadd_imm_s(run, K as i64);
        self.b
            .ins()
            .jump(head_k, &args([pn, qk, sumkb, maxkb, plen, pword, grown]));

        // A group that breaks the run: loaded again from a pointer that is a block
        // parameter (none of the fast path's values lives across the branch), string by
        // string.
        self.b.switch_to_block(slow_k);
        let pl = self.b.append_block_param(slow_k, I64);
        let mut st = (plen, pword, run, qk);
        for i in 0..K {
            let (len, _, word) = self.load_string(l, pl, i * stride);
            st = self.run_step(len, word, st);
        }
        let pn = self.b.ins().iadd_imm_s(pl, (K * stride) as i64);
        self.b
            .ins()
            .jump(head_k, &args([pn, st.3, sumkb, maxkb, st.0, st.1, st.2]));

        // The rest, checked: the strings after the last group, or every string from where
        // the room ran short.
        self.b.switch_to_block(rest);
        let [p, q, sum, max, plen, pword, run] =
            [(); 7].map(|()| self.b.append_block_param(rest, I64));
        self.b.def_var(self.cur, q);
        if self.reg.sizes {
            let walked = self.b.ins().isub(p, start);
            let walked = self.div(walked, stride);
            self.tally_strings(l, walked, sum, max, start);
        }
        let vars = [(); 3].map(|()| self.b.declare_var(I64));
        for (v, x) in vars.iter().zip([plen, pword, run]) {
            self.b.def_var(*v, x);
        }
        let left = self.b.ins().isub(stop, p);
        let left = self.div(left, stride);
        let layout = *l;
        self.loop_n(left, |g, i| {
            let off = g.b.ins().imul_imm_s(i, stride as i64);
            let at = g.b.ins().iadd(p, off);
            let (len, cap, word) = g.load_string(&layout, at, 0);
            if g.reg.sizes {
                g.decoder_bound(cap, MAX_BYTES, ErrorCode::String, at);
                let heap = g.b.ins().imul_imm_s(cap, layout.char_size as i64);
                let e = g.b.ins().iadd_imm_s(heap, layout.size as i64);
                g.tally(e);
            }
            if g.reg.stream {
                g.run_step_checked(len, word, vars);
            }
            Ok(())
        })?;
        if self.reg.stream {
            let run = self.b.use_var(vars[2]);
            let flush = self.b.create_block();
            let join = self.b.create_block();
            let has = self.icmp_imm(IntCC::NotEqual, run, 0);
            self.b.ins().brif(has, flush, &[], join, &[]);
            self.b.switch_to_block(flush);
            let code = self.c(string::RUN);
            self.emit(&[run, code]);
            self.b.ins().jump(join, &[]);
            self.b.switch_to_block(join);
        }
        Ok(())
    }

    /// One string of a group that has room at its longest: counted if it repeats the last
    /// pair, else written after the run it ends. `st` is (last length, last capacity word,
    /// run, cursor) before it; returns them after it.
    fn run_step(
        &mut self,
        len: Value,
        word: Value,
        st: (Value, Value, Value, Value),
    ) -> (Value, Value, Value, Value) {
        let (plen, pword, run, q) = st;
        let dl = self.b.ins().bxor(len, plen);
        let dw = self.b.ins().bxor(word, pword);
        let d = self.b.ins().bor(dl, dw);
        let same = self.icmp_imm(IntCC::Equal, d, 0);
        let same_b = self.b.create_block();
        let diff_b = self.b.create_block();
        let flush = self.b.create_block();
        let write = self.b.create_block();
        let qw = self.b.append_block_param(write, I64);
        let join = self.b.create_block();
        let out = [(); 4].map(|()| self.b.append_block_param(join, I64));
        self.b.ins().brif(same, same_b, &[], diff_b, &[]);
        self.b.switch_to_block(same_b);
        let grown = self.b.ins().iadd_imm_s(run, 1);
        let a = [plen, pword, grown, q].map(BlockArg::Value);
        self.b.ins().jump(join, &a);
        self.b.switch_to_block(diff_b);
        let has = self.icmp_imm(IntCC::NotEqual, run, 0);
        self.b
            .ins()
            .brif(has, flush, &[], write, &[BlockArg::Value(q)]);
        self.b.switch_to_block(flush);
        let q1 = self.varint_unchecked(run, q);
        let code = self.c(string::RUN);
        self.b.ins().istore8(trusted(), code, q1, 0);
        let q2 = self.b.ins().iadd_imm_s(q1, 1);
        self.b.ins().jump(write, &[BlockArg::Value(q2)]);
        self.b.switch_to_block(write);
        let q3 = self.varint_unchecked(len, qw);
        let q4 = self.varint_unchecked(word, q3);
        let zero = self.c(0);
        let a = [len, word, zero, q4].map(BlockArg::Value);
        self.b.ins().jump(join, &a);
        self.b.switch_to_block(join);
        (out[0], out[1], out[2], out[3])
    }

    /// [`Gen::run_step`] with checked stores, its state in the variables (last length, last
    /// capacity word, run).
    fn run_step_checked(&mut self, len: Value, word: Value, vars: [Variable; 3]) {
        let [plen, pword, run] = vars.map(|v| self.b.use_var(v));
        let dl = self.b.ins().bxor(len, plen);
        let dw = self.b.ins().bxor(word, pword);
        let d = self.b.ins().bor(dl, dw);
        let same = self.icmp_imm(IntCC::Equal, d, 0);
        let same_b = self.b.create_block();
        let diff_b = self.b.create_block();
        let flush = self.b.create_block();
        let write = self.b.create_block();
        let join = self.b.create_block();
        self.b.ins().brif(same, same_b, &[], diff_b, &[]);
        self.b.switch_to_block(same_b);
        let grown = self.b.ins().iadd_imm_s(run, 1);
        self.b.def_var(vars[2], grown);
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(diff_b);
        let has = self.icmp_imm(IntCC::NotEqual, run, 0);
        self.b.ins().brif(has, flush, &[], write, &[]);
        self.b.switch_to_block(flush);
        let code = self.c(string::RUN);
        self.emit(&[run, code]);
        self.b.ins().jump(write, &[]);
        self.b.switch_to_block(write);
        self.emit(&[len, word]);
        let zero = self.c(0);
        self.b.def_var(vars[0], len);
        self.b.def_var(vars[1], word);
        self.b.def_var(vars[2], zero);
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(join);
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
