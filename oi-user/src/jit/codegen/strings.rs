//! `std::string` and arrays of strings: the SSO check, and `vector<string>`'s unrolled loop
//! that writes a group of four strings as one 8-byte word while their words are small, and
//! counts a group equal to the last one in a register instead of writing it (the stream's
//! runs, `plan::stream::StringRuns`).

use super::*;

/// Most bytes a run's end takes: its marker and a ten-byte count.
const RUN_END_BYTES: u64 = RUN_MARKER.len() as u64 + MAX_WORD_BYTES as u64;
/// Room the unchecked group loop needs before a group: a run's end, then eight ten-byte words.
const GROUP_ROOM: u64 = RUN_END_BYTES + 2 * STRING_GROUP * MAX_WORD_BYTES as u64;
/// Most bytes a short group moves the cursor: a run's end and its 8-byte word.
const GROUP_STEP: u64 = RUN_END_BYTES + 2 * STRING_GROUP;
/// The group loop's strings per branch to the long path (the group's last string always
/// ends one).
const CHECK_EVERY: u64 = 2;

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
            let cap = self.heap_chars(cap);
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
        let chars = self
            .b
            .ins()
            .iadd_imm_s(cap, self.plan.sizing.terminator() as i64);
        let bytes = self.b.ins().imul_imm_s(chars, l.char_size as i64);
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
        // `umax(cap, 1)` as a select: its constant is then an operand in memory, where
        // `umax` keeps a register (or a stack slot) for the 1.
        let none_yet = self.icmp_imm(IntCC::Equal, cap, 0);
        let one = self.c(1);
        let cap = self.b.ins().select(none_yet, one, cap);
        let zero = self.c(0);
        let cap = self.b.ins().select(inline, zero, cap);
        (len, cap)
    }

    /// The running sum of the characters heap strings allocated (`heap_chars`) and the
    /// largest heap capacity, with sizes.
    pub(super) fn sum_max(&mut self, sum: Value, max: Value, caps: &[Value]) -> (Value, Value) {
        let (mut sum, mut max) = (sum, max);
        if self.reg.sizes {
            for &c in caps {
                let chars = self.heap_chars(c);
                sum = self.b.ins().iadd(sum, chars);
                max = self.b.ins().umax(max, c);
            }
        }
        (sum, max)
    }

    /// The characters charged for heap capacity `cap` (0: inline): the capacity, and under
    /// real sizes the terminator of a heap string (`Sizing::terminator`).
    fn heap_chars(&mut self, cap: Value) -> Value {
        if self.plan.sizing.terminator() == 0 {
            return cap;
        }
        let heap = self.icmp_imm(IntCC::NotEqual, cap, 0);
        let one = self.b.ins().uextend(I64, heap);
        self.b.ins().iadd(cap, one)
    }

    /// The hot loop of `vector<string>` (the interpreter's fast path too), writing the
    /// stream's runs of repeated groups (`plan::stream::StringRuns`). While the output has
    /// room for a group at its longest (a run's end, then eight ten-byte words), stores
    /// need no check. [`STRING_GROUP`] strings an iteration: per string its loads, its two
    /// bytes added into the group's word `G` in a register, and a branch to the long path if
    /// a word is 128 or more; nothing is stored. When `G` equals the last group written, the
    /// group counts in a register and the loop goes on after one compare against a bound of
    /// groups that have room; the run's marker and count are written where it ends. Else `G`
    /// is stored at the cursor (after a run's end) as one 8-byte word. A vector of alike
    /// strings thus stores nothing at all. When the room runs short, the groups go on with
    /// checked stores (the same bytes: the stream does not depend on the buffer's size);
    /// the strings after the last group go one at a time. With sizes, the heap capacities
    /// are summed in registers and added once.
    pub(super) fn string_array(
        &mut self,
        l: &StringLayout,
        start: Value,
        n: Value,
        stride: u64,
    ) -> G {
        const K: u64 = STRING_GROUP;
        let group_step = (K * stride) as i64;
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
        // Room limits for one string and for a group; an `end` below a group's longest (no
        // real buffer) has none.
        let end = self.end;
        let zero = self.c(0);
        let (lim1, limk) = if self.reg.stream {
            let big = self.icmp_imm(IntCC::UnsignedGreaterThanOrEqual, end, GROUP_ROOM);
            let l1 = self.b.ins().iadd_imm_s(end, -w);
            let lim1 = self.b.ins().select(big, l1, zero);
            let lk = self.b.ins().iadd_imm_s(end, -(GROUP_ROOM as i64));
            let limk = self.b.ins().select(big, lk, zero);
            (lim1, limk)
        } else {
            // Nothing is written: always room.
            let all = self.c(u64::MAX);
            (all, all)
        };
        // The last group written, when it was not short: no short group's word (its bytes
        // are below 0x80).
        let none = self.c(u64::MAX);
        let cur = self.b.use_var(self.cur);
        let args = |vs: [Value; 4]| vs.map(BlockArg::Value);
        let args6 = |vs: [Value; 6]| vs.map(BlockArg::Value);

        // Groups: (element, cursor, sum of heap capacities, largest capacity, bound, groups
        // in the run; the last group written is in `last_slot`). `head_k` checks the bound
        // and enters `body_k` with the same values; a repeated group checks it at its end
        // and goes straight back to `body_k`.
        let head_k = self.b.create_block();
        let body_k = self.b.create_block();
        let short_k = self.b.create_block();
        let again_k = self.b.create_block();
        let lit_k = self.b.create_block();
        let mark_k = self.b.create_block();
        let write_k = self.b.create_block();
        let long_k = self.b.create_block();
        let long_mark = self.b.create_block();
        let long_words = self.b.create_block();
        let out_k = self.b.create_block();
        let rebound = self.b.create_block();
        let finish = self.b.create_block();
        let finish_mark = self.b.create_block();
        let checked = self.b.create_block();
        // One at a time: (element, cursor, sum, largest).
        let head = self.b.create_block();
        let check = self.b.create_block();
        let body = self.b.create_block();
        let two = self.b.create_block();
        let long = self.b.create_block();
        let next = self.b.create_block();
        let done = self.b.create_block();
        let spill = self.b.create_block();
        let join = self.b.create_block();
        let [ph, qh, sumh, maxh, bh, rh] = [(); 6].map(|()| self.b.append_block_param(head_k, I64));
        let [pk, qk, sumk, maxk, bk, rk] = [(); 6].map(|()| self.b.append_block_param(body_k, I64));
        let [po, qo, sumo, maxo, ro] = [(); 5].map(|()| self.b.append_block_param(out_k, I64));
        // The last group written lives in a stack slot, not in a loop value: the repeat path
        // loads it for its compare, where as a seventh loop value it would be spilled anyway
        // and moved from and back to the stack every group.
        let last_slot =
            self.b
                .create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 8, 3));
        self.b.ins().stack_store(I64, none, last_slot, 0);
        let [p, q, sum, max] = [(); 4].map(|()| self.b.append_block_param(head, I64));
        let qn = self.b.append_block_param(next, I64);
        let bound = self.group_bound(start, cur, limk, last_group, stride);
        self.b
            .ins()
            .jump(head_k, &args6([start, cur, zero, zero, bound, zero]));

        self.b.switch_to_block(head_k);
        let group = self.b.ins().icmp(IntCC::UnsignedLessThan, ph, bh);
        self.b.ins().brif(
            group,
            body_k,
            &args6([ph, qh, sumh, maxh, bh, rh]),
            out_k,
            &[ph, qh, sumh, maxh, rh].map(BlockArg::Value),
        );
        self.b.switch_to_block(body_k);
        // Per string: its loads, its two bytes added into the group's word `G`, and a
        // branch to the long path if a word is 128 or more, which passes `G` so far as an
        // argument that the long path ignores. That argument is what places each string's
        // share of `G` right after its loads: a pure value is computed where it is first
        // used, so `G` built at the group's end would keep the twelve loaded words live
        // there, and they do not fit in registers (the element pointer and constants would go
        // to the stack). A different value from each branch makes it a real block parameter
        // that Cranelift keeps. (Storing the bytes at the cursor and reading `G` back as one
        // word runs fewer instructions but stalls on the store forwarding.)
        // Nothing is stored in the loop: a repeated group writes nothing, a group written
        // stores `G` once.
        let mut caps = Vec::with_capacity(K as usize);
        let mut g = none;
        // The OR of the words of the strings since the last branch.
        let mut pending: Option<Value> = None;
        for i in 0..K {
            let (len, cap) = self.load_string(l, pk, i * stride);
            caps.push(cap);
            if !self.reg.stream {
                continue;
            }
            let words = pending;
            let hi = self.b.ins().ishl_imm_s(cap, 16 * i as i64 + 8);
            g = if i == 0 {
                self.b.ins().bor(len, hi)
            } else {
                let lo = self.b.ins().ishl_imm_s(len, 16 * i as i64);
                let both = self.b.ins().bor(lo, hi);
                self.b.ins().bor(g, both)
            };
            let words = match words {
                Some(w) => {
                    let w = self.b.ins().bor(w, len);
                    self.b.ins().bor(w, cap)
                }
                None => self.b.ins().bor(len, cap),
            };
            if (i + 1) % CHECK_EVERY != 0 && i + 1 < K {
                pending = Some(words);
                continue;
            }
            pending = None;
            let small = self.icmp_imm(IntCC::UnsignedLessThan, words, 0x80);
            let next_strings = self.b.create_block();
            self.b.ins().brif(
                small,
                next_strings,
                &[],
                long_k,
                &[BlockArg::Value(pk), BlockArg::Value(g)],
            );
            self.b.switch_to_block(next_strings);
        }
        let (sumkb, maxkb) = self.sum_max(sumk, maxk, &caps);
        let pn = self.b.ins().iadd_imm_s(pk, group_step);
        if !self.reg.stream {
            // Nothing to write: the group is its capacities.
            self.b
                .ins()
                .jump(head_k, &args6([pn, qk, sumkb, maxkb, bk, rk]));
        } else {
            self.b.ins().jump(short_k, &[]);
        }
        // Short: the same group again is counted, another is written (after a run's end).
        self.b.switch_to_block(short_k);
        let gk = self.b.ins().stack_load(I64, I64, last_slot, 0);
        let same = self.b.ins().icmp(IntCC::Equal, g, gk);
        self.b.ins().brif(same, again_k, &[], lit_k, &[]);
        self.b.switch_to_block(again_k);
        let r1 = self.b.ins().iadd_imm_s(rk, 1);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, pn, bk);
        self.b.ins().brif(
            more,
            body_k,
            &args6([pn, qk, sumkb, maxkb, bk, r1]),
            out_k,
            &[pn, qk, sumkb, maxkb, r1].map(BlockArg::Value),
        );
        self.b.switch_to_block(lit_k);
        self.b
            .ins()
            .brif(rk, mark_k, &[], write_k, &[BlockArg::Value(qk)]);
        self.b.switch_to_block(mark_k);
        let qm = self.run_end_unchecked(rk, qk);
        self.b.ins().jump(write_k, &[BlockArg::Value(qm)]);
        self.b.switch_to_block(write_k);
        let qw = self.b.append_block_param(write_k, I64);
        if self.reg.stream {
            self.b.ins().store(trusted(), g, qw, 0);
        }
        self.b.ins().stack_store(I64, g, last_slot, 0);
        let q8 = self.b.ins().iadd_imm_s(qw, 2 * K as i64);
        self.b
            .ins()
            .jump(head_k, &args6([pn, q8, sumkb, maxkb, bk, zero]));
        // A word of two bytes or more (rare): the run's end, then the strings loaded again,
        // word by word, from a pointer that is a block parameter, so that none of the fast
        // path's values (the objects' addresses) is shared with this path and kept alive
        // across the branch.
        self.b.switch_to_block(long_k);
        let pl = self.b.append_block_param(long_k, I64);
        // `G` so far (see the group loop): unused here.
        let _ = self.b.append_block_param(long_k, I64);
        self.b
            .ins()
            .brif(rk, long_mark, &[], long_words, &[BlockArg::Value(qk)]);
        self.b.switch_to_block(long_mark);
        let qm = self.run_end_unchecked(rk, qk);
        self.b.ins().jump(long_words, &[BlockArg::Value(qm)]);
        self.b.switch_to_block(long_words);
        let mut at = self.b.append_block_param(long_words, I64);
        let mut long_caps = Vec::with_capacity(K as usize);
        for i in 0..K {
            let (len, cap) = self.load_string(l, pl, i * stride);
            long_caps.push(cap);
            at = self.varint_unchecked(len, at);
            at = self.varint_unchecked(cap, at);
        }
        // The group's capacities as the path read them (it may leave before the fast
        // path's last string).
        let (sum_l, max_l) = self.sum_max(sumk, maxk, &long_caps);
        let pn = self.b.ins().iadd_imm_s(pl, group_step);
        let bound = self.group_bound(pn, at, limk, last_group, stride);
        self.b.ins().stack_store(I64, none, last_slot, 0);
        self.b
            .ins()
            .jump(head_k, &args6([pn, at, sum_l, max_l, bound, zero]));

        // Out of the groups' bound: groups left (the bound counted cursor room, and a run
        // does not move the cursor), or the room short, or the last group done.
        self.b.switch_to_block(out_k);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, po, last_group);
        self.b.ins().brif(more, rebound, &[], finish, &[]);
        self.b.switch_to_block(rebound);
        let nb = self.group_bound(po, qo, limk, last_group, stride);
        let room = self.b.ins().icmp(IntCC::UnsignedGreaterThan, nb, po);
        self.b.ins().brif(
            room,
            head_k,
            &args6([po, qo, sumo, maxo, nb, ro]),
            checked,
            &[],
        );
        self.b.switch_to_block(finish);
        self.b
            .ins()
            .brif(ro, finish_mark, &[], head, &args([po, qo, sumo, maxo]));
        self.b.switch_to_block(finish_mark);
        let qm = self.run_end_unchecked(ro, qo);
        self.b.ins().jump(head, &args([po, qm, sumo, maxo]));

        // The room ran short inside the groups: the rest with checked stores.
        self.b.switch_to_block(checked);
        self.b.def_var(self.cur, qo);
        if self.reg.sizes {
            let walked = self.b.ins().isub(po, start);
            let walked = self.div(walked, stride);
            self.tally_strings(l, walked, sumo, maxo, start);
        }
        let go = self.b.ins().stack_load(I64, I64, last_slot, 0);
        self.checked_groups(l, po, stop, last_group, go, ro, stride)?;
        self.b.ins().jump(join, &[]);

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

        // The room ran short at element `p` (after the groups): the rest, checked.
        self.b.switch_to_block(spill);
        self.b.def_var(self.cur, q);
        if self.reg.sizes {
            let walked = self.b.ins().isub(p, start);
            let walked = self.div(walked, stride);
            self.tally_strings(l, walked, sum, max, start);
        }
        self.checked_strings(l, p, stop, stride)?;
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(join);
        Ok(())
    }

    /// The [`STRING_GROUP`] strings from `p`: the OR of their words (below 128 iff all
    /// are), the word `G` of their low bytes (`plan::stream::pack_group`), their heap
    /// capacities.
    fn load_group(
        &mut self,
        l: &StringLayout,
        p: Value,
        stride: u64,
    ) -> (Value, Value, Vec<Value>) {
        let mut all = None;
        let mut g = None;
        let mut caps = Vec::with_capacity(STRING_GROUP as usize);
        for i in 0..STRING_GROUP {
            let (len, cap) = self.load_string(l, p, i * stride);
            caps.push(cap);
            let either = self.b.ins().bor(len, cap);
            all = Some(match all {
                Some(a) => self.b.ins().bor(a, either),
                None => either,
            });
            if self.reg.stream {
                let hi = self.b.ins().ishl_imm_s(cap, 8);
                let pair = self.b.ins().bor(len, hi);
                g = Some(match g {
                    Some(g) => {
                        let up = self.b.ins().ishl_imm_s(pair, 16 * i as i64);
                        self.b.ins().bor(g, up)
                    }
                    None => pair,
                });
            }
        }
        let all = all.expect("a group has strings");
        let g = g.unwrap_or(all);
        (all, g, caps)
    }

    /// A run's end at `q`, known to have room: the marker, then the groups it repeats.
    fn run_end_unchecked(&mut self, run: Value, q: Value) -> Value {
        if !self.reg.stream {
            return q;
        }
        let marker = self.c(u64::from(u16::from_le_bytes(RUN_MARKER)));
        self.b.ins().istore16(trusted(), marker, q, 0);
        let q2 = self.b.ins().iadd_imm_s(q, RUN_MARKER.len() as i64);
        self.varint_unchecked(run, q2)
    }

    /// A run's end at the cursor, each byte stored where it fits (`Gen::varint`).
    fn run_end_checked(&mut self, run: Value) {
        if !self.reg.stream {
            return;
        }
        for byte in RUN_MARKER {
            let cur = self.b.use_var(self.cur);
            let fits = self.b.ins().icmp(IntCC::UnsignedLessThan, cur, self.end);
            let store = self.b.create_block();
            let join = self.b.create_block();
            self.b.ins().brif(fits, store, &[], join, &[]);
            self.b.switch_to_block(store);
            let v = self.c(u64::from(byte));
            self.b.ins().istore8(trusted(), v, cur, 0);
            self.b.ins().jump(join, &[]);
            self.b.switch_to_block(join);
            let next = self.b.ins().iadd_imm_s(cur, 1);
            self.b.def_var(self.cur, next);
        }
        self.varint(run);
    }

    /// The groups from `p` on with checked stores, continuing the run state of the
    /// unchecked loop (the last group written `last`, `run` groups since), then the strings
    /// after the last group: the bytes the unchecked loop would have written, so that a
    /// walk that ran out of room reports the size the next walk writes.
    #[allow(clippy::too_many_arguments)]
    fn checked_groups(
        &mut self,
        l: &StringLayout,
        p: Value,
        stop: Value,
        last_group: Value,
        last: Value,
        run: Value,
        stride: u64,
    ) -> G {
        let head = self.b.create_block();
        let body = self.b.create_block();
        let lit = self.b.create_block();
        let mark = self.b.create_block();
        let words = self.b.create_block();
        let out = self.b.create_block();
        let out_mark = self.b.create_block();
        let rest = self.b.create_block();
        let [x, gc, rc, s2, m2] = [(); 5].map(|()| self.b.append_block_param(head, I64));
        let zero = self.c(0);
        let none = self.c(u64::MAX);
        let a5 = |vs: [Value; 5]| vs.map(BlockArg::Value);
        self.b.ins().jump(head, &a5([p, last, run, zero, zero]));
        self.b.switch_to_block(head);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, x, last_group);
        self.b.ins().brif(more, body, &[], out, &[]);
        self.b.switch_to_block(body);
        let (all, g, caps) = self.load_group(l, x, stride);
        let (s2b, m2b) = self.sum_max(s2, m2, &caps);
        let xn = self.b.ins().iadd_imm_s(x, (STRING_GROUP * stride) as i64);
        let small = self.icmp_imm(IntCC::UnsignedLessThan, all, 0x80);
        let same = self.b.ins().icmp(IntCC::Equal, g, gc);
        let repeat = self.b.ins().band(small, same);
        let r1 = self.b.ins().iadd_imm_s(rc, 1);
        self.b
            .ins()
            .brif(repeat, head, &a5([xn, gc, r1, s2b, m2b]), lit, &[]);
        self.b.switch_to_block(lit);
        self.b.ins().brif(rc, mark, &[], words, &[]);
        self.b.switch_to_block(mark);
        self.run_end_checked(rc);
        self.b.ins().jump(words, &[]);
        self.b.switch_to_block(words);
        for i in 0..STRING_GROUP {
            let (len, cap) = self.load_string(l, x, i * stride);
            self.varint(len);
            self.varint(cap);
        }
        let last = self.b.ins().select(small, g, none);
        self.b.ins().jump(head, &a5([xn, last, zero, s2b, m2b]));
        self.b.switch_to_block(out);
        self.b.ins().brif(rc, out_mark, &[], rest, &[]);
        self.b.switch_to_block(out_mark);
        self.run_end_checked(rc);
        self.b.ins().jump(rest, &[]);
        self.b.switch_to_block(rest);
        if self.reg.sizes {
            let walked = self.b.ins().isub(x, p);
            let walked = self.div(walked, stride);
            self.tally_strings(l, walked, s2, m2, p);
        }
        self.checked_strings(l, x, stop, stride)
    }

    /// The strings from `p` to `stop`, one at a time with checked stores.
    fn checked_strings(&mut self, l: &StringLayout, p: Value, stop: Value, stride: u64) -> G {
        let left = self.b.ins().isub(stop, p);
        let left = self.div(left, stride);
        let layout = *l;
        self.loop_n(left, |g, i| {
            let off = g.b.ins().imul_imm_s(i, stride as i64);
            let at = g.b.ins().iadd(p, off);
            g.string(&layout, at, stride)
        })
    }

    /// Where the groups from `p` (cursor `q`) must stop: at `last_group`, or earlier where
    /// a group would start past `limk` (the last cursor with room for a group at its
    /// longest after a run's end). A short group moves the cursor at most [`GROUP_STEP`]
    /// bytes (a run's end and its word); a long group computes the bound again. Without a
    /// stream there is always room.
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
        // Groups at q, q + step, … up to limk: (limk − q) / step + 1 of them, none when
        // q > limk.
        let room = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, q, limk);
        let left = self.b.ins().isub(limk, q);
        let groups = self.div(left, GROUP_STEP);
        let groups = self.b.ins().iadd_imm_s(groups, 1);
        let span = self.b.ins().imul_imm_s(groups, (k * stride) as i64);
        let reach = self.b.ins().iadd(p, span);
        let bound = self.b.ins().umin(reach, last_group);
        self.b.ins().select(room, bound, p)
    }

    /// `count` strings of the unchecked loop: their objects and heap characters (`sum`), after
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
