//! The data part of the in-target core: one shared read-write region (a memfd mapped
//! `MAP_SHARED` in the target and in oi-trace) that the wrappers in the target count into and
//! the tracer reads. Little-endian `u64` words throughout, `#[repr(C)]`, laid out by
//! [`DataLayout`]:
//!
//! - [`Header`] at offset 0 ([`HEADER_SIZE`] bytes). The tracer writes its first part once,
//!   before any wrapper can run (magic, version, sizes and their masks, the TSC scale, the
//!   usable-size rule, the lifetime bounds); target threads only add to its counters
//!   (`no_slot`, `table_full`, both rare), with `lock`-prefixed instructions, on a cache line
//!   of their own.
//! - `slots` × [`ThreadSlot`] ([`SLOT_SIZE`] bytes each, 64-byte aligned). A slot belongs to one
//!   thread pointer (`fs:[0]`, glibc's TCB self pointer), claimed by compare-and-exchange on
//!   `owner` and never released; only its owner thread writes the rest, with plain single
//!   instructions (a signal handler on the same thread cannot tear one). Its `depth` also says
//!   whether the thread is inside a wrapper: the tracer adds the depths of all slots to know
//!   whether any thread still is, so the common path writes no shared cache line.
//! - `table_slots` × [`Block`] ([`BLOCK_SIZE`] bytes each): the live blocks, an open-addressing
//!   table indexed by a hash of the address, probed over at most [`TABLE_PROBES`] slots. A
//!   thread claims a free entry by compare-and-exchange of `addr` from 0 to the address | 1
//!   (odd: being written), writes the fields, then stores the address; a free takes it back by
//!   compare-and-exchange of the address to 0. A block that finds no free entry is counted in
//!   `Header::table_full`.
//! - With sampling on ([`Sampling`]): [`DRAWS`] words of sampling intervals the tracer drew,
//!   then `ring_entries` × [`SampleRecord`] ([`RECORD_SIZE`] bytes each): the sampled
//!   allocations, each with its caller's registers and a copy of the top of its stack. A
//!   writer claims record `head` by `lock xadd` on `Header::ring_head` (never waiting), stores
//!   its `seq` 0, the fields and the stack, then `seq` = its number + 1; the tracer reads the
//!   records from its own count up to `ring_head` and keeps a record only when `seq` is the
//!   expected one before and after the copy. A record overwritten before the tracer read it
//!   is counted by the tracer as dropped (the head says how many were written).
//!
//! The tracer never writes after setup; every word the target can write is untrusted when read
//! back (`oi-user`'s `inject::record::Snapshot` parses it bounded).

use crate::allocs::MAX_BUCKETS;

pub mod spans;

/// `Header::magic`: "OIREC\0\0\x01" read as a little-endian word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"OIREC\0\0\x01");
/// `Header::version`: changes with any change of this layout.
pub const VERSION: u64 = 3;

/// Bytes of the header; the thread slots start here.
pub const HEADER_SIZE: u64 = 320;
/// Bytes of one [`ThreadSlot`] (a power of two: the wrappers index slots by a shift).
pub const SLOT_SIZE: u64 = 256;
pub const SLOT_SHIFT: u32 = 8;
/// Bytes of one [`Block`].
pub const BLOCK_SIZE: u64 = 40;

/// Thread slots a thread looks at (from its hash on) before it gives up: its calls are then
/// counted in `Header::no_slot` only.
pub const SLOT_PROBES: u64 = 16;
/// Live-table entries an allocation or a free looks at (from the address's hash on).
pub const TABLE_PROBES: u64 = 16;
/// The multiplier of both hashes (Fibonacci hashing; the high 32 bits of the product are the
/// index before the mask). Thread pointers are hashed whole, block addresses shifted right by 4
/// (their low bits are alignment).
pub const HASH_MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// Bounds of [`DataLayout`], so that a header read back can be checked before it is believed.
pub const MAX_SLOTS: u64 = 1 << 16;
pub const MAX_TABLE_SLOTS: u64 = 1 << 24;
pub const MAX_RING_ENTRIES: u64 = 1 << 16;

