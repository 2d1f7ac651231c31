//! The data part of `calls --mechanism inject`: where the entry and exit stubs in the target
//! keep each thread's shadow stack and write its call events, and where the tracer reads them.
//!
//! It starts like the allocation recorder's part (the parent module): the same [`Header`]
//! (magic [`MAGIC`], the slot count and mask, the TSC scale, `no_slot`) and the same
//! [`ThreadSlot`]s, claimed by compare-and-exchange of `owner` from the thread pointer, so
//! that one slot lookup serves both; here a slot's `depth` is the thread's *window*: how many
//! calls of the entry function it is inside. After the slots, one [`ThreadArea`] per slot, of
//! [`AREA_SIZE`] bytes, at the same index:
//!
//! - counters: `shadow_depth` (shadow entries in use), `reserved` (events written by the
//!   thread, ever), `consumed` (events the tracer has read: the one word it writes after
//!   setup), `dropped` (calls not hooked because the ring had no room for their events),
//!   `shadow_full` (calls not hooked because the shadow stack was full), `busy` and
//!   `interrupted` (below), `resynced` (below);
//! - the shadow stack: [`SHADOW_CAP`] × [`ShadowEntry`] {real return address, address of the
//!   return slot, function word, TSC at entry};
//! - the event ring: [`RING_CAP`] × [`Event`], single producer (the thread), single consumer
//!   (the tracer). An event is written whole, then `reserved` is advanced (x86 stores are
//!   seen in order, so the reader never sees a number before its event); its first word
//!   carries the low 32 bits of its number, a check on what the reader takes. A call is
//!   hooked only when the ring has room for its entry event, its exit event and the exit
//!   events of every frame still open: exits never find the ring full.
//!
//! Signals: a stub sets `busy` while it updates the shadow stack and the ring, and a stub
//! that finds it set (a signal handler's call, made on the same thread in the middle of that
//! update) leaves its call unhooked and counts it in `interrupted`. So the shadow stack and
//! the ring have one writer at a time without any atomic instruction.
//!
//! Stack switches: the shadow entries of one stack have strictly lower return slots the
//! newer they are (a tail call's callee shares its caller's), and the stubs keep it so: an
//! entry drops every entry whose slot is at or below its own, an exit every entry below its
//! own. A dropped entry is a frame left by a `longjmp` or an exception, or one that lives on
//! another stack (`swapcontext`, a fiber) that the thread switched away from. Which one is not
//! known, so when its slot lies outside the stub's own frame and still holds the exit stub's
//! address, the real return address is put back there and the entry counted in `resynced`:
//! a frame of another stack then returns straight to its caller, untimed, instead of into an
//! exit stub that no longer knows it; for a dead frame it is a write to free stack memory.
//! The slot and the real address are also kept in a small ring of [`Orphan`]s: a copy of the
//! exit stub's address taken before the entry was dropped (a hooked function that tail-calls
//! `swapcontext` lets it save the exit stub as the context's resume address) still reaches
//! the exit stub, which finds its real return address there by the slot.
//!
//! Every word the target writes is untrusted when read back.

use super::{HEADER_SIZE, Header, SLOT_SIZE, VERSION};

/// `Header::magic` of a spans part: "OISPN\0\0\x01".
pub const MAGIC: u64 = u64::from_le_bytes(*b"OISPN\0\0\x01");

/// Shadow entries a thread can hold; a call beyond is not hooked for return, and counted.
pub const SHADOW_CAP: u64 = 256;
/// Bytes of one [`ShadowEntry`] (`SHADOW_SHIFT`: its log2).
pub const SHADOW_ENTRY_SIZE: u64 = 32;
pub const SHADOW_SHIFT: u32 = 5;
/// Events one thread's ring holds (a power of two).
pub const RING_CAP: u64 = 1 << 14;
/// Bytes of one [`Event`] (`EVENT_SHIFT`: its log2).
pub const EVENT_SIZE: u64 = 16;
pub const EVENT_SHIFT: u32 = 4;
/// Bytes of the counters at the start of an area.
pub const AREA_HEADER: u64 = 64;
/// Offsets of the shadow stack and the ring in an area.
pub const SHADOW_OFFSET: u64 = AREA_HEADER;
pub const RING_OFFSET: u64 = SHADOW_OFFSET + SHADOW_CAP * SHADOW_ENTRY_SIZE;
/// Dropped frames whose return was put back (see "Stack switches" above), newest kept: a
/// word counting those ever written at [`ORPHAN_OFFSET`], one counting the returns that found
/// theirs there at [`ORPHANS_TAKEN`], then [`ORPHAN_CAP`] × [`Orphan`].
pub const ORPHAN_OFFSET: u64 = RING_OFFSET + RING_CAP * EVENT_SIZE;
pub const ORPHANS_TAKEN: u64 = ORPHAN_OFFSET + 8;
pub const ORPHAN_ENTRIES: u64 = ORPHAN_OFFSET + 16;
/// Orphans a thread keeps (a power of two).
pub const ORPHAN_CAP: u64 = 64;
/// Bytes of one [`Orphan`] (`ORPHAN_SHIFT`: its log2).
pub const ORPHAN_SIZE: u64 = 16;
pub const ORPHAN_SHIFT: u32 = 4;
/// Bytes of one [`ThreadArea`] (a power of two: areas are indexed by a shift).
pub const AREA_SIZE: u64 = 1 << AREA_SHIFT;
pub const AREA_SHIFT: u32 = 19;

