//! The visited set: recording an address once per walk (the table in `gen_visit`, or the
//! optimistic walker's short key list, or in a leaf optimistic entry a register per place
//! that visits), and `gen_block`, the glibc heap block check.

use super::*;

/// Most recorded keys whose pairs the optimistic entry compares without a loop.
const UNROLLED_KEYS: u64 = 6;
/// Most places of a leaf optimistic entry that record a visit in a register of their own.
pub(super) const MAX_SITES: usize = 8;

/// A leaf optimistic entry's visits kept in registers (`Gen::record_site`): a variable per
/// place, and the visit tag of each place used so far.
#[derive(Clone, Default)]
pub(super) struct Sites {
    pub(super) vars: Vec<Variable>,
    pub(super) tags: Vec<u64>,
}

impl Sites {
    /// `MAX_SITES` variables, each starting at 0, as a null pointer's place: the final
    /// check takes two equal places for a revisit only when they are not 0 (cold).
    pub(super) fn new(b: &mut FunctionBuilder<'_>) -> Self {
        let vars = (0..MAX_SITES)
            .map(|_| {
                let v = b.declare_var(I64);
                let start = b.ins().iconst(I64, 0);
                b.def_var(v, start);
                v
            })
            .collect();
        Sites {
            vars,
            tags: Vec::new(),
        }
    }
}

impl Gen<'_, '_> {
    /// Inserts the key of `addr` seen as `tag` (`Plan::visit_tag`) into the visited set:
    /// 1 if newly inserted, else 0.
    pub(super) fn visit_as(&mut self, addr: Value, tag: u64) -> Value {
        let t = self.c(tag);
        if self.reg.optimistic && self.record_site(addr, tag) {
            return self.c(1);
        }
        let key = self.b.ins().bxor(addr, t);
        if self.reg.optimistic {
            return self.record_visit(key);
        }
        self.visit(key)
    }

    /// An optimistic walker's visit: the key recorded for the entry's final check, and 1
    /// ("newly inserted"); [`STATUS_REVISIT`] when the record is full.
    pub(super) fn record_visit(&mut self, key: Value) -> Value {
        let n = self.recorded_count();
        let full = self.icmp_imm(IntCC::UnsignedGreaterThanOrEqual, n, OPTIMISTIC_KEYS);
        self.revisit_if(full);
        let off = self.b.ins().ishl_imm_s(n, 3);
        let slot = self.b.ins().iadd(self.ctx, off);
        self.b.ins().store(trusted(), key, slot, CTX_KEYS);
        let n1 = self.b.ins().iadd_imm_s(n, 1);
        match self.reg.leaf_keys {
            Some(v) => self.b.def_var(v, n1),
            None => self.st_ctx(n1, CTX_NKEYS),
        }
        self.c(1)
    }

    /// A leaf optimistic entry's visit outside any loop: the address in this place's own
    /// register (no store, no count), ORed into the suspicion. A pointer records before it
    /// is tested for null (`optimistic_pointer`), so that its place is the pointer itself
    /// (no move): a null place is 0, which the final check ignores. Its key is `addr ^ tag`, and
    /// tags differ only in bits 48 and up: with every recorded address below 2^47 (the
    /// suspicion checks it), keys of different tags never meet, and keys of one tag are
    /// equal when their addresses are. False when the visit must be recorded in the
    /// context instead (then the entry is generated again that way).
    pub(super) fn record_site(&mut self, addr: Value, tag: u64) -> bool {
        let loops = self.loops;
        let Some(sites) = self.reg.sites.as_mut() else {
            return false;
        };
        if loops > 0 || sites.tags.len() >= sites.vars.len() || self.suspect.is_none() {
            self.reg.sites_overflow = true;
            return false;
        }
        let v = sites.vars[sites.tags.len()];
        sites.tags.push(tag);
        self.b.def_var(v, addr);
        self.suspect(addr);
        true
    }

    /// How many keys are recorded: in a register in a leaf entry, else in the context.
    fn recorded_count(&mut self) -> Value {
        match self.reg.leaf_keys {
            Some(v) => self.b.use_var(v),
            None => self.ld_ctx(CTX_NKEYS),
        }
    }