/// Sampling intervals the tracer draws into the data part; a thread takes them in turn (its
/// `ThreadSlot::draws` modulo this).
pub const DRAWS: u64 = 1024;
/// Bytes of one [`SampleRecord`] with its stack copy (a power of two: records are indexed by
/// a shift).
pub const RECORD_SIZE: u64 = 4096;
pub const RECORD_SHIFT: u32 = 12;
/// Bytes of the fields before the stack copy; the copy takes the rest of the record.
pub const RECORD_HEADER: u64 = 128;
/// Most bytes of stack a record holds, from the caller's stack pointer up.
pub const STACK_WINDOW: u64 = RECORD_SIZE - RECORD_HEADER;
/// `Block::thread`'s bit that says the block's allocation was sampled (its record has its
/// address and tsc).
pub const SAMPLED_BIT: u32 = 63;

/// `Header::sample_mode`: what the thread's countdown counts down.
pub mod sample_mode {
    /// No sampling: the wrappers have no sampling code; no draws, no ring.
    pub const OFF: u64 = 0;
    /// Requested bytes: an allocation is sampled when the countdown crosses 0 inside it; the
    /// draws are exponential with the mean `--sample-bytes` (a Poisson process over bytes).
    pub const BYTES: u64 = 1;
    /// Calls: every Nth allocation (`--every N`; every draw is N).
    pub const CALLS: u64 = 2;
}

/// `Header::usable_rule`: how an allocation's usable size is found (the same rules as the
/// uprobe path's `allocs::hooks::Blocks`).
pub mod usable {
    /// The requested size.
    pub const REQUESTED: u64 = 0;
    /// glibc: the chunk header word at block − 8 (`malloc_usable_size`'s rule).
    pub const GLIBC: u64 = 1;
    /// jemalloc 5 (Debian's libjemalloc2): the size class of the request and its alignment.
    pub const JEMALLOC: u64 = 2;
}

/// The header. The tracer fills everything before `no_slot` before the first wrapper runs;
/// target threads only add to `no_slot`, `table_full` and `ring_head`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub magic: u64,
    pub version: u64,
    /// Thread slots (a power of two) and `slots − 1`, the mask the wrappers apply to a hash.
    pub slots: u64,
    pub slot_mask: u64,
    /// Live-table entries (a power of two), `table_slots − 1`, and the byte offset of the table
    /// from the start of the region ([`DataLayout::table_offset`]).
    pub table_slots: u64,
    pub table_mask: u64,
    pub table_offset: u64,
    /// Nanoseconds per TSC tick × 2^32: a lifetime in ns is `(Δtsc × this) >> 32`.
    pub ns_per_tick_q32: u64,
    /// One of [`usable`].
    pub usable_rule: u64,
    /// How many of `bucket_ns` are used (at most [`MAX_BUCKETS`]).
    pub bounds: u64,
    /// One of [`sample_mode`], and its mean interval (bytes or calls).
    pub sample_mode: u64,
    pub sample_period: u64,
    /// Offsets from the start of the region of the draws and of the sample ring, and the
    /// ring's entries − 1 (a power of two minus one); all 0 without sampling.
    pub draws_offset: u64,
    pub ring_offset: u64,
    pub ring_mask: u64,
    /// The end of the main thread's stack mapping (`[stack]`), the bound of its stack copies;
    /// other threads' stacks end at their thread pointer (glibc puts a thread's descriptor at
    /// the top of its stack).
    pub main_stack_end: u64,
    /// Lifetime bucket bounds in ns, ascending: a freed block goes to the bucket numbered by how
    /// many bounds its lifetime reaches (`allocs`' rule).
    pub bucket_ns: [u64; MAX_BUCKETS],
    pub _reserved1: [u64; 1],
    // Written by target threads, atomically, on their own cache line (offset 256).
    /// Calls of threads that found no free thread slot within [`SLOT_PROBES`]: not counted
    /// otherwise; this count of them is exact.
    pub no_slot: u64,
    /// Allocations whose block found no free live-table entry within [`TABLE_PROBES`]: counted
    /// in the allocation totals, absent from the live blocks; their frees are unknown frees
    /// (see [`ThreadSlot::unknown_frees`]).
    pub table_full: u64,
    /// Sample records claimed so far (the next one's number).
    pub ring_head: u64,
    pub _reserved2: [u64; 5],
}

