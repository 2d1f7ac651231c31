//! The wrappers run in this process around its own libc (`local`), called through function
//! pointers: exact counts, bytes, usable sizes, live blocks and lifetimes for known sequences
//! of every shape; nesting; threads; a full table and full slots; registers and stack
//! alignment; and the reader on hostile bytes.

use std::{
    arch::asm,
    ffi::c_void,
    sync::{
        Arc, Barrier,
        atomic::{AtomicU64, Ordering},
    },
};

use iced_x86::code_asm::*;
use oi_common::inject::{DataLayout, usable};

use super::{
    Align, Shape, Snapshot,
    local::{Local, executable},
    usable::jemalloc_usable,
};

type Malloc = extern "C" fn(usize) -> *mut c_void;
type Free = extern "C" fn(*mut c_void);
type Calloc = extern "C" fn(usize, usize) -> *mut c_void;
type Realloc = extern "C" fn(*mut c_void, usize) -> *mut c_void;
type ReallocArray = extern "C" fn(*mut c_void, usize, usize) -> *mut c_void;
type Memalign = extern "C" fn(usize, usize) -> *mut c_void;
type PosixMemalign = extern "C" fn(*mut *mut c_void, usize, usize) -> i32;
type MallocFlags = extern "C" fn(usize, i32) -> *mut c_void;

fn addr(f: *const ()) -> u64 {
    f as u64
}

/// The wrapper at `entry` as a function of type `F`.
fn as_fn<F: Copy>(entry: u64) -> F {
    assert_eq!(std::mem::size_of::<F>(), 8);
    // SAFETY: every `F` here is an `extern "C" fn` type matching the wrapped function, and
    // `entry` is a wrapper's first instruction in a live read-execute mapping.
    unsafe { std::mem::transmute_copy::<u64, F>(&entry) }
}

fn usable_of(p: *mut c_void) -> u64 {
    // SAFETY: `p` is a live block of this process's glibc malloc.
    unsafe { libc::malloc_usable_size(p) as u64 }
}

fn small() -> DataLayout {
    DataLayout::new(64, 1 << 12).unwrap()
}

/// A lifetime bound no test reaches: every free lands in bucket 0.
const FAR: [u64; 1] = [1 << 50];

#[test]
fn malloc_and_free_count_exactly_with_glibc_usable_sizes() {
    let l = Local::new(
        small(),
        usable::GLIBC,
        &FAR,
        &[
            (Shape::Malloc(Align::None), addr(libc::malloc as *const ())),
            (Shape::Free, addr(libc::free as *const ())),
        ],
    )
    .unwrap();
    let (malloc, free): (Malloc, Free) = (as_fn(l.entry(0)), as_fn(l.entry(1)));
    let sizes = [0usize, 1, 24, 25, 100, 1000, 4096, 200_000, 1 << 20];
    let blocks: Vec<*mut c_void> = sizes.iter().map(|&n| malloc(n)).collect();
    let s = l.snapshot().unwrap();
    assert_eq!(s.totals.allocs, sizes.len() as u64);
    assert_eq!(s.totals.bytes, sizes.iter().sum::<usize>() as u64);
    let usable: u64 = blocks.iter().map(|&p| usable_of(p)).sum();
    assert_eq!(s.totals.usable_bytes, usable);
    assert_eq!(s.live.len(), sizes.len());
    for (&p, &n) in blocks.iter().zip(&sizes) {
        let b = s
            .live
            .iter()
            .find(|b| b.addr == p as u64)
            .expect("block listed");
        assert_eq!((b.size, b.usable), (n as u64, usable_of(p)));
    }
    assert_eq!((s.threads, s.in_flight, s.totals.frees), (1, 0, 0));

    for &p in &blocks {
        free(p);
    }
    free(std::ptr::null_mut());
    // A block from before the wrappers: an unknown free.
    // SAFETY: plain libc malloc.
    free(unsafe { libc::malloc(10) });
    let s = l.snapshot().unwrap();
    assert_eq!(s.totals.frees, sizes.len() as u64);
    assert_eq!(s.totals.freed_bytes, s.totals.bytes);
    assert_eq!(s.totals.freed_usable_bytes, usable);
    assert_eq!(s.totals.unknown_frees, 1);
    assert_eq!(s.totals.lifetimes, vec![sizes.len() as u64, 0]);
    assert!(s.live.is_empty());
    assert_eq!(
        (s.in_flight, s.no_slot, s.table_full, s.totals.failed),
        (0, 0, 0, 0)
    );
}