    /// Leaves the optimistic entry with [`STATUS_REVISIT`] (ask the exact walker) when
    /// `cond` holds; the current block goes on otherwise.
    fn revisit_if(&mut self, cond: Value) {
        self.exit_cold_if(cond, STATUS_REVISIT);
    }

    /// Leaves the optimistic entry with `status` when `cond` holds, through a cold block of
    /// its own: the status is set there, not before the branch on the hot path.
    pub(super) fn exit_cold_if(&mut self, cond: Value, status: u64) {
        let exit = self.b.create_block();
        let ok = self.b.create_block();
        self.b.ins().brif(cond, exit, &[], ok, &[]);
        self.b.set_cold_block(exit);
        self.b.switch_to_block(exit);
        let s = self.c(status);
        self.b.ins().jump(self.ret, &[BlockArg::Value(s)]);
        self.b.switch_to_block(ok);
    }

    /// The optimistic entry's final check: [`STATUS_REVISIT`] if two recorded keys are
    /// equal (the exact walker would not have descended the second time).
    pub(super) fn check_recorded(&mut self) -> G {
        if let Some(sites) = self.reg.sites.clone() {
            // Keys in registers (`record_site`): only places of one tag can meet. A place
            // not reached, or a null pointer's, is 0 (`Sites::new`): two of them are equal
            // and are no revisit, which a cold block decides.
            for (j, &tj) in sites.tags.iter().enumerate() {
                for (i, &ti) in sites.tags[..j].iter().enumerate() {
                    if ti != tj {
                        continue;
                    }
                    let ki = self.b.use_var(sites.vars[i]);
                    let kj = self.b.use_var(sites.vars[j]);
                    let same = self.b.ins().icmp(IntCC::Equal, ki, kj);
                    let equal = self.b.create_block();
                    let ok = self.b.create_block();
                    self.b.ins().brif(same, equal, &[], ok, &[]);
                    self.b.set_cold_block(equal);
                    self.b.switch_to_block(equal);
                    self.exit_cold_if(ki, STATUS_REVISIT);
                    self.b.ins().jump(ok, &[]);
                    self.b.switch_to_block(ok);
                }
            }
            return Ok(());
        }
        let n = self.recorded_count();
        // Up to UNROLLED_KEYS keys (a small object's), the pairs are compared straight, the
        // key `i` only once `n > i`: about two instructions a pair, where the loops below
        // cost a dozen an iteration.
        let few = self.icmp_imm(IntCC::UnsignedLessThanOrEqual, n, UNROLLED_KEYS);
        let unrolled = self.b.create_block();
        let looped = self.b.create_block();
        let done = self.b.create_block();
        self.b.ins().brif(few, unrolled, &[], looped, &[]);
        self.b.switch_to_block(unrolled);
        let mut keys = Vec::new();
        for i in 0..UNROLLED_KEYS {
            let more = self.icmp_imm(IntCC::UnsignedGreaterThan, n, i);
            let next = self.b.create_block();
            self.b.ins().brif(more, next, &[], done, &[]);
            self.b.switch_to_block(next);
            let ki = self.ld_ctx(CTX_KEYS + 8 * i as i32);
            for &kj in &keys {
                let same = self.b.ins().icmp(IntCC::Equal, ki, kj);
                self.revisit_if(same);
            }
            keys.push(ki);
        }
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(looped);
        self.loop_n(n, |g, i| {
            let off = g.b.ins().ishl_imm_s(i, 3);
            let slot = g.b.ins().iadd(g.ctx, off);
            let ki = g.b.ins().load(I64, trusted(), slot, CTX_KEYS);
            g.loop_n(i, |g, j| {
                let off = g.b.ins().ishl_imm_s(j, 3);
                let slot = g.b.ins().iadd(g.ctx, off);
                let kj = g.b.ins().load(I64, trusted(), slot, CTX_KEYS);
                let same = g.b.ins().icmp(IntCC::Equal, ki, kj);
                g.revisit_if(same);
                Ok(())
            })
        })?;
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(done);
        Ok(())
    }