impl Header {
    /// The header's bytes as the region holds them (little-endian words; reserved words 0).
    pub fn to_bytes(&self) -> [u8; HEADER_SIZE as usize] {
        let mut out = [0u8; HEADER_SIZE as usize];
        let mut put = |at: u64, v: u64| {
            out[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
        };
        put(offset::MAGIC, self.magic);
        put(offset::VERSION, self.version);
        put(offset::SLOTS, self.slots);
        put(offset::SLOT_MASK, self.slot_mask);
        put(offset::TABLE_SLOTS, self.table_slots);
        put(offset::TABLE_MASK, self.table_mask);
        put(offset::TABLE_OFFSET, self.table_offset);
        put(offset::NS_PER_TICK_Q32, self.ns_per_tick_q32);
        put(offset::USABLE_RULE, self.usable_rule);
        put(offset::BOUNDS, self.bounds);
        put(offset::SAMPLE_MODE, self.sample_mode);
        put(offset::SAMPLE_PERIOD, self.sample_period);
        put(offset::DRAWS_OFFSET, self.draws_offset);
        put(offset::RING_OFFSET, self.ring_offset);
        put(offset::RING_MASK, self.ring_mask);
        put(offset::MAIN_STACK_END, self.main_stack_end);
        for (i, b) in self.bucket_ns.iter().enumerate() {
            put(offset::BUCKET_NS + 8 * i as u64, *b);
        }
        put(offset::NO_SLOT, self.no_slot);
        put(offset::TABLE_FULL, self.table_full);
        put(offset::RING_HEAD, self.ring_head);
        out
    }
}

/// One thread's counters. `owner` is claimed by compare-and-exchange (0 → the thread pointer)
/// and never released: a thread that exits leaves its slot, and a later thread whose TCB has the
/// same address (glibc reuses thread stacks) carries on counting in it. A forked child
/// inherits the patched code and the shared region, and its thread has the parent thread's
/// thread pointer, so both processes count into one slot: their plain adds can lose counts,
/// and a counted call in one makes the other's concurrent calls look nested. This layout does
/// not tell processes apart: a child must be unpatched, or given a region of its own.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadSlot {
    /// The thread pointer (`fs:[0]`) of the thread whose slot this is; 0: free.
    pub owner: u64,
    /// 1 from a counted wrapper's entry to its final `ret`, else 0. A hooked call made while
    /// it is 1 (by the allocator itself, or by a signal handler) is nested: passed to the
    /// original, not counted. The sum over all slots is the number of threads inside a
    /// wrapper, which the unpatch waits to be 0 before it unmaps the segment.
    pub depth: u64,
    /// Allocations that returned a block, their requested and usable bytes.
    pub allocs: u64,
    pub bytes: u64,
    pub usable_bytes: u64,
    /// Frees of blocks the live table held, their requested and usable bytes.
    pub frees: u64,
    pub freed_bytes: u64,
    pub freed_usable_bytes: u64,
    /// Frees (and reallocs) of a non-null pointer the live table did not hold: a block
    /// allocated before the wrappers were in place, or one that found the table full
    /// (`Header::table_full` bounds how many of these can be the latter).
    pub unknown_frees: u64,
    /// Allocations that failed: a null result, posix_memalign's error, a failed realloc (its
    /// old block stays live).
    pub failed: u64,
    /// Outermost realloc-like calls (each also counted as the free and the allocation it is).
    pub reallocs: u64,
    /// Hooked calls made inside another hooked call of the same thread: passed through.
    pub nested: u64,
    /// Sampling: what is left before the next sample (bytes or calls; signed, ≤ 0: take
    /// one), the draws taken (0: the countdown was never drawn), the samples taken.
    pub countdown: u64,
    pub draws: u64,
    pub samples: u64,
    pub _reserved: [u64; 1],
    /// Freed blocks by lifetime: < bound 0, < bound 1, …, ≥ the last bound used.
    pub lifetimes: [u64; MAX_BUCKETS + 1],
}

