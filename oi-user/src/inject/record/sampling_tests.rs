//! Sampling in the wrappers, run in this process around its own libc (`local`): every Nth call
//! exactly; the caller's pc, stack pointer and stack copy bounded by the thread's stack; the
//! marks in the live table; byte sampling's estimates within their statistical bound; a full
//! ring's drops counted.

use std::ffi::c_void;

use iced_x86::code_asm::*;
use oi_common::inject::{DataLayout, STACK_WINDOW, usable};

use super::{
    Align, Drain, Sample, Sampling, Shape,
    local::{Local, executable},
    samples::weight,
};

type Malloc = extern "C" fn(usize) -> *mut c_void;
type Free = extern "C" fn(*mut c_void);

const FAR: [u64; 1] = [1 << 50];

fn local(sampling: Sampling, period: u64, ring: u64) -> Local {
    Local::sampled(
        DataLayout::new(64, 1 << 16)
            .unwrap()
            .with_ring(ring)
            .unwrap(),
        usable::GLIBC,
        &FAR,
        &[
            (Shape::Malloc(Align::None), libc::malloc as *const () as u64),
            (Shape::Free, libc::free as *const () as u64),
        ],
        sampling,
        period,
        0,
    )
    .unwrap()
}

fn as_fn<F: Copy>(entry: u64) -> F {
    assert_eq!(std::mem::size_of::<F>(), 8);
    // SAFETY: every `F` here is an `extern "C" fn` type matching the wrapped function, and
    // `entry` is a wrapper's (or stub's) first instruction in a live read-execute mapping.
    unsafe { std::mem::transmute_copy::<u64, F>(&entry) }
}

fn drain(l: &Local, d: &mut Drain) -> Vec<Sample> {
    let mut out = Vec::new();
    d.read(l.live_view(), &mut out).unwrap();
    out
}

fn thread_pointer() -> u64 {
    let tp: u64;
    // SAFETY: reads the thread pointer, glibc's TCB self pointer; no memory written.
    unsafe { std::arch::asm!("mov {}, fs:[0]", out(reg) tp) };
    tp
}

#[test]
fn every_third_call_is_sampled_with_its_caller() {
    let l = local(Sampling::Calls, 3, 64);
    let (malloc, free): (Malloc, Free) = (as_fn(l.entry(0)), as_fn(l.entry(1)));
    // A caller of known return address: `call` the wrapper, then `ret`.
    let stub = executable(4096, |at| {
        let mut a = CodeAssembler::new(64).unwrap();
        // rsp ≡ 8 (mod 16) at the wrapper's entry, as after any call from aligned code.
        a.sub(rsp, 8).unwrap();
        a.mov(rax, l.entry(0)).unwrap();
        a.call(rax).unwrap();
        a.add(rsp, 8).unwrap();
        a.ret().unwrap();
        a.assemble(at)
            .map_err(|e| super::RecordError::Local(e.to_string()))
    })
    .unwrap();
    let via_stub: Malloc = as_fn(stub.addr());
    let return_address = stub.addr() + 16;
    let mut blocks = Vec::new();
    for i in 1..=30usize {
        let p = if i % 2 == 0 { via_stub(i) } else { malloc(i) };
        blocks.push(p);
    }
    let mut d = Drain::default();
    let samples = drain(&l, &mut d);
    assert_eq!((d.dropped, d.bad), (0, 0));
    let sizes: Vec<u64> = samples.iter().map(|s| s.size).collect();
    assert_eq!(sizes, (1..=10).map(|k| 3 * k).collect::<Vec<u64>>());
    let here = &samples as *const _ as u64;
    let top = thread_pointer();
    for s in &samples {
        assert_eq!(s.addr, blocks[s.size as usize - 1] as u64);
        if s.size % 2 == 0 {
            assert_eq!(s.pc, return_address, "the stub's call returns there");
        }
        assert!(
            s.sp.abs_diff(here) < 1 << 16,
            "sp {:#x} near {here:#x}",
            s.sp
        );
        // A test thread is glibc's: its stack ends at its thread pointer.
        assert_eq!(s.stack.len() as u64, STACK_WINDOW.min(top - s.sp));
    }
    let snapshot = l.snapshot().unwrap();
    assert_eq!(snapshot.totals.samples, 10);
    assert_eq!(snapshot.totals.allocs, 30);
    let marked: Vec<u64> = snapshot
        .live
        .iter()
        .filter(|b| b.sampled)
        .map(|b| b.size)
        .collect();
    let mut expected: Vec<u64> = sizes.clone();
    let mut marked_sorted = marked.clone();
    marked_sorted.sort();
    expected.sort();
    assert_eq!(
        marked_sorted, expected,
        "the sampled blocks are marked live"
    );
    assert!(snapshot.live.iter().all(|b| b.thread < 64));
    for p in blocks {
        free(p);
    }
    assert!(l.snapshot().unwrap().live.is_empty());
}