    /// Inserts `addr` into the visited set: 1 if newly inserted, else 0. The common case, an
    /// empty home slot in a set with room, is inlined (a call per owned pointer would be a
    /// third of a `RepeatedPtrField`'s walk); anything else calls `gen_visit`, which
    /// looks at the home slot again and goes on from there.
    pub(super) fn visit(&mut self, addr: Value) -> Value {
        let count = self.ld_ctx(CTX_COUNT);
        let table = self.ld_ctx(CTX_TABLE);
        let generation = self.ld_ctx(CTX_GEN);
        let slot = home_slot(&mut self.b, table, addr);
        let tag = self.b.ins().load(I64, trusted(), slot, 8);
        let empty = self.b.ins().icmp(IntCC::NotEqual, tag, generation);
        let insert = self.b.create_block();
        let has_room = self.b.create_block();
        let call_b = self.b.create_block();
        let join = self.b.create_block();
        let fresh = self.b.append_block_param(join, I64);
        // Two compare-and-branches, where the two flags combined cost six instructions.
        self.b.ins().brif(empty, has_room, &[], call_b, &[]);
        self.b.switch_to_block(has_room);
        let room = self.icmp_imm(IntCC::UnsignedLessThan, count, VISITED_CAPACITY as u64);
        self.b.ins().brif(room, insert, &[], call_b, &[]);

        self.b.switch_to_block(insert);
        self.b.ins().store(trusted(), addr, slot, 0);
        self.b.ins().store(trusted(), generation, slot, 8);
        let c1 = self.b.ins().iadd_imm_s(count, 1);
        self.st_ctx(c1, CTX_COUNT);
        let one = self.c(1);
        self.b.ins().jump(join, &[BlockArg::Value(one)]);

        // `gen_visit` returns nothing (a `preserve_all` function cannot): it inserted the
        // key iff it counted one more.
        self.b.switch_to_block(call_b);
        self.b.set_cold_block(call_b);
        let f = self.func_ref(FN_VISIT, 2);
        self.b.ins().call(f, &[self.ctx, addr]);
        let after = self.ld_ctx(CTX_COUNT);
        let grew = self.b.ins().icmp(IntCC::NotEqual, after, count);
        let r = self.b.ins().uextend(I64, grew);
        self.b.ins().jump(join, &[BlockArg::Value(r)]);

        self.b.switch_to_block(join);
        fresh
    }
}

