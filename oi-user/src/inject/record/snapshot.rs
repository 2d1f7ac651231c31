//! The tracer's reading of the data part: [`Snapshot::read`] parses a copy (or the live view) of
//! the shared region into totals summed over the threads, the live blocks and the lifetime
//! histogram.
//!
//! The region is target-writable, so every word is untrusted: the header must name a layout
//! within bounds that fits the bytes, its masks and offsets must agree with it, and every read
//! is bounds-checked; sums wrap instead of overflowing. A wrong header is an error (one line);
//! a block entry that cannot be right (a thread index out of range) or a second entry of one
//! address is counted, never believed. Never panics, never allocates more than the live
//! entries found.
//!
//! Duplicates: a free the wrappers did not count (one in a signal handler that interrupted an
//! allocator call) leaves its block in the table; when its address is allocated again, a second
//! entry of it appears. The newest (by tsc) is listed; the others are counted in
//! [`Snapshot::stale`].

use oi_common::{
    allocs::MAX_BUCKETS,
    inject::{
        BLOCK_SIZE, DataLayout, HEADER_SIZE, MAGIC, MAX_SLOTS, MAX_TABLE_SLOTS, SLOT_SIZE, VERSION,
        offset, usable,
    },
};

use super::{RecordError, Result};

/// Counters of every thread slot, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub allocs: u64,
    pub bytes: u64,
    pub usable_bytes: u64,
    pub frees: u64,
    pub freed_bytes: u64,
    pub freed_usable_bytes: u64,
    pub unknown_frees: u64,
    pub failed: u64,
    pub reallocs: u64,
    pub nested: u64,
    /// Allocations sampled (records written; the ring may have lost some, `Drain` says).
    pub samples: u64,
    /// Freed blocks by lifetime: `bucket_ns.len() + 1` buckets.
    pub lifetimes: Vec<u64>,
}

/// One live block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveBlock {
    pub addr: u64,
    pub size: u64,
    pub usable: u64,
    /// `rdtsc` when its allocation returned.
    pub tsc: u64,
    /// The allocating thread's slot index.
    pub thread: u64,
    /// Its allocation was sampled (a sample record has its address and tsc).
    pub sampled: bool,
}

/// What the data part held when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub layout: DataLayout,
    pub ns_per_tick_q32: u64,
    pub usable_rule: u64,
    /// Lifetime bucket bounds in ns.
    pub bucket_ns: Vec<u64>,
    /// `Header::sample_mode` (one of `oi_common::inject::sample_mode`) and its mean.
    pub sample_mode: u64,
    pub sample_period: u64,
    /// Threads inside a counted wrapper call (the slots' depths added up).
    pub in_flight: u64,
    /// Calls of threads without a slot (not counted otherwise).
    pub no_slot: u64,
    /// Allocations not in the live table (it was full): their frees are among the unknown
    /// frees, so at most `table_full` of `totals.unknown_frees` are frees of such blocks.
    pub table_full: u64,
    /// Thread slots taken.
    pub threads: u64,
    pub totals: Totals,
    /// Live blocks, by address.
    pub live: Vec<LiveBlock>,
    /// Entries being written when read (an allocation between its claim and its release).
    pub being_written: u64,
    /// Older entries of an address listed once (see the module's docs).
    pub stale: u64,
    /// Entries naming a thread slot that does not exist: not listed.
    pub bad_entries: u64,
}

