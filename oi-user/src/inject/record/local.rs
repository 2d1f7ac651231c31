//! The wrappers in oi-trace's own process: a data part and wrappers around this process's own
//! allocator functions (or any code), mapped here instead of in a target. The tests drive the
//! wrappers through it with exact expectations, and [`pair_cost`] measures what a wrapped
//! malloc+free pair adds, for the benchmark.
//!
//! Code is written into a private anonymous mapping while it is read-write, then made
//! read-execute: never writable and executable at once. Both mappings go with the value.

use std::{
    ffi::c_void,
    sync::{Arc, Barrier},
};

use oi_common::inject::DataLayout;

use super::{
    RecordError, Result, Sampling, Shape, Snapshot, clock::ns_per_tick_q32, samples, wrapper,
};

/// An anonymous mapping, unmapped on drop.
pub struct Mapping {
    addr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; nothing in it is tied to a thread.
unsafe impl Send for Mapping {}
// SAFETY: as above; writers are the wrappers, through raw addresses, with atomic instructions
// where threads share a word.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn anonymous(len: usize) -> Result<Mapping> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(local(format!(
                "mmap of {len} bytes: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Mapping {
            addr: addr.cast(),
            len,
        })
    }

    pub fn addr(&self) -> u64 {
        self.addr as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn write(&mut self, at: usize, bytes: &[u8]) -> Result<()> {
        if at.checked_add(bytes.len()).is_none_or(|end| end > self.len) {
            return Err(local(format!(
                "{} bytes at {at} do not fit a mapping of {}",
                bytes.len(),
                self.len
            )));
        }
        // SAFETY: in bounds of this read-write mapping (checked above), which only this value
        // owns while it is being filled.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.addr.add(at), bytes.len()) };
        Ok(())
    }

    fn make_executable(&mut self) -> Result<()> {
        // SAFETY: this mapping, whole: from read-write to read-execute.
        let r = unsafe {
            libc::mprotect(
                self.addr.cast(),
                self.len,
                libc::PROT_READ | libc::PROT_EXEC,
            )
        };
        if r != 0 {
            return Err(local(format!(
                "mprotect: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    /// A copy of the bytes (the wrappers may be writing meanwhile: each word is as it was at
    /// some instant).
    fn copy(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        // SAFETY: the whole mapping is readable; concurrent writers only store whole aligned
        // words, and a torn copy is what `Snapshot::read` is built to survive.
        unsafe { std::ptr::copy_nonoverlapping(self.addr, out.as_mut_ptr(), self.len) };
        out
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping this value created; nothing refers to it once the value goes.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

/// Code assembled for the address it gets (`assemble(at)`), in a read-execute mapping of
/// `capacity` bytes.
pub fn executable(
    capacity: usize,
    assemble: impl FnOnce(u64) -> Result<Vec<u8>>,
) -> Result<Mapping> {
    let mut m = Mapping::anonymous(capacity)?;
    let bytes = assemble(m.addr())?;
    m.write(0, &bytes)?;
    m.make_executable()?;
    Ok(m)
}

/// Room for one wrapper.
const WRAPPER_ROOM: usize = super::wrapper::MAX_LEN;

/// A data part and wrappers in this process.
pub struct Local {
    data: Mapping,
    _code: Mapping,
    entries: Vec<u64>,
}

impl Local {
    /// A data part of `layout` (header written: TSC scale measured here, `usable_rule`, the
    /// lifetime bounds) and one wrapper per `(shape, original)`.
    pub fn new(
        layout: DataLayout,
        usable_rule: u64,
        bucket_ns: &[u64],
        hooks: &[(Shape, u64)],
    ) -> Result<Local> {
        Local::sampled(layout, usable_rule, bucket_ns, hooks, Sampling::Off, 0, 0)
    }

    /// As [`Local::new`], the wrappers sampling by `sampling` of mean `period` (draws from
    /// `seed`) into the layout's ring, this process's main stack ending at `main_stack_end`.
    pub fn sampled(
        layout: DataLayout,
        usable_rule: u64,
        bucket_ns: &[u64],
        hooks: &[(Shape, u64)],
        sampling: Sampling,
        period: u64,
        main_stack_end: u64,
    ) -> Result<Local> {
        let mut data = Mapping::anonymous(layout.size() as usize)?;
        let mut header = layout.header(ns_per_tick_q32(), usable_rule, bucket_ns);
        if sampling != Sampling::Off {
            header = layout
                .sampled(header, sampling.mode(), period, main_stack_end)
                .ok_or_else(|| local("sampling needs a layout with a ring".into()))?;
            let draws = samples::draws(sampling.mode(), period, 1);
            data.write(
                layout.draws_offset() as usize,
                &samples::draws_bytes(&draws),
            )?;
        }
        data.write(0, &header.to_bytes())?;
        let mut code = Mapping::anonymous(WRAPPER_ROOM * hooks.len().max(1))?;
        let mut entries = Vec::with_capacity(hooks.len());
        for (i, &(shape, original)) in hooks.iter().enumerate() {
            let at = code.addr() + (i * WRAPPER_ROOM) as u64;
            let bytes = wrapper(shape, sampling, at, original, data.addr())?;
            code.write(i * WRAPPER_ROOM, &bytes)?;
            entries.push(at);
        }
        code.make_executable()?;
        Ok(Local {
            data,
            _code: code,
            entries,
        })
    }

    /// The address of the `i`th wrapper.
    pub fn entry(&self, i: usize) -> u64 {
        self.entries[i]
    }

    pub fn data_addr(&self) -> u64 {
        self.data.addr()
    }

    /// The data part as it is now.
    pub fn bytes(&self) -> Vec<u8> {
        self.data.copy()
    }

    pub fn snapshot(&self) -> Result<Snapshot> {
        Snapshot::read(&self.bytes())
    }

    /// The data part itself, live (the wrappers may be writing it): for `Drain::read`.
    pub fn live_view(&self) -> &[u8] {
        // SAFETY: the whole mapping is readable for as long as `self` lives; the reader reads
        // the words the wrappers write with volatile loads.
        unsafe { std::slice::from_raw_parts(self.data.addr as *const u8, self.data.len) }
    }
}

/// What a malloc+free pair costs in this process, directly and through the wrappers.
#[derive(Debug, Clone, Copy)]
pub struct PairCost {
    pub threads: usize,
    pub pairs_per_thread: u64,
    pub direct_ns: f64,
    pub wrapped_ns: f64,
}

impl PairCost {
    /// What the wrappers add to a pair, in ns.
    pub fn added_ns(&self) -> f64 {
        self.wrapped_ns - self.direct_ns
    }
}

type MallocFn = extern "C" fn(usize) -> *mut c_void;
type FreeFn = extern "C" fn(*mut c_void);

/// Rounds of [`pair_cost`].
const ROUNDS: u64 = 5;

/// Runs `pairs` malloc(64)+free pairs on each of `threads` threads, on libc's functions and
/// through wrappers around them (glibc usable sizes, the default lifetime bounds, sampling by
/// `sampling` of mean `period`), in alternating rounds, and gives the best CPU time per pair
/// of each (threads running at once: the mean over the threads).
pub fn pair_cost(threads: usize, pairs: u64, sampling: Sampling, period: u64) -> Result<PairCost> {
    let hooks = [
        (
            Shape::Malloc(super::Align::None),
            libc::malloc as *const () as u64,
        ),
        (Shape::Free, libc::free as *const () as u64),
    ];
    let bounds: Vec<u64> = [1e6, 1e7, 1e8, 1e9, 1e10, 6e10]
        .iter()
        .map(|s| *s as u64)
        .collect();
    let layout = DataLayout::DEFAULT
        .with_ring(if sampling == Sampling::Off { 0 } else { 1024 })
        .ok_or_else(|| local("no layout with a ring".into()))?;
    let local = Local::sampled(
        layout,
        oi_common::inject::usable::GLIBC,
        &bounds,
        &hooks,
        sampling,
        period,
        crate::inferior::procfs::main_stack_end(std::process::id() as i32).unwrap_or(0),
    )?;
    // SAFETY: the wrappers have the signatures of the functions they wrap.
    let (wrapped_malloc, wrapped_free) = unsafe {
        (
            std::mem::transmute::<u64, MallocFn>(local.entry(0)),
            std::mem::transmute::<u64, FreeFn>(local.entry(1)),
        )
    };
    let direct: (MallocFn, FreeFn) = (libc_malloc, libc_free);
    // The best of a few alternating rounds: the machine's other load only ever adds.
    let (mut direct_ns, mut wrapped_ns) = (f64::MAX, f64::MAX);
    for _ in 0..ROUNDS {
        direct_ns = direct_ns.min(run_pairs(threads, pairs, direct));
        wrapped_ns = wrapped_ns.min(run_pairs(threads, pairs, (wrapped_malloc, wrapped_free)));
    }
    let s = local.snapshot()?;
    let expected = ROUNDS * threads as u64 * pairs;
    if s.totals.allocs != expected || s.totals.frees != expected {
        return Err(local_err(format!(
            "the wrappers counted {} allocations and {} frees of {expected}",
            s.totals.allocs, s.totals.frees
        )));
    }
    Ok(PairCost {
        threads,
        pairs_per_thread: pairs,
        direct_ns,
        wrapped_ns,
    })
}

extern "C" fn libc_malloc(n: usize) -> *mut c_void {
    // SAFETY: plain libc malloc.
    unsafe { libc::malloc(n) }
}

extern "C" fn libc_free(p: *mut c_void) {
    // SAFETY: `p` came from `libc_malloc` (or a wrapper around libc's malloc).
    unsafe { libc::free(p) }
}

fn run_pairs(threads: usize, pairs: u64, (malloc, free): (MallocFn, FreeFn)) -> f64 {
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let start = thread_cpu_ns();
                for _ in 0..pairs {
                    let p = std::hint::black_box(malloc(std::hint::black_box(64)));
                    free(p);
                }
                thread_cpu_ns().saturating_sub(start)
            })
        })
        .collect();
    let total: u64 = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_default())
        .sum();
    total as f64 / (pairs.max(1) * threads.max(1) as u64) as f64
}

/// The calling thread's CPU time: what a pair costs the thread, whatever else the machine
/// runs meanwhile.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn local(why: String) -> RecordError {
    RecordError::Local(why)
}

fn local_err(why: String) -> RecordError {
    RecordError::Local(why)
}