/// `fn(ctx, p) -> usable size of the glibc heap block starting at p, or 0`: the checks of
/// `interp::heap::block_usable`, in its order, over the context's heap ranges (the first
/// range holding the chunk decides). Target memory is read only inside that range.
pub(super) fn gen_block(fctx: &mut FunctionBuilderContext, fc: TargetFrontendConfig) -> Function {
    let mut func = new_function(FN_BLOCK, 2);
    {
        let mut b = FunctionBuilder::new(&mut func, fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let (ctx, p) = (b.block_params(entry)[0], b.block_params(entry)[1]);
        let no = b.create_block();
        let low = b.ins().band_imm_s(p, 15);
        let small = b.ins().icmp_imm_s(IntCC::UnsignedLessThan, p, 16);
        let small = b.ins().uextend(I64, small);
        let bad = b.ins().bor(low, small);
        let search = b.create_block();
        b.ins().brif(bad, no, &[], search, &[]);

        b.switch_to_block(no);
        let zero = b.ins().iconst(I64, 0);
        b.ins().return_(&[zero]);

        // Linear search of the ranges: (start, end) pairs.
        b.switch_to_block(search);
        let chunk = b.ins().iadd_imm_s(p, -16);
        let heaps = b.ins().load(I64, trusted(), ctx, CTX_HEAPS);
        let n = b.ins().load(I64, trusted(), ctx, CTX_NHEAPS);
        let probe = b.create_block();
        let i = b.append_block_param(probe, I64);
        let zero = b.ins().iconst(I64, 0);
        b.ins().jump(probe, &[BlockArg::Value(zero)]);

        b.switch_to_block(probe);
        let more = b.ins().icmp(IntCC::UnsignedLessThan, i, n);
        let look = b.create_block();
        b.ins().brif(more, look, &[], no, &[]);

        b.switch_to_block(look);
        let off = b.ins().ishl_imm_s(i, 4);
        let slot = b.ins().iadd(heaps, off);
        let start = b.ins().load(I64, trusted(), slot, 0);
        let end = b.ins().load(I64, trusted(), slot, 8);
        let ge = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, start, chunk);
        let le = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, p, end);
        let inside = b.ins().band(ge, le);
        let found = b.create_block();
        let end_v = b.append_block_param(found, I64);
        let next = b.create_block();
        b.ins()
            .brif(inside, found, &[BlockArg::Value(end)], next, &[]);

        b.switch_to_block(next);
        let i1 = b.ins().iadd_imm_s(i, 1);
        b.ins().jump(probe, &[BlockArg::Value(i1)]);

        b.switch_to_block(found);
        let head = b.ins().load(I64, target(), p, -8);
        let size = b.ins().band_imm_s(head, !7i64);
        let room = b.ins().isub(end_v, chunk);
        let mmapped = b.ins().band_imm_s(head, 2);
        let mm = b.create_block();
        let arena = b.create_block();
        b.ins().brif(mmapped, mm, &[], arena, &[]);

        // An mmapped chunk: page-aligned, page-multiple size inside the range, prev_size 0.
        b.switch_to_block(mm);
        let a = b.ins().band_imm_s(chunk, 4095);
        let c = b.ins().band_imm_s(size, 4095);
        let z = b.ins().icmp_imm_s(IntCC::Equal, size, 0);
        let big = b.ins().icmp(IntCC::UnsignedGreaterThan, size, room);
        let bad = b.ins().bor(a, c);
        let z = b.ins().uextend(I64, z);
        let big = b.ins().uextend(I64, big);
        let bad = b.ins().bor(bad, z);
        let bad = b.ins().bor(bad, big);
        let prev_b = b.create_block();
        b.ins().brif(bad, no, &[], prev_b, &[]);
        b.switch_to_block(prev_b);
        let prev = b.ins().load(I64, target(), chunk, 0);
        let yes_mm = b.create_block();
        b.ins().brif(prev, no, &[], yes_mm, &[]);
        b.switch_to_block(yes_mm);
        let u = b.ins().iadd_imm_s(size, -16);
        b.ins().return_(&[u]);

        // An arena chunk: size ≥ 32, a multiple of 16, its successor's size word inside the
        // range with PREV_INUSE set.
        b.switch_to_block(arena);
        let lt = b.ins().icmp_imm_s(IntCC::UnsignedLessThan, size, 32);
        let odd = b.ins().band_imm_s(size, 15);
        let tight = b.ins().icmp_imm_s(IntCC::UnsignedLessThan, room, 16);
        let room16 = b.ins().iadd_imm_s(room, -16);
        let over = b.ins().icmp(IntCC::UnsignedGreaterThan, size, room16);
        let lt = b.ins().uextend(I64, lt);
        let tight = b.ins().uextend(I64, tight);
        let over = b.ins().uextend(I64, over);
        let bad = b.ins().bor(lt, odd);
        let bad = b.ins().bor(bad, tight);
        let bad = b.ins().bor(bad, over);
        let next_b = b.create_block();
        b.ins().brif(bad, no, &[], next_b, &[]);
        b.switch_to_block(next_b);
        let nextp = b.ins().iadd(chunk, size);
        let nhead = b.ins().load(I64, target(), nextp, 8);
        let inuse = b.ins().band_imm_s(nhead, 1);
        let yes = b.create_block();
        b.ins().brif(inuse, yes, &[], no, &[]);
        b.switch_to_block(yes);
        let u = b.ins().iadd_imm_s(size, -8);
        b.ins().return_(&[u]);

        b.seal_all_blocks();
        b.finalize(fc);
    }
    func
}