#[test]
fn calloc_counts_the_product_and_fails_on_overflow() {
    let l = Local::new(
        small(),
        usable::GLIBC,
        &FAR,
        &[
            (Shape::Calloc, addr(libc::calloc as *const ())),
            (Shape::Free, addr(libc::free as *const ())),
        ],
    )
    .unwrap();
    let (calloc, free): (Calloc, Free) = (as_fn(l.entry(0)), as_fn(l.entry(1)));
    let p = calloc(12, 100);
    assert!(!p.is_null());
    assert!(calloc(usize::MAX / 2, 4).is_null());
    let s = l.snapshot().unwrap();
    assert_eq!(
        (s.totals.allocs, s.totals.bytes, s.totals.failed),
        (1, 1200, 1)
    );
    assert_eq!(s.totals.usable_bytes, usable_of(p));
    free(p);
    assert_eq!(l.snapshot().unwrap().totals.freed_bytes, 1200);
}

#[test]
fn realloc_is_a_free_and_an_allocation_in_its_four_cases() {
    let l = Local::new(
        small(),
        usable::GLIBC,
        &FAR,
        &[
            (
                Shape::Realloc(Align::None),
                addr(libc::realloc as *const ()),
            ),
            (Shape::Free, addr(libc::free as *const ())),
            (Shape::ReallocArray, addr(libc::reallocarray as *const ())),
        ],
    )
    .unwrap();
    let (realloc, free, reallocarray): (Realloc, Free, ReallocArray) =
        (as_fn(l.entry(0)), as_fn(l.entry(1)), as_fn(l.entry(2)));
    // realloc(NULL, n): an allocation only.
    let p = realloc(std::ptr::null_mut(), 100);
    let s = l.snapshot().unwrap();
    assert_eq!(
        (s.totals.allocs, s.totals.bytes, s.totals.frees),
        (1, 100, 0)
    );
    // realloc(p, m): p freed, q allocated.
    let q = realloc(p, 5000);
    let s = l.snapshot().unwrap();
    assert_eq!((s.totals.allocs, s.totals.bytes), (2, 5100));
    assert_eq!((s.totals.frees, s.totals.freed_bytes), (1, 100));
    assert_eq!(s.live.len(), 1);
    assert_eq!((s.live[0].addr, s.live[0].size), (q as u64, 5000));
    assert_eq!(s.live[0].usable, usable_of(q));
    // A failed realloc: nothing but `failed`; q stays live as it was.
    assert!(realloc(q, usize::MAX - 4096).is_null());
    let s = l.snapshot().unwrap();
    assert_eq!(
        (s.totals.allocs, s.totals.frees, s.totals.failed),
        (2, 1, 1)
    );
    assert_eq!(s.live.len(), 1);
    assert_eq!((s.live[0].addr, s.live[0].size), (q as u64, 5000));
    // realloc(q, 0): glibc frees q and returns NULL: a free only.
    assert!(realloc(q, 0).is_null());
    let s = l.snapshot().unwrap();
    assert_eq!(
        (s.totals.allocs, s.totals.frees, s.totals.freed_bytes),
        (2, 2, 5100)
    );
    assert!(s.live.is_empty());
    assert_eq!(s.totals.reallocs, 4);
    // reallocarray: n × size, and an overflow fails.
    let r = reallocarray(std::ptr::null_mut(), 10, 30);
    assert!(reallocarray(r, usize::MAX / 2, 3).is_null());
    let s = l.snapshot().unwrap();
    assert_eq!(
        (s.totals.allocs, s.totals.bytes, s.totals.failed),
        (3, 5400, 2)
    );
    assert_eq!(s.live.len(), 1);
    assert_eq!((s.live[0].addr, s.live[0].size), (r as u64, 300));
    // realloc of a block from before the wrappers: an unknown free and an allocation.
    // SAFETY: plain libc malloc.
    let old = unsafe { libc::malloc(8) };
    let moved = realloc(old, 64);
    free(moved);
    free(r);
    let s = l.snapshot().unwrap();
    assert_eq!(s.totals.unknown_frees, 1);
    assert_eq!((s.totals.allocs, s.totals.frees), (4, 4));
    assert!(s.live.is_empty());
    assert_eq!(s.in_flight, 0);
}