impl Snapshot {
    /// Parses the data part, bounded (see the module's docs).
    pub fn read(bytes: &[u8]) -> Result<Snapshot> {
        let r = Reader(bytes);
        if (bytes.len() as u64) < HEADER_SIZE {
            return Err(bad(format!(
                "{} bytes, shorter than its header ({HEADER_SIZE})",
                bytes.len()
            )));
        }
        let magic = r.word(offset::MAGIC)?;
        if magic != MAGIC {
            return Err(bad(format!("magic {magic:#x}, expected {MAGIC:#x}")));
        }
        let version = r.word(offset::VERSION)?;
        if version != VERSION {
            return Err(bad(format!(
                "version {version}, this oi-trace reads {VERSION}"
            )));
        }
        let (slots, table_slots) = (r.word(offset::SLOTS)?, r.word(offset::TABLE_SLOTS)?);
        let layout = DataLayout::new(slots, table_slots).ok_or_else(|| {
            bad(format!(
                "{slots} thread slots and {table_slots} table entries: not powers of two up to \
                 {MAX_SLOTS} and {MAX_TABLE_SLOTS}"
            ))
        })?;
        if r.word(offset::SLOT_MASK)? != slots - 1
            || r.word(offset::TABLE_MASK)? != table_slots - 1
            || r.word(offset::TABLE_OFFSET)? != layout.table_offset()
        {
            return Err(bad(
                "its masks or table offset disagree with its sizes".into()
            ));
        }
        if (bytes.len() as u64) < layout.size() {
            return Err(bad(format!(
                "{} bytes, its layout needs {}",
                bytes.len(),
                layout.size()
            )));
        }
        let usable_rule = r.word(offset::USABLE_RULE)?;
        if usable_rule > usable::JEMALLOC {
            return Err(bad(format!("unknown usable-size rule {usable_rule}")));
        }
        let sample_mode = r.word(offset::SAMPLE_MODE)?;
        if sample_mode > oi_common::inject::sample_mode::CALLS {
            return Err(bad(format!("unknown sampling mode {sample_mode}")));
        }
        let bounds = r.word(offset::BOUNDS)?;
        if bounds > MAX_BUCKETS as u64 {
            return Err(bad(format!(
                "{bounds} lifetime bounds, at most {MAX_BUCKETS}"
            )));
        }
        let bucket_ns = (0..bounds)
            .map(|i| r.word(offset::BUCKET_NS + 8 * i))
            .collect::<Result<Vec<u64>>>()?;
        let mut totals = Totals {
            lifetimes: vec![0; bounds as usize + 1],
            ..Totals::default()
        };
        let (mut threads, mut in_flight) = (0, 0u64);
        for i in 0..slots {
            let s = layout.slot_offset(i);
            if r.word(s + offset::OWNER)? != 0 {
                threads += 1;
            }
            in_flight = in_flight.wrapping_add(r.word(s + offset::DEPTH)?);
            let field = |o: u64| r.word(s + o);
            for (sum, o) in [
                (&mut totals.allocs, offset::ALLOCS),
                (&mut totals.bytes, offset::BYTES),
                (&mut totals.usable_bytes, offset::USABLE_BYTES),
                (&mut totals.frees, offset::FREES),
                (&mut totals.freed_bytes, offset::FREED_BYTES),
                (&mut totals.freed_usable_bytes, offset::FREED_USABLE_BYTES),
                (&mut totals.unknown_frees, offset::UNKNOWN_FREES),
                (&mut totals.failed, offset::FAILED),
                (&mut totals.reallocs, offset::REALLOCS),
                (&mut totals.nested, offset::NESTED),
                (&mut totals.samples, offset::SAMPLES),
            ] {
                *sum = sum.wrapping_add(field(o)?);
            }
            for b in 0..=MAX_BUCKETS as u64 {
                let n = field(offset::LIFETIMES + 8 * b)?;
                match totals.lifetimes.get_mut(b as usize) {
                    Some(sum) => *sum = sum.wrapping_add(n),
                    None if n == 0 => {}
                    None => {
                        return Err(bad(format!(
                            "thread slot {i} counts lifetimes in bucket {b}, beyond its {bounds} \
                             bounds"
                        )));
                    }
                }
            }
        }
        let mut snapshot = Snapshot {
            layout,
            ns_per_tick_q32: r.word(offset::NS_PER_TICK_Q32)?,
            usable_rule,
            bucket_ns,
            sample_mode,
            sample_period: r.word(offset::SAMPLE_PERIOD)?,
            in_flight,
            no_slot: r.word(offset::NO_SLOT)?,
            table_full: r.word(offset::TABLE_FULL)?,
            threads,
            totals,
            live: Vec::new(),
            being_written: 0,
            stale: 0,
            bad_entries: 0,
        };
        for i in 0..table_slots {
            let e = layout.block_offset(i);
            let addr = r.word(e + offset::ADDR)?;
            if addr == 0 {
                continue;
            }
            if addr & 1 != 0 {
                snapshot.being_written += 1;
                continue;
            }
            let (sampled, thread) = super::samples::sampled_thread(r.word(e + offset::THREAD)?);
            let block = LiveBlock {
                addr,
                size: r.word(e + offset::SIZE)?,
                usable: r.word(e + offset::USABLE)?,
                tsc: r.word(e + offset::TSC)?,
                thread,
                sampled,
            };
            if block.thread >= slots {
                snapshot.bad_entries += 1;
                continue;
            }
            snapshot.live.push(block);
        }
        // One entry per address: the newest.
        snapshot
            .live
            .sort_unstable_by_key(|b| (b.addr, std::cmp::Reverse(b.tsc)));
        let before = snapshot.live.len();
        snapshot.live.dedup_by_key(|b| b.addr);
        snapshot.stale = (before - snapshot.live.len()) as u64;
        Ok(snapshot)
    }

    /// Bytes of the live blocks: requested and usable.
    pub fn live_bytes(&self) -> (u64, u64) {
        self.live.iter().fold((0, 0), |(b, u), l| {
            (b.wrapping_add(l.size), u.wrapping_add(l.usable))
        })
    }

    /// A TSC interval in ns, by the header's scale.
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        ((u128::from(ticks) * u128::from(self.ns_per_tick_q32)) >> 32).min(u128::from(u64::MAX))
            as u64
    }
}

/// Little-endian words of the region, bounds-checked.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn word(&self, at: u64) -> Result<u64> {
        let start = usize::try_from(at).ok();
        start
            .and_then(|s| self.0.get(s..s.checked_add(8)?))
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| bad(format!("word at {at:#x} beyond its {} bytes", self.0.len())))
    }
}

fn bad(why: String) -> RecordError {
    RecordError::Snapshot(why)
}

// The sizes the reader steps by are the layout's.
const _: () = assert!(SLOT_SIZE == 256 && BLOCK_SIZE == 40);
