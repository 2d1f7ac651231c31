//! Live tests of the kernel-side unwinder: the test-only eBPF program
//! `oi-ebpf/src/bin/stack_check.rs` uprobes the innermost function of a known chain of calls
//! (`tests/fixtures/unwind_chain.cpp`, through a shared library and libstdc++), walks the stack
//! with `user_stack` over the tables [`Unwinder`] loaded, and the frames, symbolized by
//! `symbolize`, must be exactly the chain up to `main` and the C library's start code. The
//! same hit's frame-pointer walk (`bpf_get_stack`) shows that -O2 code needs the tables.
//! Fixture processes are killed by pid when a test ends, pass or fail.

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use aya::{
    Ebpf,
    maps::{MapData, RingBuf},
};
use oi_common::stack::{StackSample, check_mode};

use super::{Unwinder, check};
use crate::symbolize::Symbolizer;

/// The chain of `unwind_chain.cpp`, innermost first, up to `main`.
const CHAIN: &[&str] = &[
    "chain_leaf",
    "Sink::overflow",
    "std::basic_streambuf<char, std::char_traits<char> >::xsputn",
    // The demangler writes the standard abbreviation (`So`) as `std::ostream`.
    "std::ostream::write",
    "chain_c",
    "chain_b",
    "unwind_hop",
    "chain_a",
    "main",
];

/// The fixture and its library, built with `flags` (see [`oi_e2e::unwind_chain`]).
pub(crate) fn build(flags: &[&str]) -> PathBuf {
    oi_e2e::unwind_chain(flags)
}

/// A running fixture; killed (by pid) when dropped.
struct Fixture(Child);

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(exe: &Path) -> Fixture {
    let mut child = Command::new(exe)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start fixture");
    let stdout = child.stdout.take().expect("stdout");
    let fixture = Fixture(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read fixture");
    assert_eq!(line.trim(), "READY");
    fixture
}

/// Loads the test program for process `pid` with `mode`, its maps sized for the unwinder.
fn load(pid: u32, mode: u32) -> Ebpf {
    check::load(pid, mode, &[]).expect("load stack_check")
}

fn attach(ebpf: &mut Ebpf, exe: &Path, symbol: &str, pid: u32) {
    check::attach(ebpf, exe, symbol, pid).expect("attach");
}

/// The next sample of the ring buffer (waits for the fixture's next call).
fn next_sample(ring: &mut RingBuf<MapData>) -> StackSample {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(item) = ring.next() {
            assert_eq!(item.len(), size_of::<StackSample>());
            // SAFETY: the program sends whole StackSample values, a Pod type; read unaligned.
            return unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<StackSample>()) };
        }
        assert!(Instant::now() < deadline, "no sample from the fixture");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The function of each physical frame (the one holding the code, not those inlined at it).
fn names(symbolizer: &mut Symbolizer, pid: u32, frames: &[u64]) -> Vec<String> {
    // Return addresses name the instruction after the call: symbolize the call itself.
    let addrs: Vec<u64> = frames
        .iter()
        .enumerate()
        .map(|(i, &a)| if i == 0 { a } else { a.wrapping_sub(1) })
        .collect();
    symbolizer
        .frames(pid, &addrs)
        .iter()
        .map(|f| f.last().map_or(String::new(), |f| f.function.to_string()))
        .collect()
}

