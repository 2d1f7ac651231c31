//! The kernel's row array, written as memory: `UNWIND_ROWS` is created memory-mappable and
//! mapped once (`probe::mapped`), so loading a file's table is a copy, not one
//! `bpf(BPF_MAP_UPDATE_ELEM)` per row (libc and libstdc++ have about 30,000 rows each: 130 ms
//! of system calls at start-up, now under a millisecond).
//!
//! Each row is written as one aligned 8-byte store, so a walk that reads a row while a file's
//! range is being written (only ranges no tracked process points at are ever written) sees
//! either the old row or the new one, never half of each.

use std::sync::atomic::{AtomicU64, Ordering};

use aya::maps::Map;
use oi_common::stack::Row;

use crate::{error::Result, probe::mapped::MappedArray};

const _: () = assert!(size_of::<Row>() == 8, "a row is one 8-byte store");

/// The row array, mapped shared with the kernel.
pub struct RowArray(MappedArray<Row>);

impl RowArray {
    /// Maps `map` (the object's `UNWIND_ROWS`).
    pub fn new(map: Map) -> Result<Self> {
        MappedArray::new(map, "UNWIND_ROWS").map(Self)
    }

    /// Rows the array holds.
    pub fn capacity(&self) -> u32 {
        self.0.capacity()
    }

    /// Writes `rows` from index `first` on; false (nothing written) when they do not fit.
    pub fn write(&mut self, first: u32, rows: &[Row]) -> bool {
        let fits = u32::try_from(rows.len())
            .ok()
            .and_then(|n| first.checked_add(n))
            .is_some_and(|end| end <= self.capacity());
        if !fits {
            return false;
        }
        for (row, index) in rows.iter().zip(first..) {
            let word = u64::from(row.pc)
                | u64::from(row.cfa_offset) << 32
                | u64::from(row.rule) << 48
                | u64::from(row.rbp_slot as u8) << 56;
            let Some(at) = self.0.element(index) else {
                return false;
            };
            // SAFETY: an element of the mapped array: 8 bytes, 8-byte aligned, mapped while
            // `self` lives; the kernel only reads it.
            unsafe { (*at.cast::<AtomicU64>()).store(word, Ordering::Relaxed) };
        }
        true
    }
}
