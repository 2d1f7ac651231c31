//! The stubs run in this process (`local`), called in place of the functions they hook:
//! exact trees from known call patterns, the window, tail calls, return values in every
//! return register, eight integer arguments and varargs, a full ring, a signal handler's
//! calls, threads, a stack switch, and the reader on hostile bytes.

use std::{
    ffi::{CStr, c_char, c_int},
    hint::black_box,
    sync::{
        Arc, Barrier,
        atomic::{AtomicU64, Ordering},
    },
};

use oi_common::calls::{NodeKey, NodeStats, ROOT};
use oi_common::inject::spans::{AREA_SIZE, Event, RING_CAP, SpansLayout, kind, offset};

use super::{
    local::{Hook, LocalSpans},
    nodes::Nodes,
    reader::{self, View},
};

/// Stub addresses the test functions call through: what a patched entry's jump would do.
static STUB: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
const F: usize = 0;
const G: usize = 1;
const LEAF: usize = 2;
const TAIL: usize = 3;

fn stub<T: Copy>(i: usize) -> T {
    as_fn(STUB[i].load(Ordering::Acquire))
}

/// The stub at `at` as a function of type `T`.
fn as_fn<T: Copy>(at: u64) -> T {
    assert_ne!(at, 0);
    assert_eq!(std::mem::size_of::<T>(), 8);
    // SAFETY: every `T` here is an `extern "C" fn` type matching the hooked function, and the
    // address is its entry stub in a live read-execute mapping.
    unsafe { std::mem::transmute_copy::<u64, T>(&at) }
}

type U2U = extern "C" fn(u64) -> u64;

extern "C" fn leaf(n: u64) -> u64 {
    black_box(n) + 1
}

extern "C" fn g(n: u64) -> u64 {
    stub::<U2U>(LEAF)(n) * 2
}

/// F → G → LEAF, n times, and LEAF once directly.
extern "C" fn f(n: u64) -> u64 {
    let mut acc = 0;
    for i in 0..n {
        acc += stub::<U2U>(G)(i);
    }
    acc + stub::<U2U>(LEAF)(100)
}

fn addr(f: *const ()) -> u64 {
    f as u64
}

fn small() -> SpansLayout {
    SpansLayout::new(16).unwrap()
}

/// The stubs of f, g and leaf (ids 0, 1, 2; f the entry), published for the test functions.
fn three() -> LocalSpans {
    let spans = LocalSpans::new(
        small(),
        &[
            Hook {
                function: 0,
                window: true,
                original: addr(f as *const ()),
                unwinding: None,
            },
            Hook {
                function: 1,
                window: false,
                original: addr(g as *const ()),
                unwinding: None,
            },
            Hook {
                function: 2,
                window: false,
                original: addr(leaf as *const ()),
                unwinding: None,
            },
        ],
    )
    .unwrap();
    for (i, cell) in STUB.iter().enumerate().take(3) {
        cell.store(spans.entry(i), Ordering::Release);
    }
    spans
}

/// (parent function path, calls) of every node, for exact comparison.
fn shape(nodes: &[(NodeKey, u32, NodeStats)]) -> Vec<(Vec<u32>, u64)> {
    let path = |mut id: u32| {
        let mut p = Vec::new();
        while let Some((key, _, _)) = nodes.iter().find(|(_, i, _)| *i == id) {
            p.push(key.function);
            if key.parent == ROOT {
                break;
            }
            id = key.parent;
        }
        p.reverse();
        p
    };
    let mut out: Vec<(Vec<u32>, u64)> = nodes
        .iter()
        .map(|(_, id, s)| (path(*id), s.calls))
        .collect();
    out.sort();
    out
}

// The tests share STUB: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn calls_inside_the_window_build_the_exact_tree_and_outside_cost_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spans = three();
    let mut nodes = Nodes::new(1 << 32, 1024, None, None);
    // Outside the window: no event.
    assert_eq!(stub::<U2U>(LEAF)(41), 42);
    assert_eq!(stub::<U2U>(G)(1), 4);
    assert_eq!(spans.drain_into(&mut nodes).events, 0);

    let expected: u64 = (0..5).map(|i| (i + 1) * 2).sum::<u64>() + 101;
    for _ in 0..3 {
        assert_eq!(stub::<U2U>(F)(5), expected);
    }
    let drained = spans.drain_into(&mut nodes);
    // Per f: itself, 5 g, 5 leaf beneath them, 1 leaf: 12 calls, two events each.
    assert_eq!((drained.events, drained.bad), (3 * 12 * 2, 0));
    assert_eq!(
        shape(&nodes.nodes()),
        vec![
            (vec![0], 3),
            (vec![0, 1], 15),
            (vec![0, 1, 2], 15),
            (vec![0, 2], 3)
        ]
    );
    assert_eq!(nodes.counters.windows_closed, 3);
    assert_eq!(nodes.counters.unmatched, 0);
    // Outside again: the window closed.
    assert_eq!(stub::<U2U>(LEAF)(1), 2);
    assert_eq!(spans.drain_into(&mut nodes).events, 0);
    let t = spans.totals();
    assert_eq!((t.threads, t.open, t.dropped, t.shadow_full), (1, 0, 0, 0));
    // Times add up: a node's total is its self time and its children's totals.
    let all = nodes.nodes();
    let root = all.iter().find(|(k, _, _)| k.parent == ROOT).unwrap();
    let children: u64 = all
        .iter()
        .filter(|(k, _, _)| k.parent == root.1)
        .map(|(_, _, s)| s.total_ns)
        .sum();
    assert_eq!(root.2.total_ns, root.2.self_ns + children);
}