/// One live block. `addr` 0: a free entry; odd: being written by the allocating thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Block {
    pub addr: u64,
    /// Requested and usable bytes.
    pub size: u64,
    pub usable: u64,
    /// `rdtsc` when the allocation returned.
    pub tsc: u64,
    /// The allocating thread's slot index; bit [`SAMPLED_BIT`] set when it was sampled.
    pub thread: u64,
}

/// One sampled allocation, at the start of a [`RECORD_SIZE`]-byte record; the bytes of the
/// caller's stack from `sp` up follow at [`RECORD_HEADER`] (`stack_len` of them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleRecord {
    /// 0 while being written; the record's number + 1 once written.
    pub seq: u64,
    /// The block, its requested and usable bytes, `rdtsc` when it returned, the thread slot.
    pub addr: u64,
    pub size: u64,
    pub usable: u64,
    pub tsc: u64,
    pub thread: u64,
    /// The allocator's caller as the allocator's return left it: its pc (the return
    /// address), its stack pointer (after the return) and rbp.
    pub pc: u64,
    pub sp: u64,
    pub bp: u64,
    /// Bytes of the stack copied.
    pub stack_len: u64,
    pub _reserved: [u64; 6],
}

/// Sizes and offsets of the data part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataLayout {
    /// Thread slots, a power of two in 1..=[`MAX_SLOTS`].
    pub slots: u64,
    /// Live-table entries, a power of two in 1..=[`MAX_TABLE_SLOTS`].
    pub table_slots: u64,
    /// Sample records: 0 (no sampling: no draws, no ring) or a power of two up to
    /// [`MAX_RING_ENTRIES`].
    pub ring_entries: u64,
}

impl DataLayout {
    /// Sized for a busy service: 1024 threads, a million live blocks (40 MiB, touched lazily).
    pub const DEFAULT: DataLayout = DataLayout {
        slots: 1024,
        table_slots: 1 << 20,
        ring_entries: 0,
    };

    /// A layout of these sizes, if both are powers of two within bounds.
    pub const fn new(slots: u64, table_slots: u64) -> Option<DataLayout> {
        if slots.is_power_of_two()
            && slots <= MAX_SLOTS
            && table_slots.is_power_of_two()
            && table_slots <= MAX_TABLE_SLOTS
        {
            Some(DataLayout {
                slots,
                table_slots,
                ring_entries: 0,
            })
        } else {
            None
        }
    }

    /// This layout with a sample ring of `entries` records (0: none), if a power of two
    /// within bounds.
    pub const fn with_ring(self, entries: u64) -> Option<DataLayout> {
        if entries == 0 || (entries.is_power_of_two() && entries <= MAX_RING_ENTRIES) {
            Some(DataLayout {
                ring_entries: entries,
                ..self
            })
        } else {
            None
        }
    }

    /// Where the draws start (after the table, aligned to a page), and the ring after them.
    pub const fn draws_offset(&self) -> u64 {
        (self.table_offset() + self.table_slots * BLOCK_SIZE).next_multiple_of(4096)
    }

    pub const fn ring_offset(&self) -> u64 {
        self.draws_offset() + DRAWS * 8
    }

    pub const fn record_offset(&self, index: u64) -> u64 {
        self.ring_offset() + index * RECORD_SIZE
    }