#[test]
fn aligned_allocations_read_their_size_and_block() {
    let l = Local::new(
        small(),
        usable::GLIBC,
        &FAR,
        &[
            (
                Shape::PosixMemalign,
                addr(libc::posix_memalign as *const ()),
            ),
            (Shape::Memalign, addr(libc::aligned_alloc as *const ())),
            (Shape::Memalign, addr(libc::memalign as *const ())),
            (Shape::Free, addr(libc::free as *const ())),
        ],
    )
    .unwrap();
    let posix_memalign: PosixMemalign = as_fn(l.entry(0));
    let (aligned_alloc, memalign): (Memalign, Memalign) = (as_fn(l.entry(1)), as_fn(l.entry(2)));
    let free: Free = as_fn(l.entry(3));
    let mut p = std::ptr::null_mut();
    assert_eq!(posix_memalign(&mut p, 64, 100), 0);
    assert_eq!(p as u64 % 64, 0);
    let mut untouched = std::ptr::null_mut();
    // An alignment that is not a power of two: EINVAL, counted failed.
    assert_eq!(posix_memalign(&mut untouched, 24, 100), libc::EINVAL);
    let q = aligned_alloc(256, 512);
    let r = memalign(4096, 10);
    let s = l.snapshot().unwrap();
    assert_eq!(
        (s.totals.allocs, s.totals.bytes, s.totals.failed),
        (3, 622, 1)
    );
    assert_eq!(
        s.totals.usable_bytes,
        usable_of(p) + usable_of(q) + usable_of(r)
    );
    let mut live: Vec<u64> = s.live.iter().map(|b| b.addr).collect();
    let mut expected = vec![p as u64, q as u64, r as u64];
    live.sort_unstable();
    expected.sort_unstable();
    assert_eq!(live, expected);
    for b in [p, q, r] {
        free(b);
    }
    let s = l.snapshot().unwrap();
    assert_eq!((s.totals.frees, s.totals.freed_bytes), (3, 622));
}

/// `operator new`'s way: a function that calls the malloc wrapper itself.
static INNER_MALLOC: AtomicU64 = AtomicU64::new(0);

extern "C" fn outer_new(n: usize) -> *mut c_void {
    as_fn::<Malloc>(INNER_MALLOC.load(Ordering::SeqCst))(n)
}

#[test]
fn a_hooked_call_inside_another_is_counted_once() {
    let l = Local::new(
        small(),
        usable::GLIBC,
        &FAR,
        &[
            (Shape::Malloc(Align::None), addr(libc::malloc as *const ())),
            (Shape::Malloc(Align::None), addr(outer_new as *const ())),
            (Shape::Free, addr(libc::free as *const ())),
        ],
    )
    .unwrap();
    INNER_MALLOC.store(l.entry(0), Ordering::SeqCst);
    let (new, free): (Malloc, Free) = (as_fn(l.entry(1)), as_fn(l.entry(2)));
    let p = new(40);
    let s = l.snapshot().unwrap();
    assert_eq!(
        (s.totals.allocs, s.totals.bytes, s.totals.nested),
        (1, 40, 1)
    );
    assert_eq!(s.live.len(), 1);
    free(p);
    // After the outer call returned, the inner wrapper alone is outermost again.
    let inner: Malloc = as_fn(l.entry(0));
    free(inner(8));
    let s = l.snapshot().unwrap();
    assert_eq!(
        (s.totals.allocs, s.totals.frees, s.totals.nested),
        (2, 2, 1)
    );
    assert_eq!(s.in_flight, 0);
}

/// The wrappers a signal handler calls, and a "malloc" that is interrupted by that handler.
static HANDLER_MALLOC: AtomicU64 = AtomicU64::new(0);
static HANDLER_FREE: AtomicU64 = AtomicU64::new(0);

extern "C" fn allocating_handler(_: i32) {
    let malloc: Malloc = as_fn(HANDLER_MALLOC.load(Ordering::SeqCst));
    let free: Free = as_fn(HANDLER_FREE.load(Ordering::SeqCst));
    free(malloc(32));
}

extern "C" fn interrupted_malloc(n: usize) -> *mut c_void {
    // SAFETY: raise runs the handler on this thread before it returns; plain libc malloc.
    unsafe {
        libc::raise(libc::SIGUSR2);
        libc::malloc(n)
    }
}