#[test]
fn the_entry_function_called_inside_itself_keeps_the_window_until_the_outer_call_returns() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    extern "C" fn outer(n: u64) -> u64 {
        // f (the entry) again, through its stub, then leaf: still inside the outer window.
        let r = stub::<U2U>(F)(n);
        r + stub::<U2U>(LEAF)(0)
    }
    let spans = LocalSpans::new(
        small(),
        &[
            Hook {
                function: 0,
                window: true,
                original: addr(outer as *const ()),
                unwinding: None,
            },
            Hook {
                function: 1,
                window: true,
                original: addr(f as *const ()),
                unwinding: None,
            },
            Hook {
                function: 2,
                window: false,
                original: addr(leaf as *const ()),
                unwinding: None,
            },
            Hook {
                function: 3,
                window: false,
                original: addr(g as *const ()),
                unwinding: None,
            },
        ],
    )
    .unwrap();
    // outer is the entry too (window); F's stub is f's, G's is g's.
    STUB[F].store(spans.entry(1), Ordering::Release);
    STUB[LEAF].store(spans.entry(2), Ordering::Release);
    STUB[G].store(spans.entry(3), Ordering::Release);
    let outer_fn: U2U = as_fn(spans.entry(0));
    assert_eq!(outer_fn(2), (2 + 4) + 101 + 1);
    let mut nodes = Nodes::new(1 << 32, 1024, None, None);
    spans.drain_into(&mut nodes);
    assert_eq!(
        shape(&nodes.nodes()),
        vec![
            (vec![0], 1),
            (vec![0, 1], 1),
            (vec![0, 1, 2], 1),
            (vec![0, 1, 3], 2),
            (vec![0, 1, 3, 2], 2),
            (vec![0, 2], 1),
        ]
    );
    assert_eq!(stub::<U2U>(LEAF)(1), 2);
    assert_eq!(
        spans.drain_into(&mut nodes).events,
        0,
        "both windows closed"
    );
}

/// A tail call: `mov r11, [the cell holding TAIL's callee]; jmp r11`.
fn tail_code(cell: &AtomicU64) -> crate::inject::record::local::Mapping {
    use iced_x86::code_asm::*;
    let cell = cell as *const AtomicU64 as u64;
    crate::inject::record::local::executable(64, |at| {
        let mut a = CodeAssembler::new(64).map_err(asm)?;
        a.mov(r11, cell).map_err(asm)?;
        a.mov(r11, qword_ptr(r11)).map_err(asm)?;
        a.jmp(r11).map_err(asm)?;
        a.assemble(at).map_err(asm)
    })
    .unwrap()
}

fn asm(e: iced_x86::IcedError) -> crate::inject::record::RecordError {
    crate::inject::record::RecordError::Local(e.to_string())
}

extern "C" fn f_tail(n: u64) -> u64 {
    stub::<U2U>(TAIL)(n) + 1
}