/// Bit of a shadow entry's function word: the call is one of the entry function (its exit
/// closes a window).
pub const WINDOW_BIT: u64 = 1 << 32;
/// The function id in a function word or an event.
pub const FUNCTION_MASK: u64 = (1 << 28) - 1;

/// Kinds of [`Event`] (bits 28-31 of its first word).
pub mod kind {
    /// A hooked call began.
    pub const ENTRY: u64 = 1;
    /// The newest open call returned (through the exit stub).
    pub const EXIT: u64 = 2;
    /// The newest open call was left without returning (an exception or a `longjmp`): found
    /// so by the stack pointer at a later entry, exit or catch.
    pub const UNWOUND: u64 = 3;
}
pub const KIND_SHIFT: u32 = 28;

/// The counters at the start of a thread's area.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AreaCounters {
    pub shadow_depth: u64,
    pub reserved: u64,
    /// Written by the tracer: events read.
    pub consumed: u64,
    pub dropped: u64,
    pub shadow_full: u64,
    /// Non-zero while the thread runs a stub's bookkeeping: a signal handler's calls that
    /// arrive meanwhile pass through unhooked, counted in `interrupted`.
    pub busy: u64,
    pub interrupted: u64,
    /// Shadow entries dropped with their return still hooked (see the module's "Stack
    /// switches"): the real return address was put back into the slot.
    pub resynced: u64,
}

/// One open hooked call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShadowEntry {
    /// Where the call returns to (the caller's, or the exit stub for a tail call's callee).
    pub ret: u64,
    /// The stack address that held `ret` and now holds the exit stub's address.
    pub slot: u64,
    /// The function id, with [`WINDOW_BIT`] for a call of the entry function.
    pub function: u64,
    pub tsc: u64,
}

/// A frame dropped from the shadow stack whose hooked return was put back: where, and what.
/// Its slot is zeroed once used.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Orphan {
    pub slot: u64,
    pub ret: u64,
}

/// One call event: `word` = event number (low 32 bits) << 32 | kind << 28 | function id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    pub word: u64,
    pub tsc: u64,
}

impl Event {
    pub const fn number(&self) -> u32 {
        (self.word >> 32) as u32
    }

    pub const fn kind(&self) -> u64 {
        (self.word >> KIND_SHIFT) & 0xf
    }

    pub const fn function(&self) -> u32 {
        (self.word & FUNCTION_MASK) as u32
    }
}

/// Sizes and offsets of a spans part with `slots` thread slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpansLayout {
    /// A power of two in 1..=[`MAX_SLOTS`].
    pub slots: u64,
}

/// Most threads a spans part has room for.
pub const MAX_SLOTS: u64 = 1 << 12;

impl SpansLayout {
    /// 256 threads: 128 MiB of address space, touched only where threads write.
    pub const DEFAULT: SpansLayout = SpansLayout { slots: 256 };

    pub const fn new(slots: u64) -> Option<SpansLayout> {
        if slots.is_power_of_two() && slots <= MAX_SLOTS {
            Some(SpansLayout { slots })
        } else {
            None
        }
    }

    /// Where the areas start: after the slots, aligned to a page.
    pub const fn areas_offset(&self) -> u64 {
        (HEADER_SIZE + self.slots * SLOT_SIZE).next_multiple_of(4096)
    }

    pub const fn area_offset(&self, index: u64) -> u64 {
        self.areas_offset() + index * AREA_SIZE
    }

    pub const fn size(&self) -> u64 {
        self.areas_offset() + self.slots * AREA_SIZE
    }