#[test]
fn byte_sampling_estimates_within_five_standard_deviations() {
    let period = 4096;
    let l = local(Sampling::Bytes, period, 256);
    let (malloc, free): (Malloc, Free) = (as_fn(l.entry(0)), as_fn(l.entry(1)));
    let mut d = Drain::default();
    let mut samples = Vec::new();
    // Two sites: 3 bytes of 48-byte blocks for each byte of 16-byte blocks.
    let rounds = 100_000u64;
    for i in 0..rounds {
        free(malloc(48));
        if i % 3 == 0 {
            free(malloc(48));
            free(malloc(16));
            free(malloc(16));
            free(malloc(16));
        }
        if i % 64 == 0 {
            samples.extend(drain(&l, &mut d));
        }
    }
    samples.extend(drain(&l, &mut d));
    assert_eq!(d.dropped, 0);
    let bytes_of = |size: u64| -> (f64, u64) {
        let taken = samples.iter().filter(|s| s.size == size).count() as u64;
        (
            taken as f64 * weight(oi_common::inject::sample_mode::BYTES, period, size).1,
            taken,
        )
    };
    let n48 = rounds + rounds.div_ceil(3);
    let n16 = 3 * rounds.div_ceil(3);
    for (size, n) in [(48, n48), (16, n16)] {
        let (est, taken) = bytes_of(size);
        let truth = (n * size) as f64;
        // The samples of a site are Poisson-like: a relative error of 1/sqrt(taken) per
        // standard deviation; five of them.
        let bound = 5.0 / (taken as f64).sqrt();
        assert!(
            (est / truth - 1.0).abs() < bound,
            "{size}-byte blocks: estimated {est:.0} of {truth} bytes from {taken} samples"
        );
    }
    assert_eq!(l.snapshot().unwrap().totals.samples, samples.len() as u64);
}

#[test]
fn a_full_ring_counts_what_it_lost() {
    let l = local(Sampling::Calls, 1, 8);
    let (malloc, free): (Malloc, Free) = (as_fn(l.entry(0)), as_fn(l.entry(1)));
    for n in 1..=20 {
        free(malloc(n));
    }
    let mut d = Drain::default();
    let samples = drain(&l, &mut d);
    assert_eq!(d.dropped, 12);
    let sizes: Vec<u64> = samples.iter().map(|s| s.size).collect();
    assert_eq!(sizes, (13..=20).collect::<Vec<u64>>(), "the newest eight");
    free(malloc(100));
    let more = drain(&l, &mut d);
    assert_eq!((more.len(), d.dropped), (1, 12));
}

#[test]
fn sampling_off_writes_no_record() {
    let l = Local::new(
        DataLayout::new(64, 1 << 12).unwrap(),
        usable::GLIBC,
        &FAR,
        &[(Shape::Malloc(Align::None), libc::malloc as *const () as u64)],
    )
    .unwrap();
    let malloc: Malloc = as_fn(l.entry(0));
    // SAFETY: a block of libc's malloc, freed once.
    unsafe { libc::free(malloc(10)) };
    let s = l.snapshot().unwrap();
    assert_eq!((s.totals.samples, s.sample_mode), (0, 0));
}