#[test]
fn a_signal_handler_inside_a_counted_call_is_nested_and_not_counted() {
    let l = Local::new(
        small(),
        usable::GLIBC,
        &FAR,
        &[
            (Shape::Malloc(Align::None), addr(libc::malloc as *const ())),
            (Shape::Free, addr(libc::free as *const ())),
            (
                Shape::Malloc(Align::None),
                addr(interrupted_malloc as *const ()),
            ),
        ],
    )
    .unwrap();
    HANDLER_MALLOC.store(l.entry(0), Ordering::SeqCst);
    HANDLER_FREE.store(l.entry(1), Ordering::SeqCst);
    // SAFETY: SIGUSR2 is used by no other test of this binary; the handler only calls the
    // wrappers above, which take no lock.
    unsafe {
        libc::signal(
            libc::SIGUSR2,
            allocating_handler as *const () as libc::sighandler_t,
        )
    };
    let (malloc, free): (Malloc, Free) = (as_fn(l.entry(2)), as_fn(l.entry(1)));
    let p = malloc(24);
    let s = l.snapshot().unwrap();
    // The handler's malloc and free ran at depth 1: passed through, counted as nested only.
    assert_eq!(
        (s.totals.allocs, s.totals.bytes, s.totals.nested),
        (1, 24, 2)
    );
    assert_eq!(
        (s.totals.frees, s.totals.unknown_frees, s.live.len()),
        (0, 0, 1)
    );
    free(p);
    // Outside a counted call the handler's calls are outermost: counted.
    // SAFETY: as above.
    unsafe { libc::raise(libc::SIGUSR2) };
    // SAFETY: back to the default action; nothing raises it again.
    unsafe { libc::signal(libc::SIGUSR2, libc::SIG_DFL) };
    let s = l.snapshot().unwrap();
    assert_eq!(
        (s.totals.allocs, s.totals.frees, s.totals.nested),
        (2, 2, 2)
    );
    assert!(s.live.is_empty());
}

static INSIDE_DATA: AtomicU64 = AtomicU64::new(0);
static INSIDE_SEEN: AtomicU64 = AtomicU64::new(u64::MAX);

/// An allocator that looks, while it runs, how many threads the data part says are inside.
extern "C" fn looking_malloc(n: usize) -> *mut c_void {
    let data = INSIDE_DATA.load(Ordering::SeqCst);
    let layout = small();
    let inside: u64 = (0..layout.slots)
        .map(|i| {
            let at = data + layout.slot_offset(i) + oi_common::inject::offset::DEPTH;
            // SAFETY: a word of the live data part of `small()`'s layout, 8-aligned.
            unsafe { std::ptr::read_volatile(at as *const u64) }
        })
        .sum();
    INSIDE_SEEN.store(inside, Ordering::SeqCst);
    // SAFETY: plain libc malloc.
    unsafe { libc::malloc(n) }
}

#[test]
fn a_thread_is_inside_from_the_wrapper_entry_to_its_return() {
    let l = Local::new(
        small(),
        usable::GLIBC,
        &FAR,
        &[
            (
                Shape::Malloc(Align::None),
                addr(looking_malloc as *const ()),
            ),
            (Shape::Free, addr(libc::free as *const ())),
        ],
    )
    .unwrap();
    INSIDE_DATA.store(l.data_addr(), Ordering::SeqCst);
    let (malloc, free): (Malloc, Free) = (as_fn(l.entry(0)), as_fn(l.entry(1)));
    let p = malloc(40);
    // Inside the original, the slots' depths said one thread; after the return, none.
    assert_eq!(INSIDE_SEEN.load(Ordering::SeqCst), 1);
    let s = l.snapshot().unwrap();
    assert_eq!((s.in_flight, s.totals.allocs, s.totals.bytes), (0, 1, 40));
    free(p);
    assert_eq!(l.snapshot().unwrap().in_flight, 0);
}

#[test]
fn eight_threads_of_a_million_pairs_count_exactly() {
    const THREADS: u64 = 8;
    const PAIRS: u64 = 1_000_000;
    let l = Arc::new(
        Local::new(
            DataLayout::DEFAULT,
            usable::GLIBC,
            &FAR,
            &[
                (Shape::Malloc(Align::None), addr(libc::malloc as *const ())),
                (Shape::Free, addr(libc::free as *const ())),
            ],
        )
        .unwrap(),
    );
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (l, barrier) = (l.clone(), barrier.clone());
            std::thread::spawn(move || {
                let (malloc, free): (Malloc, Free) = (as_fn(l.entry(0)), as_fn(l.entry(1)));
                barrier.wait();
                let mut bytes = 0;
                // A few blocks held at once, so the table sees more than one address a thread.
                let mut held: [*mut c_void; 4] = [std::ptr::null_mut(); 4];
                for i in 0..PAIRS {
                    let n = ((i * 7 + t) % 300) as usize;
                    bytes += n as u64;
                    let slot = (i % 4) as usize;
                    if !held[slot].is_null() {
                        free(held[slot]);
                    }
                    held[slot] = malloc(n);
                }
                for p in held {
                    free(p);
                }
                bytes
            })
        })
        .collect();
    let bytes: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let s = l.snapshot().unwrap();
    assert_eq!(s.totals.allocs, THREADS * PAIRS);
    assert_eq!(s.totals.frees, THREADS * PAIRS);
    assert_eq!((s.totals.bytes, s.totals.freed_bytes), (bytes, bytes));
    assert_eq!(s.totals.usable_bytes, s.totals.freed_usable_bytes);
    assert_eq!(s.totals.lifetimes.iter().sum::<u64>(), THREADS * PAIRS);
    assert!(s.live.is_empty());
    assert_eq!(
        (s.threads, s.in_flight, s.no_slot, s.table_full),
        (THREADS, 0, 0, 0)
    );
    assert_eq!(
        (s.totals.unknown_frees, s.stale, s.being_written),
        (0, 0, 0)
    );
}