    pub const fn slots_offset(&self) -> u64 {
        HEADER_SIZE
    }

    pub const fn slot_offset(&self, index: u64) -> u64 {
        HEADER_SIZE + index * SLOT_SIZE
    }

    pub const fn table_offset(&self) -> u64 {
        HEADER_SIZE + self.slots * SLOT_SIZE
    }

    pub const fn block_offset(&self, index: u64) -> u64 {
        self.table_offset() + index * BLOCK_SIZE
    }

    /// Bytes of the whole region.
    pub const fn size(&self) -> u64 {
        if self.ring_entries == 0 {
            self.table_offset() + self.table_slots * BLOCK_SIZE
        } else {
            self.record_offset(self.ring_entries)
        }
    }

    /// The header the tracer writes at offset 0 before any wrapper runs. `bucket_ns` beyond
    /// [`MAX_BUCKETS`] bounds are ignored.
    pub fn header(&self, ns_per_tick_q32: u64, usable_rule: u64, bucket_ns: &[u64]) -> Header {
        let mut bounds = [0; MAX_BUCKETS];
        let used = bucket_ns.len().min(MAX_BUCKETS);
        bounds[..used].copy_from_slice(&bucket_ns[..used]);
        Header {
            magic: MAGIC,
            version: VERSION,
            slots: self.slots,
            slot_mask: self.slots - 1,
            table_slots: self.table_slots,
            table_mask: self.table_slots - 1,
            table_offset: self.table_offset(),
            ns_per_tick_q32,
            usable_rule,
            bounds: used as u64,
            sample_mode: sample_mode::OFF,
            sample_period: 0,
            draws_offset: 0,
            ring_offset: 0,
            ring_mask: 0,
            main_stack_end: 0,
            bucket_ns: bounds,
            _reserved1: [0; 1],
            no_slot: 0,
            table_full: 0,
            ring_head: 0,
            _reserved2: [0; 5],
        }
    }

    /// `header` with sampling on: `mode` (one of [`sample_mode`]) of mean `period`, the main
    /// thread's stack end. `None` when this layout has no ring.
    pub fn sampled(
        &self,
        header: Header,
        mode: u64,
        period: u64,
        main_stack_end: u64,
    ) -> Option<Header> {
        if self.ring_entries == 0 || mode == sample_mode::OFF {
            return None;
        }
        Some(Header {
            sample_mode: mode,
            sample_period: period,
            draws_offset: self.draws_offset(),
            ring_offset: self.ring_offset(),
            ring_mask: self.ring_entries - 1,
            main_stack_end,
            ..header
        })
    }
}

/// Byte offsets of the fields the wrappers and the reader address.
pub mod offset {
    use super::{Block, Header, ThreadSlot};
    use core::mem::offset_of;

    pub const MAGIC: u64 = offset_of!(Header, magic) as u64;
    pub const VERSION: u64 = offset_of!(Header, version) as u64;
    pub const SLOTS: u64 = offset_of!(Header, slots) as u64;
    pub const SLOT_MASK: u64 = offset_of!(Header, slot_mask) as u64;
    pub const TABLE_SLOTS: u64 = offset_of!(Header, table_slots) as u64;
    pub const TABLE_MASK: u64 = offset_of!(Header, table_mask) as u64;
    pub const TABLE_OFFSET: u64 = offset_of!(Header, table_offset) as u64;
    pub const NS_PER_TICK_Q32: u64 = offset_of!(Header, ns_per_tick_q32) as u64;
    pub const USABLE_RULE: u64 = offset_of!(Header, usable_rule) as u64;
    pub const BOUNDS: u64 = offset_of!(Header, bounds) as u64;
    pub const BUCKET_NS: u64 = offset_of!(Header, bucket_ns) as u64;
    pub const SAMPLE_MODE: u64 = offset_of!(Header, sample_mode) as u64;
    pub const SAMPLE_PERIOD: u64 = offset_of!(Header, sample_period) as u64;
    pub const DRAWS_OFFSET: u64 = offset_of!(Header, draws_offset) as u64;
    pub const RING_OFFSET: u64 = offset_of!(Header, ring_offset) as u64;
    pub const RING_MASK: u64 = offset_of!(Header, ring_mask) as u64;
    pub const MAIN_STACK_END: u64 = offset_of!(Header, main_stack_end) as u64;
    pub const NO_SLOT: u64 = offset_of!(Header, no_slot) as u64;
    pub const TABLE_FULL: u64 = offset_of!(Header, table_full) as u64;
    pub const RING_HEAD: u64 = offset_of!(Header, ring_head) as u64;