#[test]
fn a_tail_call_is_the_jumping_functions_child_and_both_return_together() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    static CALLEE: AtomicU64 = AtomicU64::new(0);
    let code = tail_code(&CALLEE);
    let spans = LocalSpans::new(
        small(),
        &[
            Hook {
                function: 0,
                window: true,
                original: addr(f_tail as *const ()),
                unwinding: None,
            },
            Hook {
                function: 1,
                window: false,
                original: addr(g as *const ()),
                unwinding: None,
            },
            Hook {
                function: 2,
                window: false,
                original: addr(leaf as *const ()),
                unwinding: None,
            },
            Hook {
                function: 3,
                window: false,
                original: code.addr(),
                unwinding: None,
            },
        ],
    )
    .unwrap();
    STUB[F].store(spans.entry(0), Ordering::Release);
    STUB[G].store(spans.entry(1), Ordering::Release);
    STUB[LEAF].store(spans.entry(2), Ordering::Release);
    STUB[TAIL].store(spans.entry(3), Ordering::Release);
    CALLEE.store(spans.entry(1), Ordering::Release);
    for n in 0..4 {
        assert_eq!(stub::<U2U>(F)(n), (n + 1) * 2 + 1);
    }
    let mut nodes = Nodes::new(1 << 32, 1024, None, None);
    spans.drain_into(&mut nodes);
    assert_eq!(
        shape(&nodes.nodes()),
        vec![
            (vec![0], 4),
            (vec![0, 3], 4),
            (vec![0, 3, 1], 4),
            (vec![0, 3, 1, 2], 4),
        ]
    );
    assert_eq!((nodes.counters.unmatched, nodes.counters.abandoned), (0, 0));
    assert_eq!(spans.totals().open, 0);
    assert_eq!(stub::<U2U>(LEAF)(1), 2);
    assert_eq!(spans.drain_into(&mut nodes).events, 0);
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pair {
    a: u64,
    b: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
struct Floats {
    x: f64,
    y: f64,
}

extern "C" fn pair(n: u64) -> Pair {
    Pair {
        a: black_box(n) * 3,
        b: black_box(n) ^ 0xdead_beef_0000,
    }
}

extern "C" fn half(x: f64) -> f64 {
    black_box(x) / 2.0
}

extern "C" fn floats(x: f64) -> Floats {
    Floats {
        x: black_box(x) + 0.25,
        y: black_box(x) * -3.5,
    }
}

#[allow(clippy::too_many_arguments)]
extern "C" fn eight(a: u64, b: u64, c: u64, d: u64, e: u64, f: u64, g: u64, h: u64) -> u64 {
    [a, b, c, d, e, f, g, h]
        .iter()
        .enumerate()
        .fold(0u64, |acc, (i, v)| {
            acc.wrapping_mul(31).wrapping_add(v ^ i as u64)
        })
}

std::arch::global_asm!(
    ".globl oi_spans_test_pi",
    "oi_spans_test_pi:",
    "fldpi",
    "ret",
);

unsafe extern "C" {
    fn oi_spans_test_pi();
}

type Snprintf = unsafe extern "C" fn(*mut c_char, usize, *const c_char, ...) -> c_int;

#[test]
fn return_values_arguments_and_varargs_pass_through_hooked_calls_unchanged() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let entry = |i: u32, original: u64| Hook {
        function: i,
        window: true,
        original,
        unwinding: None,
    };
    let spans = LocalSpans::new(
        small(),
        &[
            entry(0, addr(pair as *const ())),
            entry(1, addr(half as *const ())),
            entry(2, addr(floats as *const ())),
            entry(3, addr(eight as *const ())),
            entry(4, addr(libc::snprintf as *const ())),
            entry(5, addr(oi_spans_test_pi as *const ())),
        ],
    )
    .unwrap();
    let hooked_pair: extern "C" fn(u64) -> Pair = as_fn(spans.entry(0));
    let hooked_half: extern "C" fn(f64) -> f64 = as_fn(spans.entry(1));
    let hooked_floats: extern "C" fn(f64) -> Floats = as_fn(spans.entry(2));
    #[allow(clippy::type_complexity)]
    let hooked_eight: extern "C" fn(u64, u64, u64, u64, u64, u64, u64, u64) -> u64 =
        as_fn(spans.entry(3));
    let hooked_snprintf: Snprintf = as_fn(spans.entry(4));

    for n in [0u64, 7, u64::MAX / 3] {
        assert_eq!(hooked_pair(n), pair(n));
    }
    for x in [0.0, 1.5, -1e300, f64::MIN_POSITIVE] {
        assert_eq!(hooked_half(x).to_bits(), half(x).to_bits());
        assert_eq!(hooked_floats(x), floats(x));
    }
    let args = [
        0x1111_2222_3333_4444u64,
        5,
        u64::MAX,
        0,
        0x8000_0000_0000_0000,
        42,
        0xfeed_face,
        0x0123_4567_89ab_cdef,
    ];
    let [a, b, c, d, e, f, g, h] = args;
    assert_eq!(
        hooked_eight(a, b, c, d, e, f, g, h),
        eight(a, b, c, d, e, f, g, h)
    );

    // Varargs: two doubles (al = 2, which the hooked function reads) and integers past the
    // registers, on the stack.
    let format = c"%d %.3f %s %ld %.1f %d %d %d %d|";
    let print = |f: Snprintf| {
        let mut buf = [0 as c_char; 128];
        // SAFETY: a buffer of its stated size, a NUL-terminated format, and arguments of the
        // types the format names.
        let n = unsafe {
            f(
                buf.as_mut_ptr(),
                buf.len(),
                format.as_ptr(),
                -17 as c_int,
                std::f64::consts::E,
                c"str".as_ptr(),
                1i64 << 40,
                -0.5f64,
                1 as c_int,
                2 as c_int,
                3 as c_int,
                4 as c_int,
            )
        };
        // SAFETY: snprintf wrote a NUL-terminated string into `buf`.
        (n, unsafe { CStr::from_ptr(buf.as_ptr()) }.to_owned())
    };
    let direct = print(libc::snprintf);
    assert_eq!(
        direct.1.to_str().unwrap(),
        "-17 2.718 str 1099511627776 -0.5 1 2 3 4|"
    );
    assert_eq!(print(hooked_snprintf), direct);

    // A long double in st(0), directly and through the stubs.
    let st0 = |f: u64| {
        let mut out = 0f64;
        // SAFETY: calls a function that takes nothing and leaves pi in st(0), which is stored
        // and popped here; every register the C ABI lets a call clobber is declared so.
        unsafe {
            std::arch::asm!(
                "call {f}",
                "fstp qword ptr [r12]",
                f = in(reg) f,
                // Callee-saved: the call keeps it.
                in("r12") &mut out as *mut f64,
                clobber_abi("C"),
            );
        }
        out
    };
    assert_eq!(
        st0(addr(oi_spans_test_pi as *const ())),
        std::f64::consts::PI
    );
    assert_eq!(st0(spans.entry(5)), std::f64::consts::PI);

    let mut nodes = Nodes::new(1 << 32, 1024, None, None);
    spans.drain_into(&mut nodes);
    // Every call above went through its stub, hooked, and returned through the exit stub.
    assert_eq!(nodes.counters.windows_closed, 3 + 8 + 1 + 1 + 1);
    assert_eq!(spans.totals().open, 0);
}