/// Bits of the granule of the address that picks a key's home slot inside its group: 32
/// bytes, glibc's smallest chunk, so that two heap objects never share a home slot.
const VISIT_GRANULE_BITS: i64 = 5;
/// Bits of a group's slot count: 256 slots of 16 bytes, one page of the table, for the
/// home slots of one 8 KiB block of addresses.
const VISIT_GROUP_BITS: i64 = 8;
/// Bits of the address block whose keys share a group.
const VISIT_BLOCK_BITS: i64 = VISIT_GRANULE_BITS + VISIT_GROUP_BITS;
/// Bits of the address region (64 MiB, glibc's arena heap alignment) whose blocks take
/// consecutive groups from their own turn in a key's second home slot.
const VISIT_REGION_BITS: i64 = 26;

/// The address of the home slot of key `addr` in the visited-set `table` (see `gen_visit`):
/// the granule's bits 5–22 as the slot's index, so that group = block mod groups. One shift
/// and one mask: three instructions, where the turned home (the second) takes eight and a
/// multiply, on every pointer an array of owned pointers walks.
fn home_slot(b: &mut FunctionBuilder<'_>, table: Value, addr: Value) -> Value {
    // Granule bit VISIT_GRANULE_BITS lands on bit 4 (slots are 16 bytes).
    let off = b.ins().ushr_imm_s(addr, VISIT_GRANULE_BITS - 4);
    let off = b.ins().band_imm_s(off, ((VISITED_SLOTS - 1) << 4) as i64);
    b.ins().iadd(table, off)
}

/// The address of key `addr`'s second home slot: group `(block + turn) mod groups`, where
/// the turn is the Fibonacci hash of the key's 64 MiB region, the granule's slot in it.
/// Adding the turn to the key at the block bit moves the block only (the bits below are
/// zero in it), so one shift right by one and one mask put the granule's bits (5–12) and
/// the group's low bits above them exactly where the slot's offset has them.
fn second_home_slot(b: &mut FunctionBuilder<'_>, table: Value, addr: Value) -> Value {
    let slot_bits = VISITED_SLOTS.trailing_zeros() as i64;
    let group_bits = slot_bits - VISIT_GROUP_BITS;
    let region = b.ins().ushr_imm_s(addr, VISIT_REGION_BITS);
    let turn = b.ins().imul_imm_s(region, 0x9E37_79B9_7F4A_7C15u64 as i64);
    let turn = b.ins().ushr_imm_s(turn, 64 - group_bits);
    let turn = b.ins().ishl_imm_s(turn, VISIT_BLOCK_BITS);
    let moved = b.ins().iadd(addr, turn);
    home_slot(b, table, moved)
}