    pub const OWNER: u64 = offset_of!(ThreadSlot, owner) as u64;
    pub const DEPTH: u64 = offset_of!(ThreadSlot, depth) as u64;
    pub const ALLOCS: u64 = offset_of!(ThreadSlot, allocs) as u64;
    pub const BYTES: u64 = offset_of!(ThreadSlot, bytes) as u64;
    pub const USABLE_BYTES: u64 = offset_of!(ThreadSlot, usable_bytes) as u64;
    pub const FREES: u64 = offset_of!(ThreadSlot, frees) as u64;
    pub const FREED_BYTES: u64 = offset_of!(ThreadSlot, freed_bytes) as u64;
    pub const FREED_USABLE_BYTES: u64 = offset_of!(ThreadSlot, freed_usable_bytes) as u64;
    pub const UNKNOWN_FREES: u64 = offset_of!(ThreadSlot, unknown_frees) as u64;
    pub const FAILED: u64 = offset_of!(ThreadSlot, failed) as u64;
    pub const REALLOCS: u64 = offset_of!(ThreadSlot, reallocs) as u64;
    pub const NESTED: u64 = offset_of!(ThreadSlot, nested) as u64;
    pub const COUNTDOWN: u64 = offset_of!(ThreadSlot, countdown) as u64;
    pub const DRAWS: u64 = offset_of!(ThreadSlot, draws) as u64;
    pub const SAMPLES: u64 = offset_of!(ThreadSlot, samples) as u64;
    pub const LIFETIMES: u64 = offset_of!(ThreadSlot, lifetimes) as u64;

    pub const ADDR: u64 = offset_of!(Block, addr) as u64;
    pub const SIZE: u64 = offset_of!(Block, size) as u64;
    pub const USABLE: u64 = offset_of!(Block, usable) as u64;
    pub const TSC: u64 = offset_of!(Block, tsc) as u64;
    pub const THREAD: u64 = offset_of!(Block, thread) as u64;

    /// [`SampleRecord`](super::SampleRecord)'s fields.
    pub mod record {
        use super::super::SampleRecord;
        use core::mem::offset_of;

        pub const SEQ: u64 = offset_of!(SampleRecord, seq) as u64;
        pub const ADDR: u64 = offset_of!(SampleRecord, addr) as u64;
        pub const SIZE: u64 = offset_of!(SampleRecord, size) as u64;
        pub const USABLE: u64 = offset_of!(SampleRecord, usable) as u64;
        pub const TSC: u64 = offset_of!(SampleRecord, tsc) as u64;
        pub const THREAD: u64 = offset_of!(SampleRecord, thread) as u64;
        pub const PC: u64 = offset_of!(SampleRecord, pc) as u64;
        pub const SP: u64 = offset_of!(SampleRecord, sp) as u64;
        pub const BP: u64 = offset_of!(SampleRecord, bp) as u64;
        pub const STACK_LEN: u64 = offset_of!(SampleRecord, stack_len) as u64;
    }
}

