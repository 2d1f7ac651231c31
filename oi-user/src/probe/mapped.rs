//! An eBPF array map created memory-mappable (`BPF_F_MMAPABLE`), mapped into oi-trace once:
//! its elements are then read and written as memory, not one `bpf()` system call each. The
//! unwinder's row array is written this way (about 30,000 rows for each of libc and
//! libstdc++), and the allocation profiler's live-block slots are read this way at every
//! report (262,144 slots by default: about 120 ms of system calls a report, one a slot).
//!
//! The kernel's programs write the same memory concurrently. This module only hands out
//! element pointers, bounds-checked; each user says how its elements are read or written
//! without tearing (one aligned 8-byte store a row; a slot's address read before and after
//! its block).

use std::{
    marker::PhantomData,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::maps::{Map, MapData};
use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};

/// A mapped array of `T`: elements are `size_of::<T>()` bytes apart (the kernel rounds each
/// element up to 8 bytes, so `T` must be a multiple of 8 bytes long).
pub struct MappedArray<T> {
    view: MmapRaw,
    len: u32,
    /// Keeps the map, and so its memory, alive as long as the view.
    _map: MapData,
    _element: PhantomData<T>,
}

impl<T: Copy> MappedArray<T> {
    /// Maps `map`, the eBPF array map `name` (declared with `BPF_F_MMAPABLE`).
    pub fn new(map: Map, name: &str) -> Result<Self> {
        let Map::Array(data) = map else {
            return Err(Error::internal(format!("eBPF map {name} is not an array")));
        };
        let info = data
            .info()
            .map_err(|e| Error::internal(format!("eBPF map {name}: {e}")))?;
        if info.value_size() as usize != size_of::<T>() || !size_of::<T>().is_multiple_of(8) {
            return Err(Error::internal(format!(
                "eBPF map {name}: elements of {} bytes, {} expected (a multiple of 8)",
                info.value_size(),
                size_of::<T>()
            )));
        }
        let len = info.max_entries();
        let view = MmapOptions::new()
            .len(len as usize * size_of::<T>())
            .map_raw(data.fd().as_fd().as_raw_fd())
            .map_err(|e| Error::internal(format!("mapping eBPF map {name} into memory: {e}")))?;
        Ok(Self {
            view,
            len,
            _map: data,
            _element: PhantomData,
        })
    }

    /// Elements the array holds.
    pub fn capacity(&self) -> u32 {
        self.len
    }

    /// The element at `index`, 8-byte aligned and valid while `self` lives; `None` past the
    /// end.
    pub fn element(&self, index: u32) -> Option<*mut T> {
        // SAFETY: `index` < `len`, and the view is `len` elements long.
        (index < self.len)
            .then(|| unsafe { self.view.as_mut_ptr().cast::<T>().add(index as usize) })
    }
}
