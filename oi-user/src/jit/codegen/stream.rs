//! The output stream: words as LEB128 varints, checked against the buffer end or written
//! unchecked where a loop has reserved room; pointer nodes' pointers as deltas.

use super::*;

impl Gen<'_, '_> {
    /// Appends words to the output, each in LEB128 (`plan::stream`). Bytes that do not fit
    /// are not stored, but the cursor advances anyway: the walk goes on counting, and the
    /// entry reports [`STATUS_FULL`] with the size the output needs, so the tracer grows the
    /// buffer once.
    pub(super) fn emit(&mut self, words: &[Value]) {
        for &w in words {
            self.varint(w);
        }
    }

    /// A pointer node's pointer `p` as its distance from the last one
    /// (`plan::stream::PointerDelta`): mostly a one- or two-byte word.
    pub(super) fn emit_pointer(&mut self, p: Value) {
        if !self.reg.stream {
            return;
        }
        let w = self.pointer_word(p);
        self.varint_short(w);
    }

    /// A pointer node's two words: the pointer `p` (as [`Gen::emit_pointer`]) and the flag
    /// `descended` (0 or 1).
    pub(super) fn emit_pointer_and_flag(&mut self, p: Value, descended: Value) {
        if !self.reg.stream {
            return;
        }
        let w = self.pointer_word(p);
        self.word_and_flag(w, descended);
    }

    /// [`Gen::emit_pointer_and_flag`] of a pointer known not to be null.
    pub(super) fn emit_nonnull_pointer_and_flag(&mut self, p: Value, descended: Value) {
        if !self.reg.stream {
            return;
        }
        let w = self.delta_word(p);
        self.b.def_var(self.last_pointer, p);
        self.word_and_flag(w, descended);
    }

    /// [`Gen::emit_pointer_and_flag`] of a null pointer: the words 0 and 0.
    pub(super) fn emit_null_pointer_and_flag(&mut self) {
        if !self.reg.stream {
            return;
        }
        let zero = self.c(0);
        self.word_and_flag(zero, zero);
    }

    /// A pointer word `w` and the flag `descended` (0 or 1). When `w` is below 2^14 and
    /// three bytes fit, both go out under one check: the word's 16-bit store, then the
    /// flag's byte right after the word (over the store's second byte when the word took
    /// one). The flag's own check and branch would be eight instructions of every element of
    /// an array of owned pointers.
    fn word_and_flag(&mut self, w: Value, descended: Value) {
        let cur = self.b.use_var(self.cur);
        let short = self.icmp_imm(IntCC::UnsignedLessThan, w, 0x4000);
        let three = self.b.ins().iadd_imm_s(cur, 3);
        let fast_b = self.b.create_block();
        let room_b = self.b.create_block();
        let slow_b = self.b.create_block();
        let join = self.b.create_block();
        self.b.ins().brif(short, room_b, &[], slow_b, &[]);
        self.b.switch_to_block(room_b);
        let room = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, three, self.end);
        self.b.ins().brif(room, fast_b, &[], slow_b, &[]);

        self.b.switch_to_block(fast_b);
        let (both, more) = self.short_word(w);
        self.b.ins().istore16(trusted(), both, cur, 0);
        let at = self.b.ins().iadd(cur, more);
        self.b.ins().istore8(trusted(), descended, at, 1);
        let next = self.b.ins().iadd_imm_s(at, 2);
        self.b.def_var(self.cur, next);
        self.b.ins().jump(join, &[]);

