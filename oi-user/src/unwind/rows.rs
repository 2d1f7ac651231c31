//! The kernel's row array seen as memory: `UNWIND_ROWS` is created memory-mappable
//! (`BPF_F_MMAPABLE`), and this maps it into oi-trace once, so loading a file's table is a
//! copy, not one `bpf(BPF_MAP_UPDATE_ELEM)` per row (libc and libstdc++ have about 30,000
//! rows each: 130 ms of system calls at start-up, now under a millisecond).
//!
//! Each row is written as one aligned 8-byte store, so a walk that reads a row while a file's
//! range is being written (only ranges no tracked process points at are ever written) sees
//! either the old row or the new one, never half of each.

use std::{
    os::fd::{AsFd as _, AsRawFd as _},
    sync::atomic::{AtomicU64, Ordering},
};

use aya::maps::{Map, MapData};
use memmap2::{MmapOptions, MmapRaw};
use oi_common::stack::Row;

use crate::error::{Error, Result};

/// The row array, mapped shared with the kernel.
pub struct RowArray {
    view: MmapRaw,
    len: u32,
    /// Keeps the map (and so the memory) alive as long as the view.
    _map: MapData,
}

impl RowArray {
    /// Maps `map` (the object's `UNWIND_ROWS`, an array of [`Row`]).
    pub fn new(map: Map) -> Result<Self> {
        let Map::Array(data) = map else {
            return Err(Error::internal("eBPF map UNWIND_ROWS is not an array"));
        };
        let info = data
            .info()
            .map_err(|e| Error::internal(format!("eBPF map UNWIND_ROWS: {e}")))?;
        if info.value_size() as usize != size_of::<Row>() || size_of::<Row>() != 8 {
            return Err(Error::internal(
                "eBPF map UNWIND_ROWS: rows are not 8 bytes on both sides",
            ));
        }
        let len = info.max_entries();
        let view = MmapOptions::new()
            .len(len as usize * size_of::<Row>())
            .map_raw(data.fd().as_fd().as_raw_fd())
            .map_err(|e| {
                Error::internal(format!("mapping eBPF map UNWIND_ROWS into memory: {e}"))
            })?;
        Ok(Self {
            view,
            len,
            _map: data,
        })
    }

    /// Rows the array holds.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Writes `rows` from index `first` on; false (nothing written) when they do not fit.
    pub fn write(&mut self, first: u32, rows: &[Row]) -> bool {
        let Some(end) = (first as usize).checked_add(rows.len()) else {
            return false;
        };
        if end > self.len as usize {
            return false;
        }
        let words = self.view.as_mut_ptr().cast::<AtomicU64>();
        for (row, index) in rows.iter().zip(first as usize..) {
            let word = u64::from(row.pc)
                | u64::from(row.cfa_offset) << 32
                | u64::from(row.rule) << 48
                | u64::from(row.rbp_slot as u8) << 56;
            // SAFETY: `index` < `len`, the view is `len` rows of 8 bytes, page-aligned, and
            // stays mapped while `self` lives; the kernel only reads it.
            unsafe { (*words.add(index)).store(word, Ordering::Relaxed) };
        }
        true
    }
}