extern "C" fn many(n: u64) -> u64 {
    (0..n).map(|i| stub::<U2U>(LEAF)(i)).sum()
}

#[test]
fn a_full_ring_leaves_calls_unhooked_and_counts_them_and_exits_always_fit() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spans = LocalSpans::new(
        small(),
        &[
            Hook {
                function: 0,
                window: true,
                original: addr(many as *const ()),
                unwinding: None,
            },
            Hook {
                function: 2,
                window: false,
                original: addr(leaf as *const ()),
                unwinding: None,
            },
        ],
    )
    .unwrap();
    STUB[F].store(spans.entry(0), Ordering::Release);
    STUB[LEAF].store(spans.entry(1), Ordering::Release);
    let n = 10_000u64;
    assert_eq!(stub::<U2U>(F)(n), (1..=n).sum::<u64>());
    // Room for the entry, then a leaf needs its 2 events and the entry's exit: 8191 fit.
    let t = spans.totals();
    assert_eq!((t.dropped, t.open), (n - 8191, 0));
    let mut nodes = Nodes::new(1 << 32, 1024, None, None);
    let drained = spans.drain_into(&mut nodes);
    assert_eq!((drained.events, drained.bad), (RING_CAP, 0));
    assert_eq!(
        shape(&nodes.nodes()),
        vec![(vec![0], 1), (vec![0, 2], 8191)]
    );
    // Drained: room again.
    assert_eq!(stub::<U2U>(F)(3), 6);
    spans.drain_into(&mut nodes);
    assert_eq!(
        shape(&nodes.nodes()),
        vec![(vec![0], 2), (vec![0, 2], 8194)]
    );
}

extern "C" fn on_usr1(_: c_int) {
    stub::<U2U>(LEAF)(1);
}

extern "C" fn raiser(n: u64) -> u64 {
    // SAFETY: raises a signal whose handler (installed by the test) only calls `leaf`.
    unsafe { libc::raise(libc::SIGUSR1) };
    n
}

#[test]
fn a_signal_handlers_calls_inside_a_hooked_call_are_its_children() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spans = LocalSpans::new(
        small(),
        &[
            Hook {
                function: 0,
                window: true,
                original: addr(raiser as *const ()),
                unwinding: None,
            },
            Hook {
                function: 2,
                window: false,
                original: addr(leaf as *const ()),
                unwinding: None,
            },
        ],
    )
    .unwrap();
    STUB[LEAF].store(spans.entry(1), Ordering::Release);
    // SAFETY: installs a handler for SIGUSR1, which nothing else in the tests uses; restored
    // below.
    let old = unsafe { libc::signal(libc::SIGUSR1, on_usr1 as *const () as libc::sighandler_t) };
    let hooked: U2U = as_fn(spans.entry(0));
    assert_eq!(hooked(5), 5);
    // SAFETY: puts the previous disposition back.
    unsafe { libc::signal(libc::SIGUSR1, old) };
    let mut nodes = Nodes::new(1 << 32, 1024, None, None);
    spans.drain_into(&mut nodes);
    assert_eq!(shape(&nodes.nodes()), vec![(vec![0], 1), (vec![0, 2], 1)]);
    assert_eq!(spans.totals().interrupted, 0);
}