// The wrappers and the reader rely on these sizes and on the counters' own cache line.
const _: () = {
    assert!(core::mem::size_of::<Header>() as u64 == HEADER_SIZE);
    assert!(core::mem::size_of::<ThreadSlot>() as u64 == SLOT_SIZE);
    assert!(1 << SLOT_SHIFT == SLOT_SIZE);
    assert!(core::mem::size_of::<Block>() as u64 == BLOCK_SIZE);
    assert!(offset::NO_SLOT == 256);
    assert!(core::mem::size_of::<SampleRecord>() as u64 == RECORD_HEADER);
    assert!(1 << RECORD_SHIFT == RECORD_SIZE);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_is_a_million_blocks_after_the_slots() {
        let l = DataLayout::DEFAULT;
        assert_eq!(l.slots_offset(), 320);
        assert_eq!(l.table_offset(), 320 + 1024 * 256);
        assert_eq!(l.block_offset(3), l.table_offset() + 120);
        assert_eq!(l.size(), 320 + 1024 * 256 + (1 << 20) * 40);
        assert_eq!(l.table_offset() % 64, 0);
    }

    #[test]
    fn layouts_are_powers_of_two_within_bounds() {
        assert!(DataLayout::new(3, 16).is_none());
        assert!(DataLayout::new(4, 0).is_none());
        assert!(DataLayout::new(MAX_SLOTS * 2, 16).is_none());
        assert!(DataLayout::new(4, MAX_TABLE_SLOTS * 2).is_none());
        assert_eq!(
            DataLayout::new(4, 16),
            Some(DataLayout {
                slots: 4,
                table_slots: 16,
                ring_entries: 0,
            })
        );
        let l = DataLayout::new(4, 16).unwrap();
        assert!(l.with_ring(3).is_none());
        assert!(l.with_ring(MAX_RING_ENTRIES * 2).is_none());
        let r = l.with_ring(8).unwrap();
        assert_eq!(r.draws_offset() % 4096, 0);
        assert!(r.draws_offset() >= l.size());
        assert_eq!(r.ring_offset(), r.draws_offset() + DRAWS * 8);
        assert_eq!(r.size(), r.ring_offset() + 8 * RECORD_SIZE);
    }

    #[test]
    fn sampled_header_says_where_draws_and_ring_are() {
        let l = DataLayout::new(8, 32).unwrap();
        let h = l.header(1, usable::GLIBC, &[10]);
        assert!(l.sampled(h, sample_mode::BYTES, 4096, 0).is_none());
        let r = l.with_ring(16).unwrap();
        let s = r.sampled(h, sample_mode::BYTES, 4096, 0x7fff_0000).unwrap();
        assert_eq!((s.ring_mask, s.ring_offset), (15, r.ring_offset()));
        let bytes = s.to_bytes();
        let word =
            |o: u64| u64::from_le_bytes(bytes[o as usize..o as usize + 8].try_into().unwrap());
        assert_eq!(word(offset::SAMPLE_PERIOD), 4096);
        assert_eq!(word(offset::DRAWS_OFFSET), r.draws_offset());
        assert_eq!(word(offset::MAIN_STACK_END), 0x7fff_0000);
    }

    #[test]
    fn header_carries_masks_and_bounds() {
        let l = DataLayout::new(8, 32).unwrap();
        let h = l.header(5 << 31, usable::GLIBC, &[10, 20, 30]);
        assert_eq!(h.magic, MAGIC);
        assert_eq!((h.slot_mask, h.table_mask), (7, 31));
        assert_eq!(h.table_offset, l.table_offset());
        assert_eq!(h.bounds, 3);
        assert_eq!(&h.bucket_ns[..4], &[10, 20, 30, 0]);
        let bytes = h.to_bytes();
        assert_eq!(&bytes[..8], &MAGIC.to_le_bytes());
        assert_eq!(bytes[offset::SLOT_MASK as usize], 7);
        assert_eq!(bytes[offset::BUCKET_NS as usize + 16], 30);
        assert_eq!(bytes[offset::NO_SLOT as usize..].iter().sum::<u8>(), 0);
        let too_many = [1u64; MAX_BUCKETS + 3];
        assert_eq!(l.header(0, 0, &too_many).bounds, MAX_BUCKETS as u64);
    }
}