/// `fn(ctx, addr)`: inserts `addr` and counts it in `CTX_COUNT` if it is new and the set has
/// room (the caller compares the count), over
/// `VISITED_SLOTS` slots of (key, generation); a slot of another generation is empty.
///
/// A key is first tried at its home slot: its 8 KiB block picks a group of slots (the
/// block's number modulo the groups), its 32-byte granule the slot in the group. Objects
/// allocated one after another then land in slots one after another, in one page of the
/// table, where a hash of the whole key costs a cache and TLB miss per key, and a run of
/// objects up to the table's reach (8 MiB) never has two keys in one home slot, wherever it
/// lies. Keys that do share a home slot (thread arenas are 64 MiB-aligned heaps, so their
/// objects meet offset for offset; or one address seen as two types) go on to a second
/// home: the blocks of a 64 MiB region take consecutive groups from a turn that is the
/// Fibonacci hash of the region, so an arena's run is again page by page. (The turned home
/// is the second, not the first: as the first, a run across a 64 MiB boundary, as one
/// `RepeatedPtrField` of 6.4 MB in ten has, would send the keys of the second region to the
/// probe and make the whole walk several times slower.) A key whose two homes hold other
/// keys goes on by linear probing from the Fibonacci hash of the whole key, so that keys
/// closer than a granule (pointers into one array) spread out instead of piling up in one
/// run. Slots are never emptied within a generation and a key is placed in the first of
/// these that is empty, so a key is present iff it is in its home slot, in its second home,
/// or on its probe sequence before an empty slot. Which slots a key takes only decides the
/// speed: the set holds the same keys as the interpreter's.
pub(super) fn gen_visit(fctx: &mut FunctionBuilderContext, fc: TargetFrontendConfig) -> Function {
    let mut func = new_function(FN_VISIT, 2);
    {
        let mut b = FunctionBuilder::new(&mut func, fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let (ctx, addr) = (b.block_params(entry)[0], b.block_params(entry)[1]);
        let count = b.ins().load(I64, trusted(), ctx, CTX_COUNT);
        let full = b.ins().icmp_imm_s(
            IntCC::UnsignedGreaterThanOrEqual,
            count,
            VISITED_CAPACITY as i64,
        );
        let no = b.create_block();
        let go = b.create_block();
        b.ins().brif(full, no, &[], go, &[]);

        b.switch_to_block(no);
        b.ins().return_(&[]);

        b.switch_to_block(go);
        let table = b.ins().load(I64, trusted(), ctx, CTX_TABLE);
        let generation = b.ins().load(I64, trusted(), ctx, CTX_GEN);
        let slot_bits = VISITED_SLOTS.trailing_zeros() as i64;
        let home_slot = home_slot(&mut b, table, addr);

        let insert = b.create_block();
        let at = b.append_block_param(insert, I64);
        let tag = b.ins().load(I64, trusted(), home_slot, 8);
        let home_empty = b.ins().icmp(IntCC::NotEqual, tag, generation);
        let home_taken = b.create_block();
        b.ins().brif(
            home_empty,
            insert,
            &[BlockArg::Value(home_slot)],
            home_taken,
            &[],
        );

        b.switch_to_block(home_taken);
        let stored = b.ins().load(I64, trusted(), home_slot, 0);
        let same = b.ins().icmp(IntCC::Equal, stored, addr);
        let second = b.create_block();
        b.ins().brif(same, no, &[], second, &[]);

        b.switch_to_block(second);
        let second_slot = second_home_slot(&mut b, table, addr);
        let tag = b.ins().load(I64, trusted(), second_slot, 8);
        let second_empty = b.ins().icmp(IntCC::NotEqual, tag, generation);
        let second_taken = b.create_block();
        b.ins().brif(
            second_empty,
            insert,
            &[BlockArg::Value(second_slot)],
            second_taken,
            &[],
        );

        b.switch_to_block(second_taken);
        let stored = b.ins().load(I64, trusted(), second_slot, 0);
        let same = b.ins().icmp(IntCC::Equal, stored, addr);
        let away = b.create_block();
        b.ins().brif(same, no, &[], away, &[]);

        // Fibonacci hashing of the whole key: the top bits of key * 2^64/φ.
        b.switch_to_block(away);
        let h = b.ins().imul_imm_s(addr, 0x9E37_79B9_7F4A_7C15u64 as i64);
        let h = b.ins().ushr_imm_s(h, 64 - slot_bits);
        let probe = b.create_block();
        let idx = b.append_block_param(probe, I64);
        b.ins().jump(probe, &[BlockArg::Value(h)]);

        b.switch_to_block(probe);
        let off = b.ins().ishl_imm_s(idx, 4);
        let slot = b.ins().iadd(table, off);
        let tag = b.ins().load(I64, trusted(), slot, 8);
        let empty = b.ins().icmp(IntCC::NotEqual, tag, generation);
        let check = b.create_block();
        b.ins()
            .brif(empty, insert, &[BlockArg::Value(slot)], check, &[]);

        b.switch_to_block(insert);
        b.ins().store(trusted(), addr, at, 0);
        b.ins().store(trusted(), generation, at, 8);
        let c1 = b.ins().iadd_imm_s(count, 1);
        b.ins().store(trusted(), c1, ctx, CTX_COUNT);
        b.ins().return_(&[]);

        b.switch_to_block(check);
        let stored = b.ins().load(I64, trusted(), slot, 0);
        let same = b.ins().icmp(IntCC::Equal, stored, addr);
        let next_b = b.create_block();
        b.ins().brif(same, no, &[], next_b, &[]);

        b.switch_to_block(next_b);
        let n = b.ins().iadd_imm_s(idx, 1);
        let n = b.ins().band_imm_s(n, (VISITED_SLOTS - 1) as i64);
        b.ins().jump(probe, &[BlockArg::Value(n)]);

        b.seal_all_blocks();
        b.finalize(fc);
    }
    func
}