#[test]
fn eight_threads_count_exactly_while_the_rings_are_drained() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spans = Arc::new(three());
    let threads = 8;
    let calls = 500u64;
    let barrier = Arc::new(Barrier::new(threads + 1));
    let done = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (barrier, done) = (barrier.clone(), done.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..calls {
                    assert_eq!(stub::<U2U>(F)(3), 2 + 4 + 6 + 101);
                }
                done.fetch_add(1, Ordering::AcqRel);
            })
        })
        .collect();
    let mut nodes = Nodes::new(1 << 32, 1024, None, None);
    barrier.wait();
    while done.load(Ordering::Acquire) < threads as u64 {
        spans.drain_into(&mut nodes);
        std::thread::yield_now();
    }
    for h in handles {
        h.join().unwrap();
    }
    spans.drain_into(&mut nodes);
    let n = threads as u64 * calls;
    assert_eq!(
        shape(&nodes.nodes()),
        vec![
            (vec![0], n),
            (vec![0, 1], 3 * n),
            (vec![0, 1, 2], 3 * n),
            (vec![0, 2], n)
        ]
    );
    let t = spans.totals();
    assert_eq!(
        (t.threads, t.dropped, t.open, t.interrupted),
        (threads as u64, 0, 0, 0)
    );
}

#[test]
fn the_reader_and_the_tree_refuse_hostile_bytes_without_panicking() {
    let layout = small();
    let mut bytes = vec![0u64; (layout.size() / 8) as usize];
    // SAFETY: a buffer of ours, 8-byte aligned, alive for the whole test.
    let view = unsafe { View::new(bytes.as_mut_ptr().cast(), bytes.len() * 8) };
    let slot0 = oi_common::inject::HEADER_SIZE;
    view.store(slot0, 0x1234);
    let area = layout.area_offset(0);
    // A ring claiming more than it holds: skipped whole.
    view.store(area + offset::RESERVED, RING_CAP * 3);
    let mut seen = Vec::new();
    let d = reader::drain(view, layout, &mut |t, e| seen.push((t, e)));
    assert_eq!((d.events, d.bad), (0, 1));
    assert_eq!(view.load(area + offset::CONSUMED), RING_CAP * 3);
    // Events whose numbers are wrong: the batch stops there.
    view.store(area + offset::RESERVED, RING_CAP * 3 + 4);
    let d = reader::drain(view, layout, &mut |t, e| seen.push((t, e)));
    assert_eq!((d.events, d.bad), (0, 1));
    // Random events into the tree: counted, never a panic, the stacks bounded.
    let mut nodes = Nodes::new(1 << 32, 64, Some(3), Some(100));
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        nodes.event(
            x % 5,
            Event {
                word: x & !(0xfu64 << 60),
                tsc: x.rotate_left(17),
            },
        );
    }
    assert!(nodes.nodes().len() <= 64);
    let c = nodes.counters;
    assert!(c.bad + c.unmatched > 0);
    let _ = (AREA_SIZE, kind::ENTRY);
}

/// `abandon` calls the hooked `escape`, which leaves its frame without returning, as a
/// `longjmp` does (rsp back to abandon's, a jump to after the call); then abandon returns.
fn longjmp_code(
    cell: &AtomicU64,
    catch: Option<&AtomicU64>,
) -> (crate::inject::record::local::Mapping, u64) {
    use iced_x86::code_asm::*;
    let cell = cell as *const AtomicU64 as u64;
    let mut escape_at = 0;
    let code = crate::inject::record::local::executable(128, |at| {
        let mut a = CodeAssembler::new(64).map_err(asm)?;
        let mut back = a.create_label();
        let mut escape = a.create_label();
        a.push(rbx).map_err(asm)?;
        a.mov(rbx, rsp).map_err(asm)?;
        a.mov(r11, cell).map_err(asm)?;
        a.mov(r11, qword_ptr(r11)).map_err(asm)?;
        a.call(r11).map_err(asm)?;
        a.set_label(&mut back).map_err(asm)?;
        if let Some(catch) = catch {
            // A catch block starting where the call was: `__cxa_begin_catch`'s place.
            a.mov(r11, catch as *const AtomicU64 as u64).map_err(asm)?;
            a.mov(r11, qword_ptr(r11)).map_err(asm)?;
            a.call(r11).map_err(asm)?;
        }
        a.pop(rbx).map_err(asm)?;
        a.ret().map_err(asm)?;
        a.set_label(&mut escape).map_err(asm)?;
        a.mov(rsp, rbx).map_err(asm)?;
        a.jmp(back).map_err(asm)?;
        let result = a
            .assemble_options(
                at,
                iced_x86::BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
            )
            .map_err(asm)?;
        escape_at = result.label_ip(&escape).map_err(asm)?;
        Ok(result.inner.code_buffer)
    })
    .unwrap();
    (code, escape_at)
}

