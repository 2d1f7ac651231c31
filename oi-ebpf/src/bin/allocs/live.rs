//! The live-block table: an array of slots claimed by compare-and-exchange on the block
//! address, and the hash map `LIVE` for the blocks whose slot was taken; a free finds its
//! block in either, and its site gets the free and the lifetime.

use super::*;

/// A free of `ptr`: its block's site gets the free and the lifetime.
#[inline(always)]
pub(crate) fn free_block(ptr: u64, now: u64) {
    if ptr == 0 {
        return;
    }
    let Some(b) = take_live(ptr) else {
        let sampling = EVERY.load() > 1 || SAMPLE_BYTES.load() != 0;
        count(
            &COUNTERS,
            if sampling {
                counter::UNTRACKED_FREES
            } else {
                counter::UNKNOWN_FREES
            },
        );
        debug!(
            &(),
            "free of {:x}: not allocated while attached (unknown free)", ptr
        );
        return;
    };
    let Some(s) = SITES.get_ptr_mut(b.site) else {
        return;
    };
    let bucket = bucket(now.saturating_sub(b.time_ns));
    // SAFETY: as in `allocated`; the bucket index is in bounds.
    unsafe {
        (*s).frees += 1;
        (*s).freed_bytes += b.size;
        (*s).freed_usable_bytes += b.usable;
        (*s).est_frees += b.weight;
        (*s).est_freed_bytes += estimated_bytes(b.size, b.weight);
        if bucket <= MAX_BUCKETS {
            *(&raw mut (*s).lifetimes).cast::<u64>().add(bucket) += 1;
        }
    }
}

/// Removes the live block at `ptr` from its slot or from `LIVE` and returns it.
#[inline(always)]
pub(crate) fn take_live(ptr: u64) -> Option<Block> {
    if let Some(slot) = live_slot(ptr) {
        // SAFETY: a value of an array map, released atomically (see `LIVE_SLOTS`); the block
        // is copied before the slot is released.
        unsafe {
            if (*slot).addr == ptr {
                let b = (*slot).block;
                if oi_ebpf::cmpxchg(&raw mut (*slot).addr, ptr, 0) == ptr {
                    return Some(b);
                }
            }
        }
    }
    // SAFETY: a plain read of a map value, copied at once.
    let b = (unsafe { LIVE.get(&ptr) }).copied()?;
    if LIVE.remove(&ptr).is_ok() {
        live_in_hash(u64::MAX);
    }
    Some(b)
}

/// The slot of block address `addr` in `LIVE_SLOTS`.
#[inline(always)]
pub(crate) fn live_slot(addr: u64) -> Option<*mut LiveSlot> {
    let index = ((addr >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32 & LIVE_MASK.load();
    LIVE_SLOTS.get_ptr_mut(index)
}

/// Whether `LIVE` may hold a block at `addr` (only looked up when it holds any).
#[inline(always)]
pub(crate) fn in_live_hash(addr: u64) -> bool {
    match LIVE_IN_HASH.get(0) {
        Some(0) => false,
        // SAFETY: a plain read of a map value.
        _ => unsafe { LIVE.get(&addr) }.is_some(),
    }
}

/// Adds `n` (wrapping: `u64::MAX` is −1) to the count of blocks in `LIVE`.
#[inline(always)]
pub(crate) fn live_in_hash(n: u64) {
    if let Some(c) = LIVE_IN_HASH.get_ptr_mut(0) {
        add(c, n);
    }
}