fn walks_the_known_chain(flags: &[&str], frame_pointers_fail: bool) {
    let exe = build(flags);
    let fixture = start(&exe);
    let pid = fixture.0.id();
    let mut ebpf = load(
        pid,
        check_mode::CFI | check_mode::FRAME_POINTERS | check_mode::SEND,
    );
    let mut unwinder = Unwinder::new(&mut ebpf).expect("unwinder");
    unwinder.track(pid as i32).expect("track");
    let loaded = unwinder.stats();
    // The executable, its library, libstdc++, libm, libgcc_s, libc and the dynamic loader.
    assert!(loaded.files >= 7, "{loaded:?}");
    assert_eq!(loaded.rows_dropped, 0);
    // Nothing changed: tracking again loads nothing.
    unwinder.track(pid as i32).expect("track again");
    assert_eq!(unwinder.stats().rows, loaded.rows);
    let mut ring = RingBuf::try_from(ebpf.take_map("SAMPLES").expect("SAMPLES")).expect("ring");
    attach(&mut ebpf, &exe, "chain_leaf", pid);
    let sample = next_sample(&mut ring);
    let mut symbolizer = Symbolizer::new();
    let cfi = names(
        &mut symbolizer,
        pid,
        &sample.cfi[..sample.cfi_frames as usize],
    );
    // The chain, then the C library's start code and the executable's `_start`, whose
    // return address is undefined: the end of the stack.
    let mut expected: Vec<String> = CHAIN.iter().map(|s| s.to_string()).collect();
    expected.push("__libc_start_call_main".into());
    expected.push("__libc_start_main".into());
    expected.push("_start".into());
    let mut got = cfi.clone();
    // One symbol, two names: glibc's `__libc_start_main` is an alias of `..._impl`.
    for name in &mut got {
        if name == "__libc_start_main_impl" {
            *name = "__libc_start_main".into();
        }
    }
    assert_eq!(
        got,
        expected,
        "frames {:x?}",
        &sample.cfi[..sample.cfi_frames as usize]
    );
    let stats = unwinder.stats();
    assert_eq!(stats.truncated_stacks, 0, "{stats:?}");
    assert_eq!(stats.frames_without_cfi, 0, "{stats:?}");
    let fp = names(
        &mut symbolizer,
        pid,
        &sample.fp[..sample.fp_frames as usize],
    );
    if frame_pointers_fail {
        // Without frame pointers the kernel's own walk loses the chain after the first frame.
        assert_eq!(fp.first().map(String::as_str), Some("chain_leaf"));
        assert!(
            !fp.starts_with(&expected[..CHAIN.len()]),
            "frame pointers alone found the chain: {fp:?}"
        );
    }
    // Forgetting the process empties the kernel's list and gives the rows back.
    unwinder.forget(pid as i32);
    assert_eq!(unwinder.stats().files, 0);
    drop(fixture);
}

#[test]
fn kernel_unwinder_walks_an_o2_chain_without_frame_pointers() {
    walks_the_known_chain(&["-O2", "-fomit-frame-pointer"], true);
}

#[test]
fn kernel_unwinder_walks_an_o0_chain() {
    walks_the_known_chain(&["-O0"], false);
}

/// A library loaded with dlopen after tracking started: the next `track` loads exactly its
/// rows, and the kernel walks through it.
#[test]
fn track_picks_up_a_dlopen() {
    let exe = build(&["-O2", "-fomit-frame-pointer"]);
    let lib = exe.with_file_name("libunwind_hop_dl.so");
    let mut child = Command::new(&exe)
        .env("UNWIND_DLOPEN", &lib)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start fixture");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let fixture = Fixture(child);
    let pid = fixture.0.id();
    let mut line = String::new();
    stdout.read_line(&mut line).expect("READY");
    assert_eq!(line.trim(), "READY");
    let mut ebpf = load(pid, check_mode::CFI | check_mode::SEND);
    let mut unwinder = Unwinder::new(&mut ebpf).expect("unwinder");
    unwinder.track(pid as i32).expect("track");
    let before = unwinder.stats();
    std::io::Write::write_all(&mut stdin, b"go\n").expect("write");
    line.clear();
    stdout.read_line(&mut line).expect("LOADED");
    assert_eq!(line.trim(), "LOADED");
    unwinder.track(pid as i32).expect("track again");
    let after = unwinder.stats();
    let binary = crate::debuginfo::Binary::open(&lib).expect("open");
    let lib_rows = crate::debuginfo::cfi::unwind_rows(&binary)
        .expect("rows")
        .rows
        .len() as u64;
    assert_eq!(
        (after.files, after.rows),
        (before.files + 1, before.rows + lib_rows)
    );
    let mut ring = RingBuf::try_from(ebpf.take_map("SAMPLES").expect("SAMPLES")).expect("ring");
    attach(&mut ebpf, &exe, "chain_leaf", pid);
    let sample = next_sample(&mut ring);
    let frames = &sample.cfi[..sample.cfi_frames as usize];
    let names = names(&mut Symbolizer::new(), pid, frames);
    assert_eq!(names[..CHAIN.len()], *CHAIN, "{frames:x?}");
    // The hop's frame is the dlopen'ed copy's.
    let hop = frames[CHAIN.iter().position(|f| *f == "chain_a").expect("chain_a") - 1];
    let mapped = crate::inferior::procfs::mappings(pid as i32).expect("maps");
    let in_lib = mapped
        .iter()
        .find(|m| m.start <= hop && hop < m.end)
        .expect("mapped");
    assert_eq!(in_lib.path.file_name(), lib.file_name());
    assert_eq!(unwinder.stats().frames_without_cfi, 0);
    drop(stdin);
}