extern "C" fn f_longjmp(n: u64) -> u64 {
    stub::<extern "C" fn()>(TAIL)();
    stub::<U2U>(LEAF)(n)
}

#[test]
fn a_frame_left_without_returning_is_closed_as_unwound_by_the_next_exit() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    static ESCAPE: AtomicU64 = AtomicU64::new(0);
    let (code, escape) = longjmp_code(&ESCAPE, None);
    let spans = LocalSpans::new(
        small(),
        &[
            Hook {
                function: 0,
                window: true,
                original: addr(f_longjmp as *const ()),
                unwinding: None,
            },
            Hook {
                function: 2,
                window: false,
                original: addr(leaf as *const ()),
                unwinding: None,
            },
            Hook {
                function: 3,
                window: false,
                original: code.addr(),
                unwinding: None,
            },
            Hook {
                function: 4,
                window: false,
                original: escape,
                unwinding: None,
            },
        ],
    )
    .unwrap();
    STUB[LEAF].store(spans.entry(1), Ordering::Release);
    STUB[TAIL].store(spans.entry(2), Ordering::Release);
    ESCAPE.store(spans.entry(3), Ordering::Release);
    let hooked: U2U = as_fn(spans.entry(0));
    for n in 0..3 {
        assert_eq!(hooked(n), n + 1);
    }
    let mut nodes = Nodes::new(1 << 32, 1024, None, None);
    spans.drain_into(&mut nodes);
    assert_eq!(
        shape(&nodes.nodes()),
        vec![
            (vec![0], 3),
            (vec![0, 2], 3),
            (vec![0, 3], 3),
            (vec![0, 3, 4], 3)
        ]
    );
    assert_eq!((nodes.counters.abandoned, nodes.counters.unmatched), (3, 0));
    let unwound: u64 = nodes
        .nodes()
        .iter()
        .filter(|(k, _, _)| k.function == 4)
        .map(|(_, _, s)| s.abandoned)
        .sum();
    assert_eq!(unwound, 3);
    assert_eq!(spans.totals().open, 0);
}

/// The shadow entries of every thread: (slot, what the slot holds, real return address).
fn hooked_slots(spans: &LocalSpans) -> Vec<(u64, u64, u64)> {
    use oi_common::inject::spans::{SHADOW_ENTRY_SIZE, SHADOW_OFFSET};
    let (view, layout) = (spans.view(), spans.layout());
    let mut out = Vec::new();
    for index in 0..layout.slots {
        let area = layout.area_offset(index);
        let depth = view.load(area + offset::SHADOW_DEPTH);
        for e in 0..depth {
            let at = area + SHADOW_OFFSET + e * SHADOW_ENTRY_SIZE;
            let slot = view.load(at + offset::SLOT);
            // SAFETY: the slot of an open hooked call of this thread: a live word of its
            // stack, above the caller's frame.
            let holds = unsafe { std::ptr::read_volatile(slot as *const u64) };
            out.push((slot, holds, view.load(at + offset::RET)));
        }
    }
    out
}

static UNWINDING_SPANS: std::sync::Mutex<Option<usize>> = std::sync::Mutex::new(None);
static RESTORED_SEEN: AtomicU64 = AtomicU64::new(0);
static REHOOKED_SEEN: AtomicU64 = AtomicU64::new(0);
const RAISE: usize = 5;
const CATCH: usize = 6;

fn with_spans(check: impl FnOnce(&LocalSpans)) {
    let at = UNWINDING_SPANS.lock().unwrap().expect("spans published");
    // SAFETY: the test publishes the address of its LocalSpans, alive until the calls end.
    check(unsafe { &*(at as *const LocalSpans) });
}

/// The raise stub's original: every hooked slot holds its real return address again.
extern "C" fn on_raise() {
    with_spans(|spans| {
        let entries = hooked_slots(spans);
        assert!(!entries.is_empty());
        assert!(
            entries.iter().all(|&(_, holds, ret)| holds == ret),
            "{entries:x?}"
        );
        RESTORED_SEEN.fetch_add(entries.len() as u64, Ordering::AcqRel);
    });
}

/// The catch stub's original: every live hooked slot holds the exit stub again.
extern "C" fn on_catch() {
    with_spans(|spans| {
        let entries = hooked_slots(spans);
        assert!(
            entries.iter().all(|&(_, holds, _)| holds == spans.exit()),
            "{entries:x?}"
        );
        REHOOKED_SEEN.fetch_add(entries.len() as u64, Ordering::AcqRel);
    });
}

extern "C" fn g_unwinding(n: u64) -> u64 {
    stub::<extern "C" fn()>(RAISE)();
    stub::<extern "C" fn()>(CATCH)();
    n + 1
}