        self.b.switch_to_block(slow_b);
        self.varint(w);
        self.varint(descended);
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(join);
    }

    /// The word of pointer `p` ([`Gen::emit_pointer`]); moves the last pointer on.
    fn pointer_word(&mut self, p: Value) -> Value {
        let last = self.b.use_var(self.last_pointer);
        let w = self.delta_word(p);
        let nonnull = self.icmp_imm(IntCC::NotEqual, p, 0);
        let zero = self.c(0);
        let word = self.b.ins().select(nonnull, w, zero);
        let next = self.b.ins().select(nonnull, p, last);
        self.b.def_var(self.last_pointer, next);
        word
    }

    /// The word of a non-null pointer `p` against the last one, `zigzag(p - last) + 1`
    /// (`plan::stream::PointerDelta`); does not move the last pointer on. The one pointer
    /// whose word wraps to 0 takes a cold branch (a null one does when `last` is 2^63, and
    /// gets 0 there too).
    fn delta_word(&mut self, p: Value) -> Value {
        let last = self.b.use_var(self.last_pointer);
        let d = self.b.ins().isub(p, last);
        let z = self.zigzag(d);
        let w = self.b.ins().iadd_imm_s(z, 1);
        let join = self.b.create_block();
        let word = self.b.append_block_param(join, I64);
        let wrapped = self.b.create_block();
        self.b
            .ins()
            .brif(w, join, &[BlockArg::Value(w)], wrapped, &[]);
        self.b.switch_to_block(wrapped);
        self.b.set_cold_block(wrapped);
        let back = self.b.ins().ineg(last);
        let m = self.zigzag(back);
        let m1 = self.b.ins().iadd_imm_s(m, 1);
        self.b.ins().jump(join, &[BlockArg::Value(m1)]);
        self.b.switch_to_block(join);
        word
    }

    /// The one or two LEB128 bytes of `w` < 2^14 as one 16-bit value, and how many of its
    /// bytes count less one (0 or 1). With `hi = w & !0x7f`, `w + hi` is the low seven bits
    /// then `w >> 7` in the second byte, and `w + 0x3f80` reaches bit 14 exactly when `w`
    /// takes two bytes (the first byte's continuation bit, `0x80`): eight instructions
    /// where the bytes taken one by one are eleven, on every pointer of an array of owned
    /// pointers.
    fn short_word(&mut self, w: Value) -> (Value, Value) {
        let hi = self.b.ins().band_imm_s(w, !0x7f);
        let both = self.b.ins().iadd(w, hi);
        let up = self.b.ins().iadd_imm_s(w, 0x3f80);
        let more = self.b.ins().ushr_imm_s(up, 14);
        let flag = self.b.ins().ishl_imm_s(more, 7);
        let both = self.b.ins().iadd(both, flag);
        (both, more)
    }

    /// [`Gen::varint`] with a branch-free path for the words below 2^14 (one or two bytes,
    /// one 16-bit store: a pointer 64 bytes on is the word 128) when two bytes fit. A second
    /// byte stored past a one-byte word lies beyond the cursor: the next word overwrites it
    /// and the stream's length leaves it out.
    fn varint_short(&mut self, w: Value) {
        if !self.reg.stream {
            return;
        }
        let cur = self.b.use_var(self.cur);
        let short = self.icmp_imm(IntCC::UnsignedLessThan, w, 0x4000);
        let two = self.b.ins().iadd_imm_s(cur, 2);
        let room = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, two, self.end);
        let fast = self.b.ins().band(short, room);
        let fast_b = self.b.create_block();
        let slow_b = self.b.create_block();
        let join = self.b.create_block();
        self.b.ins().brif(fast, fast_b, &[], slow_b, &[]);

        self.b.switch_to_block(fast_b);
        let (both, more) = self.short_word(w);
        self.b.ins().istore16(trusted(), both, cur, 0);
        let at = self.b.ins().iadd(cur, more);
        let next = self.b.ins().iadd_imm_s(at, 1);
        self.b.def_var(self.cur, next);
        self.b.ins().jump(join, &[]);

        self.b.switch_to_block(slow_b);
        self.varint(w);
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(join);
    }

    fn zigzag(&mut self, v: Value) -> Value {
        let up = self.b.ins().ishl_imm_s(v, 1);
        let sign = self.b.ins().sshr_imm_s(v, 63);
        self.b.ins().bxor(up, sign)
    }

    /// One LEB128 word at the cursor; a byte is stored only when it lies before `end`.
    pub(super) fn varint(&mut self, w: Value) {
        if !self.reg.stream {
            return;
        }
        let cur = self.b.use_var(self.cur);
        let join = self.b.create_block();
        let joined = self.b.append_block_param(join, I64);
        // Nearly every word is a byte (a length, a count, a flag).
        let small = self.icmp_imm(IntCC::UnsignedLessThan, w, 0x80);
        let room = self.b.ins().icmp(IntCC::UnsignedLessThan, cur, self.end);
        let fast = self.b.ins().band(small, room);
        let one = self.b.create_block();
        let many = self.b.create_block();
        self.b.ins().brif(fast, one, &[], many, &[]);
        self.b.switch_to_block(one);
        self.b.ins().istore8(trusted(), w, cur, 0);
        let next = self.b.ins().iadd_imm_s(cur, 1);
        self.b.ins().jump(join, &[BlockArg::Value(next)]);

        self.b.switch_to_block(many);
        let lp = self.b.create_block();
        let v = self.b.append_block_param(lp, I64);
        let c = self.b.append_block_param(lp, I64);
        self.b
            .ins()
            .jump(lp, &[BlockArg::Value(w), BlockArg::Value(cur)]);
        self.b.switch_to_block(lp);
        let (byte, rest, more) = self.leb_byte(v);
        let room = self.b.ins().icmp(IntCC::UnsignedLessThan, c, self.end);
        let store = self.b.create_block();
        let advance = self.b.create_block();
        self.b.ins().brif(room, store, &[], advance, &[]);
        self.b.switch_to_block(store);
        self.b.ins().istore8(trusted(), byte, c, 0);
        self.b.ins().jump(advance, &[]);
        self.b.switch_to_block(advance);
        let c1 = self.b.ins().iadd_imm_s(c, 1);
        self.b.ins().brif(
            more,
            lp,
            &[BlockArg::Value(rest), BlockArg::Value(c1)],
            join,
            &[BlockArg::Value(c1)],
        );
        self.b.switch_to_block(join);
        self.b.def_var(self.cur, joined);
    }

    /// The next LEB128 byte of `v`: (byte, the bits left, whether bytes follow).
    pub(super) fn leb_byte(&mut self, v: Value) -> (Value, Value, Value) {
        let low = self.b.ins().band_imm_s(v, 0x7f);
        let rest = self.b.ins().ushr_imm_s(v, 7);
        let more = self.icmp_imm(IntCC::NotEqual, rest, 0);
        let flagged = self.b.ins().bor_imm_s(low, 0x80);
        let byte = self.b.ins().select(more, flagged, low);
        (byte, rest, more)
    }

    /// One LEB128 word at `q`, known to have room: returns the address after it.
    pub(super) fn varint_unchecked(&mut self, w: Value, q: Value) -> Value {
        if !self.reg.stream {
            return q;
        }
        let lp = self.b.create_block();
        let v = self.b.append_block_param(lp, I64);
        let c = self.b.append_block_param(lp, I64);
        let done = self.b.create_block();
        let after = self.b.append_block_param(done, I64);
        self.b
            .ins()
            .jump(lp, &[BlockArg::Value(w), BlockArg::Value(q)]);
        self.b.switch_to_block(lp);
        let (byte, rest, more) = self.leb_byte(v);
        self.b.ins().istore8(trusted(), byte, c, 0);
        let c1 = self.b.ins().iadd_imm_s(c, 1);
        self.b.ins().brif(
            more,
            lp,
            &[BlockArg::Value(rest), BlockArg::Value(c1)],
            done,
            &[BlockArg::Value(c1)],
        );
        self.b.switch_to_block(done);
        after
    }

    /// A whole little-endian `u64` at the cursor (the per-root header), stored if it fits.
    pub(super) fn emit_raw_word(&mut self, w: Value) {
        if !self.reg.stream {
            return;
        }
        let cur = self.b.use_var(self.cur);
        let next = self.b.ins().iadd_imm_s(cur, 8);
        // User-space addresses: `next` does not wrap.
        let fits = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, next, self.end);
        let store = self.b.create_block();
        let join = self.b.create_block();
        self.b.ins().brif(fits, store, &[], join, &[]);
        self.b.switch_to_block(store);
        self.b.ins().store(trusted(), w, cur, 0);
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(join);
        self.b.def_var(self.cur, next);
    }
}