/// Two processes of one executable (cgroup mode) share every file's rows; the rows go back
/// when the last of them is forgotten, and are reused for the next process.
#[test]
fn processes_share_the_rows_of_their_files() {
    let exe = build(&["-O2", "-fomit-frame-pointer"]);
    let (first, second) = (start(&exe), start(&exe));
    let mut ebpf = load(first.0.id(), 0);
    let mut unwinder = Unwinder::new(&mut ebpf).expect("unwinder");
    unwinder.track(first.0.id() as i32).expect("track");
    let one = unwinder.stats();
    unwinder.track(second.0.id() as i32).expect("track");
    let two = unwinder.stats();
    assert_eq!((two.files, two.rows), (one.files, one.rows));
    unwinder.forget(first.0.id() as i32);
    let left = unwinder.stats();
    assert_eq!((left.files, left.rows), (one.files, one.rows));
    unwinder.forget(second.0.id() as i32);
    assert_eq!((unwinder.stats().files, unwinder.stats().rows), (0, 0));
    let third = start(&exe);
    unwinder.track(third.0.id() as i32).expect("track");
    let again = unwinder.stats();
    assert_eq!(
        (again.files, again.rows, again.rows_dropped),
        (one.files, one.rows, 0)
    );
    // Reused: the released ranges held them, no fresh row was taken.
    assert_eq!(unwinder.next_row, one.rows as u32);
}

/// A row array too small for every file: what does not fit is counted, exactly, and the
/// files that fit are loaded whole.
#[test]
fn rows_that_do_not_fit_are_counted() {
    let exe = build(&["-O2", "-fomit-frame-pointer"]);
    let fixture = start(&exe);
    let pid = fixture.0.id();
    let files = crate::inferior::procfs::executable_files(pid as i32).expect("files");
    let sizes: Vec<u64> = files
        .iter()
        .map(|f| {
            let binary = crate::debuginfo::Binary::open(&f.host).expect("open");
            crate::debuginfo::cfi::unwind_rows(&binary)
                .expect("rows")
                .rows
                .len() as u64
        })
        .collect();
    let total: u64 = sizes.iter().sum();
    // Room for the largest file only.
    let capacity = *sizes.iter().max().expect("files") as u32;
    let mut ebpf = check::load(pid, 0, &[("UNWIND_ROWS", capacity)]).expect("load stack_check");
    let mut unwinder = Unwinder::new(&mut ebpf).expect("unwinder");
    unwinder.track(pid as i32).expect("track");
    let stats = unwinder.stats();
    assert!(stats.rows_dropped > 0, "{stats:?}");
    assert_eq!(
        stats.rows + stats.rows_dropped,
        total,
        "{stats:?} {sizes:?}"
    );
    assert!(stats.rows <= u64::from(capacity));
}

/// A process table full: the process that does not fit is counted (once, however often it is
/// tracked again), never an error, and a process forgotten makes room.
#[test]
fn processes_that_do_not_fit_are_counted() {
    let exe = build(&["-O2", "-fomit-frame-pointer"]);
    let first = start(&exe);
    let second = start(&exe);
    let (a, b) = (first.0.id() as i32, second.0.id() as i32);
    let mut ebpf = check::load(a as u32, 0, &[("UNWIND_MAPPINGS", 1)]).expect("load stack_check");
    let mut unwinder = Unwinder::new(&mut ebpf).expect("unwinder");
    unwinder.track(a).expect("track the first");
    unwinder.track(b).expect("a full table is no error");
    unwinder.track(b).expect("again");
    let stats = unwinder.stats();
    assert_eq!(stats.processes_untracked, 1, "{stats:?}");
    assert!(stats.rows > 0, "{stats:?}");
    unwinder.forget(a);
    unwinder.forget(b);
    unwinder.track(b).expect("room again");
    assert_eq!(unwinder.stats().processes_untracked, 1);
}