extern "C" fn f_unwinding(n: u64) -> u64 {
    let r = stub::<U2U>(G)(n);
    // The longjmp-like escape, caught where it was called.
    stub::<extern "C" fn()>(TAIL)();
    r
}

#[test]
fn unwinding_stubs_put_hooked_returns_back_close_unwound_frames_and_hook_live_ones_again() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    static ESCAPE: AtomicU64 = AtomicU64::new(0);
    let (code, escape) = longjmp_code(&ESCAPE, Some(&STUB[CATCH]));
    let call = |function: u32, window: bool, original: u64| Hook {
        function,
        window,
        original,
        unwinding: None,
    };
    let unwind = |what: super::stubs::Unwinding, original: u64| Hook {
        function: 0,
        window: false,
        original,
        unwinding: Some(what),
    };
    let spans = LocalSpans::new(
        small(),
        &[
            call(0, true, addr(f_unwinding as *const ())),
            call(1, false, addr(g_unwinding as *const ())),
            call(3, false, code.addr()),
            call(4, false, escape),
            unwind(super::stubs::Unwinding::Raise, addr(on_raise as *const ())),
            unwind(super::stubs::Unwinding::Catch, addr(on_catch as *const ())),
        ],
    )
    .unwrap();
    *UNWINDING_SPANS.lock().unwrap() = Some(&spans as *const LocalSpans as usize);
    STUB[G].store(spans.entry(1), Ordering::Release);
    STUB[TAIL].store(spans.entry(2), Ordering::Release);
    ESCAPE.store(spans.entry(3), Ordering::Release);
    STUB[RAISE].store(spans.entry(4), Ordering::Release);
    STUB[CATCH].store(spans.entry(5), Ordering::Release);
    let hooked: U2U = as_fn(spans.entry(0));
    assert_eq!(hooked(41), 42);
    *UNWINDING_SPANS.lock().unwrap() = None;
    // Raise saw f and g restored; catch saw them hooked again, then f and abandon (escape was
    // closed before the check).
    assert_eq!(RESTORED_SEEN.load(Ordering::Acquire), 2);
    assert_eq!(REHOOKED_SEEN.load(Ordering::Acquire), 2 + 2);
    let mut nodes = Nodes::new(1 << 32, 1024, None, None);
    spans.drain_into(&mut nodes);
    assert_eq!(
        shape(&nodes.nodes()),
        vec![
            (vec![0], 1),
            (vec![0, 1], 1),
            (vec![0, 3], 1),
            (vec![0, 3, 4], 1)
        ]
    );
    assert_eq!((nodes.counters.abandoned, nodes.counters.unmatched), (1, 0));
    assert_eq!(spans.totals().open, 0);
}

std::arch::global_asm!(".globl oi_spans_test_nop", "oi_spans_test_nop:", "ret",);

unsafe extern "C" {
    fn oi_spans_test_nop();
}

#[test]
fn every_general_register_survives_a_hooked_call_as_interprocedural_allocation_expects() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spans = LocalSpans::new(
        small(),
        &[Hook {
            function: 0,
            window: true,
            original: addr(oi_spans_test_nop as *const ()),
            unwinding: None,
        }],
    )
    .unwrap();
    let patterns: [u64; 9] = std::array::from_fn(|i| 0x1111_1111_1111_1111 * (i as u64 + 1));
    let mut r = patterns;
    // SAFETY: calls the stub of a function that only returns; every register it could
    // change is an operand, and the stack is left as it was.
    unsafe {
        std::arch::asm!(
            "call {f}",
            f = in(reg) spans.entry(0),
            inout("rax") r[0],
            inout("rcx") r[1],
            inout("rdx") r[2],
            inout("rsi") r[3],
            inout("rdi") r[4],
            inout("r8") r[5],
            inout("r9") r[6],
            inout("r10") r[7],
            inout("r11") r[8],
        );
    }
    assert_eq!(r, patterns);
    let mut nodes = Nodes::new(1 << 32, 1024, None, None);
    spans.drain_into(&mut nodes);
    assert_eq!(nodes.counters.windows_closed, 1, "the call was hooked");
}

/// Where the stack-switch test keeps its two contexts (`ucontext_t`s it leaked).
static MAIN_CTX: AtomicU64 = AtomicU64::new(0);
static CO_CTX: AtomicU64 = AtomicU64::new(0);
static CO_LEAVES: AtomicU64 = AtomicU64::new(0);
const YIELD: usize = 4;

/// The hooked `co_yield`: a tail call of `swapcontext(CO_CTX, MAIN_CTX)`, as GCC makes one at
/// -O2, so that the context is saved with the exit stub's address as where it resumes.
fn yield_code() -> crate::inject::record::local::Mapping {
    use iced_x86::code_asm::*;
    crate::inject::record::local::executable(64, |at| {
        let mut a = CodeAssembler::new(64).map_err(asm)?;
        a.mov(rdi, CO_CTX.load(Ordering::Acquire)).map_err(asm)?;
        a.mov(rsi, MAIN_CTX.load(Ordering::Acquire)).map_err(asm)?;
        a.mov(rax, libc::swapcontext as *const () as u64)
            .map_err(asm)?;
        a.jmp(rax).map_err(asm)?;
        a.assemble(at).map_err(asm)
    })
    .unwrap()
}

