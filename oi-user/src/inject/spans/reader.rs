//! The tracer's drain of the event rings, from its own view of the data part.
//!
//! For each thread slot that has an owner: read the area's `reserved` and `consumed`, take
//! the events between them (at most [`RING_CAP`]; an event whose number is not the one
//! expected ends the thread's batch and is counted as bad), hand each to the caller, and
//! write `consumed`. Every word comes from memory the target writes: the slot count comes
//! from the layout the tracer chose, never from the header, and a ring that claims more
//! than it can hold is skipped whole and counted.

use std::sync::atomic::{AtomicU64, Ordering};

use oi_common::inject::{
    HEADER_SIZE, SLOT_SIZE,
    offset::OWNER,
    spans::{
        AREA_SIZE, EVENT_SIZE, Event, ORPHANS_TAKEN, RING_CAP, RING_OFFSET, SpansLayout, offset,
    },
};

/// Our view of a data part: the mapping's address and length (the mapping outlives it).
#[derive(Debug, Clone, Copy)]
pub struct View {
    base: *mut u8,
    len: usize,
}

impl View {
    /// # Safety
    /// `base..base + len` is a mapping of ours, readable and writable, 8-byte aligned, that
    /// stays mapped while the view is used.
    pub unsafe fn new(base: *mut u8, len: usize) -> Self {
        Self { base, len }
    }

    fn atomic(&self, at: u64) -> Option<&AtomicU64> {
        let end = at.checked_add(8)?;
        if end > self.len as u64 || !at.is_multiple_of(8) {
            return None;
        }
        // SAFETY: in bounds and aligned (checked above) of a mapping that outlives `self`
        // (`View::new`'s contract); other processes only store whole aligned words there.
        Some(unsafe { AtomicU64::from_ptr(self.base.add(at as usize).cast()) })
    }

    /// The word at `at`, or 0 beyond the view.
    pub fn load(&self, at: u64) -> u64 {
        self.atomic(at).map_or(0, |w| w.load(Ordering::Acquire))
    }

    pub fn store(&self, at: u64, value: u64) {
        if let Some(w) = self.atomic(at) {
            w.store(value, Ordering::Release);
        }
    }
}

/// What a drain saw beyond the events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    pub events: u64,
    /// Events refused: a ring claiming more than it holds, or an event not yet (or wrongly)
    /// numbered.
    pub bad: u64,
}

/// Hands every new event of every thread to `sink` (slot index, event), oldest first per
/// thread, and marks them consumed.
pub fn drain(view: View, layout: SpansLayout, sink: &mut dyn FnMut(u64, Event)) -> Drained {
    let mut out = Drained::default();
    for index in 0..layout.slots {
        if view.load(HEADER_SIZE + index * SLOT_SIZE + OWNER) == 0 {
            continue;
        }
        let area = layout.area_offset(index);
        let reserved = view.load(area + offset::RESERVED);
        let consumed = view.load(area + offset::CONSUMED);
        let pending = reserved.wrapping_sub(consumed);
        if pending == 0 {
            continue;
        }
        if pending > RING_CAP {
            out.bad += 1;
            view.store(area + offset::CONSUMED, reserved);
            continue;
        }
        let mut n = consumed;
        while n != reserved {
            let at = area + RING_OFFSET + (n & (RING_CAP - 1)) * EVENT_SIZE;
            debug_assert!(at + EVENT_SIZE <= area + AREA_SIZE);
            let word = view.load(at + offset::EVENT_WORD);
            let event = Event {
                word,
                tsc: view.load(at + offset::EVENT_TSC),
            };
            if event.number() != n as u32 {
                out.bad += 1;
                break;
            }
            sink(index, event);
            out.events += 1;
            n = n.wrapping_add(1);
        }
        view.store(area + offset::CONSUMED, n);
    }
    out
}

/// The counters of every thread's area, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AreaTotals {
    /// Threads that have a slot.
    pub threads: u64,
    pub dropped: u64,
    pub shadow_full: u64,
    pub interrupted: u64,
    /// Open calls dropped with their return still hooked, the real one put back (another
    /// stack, or a `longjmp`'s dead frames).
    pub resynced: u64,
    /// Returns through a copy of the exit stub's address whose frame had been dropped: the
    /// real address came from the orphans.
    pub orphan_returns: u64,
    /// Shadow entries still open (calls not returned yet, or left and not seen so).
    pub open: u64,
}

pub fn totals(view: View, layout: SpansLayout) -> AreaTotals {
    let mut t = AreaTotals::default();
    for index in 0..layout.slots {
        if view.load(HEADER_SIZE + index * SLOT_SIZE + OWNER) == 0 {
            continue;
        }
        let area = layout.area_offset(index);
        t.threads += 1;
        t.dropped = t.dropped.saturating_add(view.load(area + offset::DROPPED));
        t.shadow_full = t
            .shadow_full
            .saturating_add(view.load(area + offset::SHADOW_FULL));
        t.interrupted = t
            .interrupted
            .saturating_add(view.load(area + offset::INTERRUPTED));
        t.resynced = t
            .resynced
            .saturating_add(view.load(area + offset::RESYNCED));
        t.orphan_returns = t
            .orphan_returns
            .saturating_add(view.load(area + ORPHANS_TAKEN));
        t.open = t.open.saturating_add(
            view.load(area + offset::SHADOW_DEPTH)
                .min(oi_common::inject::spans::SHADOW_CAP),
        );
    }
    t
}
