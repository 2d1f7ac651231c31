//! What one probe hit costs on this machine, measured at start on functions of oi-trace itself,
//! with the same program, the same maps and the same way of attaching as the real run.
//!
//! A window function of ours calls a leaf of ours N times; both are probed exactly as a target's
//! functions are (entry and `ret` sites from the same disassembly). The time of N calls with and
//! without the probes, over the number of hits, is the cost of a hit inside a window; N direct
//! calls of the leaf from an unprobed loop give the cost of a hit outside one. The run doubles as
//! a self-test: the tree the kernel built for our calls must have exactly the calls we made.
//!
//! The figures are reported next to the results (how much of each time is probe cost); nothing
//! is ever subtracted from a measured time. Never touches the target.

use std::{hint::black_box, time::Instant};

use oi_common::calls::{NodeKey, ROOT, cookie};

use super::{
    program::Program,
    select::{ColdParts, Function},
    sites::sites_of,
};
use crate::{
    debuginfo::{Binary, find_function},
    error::{Error, Result},
};

/// Leaf calls per timed run, and timed runs per figure (the median counts: the fastest would
/// flatter the probes on a busy machine, where the target runs too). 200 probed calls take
/// about 4 ms (a hit costs 10 µs on a VM): long enough for the clock, and short enough that
/// the whole calibration stays near 50 ms of start-up.
const CALLS: u64 = 200;
const RUNS: usize = 5;
/// Function ids of the calibration functions: far from the target's ids (which count from 0).
const WINDOW_ID: u32 = cookie::MAX_FUNCTIONS - 2;
const LEAF_ID: u32 = cookie::MAX_FUNCTIONS - 3;

/// The measured cost of one probe hit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProbeCost {
    /// Per hit of a thread inside a window (the entry and return of a timed call).
    pub inside_ns: f64,
    /// Per hit of a thread outside every window (one map lookup).
    pub outside_ns: f64,
    /// A function call without probes, for scale.
    pub bare_call_ns: f64,
}

/// The leaf: as small as a function gets.
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn oi_trace_calibration_leaf(x: u64) -> u64 {
    black_box(x).wrapping_add(1)
}

/// The window: `n` calls of the leaf.
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn oi_trace_calibration_window(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = oi_trace_calibration_leaf(black_box(acc ^ i));
    }
    acc
}

/// `n` calls of the leaf from code that is not probed: outside any window.
#[inline(never)]
fn outside(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = oi_trace_calibration_leaf(black_box(acc ^ i));
    }
    acc
}

/// The median of `RUNS` timings of `f`, in ns.
fn timed(f: &dyn Fn() -> u64) -> f64 {
    let mut times: Vec<f64> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed().as_nanos() as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[RUNS / 2]
}

/// Measures the cost of a hit with `program` (which must have nothing else attached, and is
/// reset by the caller afterwards). Errors when our own functions cannot be probed or the
/// kernel's tree of our calls is wrong (then nothing it measures could be trusted).
pub fn measure(program: &mut Program) -> Result<ProbeCost> {
    let exe = Binary::open("/proc/self/exe")
        .map_err(|e| Error::internal(format!("calibration: reading oi-trace itself: {e}")))?;
    let symbol = |name: &str| {
        find_function(&exe, name)
            .ok()
            .and_then(|mut found| found.pop())
            .ok_or_else(|| {
                Error::internal(format!(
                    "calibration: oi-trace has no symbol {name} (was it stripped?)"
                ))
            })
    };
    let functions = [
        Function {
            file: 0,
            symbol: symbol("oi_trace_calibration_window")?,
            name: "oi_trace_calibration_window".into(),
            is_entry: true,
        },
        Function {
            file: 0,
            symbol: symbol("oi_trace_calibration_leaf")?,
            name: "oi_trace_calibration_leaf".into(),
            is_entry: false,
        },
    ];
    let ids = [WINDOW_ID, LEAF_ID];
    let mut sites = Vec::new();
    for (f, found) in functions.iter().zip(sites_of(
        &functions,
        &ids,
        &[exe.bytes()],
        &[ColdParts::default()],
    )) {
        sites.extend(
            found
                .map_err(|why| {
                    Error::internal(format!("calibration: cannot probe {}: {why}", f.name))
                })?
                .sites,
        );
    }

    let window = || oi_trace_calibration_window(CALLS);
    let direct = || outside(CALLS);
    window();
    let bare_window = timed(&window);
    let bare_direct = timed(&direct);

    let attachment = program.attach(exe.path(), &sites, Some(std::process::id()), &mut |_| {})?;
    window();
    let probed_window = timed(&window);
    let probed_direct = timed(&direct);
    program.detach(attachment);

    // The self-test: one window node with 1 + RUNS calls, one leaf node beneath it with
    // CALLS for each of them; the direct calls were outside and count nowhere.
    let snapshot = program.snapshot();
    let calls_of = |parent: u32, function: u32| {
        snapshot
            .nodes
            .iter()
            .find(|(key, _, _)| *key == NodeKey { parent, function })
            .map(|&(_, id, stats)| (id, stats.calls))
    };
    let windows = 1 + RUNS as u64;
    let root = calls_of(ROOT, WINDOW_ID);
    let leaf = root.and_then(|(id, _)| calls_of(id, LEAF_ID));
    if root.map(|r| r.1) != Some(windows) || leaf.map(|l| l.1) != Some(windows * CALLS) {
        return Err(Error::internal(format!(
            "self-test failed: the kernel counted {:?} windows and {:?} calls beneath them \
             where oi-trace made {windows} and {}; this kernel's uprobes or this eBPF program \
             misbehave, and no figure would be right",
            root.map(|r| r.1),
            leaf.map(|l| l.1),
            windows * CALLS
        )));
    }
    let hits_inside = (2 * CALLS + 2) as f64;
    let hits_outside = (2 * CALLS) as f64;
    Ok(ProbeCost {
        inside_ns: ((probed_window - bare_window) / hits_inside).max(0.0),
        outside_ns: ((probed_direct - bare_direct) / hits_outside).max(0.0),
        bare_call_ns: bare_direct / CALLS as f64,
    })
}