/// The coroutine, on its own stack: leaf, then a switch back to the main context, 3 times.
extern "C" fn co_body() {
    for i in 0..3 {
        CO_LEAVES.fetch_add(stub::<U2U>(LEAF)(10 + i), Ordering::AcqRel);
        stub::<extern "C" fn()>(YIELD)();
    }
}

/// The entry function: resumes the coroutine four times (the fourth lets it finish and
/// return to this context), and calls leaf after each switch back.
extern "C" fn w_swap(_: u64) -> u64 {
    let (main, co) = (
        MAIN_CTX.load(Ordering::Acquire) as *mut libc::ucontext_t,
        CO_CTX.load(Ordering::Acquire) as *mut libc::ucontext_t,
    );
    let mut acc = 0;
    for i in 0..4 {
        // SAFETY: both contexts are live, leaked by the test; the coroutine's was made by
        // makecontext on a stack that outlives it, and links back to `main`.
        assert_eq!(unsafe { libc::swapcontext(main, co) }, 0);
        acc += stub::<U2U>(LEAF)(i);
    }
    acc
}

#[test]
fn a_stack_switch_puts_back_the_returns_of_frames_left_on_the_other_stack() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let leak = || Box::into_raw(Box::new(std::mem::MaybeUninit::<libc::ucontext_t>::zeroed()));
    let (main, co) = (
        leak().cast::<libc::ucontext_t>(),
        leak().cast::<libc::ucontext_t>(),
    );
    // Below this thread's stack, as a coroutine stack in the heap is below the main thread's:
    // asked for at a low address, which the kernel gives when it is free.
    const STACK: usize = 64 * 1024;
    // SAFETY: a fresh private anonymous mapping, never unmapped (the coroutine's context may
    // point into it until the process ends).
    let at = unsafe {
        libc::mmap(
            0x2000_0000 as *mut libc::c_void,
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(at, libc::MAP_FAILED);
    let here = 0u64;
    assert!(
        (at as u64) < &here as *const u64 as u64,
        "the stack is below ours"
    );
    // SAFETY: `co` is a zeroed ucontext_t of ours; getcontext fills it, and makecontext gets a
    // stack that lives to the end of the process (mapped above) and a link to `main`, filled
    // by swapcontext before the coroutine can finish.
    unsafe {
        assert_eq!(libc::getcontext(co), 0);
        (*co).uc_stack.ss_sp = at;
        (*co).uc_stack.ss_size = STACK;
        (*co).uc_link = main;
        libc::makecontext(co, co_body, 0);
    }
    MAIN_CTX.store(main as u64, Ordering::Release);
    CO_CTX.store(co as u64, Ordering::Release);
    let code = yield_code();
    let spans = LocalSpans::new(
        small(),
        &[
            Hook {
                function: 0,
                window: true,
                original: addr(w_swap as *const ()),
                unwinding: None,
            },
            Hook {
                function: 2,
                window: false,
                original: addr(leaf as *const ()),
                unwinding: None,
            },
            Hook {
                function: 4,
                window: false,
                original: code.addr(),
                unwinding: None,
            },
        ],
    )
    .unwrap();
    STUB[LEAF].store(spans.entry(1), Ordering::Release);
    STUB[YIELD].store(spans.entry(2), Ordering::Release);
    CO_LEAVES.store(0, Ordering::Release);
    let hooked: U2U = as_fn(spans.entry(0));
    assert_eq!(hooked(0), 1 + 2 + 3 + 4);
    assert_eq!(CO_LEAVES.load(Ordering::Acquire), 11 + 12 + 13);

    // Each switch back left the yield's frame on the coroutine's stack, hooked: the leaf call
    // after it dropped the entry and put the real return address back; the coroutine's context
    // had saved the exit stub's address, and resumed through the orphans.
    let t = spans.totals();
    assert_eq!((t.resynced, t.orphan_returns), (3, 3));
    let mut nodes = Nodes::new(1 << 32, 1024, None, None);
    spans.drain_into(&mut nodes);
    // The coroutine's calls show under the entry, whose frame was the newest on the shadow
    // stack when it switched.
    assert_eq!(
        shape(&nodes.nodes()),
        vec![(vec![0], 1), (vec![0, 2], 4 + 3), (vec![0, 4], 3)]
    );
    assert_eq!((nodes.counters.abandoned, nodes.counters.unmatched), (3, 0));
    assert_eq!(spans.totals().open, 0);
}