#[test]
fn a_full_table_counts_what_it_drops_and_their_frees_are_unknown() {
    let layout = DataLayout::new(4, 16).unwrap();
    let l = Local::new(
        layout,
        usable::REQUESTED,
        &FAR,
        &[
            (Shape::Malloc(Align::None), addr(libc::malloc as *const ())),
            (Shape::Free, addr(libc::free as *const ())),
        ],
    )
    .unwrap();
    let (malloc, free): (Malloc, Free) = (as_fn(l.entry(0)), as_fn(l.entry(1)));
    let blocks: Vec<_> = (0..40).map(|_| malloc(32)).collect();
    let s = l.snapshot().unwrap();
    // Probing covers the whole 16-entry table: exactly 16 fit.
    assert_eq!((s.totals.allocs, s.live.len(), s.table_full), (40, 16, 24));
    assert_eq!(s.totals.usable_bytes, 40 * 32);
    for p in blocks {
        free(p);
    }
    let s = l.snapshot().unwrap();
    assert_eq!(
        (s.totals.frees, s.totals.unknown_frees, s.table_full),
        (16, 24, 24)
    );
    assert!(s.live.is_empty());
}

#[test]
fn threads_without_a_slot_are_counted_and_pass_through() {
    let layout = DataLayout::new(2, 64).unwrap();
    let l = Arc::new(
        Local::new(
            layout,
            usable::REQUESTED,
            &FAR,
            &[
                (Shape::Malloc(Align::None), addr(libc::malloc as *const ())),
                (Shape::Free, addr(libc::free as *const ())),
            ],
        )
        .unwrap(),
    );
    // Three threads alive at once, two slots: one thread's two calls find none.
    let (start, end) = (Arc::new(Barrier::new(3)), Arc::new(Barrier::new(3)));
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let (l, start, end) = (l.clone(), start.clone(), end.clone());
            std::thread::spawn(move || {
                let (malloc, free): (Malloc, Free) = (as_fn(l.entry(0)), as_fn(l.entry(1)));
                start.wait();
                let p = malloc(16);
                assert!(!p.is_null());
                free(p);
                end.wait();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = l.snapshot().unwrap();
    assert_eq!((s.threads, s.no_slot), (2, 2));
    assert_eq!((s.totals.allocs, s.totals.frees, s.in_flight), (2, 2, 0));
}

#[test]
fn lifetimes_fall_in_the_buckets_of_their_bounds() {
    let l = Local::new(
        small(),
        usable::GLIBC,
        &[2_000_000, 1 << 50],
        &[
            (Shape::Malloc(Align::None), addr(libc::malloc as *const ())),
            (Shape::Free, addr(libc::free as *const ())),
        ],
    )
    .unwrap();
    let (malloc, free): (Malloc, Free) = (as_fn(l.entry(0)), as_fn(l.entry(1)));
    for _ in 0..5 {
        free(malloc(10));
    }
    let slow: Vec<_> = (0..3).map(|_| malloc(10)).collect();
    std::thread::sleep(std::time::Duration::from_millis(10));
    for p in slow {
        free(p);
    }
    let s = l.snapshot().unwrap();
    assert_eq!(s.totals.lifetimes, vec![5, 3, 0]);
}

/// jemalloc's `mallocx(size, flags)` shape, on glibc's malloc: the wrapper computes the usable
/// size from the request and flags alone.
extern "C" fn malloc_with_flags(n: usize, _flags: i32) -> *mut c_void {
    // SAFETY: plain libc malloc.
    unsafe { libc::malloc(n) }
}

#[test]
fn jemalloc_usable_sizes_are_its_size_classes() {
    let l = Local::new(
        DataLayout::new(4, 1 << 14).unwrap(),
        usable::JEMALLOC,
        &FAR,
        &[
            (Shape::Malloc(Align::None), addr(libc::malloc as *const ())),
            (
                Shape::Malloc(Align::FlagsRsi),
                addr(malloc_with_flags as *const ()),
            ),
            (Shape::Memalign, addr(libc::aligned_alloc as *const ())),
            (Shape::Free, addr(libc::free as *const ())),
        ],
    )
    .unwrap();
    let malloc: Malloc = as_fn(l.entry(0));
    let mallocx: MallocFlags = as_fn(l.entry(1));
    let aligned_alloc: Memalign = as_fn(l.entry(2));
    let free: Free = as_fn(l.entry(3));
    let mut sizes: Vec<u64> = (0..=300).collect();
    sizes.extend((1..64).map(|k| k * 97 + 5));
    sizes.extend([
        4095, 4096, 4097, 14335, 14336, 14337, 16383, 16384, 16385, 100_000,
    ]);
    for &n in &sizes {
        for lg in [0u32, 4, 6, 12, 13] {
            let (p, align) = if lg == 0 {
                (malloc(n as usize), 0)
            } else if lg % 2 == 0 {
                (mallocx(n as usize, lg as i32), 1u64 << lg)
            } else {
                (aligned_alloc(1 << lg, n as usize), 1u64 << lg)
            };
            let s = l.snapshot().unwrap();
            let b = s.live.iter().find(|b| b.addr == p as u64).unwrap();
            assert_eq!(
                b.usable,
                jemalloc_usable(n, align),
                "size {n} align {align}"
            );
            free(p);
        }
    }
    // Spot checks of the reference against jemalloc's own tables (Debian's libjemalloc2).
    assert_eq!(jemalloc_usable(0, 0), 8);
    assert_eq!(jemalloc_usable(9, 0), 16);
    assert_eq!(jemalloc_usable(129, 0), 160);
    assert_eq!(jemalloc_usable(1025, 0), 1280);
    assert_eq!(jemalloc_usable(14337, 0), 16384);
    assert_eq!(jemalloc_usable(100, 64), 128);
    assert_eq!(jemalloc_usable(10, 8192), 16384);
}

/// A test `original`: counts calls whose stack was not 16-byte aligned at their `call`
/// (cells[0]), records its first argument (cells[1]), clobbers every caller-saved register
/// and returns cells[2].
fn checking_original(cells: u64) -> super::local::Mapping {
    executable(4096, |_| {
        let mut a = CodeAssembler::new(64).unwrap();
        let mut aligned = a.create_label();
        a.mov(r10, cells).unwrap();
        a.mov(rax, rsp).unwrap();
        a.and(eax, 15).unwrap();
        a.cmp(eax, 8).unwrap();
        a.je(aligned).unwrap();
        a.inc(qword_ptr(r10)).unwrap();
        a.set_label(&mut aligned).unwrap();
        a.mov(qword_ptr(r10 + 8), rdi).unwrap();
        for r in [rcx, rdx, rsi, rdi, r8, r9, r11] {
            a.mov(r, 0x5a5a_5a5a_5a5a_5a5au64).unwrap();
        }
        a.mov(rax, qword_ptr(r10 + 16)).unwrap();
        a.mov(r10, -1i64).unwrap();
        a.ret().unwrap();
        Ok(a.assemble(0).unwrap())
    })
    .unwrap()
}

/// Calls `f(arg, arg2)` with rbx, rbp and r12–r15 holding patterns and a 16-byte aligned
/// stack; returns its result and the OR of every callee-saved register's change.
fn call_with_patterns(f: u64, arg: u64, arg2: u64) -> (u64, u64) {
    let result: u64;
    let changed: u64;
    // SAFETY: `f` is a wrapper (or function) of the C ABI taking up to two integer
    // arguments; every callee-saved register the block sets is saved before and restored
    // after, and the stack pointer is restored from its saved copy.
    unsafe {
        asm!(
            "push rbx", "push rbp", "push r12", "push r13", "push r14", "push r15",
            "mov rax, rsp",
            "and rsp, -16",
            "push rax",
            "push rax",
            "mov rbx, 0x1111111111111111",
            "mov rbp, 0x2222222222222222",
            "mov r12, 0x3333333333333333",
            "mov r13, 0x4444444444444444",
            "mov r14, 0x5555555555555555",
            "mov r15, 0x6666666666666666",
            "call r11",
            "xor esi, esi",
            "mov rdx, 0x1111111111111111", "xor rdx, rbx", "or rsi, rdx",
            "mov rdx, 0x2222222222222222", "xor rdx, rbp", "or rsi, rdx",
            "mov rdx, 0x3333333333333333", "xor rdx, r12", "or rsi, rdx",
            "mov rdx, 0x4444444444444444", "xor rdx, r13", "or rsi, rdx",
            "mov rdx, 0x5555555555555555", "xor rdx, r14", "or rsi, rdx",
            "mov rdx, 0x6666666666666666", "xor rdx, r15", "or rsi, rdx",
            "mov rdx, [rsp]", "xor rdx, [rsp + 8]", "or rsi, rdx",
            "mov rsp, [rsp]",
            "pop r15", "pop r14", "pop r13", "pop r12", "pop rbp", "pop rbx",
            in("r11") f,
            in("rdi") arg,
            inout("rsi") arg2 => changed,
            out("rax") result,
            clobber_abi("C"),
        );
    }
    (result, changed)
}

#[test]
fn registers_and_stack_alignment_are_kept_for_every_shape() {
    let cells: Box<[u64; 4]> = Box::new([0; 4]);
    let cells_addr = cells.as_ptr() as u64;
    // SAFETY: plain libc malloc, freed below.
    let block = unsafe { libc::malloc(48) };
    // SAFETY: `cells` is alive for the whole test; the original writes its words.
    unsafe { *(cells_addr as *mut u64).add(2) = block as u64 };
    let original = checking_original(cells_addr);
    let shapes = [
        Shape::Malloc(Align::None),
        Shape::Calloc,
        Shape::Realloc(Align::None),
        Shape::Memalign,
        Shape::Free,
    ];
    let hooks: Vec<_> = shapes.iter().map(|&s| (s, original.addr())).collect();
    // Without sampling, and with every allocation sampled (its record written).
    for sampling in [super::Sampling::Off, super::Sampling::Calls] {
        let layout = small().with_ring(16).unwrap();
        let l = Local::sampled(layout, usable::GLIBC, &FAR, &hooks, sampling, 1, 0).unwrap();
        for (i, shape) in shapes.iter().enumerate() {
            let (arg, arg2) = match shape {
                Shape::Calloc => (6, 8),
                Shape::Realloc(_) => (0, 48),
                Shape::Memalign => (16, 48),
                Shape::Free => (block as u64, 0),
                _ => (48, 0),
            };
            let (result, changed) = call_with_patterns(l.entry(i), arg, arg2);
            assert_eq!(changed, 0, "{shape}: a callee-saved register changed");
            assert_eq!(result, block as u64, "{shape}: the result");
            // SAFETY: as above.
            let seen = unsafe { *(cells_addr as *const u64).add(1) };
            assert_eq!(seen, arg, "{shape}: the first argument");
            if *shape != Shape::Free {
                // Each allocation returned the same block: the next one is recorded again once
                // the free below took it out.
                let s = l.snapshot().unwrap();
                assert!(s.live.iter().any(|b| b.addr == block as u64));
            }
        }
        // SAFETY: as above.
        let misaligned = unsafe { *(cells_addr as *const u64) };
        assert_eq!(
            misaligned, 0,
            "calls of the original with a misaligned stack"
        );
        let s = l.snapshot().unwrap();
        assert_eq!(s.totals.allocs, 4);
        assert_eq!(s.totals.bytes, 48 * 4);
        assert_eq!(s.totals.frees, 1);
        // The test original returns one address four times (no free between): four entries of
        // it, one taken by the free; the reader lists the newest left and counts the others stale.
        assert_eq!((s.live.len(), s.stale), (1, 2));
        let samples = if sampling == super::Sampling::Off {
            0
        } else {
            4
        };
        assert_eq!(s.totals.samples, samples);
        // SAFETY: as above.
        unsafe { *(cells_addr as *mut u64) = 0 };
    }
    // SAFETY: the block from above.
    unsafe { libc::free(block) };
    drop(cells);
}

#[test]
fn the_reader_refuses_hostile_bytes_without_panicking() {
    let layout = DataLayout::new(4, 16).unwrap();
    let l = Local::new(
        layout,
        usable::REQUESTED,
        &FAR,
        &[(Shape::Malloc(Align::None), addr(libc::malloc as *const ()))],
    )
    .unwrap();
    let malloc: Malloc = as_fn(l.entry(0));
    let blocks: Vec<_> = (0..5).map(|_| malloc(24)).collect();
    let good = l.bytes();
    let s = Snapshot::read(&good).unwrap();
    assert_eq!((s.totals.allocs, s.live.len()), (5, 5));

    // Truncated anywhere: an error.
    for len in [0, 7, 100, 319, 320, good.len() - 1] {
        assert!(Snapshot::read(&good[..len]).is_err(), "{len} bytes");
    }
    // Each header word set to a hostile value: an error, or (for the counters and the TSC
    // scale) read as it is.
    for word in 0..40 {
        for v in [0, 1, 3, u64::MAX, 1 << 40] {
            let mut b = good.clone();
            b[word * 8..word * 8 + 8].copy_from_slice(&v.to_le_bytes());
            let _ = Snapshot::read(&b);
        }
    }
    let mut b = good.clone();
    b[0] ^= 1;
    assert!(
        Snapshot::read(&b)
            .unwrap_err()
            .to_string()
            .contains("magic")
    );
    // A block naming a thread slot that does not exist, and a stale duplicate.
    let table = layout.table_offset() as usize;
    let entries: Vec<usize> = (0..16)
        .map(|i| table + i * 40)
        .filter(|&e| good[e..e + 8] != [0; 8])
        .collect();
    let mut b = good.clone();
    b[entries[0] + 32..entries[0] + 40].copy_from_slice(&99u64.to_le_bytes());
    let bad = Snapshot::read(&b).unwrap();
    assert_eq!((bad.bad_entries, bad.live.len()), (1, 4));
    let mut b = good.clone();
    let (from, to) = (entries[1], entries[2]);
    let copy = b[from..from + 8].to_vec();
    b[to..to + 8].copy_from_slice(&copy);
    let dup = Snapshot::read(&b).unwrap();
    assert_eq!((dup.stale, dup.live.len()), (1, 4));
    // Lifetimes counted beyond the bounds: an error.
    let mut b = good.clone();
    let beyond = layout.slot_offset(0) as usize + 128 + 8 * 5;
    b[beyond..beyond + 8].copy_from_slice(&1u64.to_le_bytes());
    assert!(Snapshot::read(&b).is_err());
    // Random bytes, and random bytes behind a valid header: no panic.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..2000 {
        let len = (next() % (good.len() as u64 + 64)) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if round % 2 == 0 && len > 320 {
            b[..320].copy_from_slice(&good[..320]);
        }
        let _ = Snapshot::read(&b);
    }
    for p in blocks {
        // SAFETY: blocks of libc's malloc.
        unsafe { libc::free(p) };
    }
}

/// The size-class reference against jemalloc itself: Debian's libjemalloc2 (which `cargo xtask
/// setup` installs), asked by `nallocx(size, MALLOCX_LG_ALIGN(lg))`. jemalloc's TLS is
/// initial-exec, which a dlopen finds room for only with glibc's optional static TLS raised at
/// start: the test runs itself again in a child with that tunable, where the library is loaded
/// locally (this process keeps glibc's malloc).
#[test]
fn the_jemalloc_reference_is_jemallocs_own_nallocx() {
    const CHILD: &str = "OI_RECORD_NALLOCX_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "inject::record::tests::the_jemalloc_reference_is_jemallocs_own_nallocx",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=1048576")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "the child failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    // SAFETY: dlopen of a shared library by its soname, RTLD_LOCAL: its symbols do not
    // interpose on this process's.
    let lib = unsafe {
        libc::dlopen(
            c"libjemalloc.so.2".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        )
    };
    if lib.is_null() {
        // SAFETY: dlerror's message is a C string valid until the next dl call.
        let why = unsafe { std::ffi::CStr::from_ptr(libc::dlerror()) };
        panic!("cannot load libjemalloc.so.2 (cargo xtask setup installs it): {why:?}");
    }
    // SAFETY: a symbol of the library just opened.
    let sym = unsafe { libc::dlsym(lib, c"nallocx".as_ptr()) };
    assert!(!sym.is_null());
    // SAFETY: jemalloc's `size_t nallocx(size_t size, int flags)`.
    let nallocx: extern "C" fn(usize, i32) -> usize = unsafe { std::mem::transmute(sym) };
    let mut checked = 0;
    for size in (1..20_000u64).chain([65_536, 100_000, 1 << 20, (1 << 20) + 1]) {
        for lg in [0u32, 4, 5, 6, 8, 12, 13] {
            let align = if lg == 0 { 0 } else { 1 << lg };
            assert_eq!(
                jemalloc_usable(size, align),
                nallocx(size as usize, lg as i32) as u64,
                "size {size} align {align}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 20_003 * 7);
}

#[test]
fn wrappers_fit_two_kilobytes() {
    for shape in [
        Shape::Malloc(Align::FlagsRsi),
        Shape::Calloc,
        Shape::Realloc(Align::FlagsRdx),
        Shape::ReallocArray,
        Shape::Memalign,
        Shape::PosixMemalign,
        Shape::Free,
    ] {
        let bytes = super::wrapper(
            shape,
            super::Sampling::Bytes,
            0x7f00_0000_0000,
            0x7f10_0000_0000,
            0x7f20_0000_0000,
        )
        .unwrap();
        assert!(
            bytes.len() <= super::wrapper::MAX_LEN,
            "{shape}: {} bytes",
            bytes.len()
        );
    }
}