    /// The header the tracer writes at offset 0 before any stub runs: the allocation
    /// recorder's, with this part's magic, its slots, and the areas where its live table
    /// would be (`table_offset`; no table).
    pub fn header(&self, ns_per_tick_q32: u64) -> Header {
        Header {
            magic: MAGIC,
            version: VERSION,
            slots: self.slots,
            slot_mask: self.slots - 1,
            table_slots: 0,
            table_mask: 0,
            table_offset: self.areas_offset(),
            ns_per_tick_q32,
            usable_rule: 0,
            bounds: 0,
            sample_mode: super::sample_mode::OFF,
            sample_period: 0,
            draws_offset: 0,
            ring_offset: 0,
            ring_mask: 0,
            main_stack_end: 0,
            bucket_ns: [0; crate::allocs::MAX_BUCKETS],
            _reserved1: [0; 1],
            no_slot: 0,
            table_full: 0,
            ring_head: 0,
            _reserved2: [0; 5],
        }
    }
}

/// Byte offsets of an area's fields.
pub mod offset {
    use super::{AreaCounters, Event, Orphan, ShadowEntry};
    use core::mem::offset_of;

    pub const SHADOW_DEPTH: u64 = offset_of!(AreaCounters, shadow_depth) as u64;
    pub const RESERVED: u64 = offset_of!(AreaCounters, reserved) as u64;
    pub const CONSUMED: u64 = offset_of!(AreaCounters, consumed) as u64;
    pub const DROPPED: u64 = offset_of!(AreaCounters, dropped) as u64;
    pub const SHADOW_FULL: u64 = offset_of!(AreaCounters, shadow_full) as u64;
    pub const BUSY: u64 = offset_of!(AreaCounters, busy) as u64;
    pub const INTERRUPTED: u64 = offset_of!(AreaCounters, interrupted) as u64;
    pub const RESYNCED: u64 = offset_of!(AreaCounters, resynced) as u64;

    pub const RET: u64 = offset_of!(ShadowEntry, ret) as u64;
    pub const SLOT: u64 = offset_of!(ShadowEntry, slot) as u64;
    pub const FUNCTION: u64 = offset_of!(ShadowEntry, function) as u64;
    pub const TSC: u64 = offset_of!(ShadowEntry, tsc) as u64;

    pub const ORPHAN_SLOT: u64 = offset_of!(Orphan, slot) as u64;
    pub const ORPHAN_RET: u64 = offset_of!(Orphan, ret) as u64;

    pub const EVENT_WORD: u64 = offset_of!(Event, word) as u64;
    pub const EVENT_TSC: u64 = offset_of!(Event, tsc) as u64;
}

const _: () = {
    assert!(core::mem::size_of::<AreaCounters>() as u64 == AREA_HEADER);
    assert!(core::mem::size_of::<ShadowEntry>() as u64 == SHADOW_ENTRY_SIZE);
    assert!(1 << SHADOW_SHIFT == SHADOW_ENTRY_SIZE);
    assert!(core::mem::size_of::<Event>() as u64 == EVENT_SIZE);
    assert!(1 << EVENT_SHIFT == EVENT_SIZE);
    assert!(RING_OFFSET + RING_CAP * EVENT_SIZE <= AREA_SIZE);
    assert!(core::mem::size_of::<Orphan>() as u64 == ORPHAN_SIZE);
    assert!(1 << ORPHAN_SHIFT == ORPHAN_SIZE);
    assert!(ORPHAN_CAP.is_power_of_two());
    assert!(ORPHAN_ENTRIES + ORPHAN_CAP * ORPHAN_SIZE <= AREA_SIZE);
    assert!(RING_CAP.is_power_of_two());
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_follow_the_slots_page_aligned() {
        let l = SpansLayout::DEFAULT;
        assert_eq!(l.areas_offset() % 4096, 0);
        assert!(l.areas_offset() >= HEADER_SIZE + 256 * SLOT_SIZE);
        assert_eq!(l.area_offset(2), l.areas_offset() + 2 * AREA_SIZE);
        assert_eq!(l.size(), l.areas_offset() + 256 * AREA_SIZE);
        assert!(SpansLayout::new(3).is_none());
        assert!(SpansLayout::new(MAX_SLOTS * 2).is_none());
    }

    #[test]
    fn events_carry_number_kind_and_function() {
        let e = Event {
            word: (7u64 << 32) | (kind::EXIT << KIND_SHIFT) | 1234,
            tsc: 9,
        };
        assert_eq!((e.number(), e.kind(), e.function()), (7, kind::EXIT, 1234));
    }
}
