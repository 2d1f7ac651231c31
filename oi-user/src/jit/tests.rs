//! Differential tests: the JIT's stream equals the interpreter's, word for word, on real
//! libstdc++ objects built in this very process.
//!
//! `testdata/objects.cpp` is compiled with `g++ -g -shared -fPIC` into `target/fixtures/`
//! and `dlopen`ed; its `make_*` functions build objects and return their addresses, its
//! `probe_*` functions give the [`Measurer`] the parameter types. The interpreter reads this
//! process through `process_vm_readv` (a [`RemoteReader`] on our own pid); the compiled code
//! is mapped executable and called directly. Objects are leaked on purpose (a test process
//! is short-lived, and some have cycles).

use std::ffi::{CString, c_void};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use oi_common::EntryRegs;

use super::*;
use crate::debuginfo::{Binary, find_function};
use crate::footprint::measure::{MeasureError, Measurer};
use crate::interp::RemoteReader;

/// The fixture library, loaded once per test process.
struct Lib {
    handle: usize,
    binary: Binary,
    bias: u64,
}

fn lib() -> &'static Lib {
    static LIB: OnceLock<Lib> = OnceLock::new();
    LIB.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let src = root.join("src/jit/testdata/objects.cpp");
        let dir = root.join("../target/fixtures");
        std::fs::create_dir_all(&dir).expect("create target/fixtures");
        let path = dir.join("jit_objects.so");
        let mtime = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
        if mtime(&path).is_none() || mtime(&path) < mtime(&src) {
            // Build to a temporary name: concurrent test binaries may load the old one.
            let tmp = dir.join(format!("jit_objects.so.{}", std::process::id()));
            let out = Command::new("g++")
                .args(["-g", "-O1", "-std=c++17", "-shared", "-fPIC", "-o"])
                .arg(&tmp)
                .arg(&src)
                .output()
                .expect("run g++");
            assert!(
                out.status.success(),
                "g++: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::rename(&tmp, &path).expect("rename fixture");
        }
        let c = CString::new(path.to_str().expect("utf8 path")).expect("path");
        // SAFETY: dlopen of a library we just built; its constructors are libstdc++'s.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
        assert!(!handle.is_null(), "dlopen {}", path.display());
        let binary = Binary::open(&path).expect("open fixture");
        let bias = bias_of(&path, &binary);
        Lib {
            handle: handle as usize,
            binary,
            bias,
        }
    })
}

/// Load bias of `path` in this process, from its first private mapping (the shared one
/// is `Binary::open`'s own view of the file).
fn bias_of(path: &Path, binary: &Binary) -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let canon = path.canonicalize().expect("canonical");
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 6 && f[1].ends_with('p') && Path::new(f[5]) == canon {
            let start = u64::from_str_radix(f[0].split('-').next().unwrap_or("0"), 16).unwrap();
            let off = u64::from_str_radix(f[2], 16).unwrap();
            return binary.load_bias(start, off).expect("bias");
        }
    }
    panic!("{} not mapped", path.display())
}

fn sym(name: &str) -> *mut c_void {
    let c = CString::new(name).unwrap();
    // SAFETY: looking up a symbol of a library that stays loaded.
    let p = unsafe { libc::dlsym(lib().handle as *mut c_void, c.as_ptr()) };
    assert!(!p.is_null(), "no symbol {name}");
    p
}

/// Calls `make_<name>()` / `make_<name>(n)`.
fn make(name: &str) -> u64 {
    // SAFETY: make_* functions take no arguments and return a heap object's address.
    unsafe {
        let f: extern "C" fn() -> *mut c_void = std::mem::transmute(sym(&format!("make_{name}")));
        f() as u64
    }
}

fn make_n(name: &str, n: i32) -> u64 {
    // SAFETY: make_* functions that take an int count.
    unsafe {
        let f: extern "C" fn(i32) -> *mut c_void =
            std::mem::transmute(sym(&format!("make_{name}")));
        f(n) as u64
    }
}

fn measurer(probe: &str, args: &[&str], features: &[&str]) -> Measurer {
    let l = lib();
    let syms = find_function(&l.binary, probe).expect("symbols");
    let s = syms.first().unwrap_or_else(|| panic!("no {probe}"));
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let features: Vec<String> = features.iter().map(|a| a.to_string()).collect();
    Measurer::new(&l.binary, s, &args, &features, false)
        .unwrap_or_else(|e| panic!("Measurer::new({probe}): {e}"))
}

fn regs(addrs: &[u64]) -> EntryRegs {
    let a = |i: usize| addrs.get(i).copied().unwrap_or(0);
    EntryRegs {
        rdi: a(0),
        rsi: a(1),
        rdx: a(2),
        rcx: a(3),
        r8: a(4),
        r9: a(5),
        ..Default::default()
    }
}

/// The interpreter's per-root streams (roots, streams).
fn interp(m: &Measurer, addrs: &[u64]) -> Result<(Vec<NodeId>, Vec<Vec<u8>>), MeasureError> {
    let mem = RemoteReader::new(std::process::id() as i32);
    let s = m.walk_arg_streams(&regs(addrs), lib().bias, &mem)?;
    Ok(s.into_iter().unzip())
}

/// Compiled code mapped executable in this process (unmapped on drop).
pub(super) struct Mapped {
    base: *mut c_void,
    len: usize,
    entry: u64,
}

impl Mapped {
    pub(super) fn new(w: &CompiledWalker) -> Self {
        let len = w.code.len().max(1).next_multiple_of(4096);
        // SAFETY: a fresh private anonymous mapping; written while RW, then made RX (never
        // both), and only ever called at its entry offset.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            std::ptr::copy_nonoverlapping(w.code.as_ptr(), base as *mut u8, w.code.len());
            assert_eq!(
                libc::mprotect(base, len, libc::PROT_READ | libc::PROT_EXEC),
                0
            );
            Mapped {
                base,
                len,
                entry: w.entry,
            }
        }
    }

    pub(super) fn call(&self, frame: &mut WalkFrame) -> u64 {
        // SAFETY: the entry has the documented signature; the frame and the buffers it
        // points to outlive the call; the walked objects are live in this process.
        unsafe {
            let f: extern "sysv64" fn(*mut WalkFrame) -> u64 =
                std::mem::transmute((self.base as *const u8).add(self.entry as usize));
            f(frame)
        }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this value owns.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

/// Output buffer, scratch and frame of one JIT run; the buffer has a guard tail.
struct Run {
    frame: WalkFrame,
    out: Vec<u8>,
    scratch: Vec<u64>,
    /// The last walk's call alone, without `go`'s setup (the cost probe).
    call_ns: u64,
}

const GUARD: usize = 64;

impl Run {
    fn new(addrs: &[u64], out_len: usize) -> Self {
        let mut frame = WalkFrame {
            nargs: addrs.len() as u64,
            ..Default::default()
        };
        frame.args[..addrs.len()].copy_from_slice(addrs);
        Run {
            frame,
            out: vec![0xAB; out_len + GUARD],
            scratch: vec![0; (SCRATCH_BYTES / 8) as usize],
            call_ns: 0,
        }
    }

    fn go(&mut self, code: &Mapped, out_len: usize) -> u64 {
        self.frame.out = self.out.as_mut_ptr() as u64;
        self.frame.out_len = out_len as u64;
        self.frame.scratch = self.scratch.as_mut_ptr() as u64;
        self.frame.scratch_len = SCRATCH_BYTES;
        self.frame.bias = lib().bias;
        self.frame
            .set_heaps(&crate::interp::heap::ranges_of(std::process::id() as i32));
        let t = std::time::Instant::now();
        let s = code.call(&mut self.frame);
        self.call_ns = t.elapsed().as_nanos() as u64;
        assert_eq!(s, self.frame.status);
        assert!(
            self.out[out_len..].iter().all(|&b| b == 0xAB),
            "walker wrote past out_len"
        );
        s
    }

    fn streams(&self, n: usize) -> Vec<Vec<u8>> {
        split_streams(&self.out[..self.frame.out_used as usize], n).expect("split")
    }
}

/// Runs the JIT, growing the output once to the size it reports, as the tracer does.
fn jit(code: &Mapped, addrs: &[u64]) -> (Run, u64) {
    let mut r = Run::new(addrs, 64);
    let s = r.go(code, 64);
    if s != STATUS_FULL {
        return (r, s);
    }
    let len = r.frame.out_used as usize;
    assert!(len > 64);
    let mut r = Run::new(addrs, len);
    let s = r.go(code, len);
    assert_ne!(
        s, STATUS_FULL,
        "the size reported with STATUS_FULL is enough"
    );
    (r, s)
}

/// The differential check: same streams, or both failing.
/// Returns the streams' words (decoded from their bytes) for the tests to look into.
fn same(probe: &str, args: &[&str], features: &[&str], addrs: &[u64]) -> Vec<Vec<u64>> {
    let m = measurer(probe, args, features);
    let (roots, want) = interp(&m, addrs).unwrap_or_else(|e| panic!("interp {probe}: {e}"));
    let w = compile(m.plan(), &roots).unwrap_or_else(|e| panic!("compile {probe}: {e}"));
    let code = Mapped::new(&w);
    let (r, s) = jit(&code, addrs);
    assert_eq!(s, STATUS_DONE, "{probe}: {:?}", check_status(&r.frame));
    let got = r.streams(roots.len());
    assert_eq!(got, want, "{probe}: JIT and interpreter streams differ");
    assert_eq!(
        in_process_streams(m.plan(), &roots, addrs),
        want,
        "{probe}: in-process (OIL) and interpreter streams differ"
    );
    // And the decoder accepts it, like the interpreter's.
    for (root, s) in roots.iter().zip(&got) {
        let mut out = Vec::new();
        let mut sink = crate::report::json::JsonSink::new(&mut out, false);
        sink.start_sample().expect("sink");
        crate::report::decode(m.plan(), *root, s, &mut sink).expect("decode");
    }
    got.iter()
        .map(|s| crate::plan::stream::decode(s).expect("whole words"))
        .collect()
}

/// The in-process backend (OIL) on the same objects, called on this thread's stack,
/// compiled with sizes: the total it adds up while walking must be the decoder's.
fn in_process_streams(plan: &Plan, roots: &[NodeId], addrs: &[u64]) -> Vec<Vec<u8>> {
    let w = in_process::LocalWalker::compile_sized(plan, roots).expect("compile in process");
    let mut out_len = 64;
    loop {
        let mut r = Run::new(addrs, out_len);
        r.frame.out = r.out.as_mut_ptr() as u64;
        r.frame.out_len = out_len as u64;
        r.frame.scratch = r.scratch.as_mut_ptr() as u64;
        r.frame.scratch_len = SCRATCH_BYTES;
        r.frame.bias = lib().bias;
        r.frame
            .set_heaps(&crate::interp::heap::ranges_of(std::process::id() as i32));
        // SAFETY: the buffers outlive the call; the objects are live in this process; the
        // test thread's stack is larger than the walker's default 256 KiB.
        let s = unsafe { w.call(&mut r.frame) };
        assert!(
            r.out[out_len..].iter().all(|&b| b == 0xAB),
            "wrote past out_len"
        );
        match s {
            STATUS_FULL => out_len = r.frame.out_used as usize,
            STATUS_DONE => {
                let streams = r.streams(roots.len());
                let decoded = roots.iter().zip(&streams).fold(0u64, |t, (&root, s)| {
                    t + crate::report::total_size(plan, root, s).expect("decode")
                });
                assert_eq!(r.frame.total, decoded, "sizes added up by the walker");
                assert_eq!(
                    in_process_total(plan, roots, addrs),
                    decoded,
                    "the total of the walker without a stream"
                );
                return streams;
            }
            _ => panic!("in-process walk: {:?}", check_status(&r.frame)),
        }
    }
}

/// The in-process walker without a stream (OIL's `size`): its total, on output buffers it
/// must leave untouched (one too small for the unchecked string loop, one large).
fn in_process_total(plan: &Plan, roots: &[NodeId], addrs: &[u64]) -> u64 {
    let w = in_process::LocalWalker::compile_totals(plan, roots).expect("compile in process");
    let totals: Vec<u64> = [16, 4096]
        .into_iter()
        .map(|out_len| {
            let mut r = Run::new(addrs, out_len);
            r.frame.out = r.out.as_mut_ptr() as u64;
            r.frame.out_len = out_len as u64;
            r.frame.scratch = r.scratch.as_mut_ptr() as u64;
            r.frame.scratch_len = SCRATCH_BYTES;
            r.frame.bias = lib().bias;
            r.frame
                .set_heaps(&crate::interp::heap::ranges_of(std::process::id() as i32));
            // SAFETY: as in `in_process_streams`.
            let s = unsafe { w.call(&mut r.frame) };
            assert_eq!(s, STATUS_DONE, "{:?}", check_status(&r.frame));
            assert_eq!(r.frame.out_used, 0, "no stream");
            assert!(r.out.iter().all(|&b| b == 0xAB), "wrote to out");
            r.frame.total
        })
        .collect();
    assert_eq!(totals[0], totals[1], "the total with either buffer");
    if !plan.charges_heap_blocks() && roots.len() == 1 {
        // The optimistic walker (one root: OIL's) gives the same total, or says a pointee
        // was shared.
        if let (STATUS_DONE, total) = optimistic_total(plan, roots, addrs) {
            assert_eq!(total, totals[0], "the optimistic walker's total");
        }
    }
    totals[0]
}

/// The optimistic walker's (status, total), on a frame with only the fields it reads: no
/// buffer, no scratch.
fn optimistic_total(plan: &Plan, roots: &[NodeId], addrs: &[u64]) -> (u64, u64) {
    let w = in_process::LocalWalker::compile_totals_optimistic(plan, roots).expect("compile");
    let mut frame = WalkFrame {
        nargs: addrs.len() as u64,
        bias: lib().bias,
        ..Default::default()
    };
    frame.args[..addrs.len()].copy_from_slice(addrs);
    // SAFETY: the walker reads no buffer (none is named); the objects are live in this
    // process; the test thread's stack is larger than the walker's default 256 KiB.
    let s = unsafe { w.call(&mut frame) };
    assert!(
        s == STATUS_DONE || s == STATUS_REVISIT,
        "{:?}",
        check_status(&frame)
    );
    (s, frame.total)
}

/// A plan node of type `ty` named `name` (the unit plans here and in the fuzz's tests).
pub(super) fn plan_node(name: &str, ty: &str, size: u64, op: crate::plan::Op) -> crate::plan::Node {
    crate::plan::Node {
        name: name.into(),
        type_names: vec![ty.into()],
        static_size: size,
        is_primitive: matches!(op, crate::plan::Op::Leaf),
        op,
        dynamic: false,
        readable: ty.into(),
        value: None,
        opaque_union: false,
        foreign: false,
    }
}

/// A unique_ptr to node `target`.
fn unique_ptr_op(target: usize) -> crate::plan::Op {
    crate::plan::Op::SmartPtr {
        offset: 0,
        target: Some(target),
        control: None,
    }
}

/// The exact count-only walker's total for the root at `addr` (with its scratch table).
fn exact_total(exact: &in_process::LocalWalker, addr: u64) -> u64 {
    let mut r = Run::new(&[addr], 0);
    r.frame.scratch = r.scratch.as_mut_ptr() as u64;
    r.frame.scratch_len = SCRATCH_BYTES;
    // SAFETY: the unit plans read their roots' words and pointees only, all live.
    let s = unsafe { exact.call(&mut r.frame) };
    assert_eq!(s, STATUS_DONE, "{:?}", check_status(&r.frame));
    r.frame.total
}

/// A 24-byte struct `root` of three unique_ptrs (name, type, target node), then `leaves`
/// (the pointees' types, nodes 4 and on), as a plan.
fn three_pointers_plan(root: &str, members: [(&str, &str, usize); 3], leaves: &[&str]) -> Plan {
    use crate::plan::Op;
    let mut plan = Plan::default();
    let offsets = vec![(0, 1), (8, 2), (16, 3)];
    plan.nodes.push(plan_node(
        "a0",
        root,
        24,
        Op::Struct {
            members: offsets,
            padding: 0,
            adapter: false,
        },
    ));
    for (name, ty, target) in members {
        plan.nodes
            .push(plan_node(name, ty, 8, unique_ptr_op(target)));
    }
    for ty in leaves {
        plan.nodes.push(plan_node("ptr_val", ty, 8, Op::Leaf));
    }
    plan.compute_dynamic();
    plan
}

/// `struct Node { unique_ptr<long> a, b; unique_ptr<Node> next; }` as a plan (24 bytes).
fn unique_node_plan() -> Plan {
    let long = "std::unique_ptr<long>";
    let members = [
        ("a", long, 4),
        ("b", long, 4),
        ("next", "std::unique_ptr<Node>", 0),
    ];
    three_pointers_plan("Node", members, &["long"])
}

#[test]
fn optimistic_totals_equal_exact_ones_or_hand_over() {
    let plan = unique_node_plan();
    let exact = in_process::LocalWalker::compile_totals(&plan, &[0]).expect("compile");
    let exact_total = |addr: u64| exact_total(&exact, addr);
    let leak = |v: [u64; 3]| Box::leak(Box::new(v)).as_mut_ptr() as u64;
    let x = leak([7, 0, 0]);
    let y = leak([8, 0, 0]);
    let optimistic = |addr| optimistic_total(&plan, &[0], &[addr]);

    // Nothing shared: both walkers, 24 + 8 + 8 (and a second node, 24 + 8).
    let tail = leak([x + 16, 0, 0]);
    let head = leak([x, y, tail]);
    assert_eq!(exact_total(head), 24 + 8 + 8 + 24 + 8);
    assert_eq!(optimistic(head), (STATUS_DONE, exact_total(head)));
    // `a` and `b` own one object (a corrupt program): the exact walker counts it once, the
    // optimistic one hands over.
    let shared = leak([x, x, 0]);
    assert_eq!(exact_total(shared), 24 + 8);
    assert_eq!(optimistic(shared).0, STATUS_REVISIT);
    // A node that owns itself: the exact walker stops at the seed; the optimistic one hands
    // over at once (its record fills up), it does not run to the depth limit.
    let cycle = leak([0, 0, 0]);
    // SAFETY: our own leaked node.
    unsafe { *(cycle as *mut u64).add(2) = cycle };
    assert_eq!(exact_total(cycle), 24);
    assert_eq!(optimistic(cycle).0, STATUS_REVISIT);
    // More pointees than the record holds, all distinct: handed over, not miscounted.
    let mut list = 0;
    for i in 0..40 {
        list = leak([leak([i, 0, 0]), 0, list]);
    }
    assert_eq!(exact_total(list), 40 * (24 + 8));
    assert_eq!(optimistic(list).0, STATUS_REVISIT);
}

/// `struct Two { unique_ptr<long> a, b; unique_ptr<double> c; }` (24 bytes): walked all
/// inline, its optimistic entry is a leaf with its visits in registers.
fn leaf_pointers_plan() -> Plan {
    let long = "std::unique_ptr<long>";
    let members = [
        ("a", long, 4),
        ("b", long, 4),
        ("c", "std::unique_ptr<double>", 5),
    ];
    three_pointers_plan("Two", members, &["long", "double"])
}

#[test]
fn optimistic_leaf_visits_in_registers_hand_over_like_recorded_ones() {
    let plan = leaf_pointers_plan();
    let exact = in_process::LocalWalker::compile_totals(&plan, &[0]).expect("compile");
    let exact_total = |addr: u64| exact_total(&exact, addr);
    let w = in_process::LocalWalker::compile_totals_optimistic(&plan, &[0]).expect("compile");
    assert!(w.leaf_entry(), "walked inline, no call");
    let optimistic = |addr: u64| {
        let mut frame = WalkFrame {
            nargs: 1,
            bias: lib().bias,
            ..Default::default()
        };
        frame.args[0] = addr;
        // SAFETY: as `exact_total`.
        let s = unsafe { w.call(&mut frame) };
        (s, frame.total)
    };
    let leak = |v: [u64; 3]| Box::leak(Box::new(v)).as_mut_ptr() as u64;
    let (x, y) = (leak([0; 3]), leak([0; 3]));
    // Distinct pointees, or some null: the exact total.
    for root in [leak([x, y, x]), leak([x, 0, y]), leak([0, 0, 0])] {
        assert_eq!(optimistic(root), (STATUS_DONE, exact_total(root)));
    }
    // `a` and `b` (one tag) own one object: the exact walker counts it once; handed over.
    let shared = leak([x, x, 0]);
    assert_eq!(exact_total(shared), 24 + 8);
    assert_eq!(optimistic(shared).0, STATUS_REVISIT);
    // An address at 2^47 or above (a corrupt pointer; nothing is read through it): keys of
    // different tags could meet there, so the walk is handed to the exact walker as corrupt.
    let high = leak([x, 0, x | 1 << 52]);
    assert_eq!(optimistic(high).0, STATUS_CORRUPT);
}

/// A root `std::vector<long>` (start, finish, end of storage): the optimistic walker's
/// flat vector (`size + capacity · 8` after its checks) gives the exact walker's total, or
/// hands over where the exact walker finds the vector corrupt, whatever the three words.
#[test]
fn optimistic_flat_vectors_hand_over_wherever_the_exact_walker_fails() {
    use crate::containers::vector::VectorLayout;
    use crate::plan::Op;
    let mut plan = Plan::default();
    let layout = VectorLayout {
        start_off: 0,
        finish_off: 8,
        eos_off: 16,
        elem_size: 8,
        size: 24,
    };
    let vector = Op::Vector { layout, elem: 1 };
    plan.nodes
        .push(plan_node("a0", "std::vector<long>", 24, vector));
    plan.nodes.push(plan_node("elem", "long", 8, Op::Leaf));
    plan.compute_dynamic();
    let exact = in_process::LocalWalker::compile_totals(&plan, &[0]).expect("compile");
    let w = in_process::LocalWalker::compile_totals_optimistic(&plan, &[0]).expect("compile");
    let run = |walker: &in_process::LocalWalker, words: [u64; 3]| {
        let root = Box::leak(Box::new(words)).as_mut_ptr() as u64;
        let mut r = Run::new(&[root], 0);
        r.frame.scratch = r.scratch.as_mut_ptr() as u64;
        r.frame.scratch_len = SCRATCH_BYTES;
        r.frame.bias = lib().bias;
        // SAFETY: only the root's three words are read (the elements read nothing).
        let s = unsafe { walker.call(&mut r.frame) };
        (s, r.frame.total)
    };
    let b = Box::leak(Box::new([0u64; 8])).as_mut_ptr() as u64;
    let top = u64::MAX - 7;
    for words in [
        [b, b + 16, b + 32],
        [0, 0, 0],
        [b, b, b],
        [b, b + 40, b + 32],
        [b + 16, b, b + 32],
        [b, b + 16, b - 8],
        // Pointers that wrap around: the differences are small, the exact walker fails.
        [top, 8, 8],
        [top, top, 8],
        [top, 8, top],
        [b, b + 16, b | 1 << 60],
        // The orders compared on the words (finish past the storage, before the start,
        // both at once), the capacity at the bound and one element past it, a capacity
        // that is no whole number of elements.
        [b, b + 24, b + 16],
        [b + 16, b + 8, b + 32],
        [b + 16, b + 8, b],
        [b + 16, b + 16, b],
        [b, b + 8, b + (1 << 28) * 8],
        [b, b + 8, b + ((1 << 28) + 1) * 8],
        [b, b + 8, b + 20],
    ] {
        let (es, et) = run(&exact, words);
        let (os, ot) = run(&w, words);
        assert!(
            (os, ot) == (es, et) || os != STATUS_DONE,
            "{words:x?}: exact ({es}, {et}), optimistic ({os}, {ot})"
        );
    }
    assert_eq!(run(&w, [b, b + 16, b + 32]), (STATUS_DONE, 24 + 32));
}

#[test]
fn jit_strings_sso_and_heap() {
    let s = same("probe_strings", &["arg0"], &[], &[make_n("strings", 100)]);
    // address, len, cap, then (len, heap cap) per string.
    assert_eq!(s[0][1], 100);
    assert_eq!(s[0].len(), 3 + 200);
    same("probe_strings", &["arg0"], &[], &[make_n("strings", 0)]);
    // Every remainder of the four-string groups, and long strings inside a group.
    for n in [1, 2, 3, 5, 18, 35, 103] {
        let s = same("probe_strings", &["arg0"], &[], &[make_n("strings", n)]);
        assert_eq!(s[0][1], n as u64);
    }
    // No buffer at all (begin = end = nullptr): the pair loop must not start at address 0.
    let s = same(
        "probe_strings",
        &["arg0"],
        &[],
        &[make("unallocated_strings")],
    );
    assert_eq!(s[0][1..], [0, 0], "no elements, no capacity");
}

/// The stream's runs of repeated string groups (`plan::stream::StringRuns`): runs, a run
/// ended by a different group and by a long group, a long group repeated (never a run), and
/// a run at the vector's end, with and without strings after the last group. The JIT's bytes
/// are the interpreter's (also when the output's room runs short inside a run), and they
/// decode to the fixture's own lengths and capacities, string by string.
#[test]
fn jit_string_runs_decode_to_the_fixture_strings() {
    use crate::plan::stream as words;
    // SAFETY: the fixture's `string_words_at(vector, i, out[2])`.
    let words_at: extern "C" fn(u64, i32, *mut u64) =
        unsafe { std::mem::transmute(sym("string_words_at")) };
    let m = measurer("probe_strings", &["arg0"], &[]);
    let kinds = 33;
    // Runs per vector, from the kinds "aaaaaaaaaa bbbbb l bbbbb llc aaaaaaaaa": 'a' ×10
    // one run; 'b' ×5 one (after an 'a' group, written); a long group ends it, and 'b' ×5
    // after it is one more; 'l' 'l' 'c' none; 'a' ×9 one, at the vector's end or (three
    // rounds of kinds) going on into the next round's 'a' ×10.
    for (n, want_runs) in [
        (4 * kinds, 4),
        (4 * kinds + 3, 4),
        (40, 1),
        (41, 1),
        (38, 1),
        (64, 2),
        (4 * 3 * kinds + 2, 10),
    ] {
        let v = make_n("run_strings", n);
        same("probe_strings", &["arg0"], &[], &[v]);
        let (_, want) = interp(&m, &[v]).expect("interp");
        let s = &want[0];
        // The vector's address, length and capacity, then its strings.
        let mut pos = 0;
        let head: Vec<u64> = (0..3).map(|_| words::read(s, &mut pos).unwrap()).collect();
        assert_eq!((head[0], head[1]), (v, n as u64), "n = {n}");
        let mut reader = words::StringRunReader::default();
        let mut runs = 0;
        for i in 0..n {
            runs += u64::from(reader.run(s, &mut pos, n as u64).expect("run") > 0);
            let got = reader.next(s, &mut pos).expect("string");
            let mut lc = [0u64; 2];
            words_at(v, i, lc.as_mut_ptr());
            assert_eq!(got, (lc[0], lc[1]), "n = {n}, string {i}");
        }
        assert_eq!(pos, s.len(), "n = {n}: nothing after the strings");
        assert_eq!(runs, want_runs, "n = {n}: runs");
        assert!(
            s.len() < 2 * n as usize,
            "n = {n}: runs make the stream shorter"
        );
        // Every buffer size from the stream's own to 200 bytes more: the unchecked groups
        // hand over to checked ones at every place, in and out of runs.
        let code = Mapped::new(&compile(m.plan(), &[0]).expect("compile"));
        let need = 8 + s.len();
        for len in need..need + 200 {
            let mut r = Run::new(&[v], len);
            assert_eq!(r.go(&code, len), STATUS_DONE, "n = {n}, out_len {len}");
            assert_eq!(r.streams(1), want, "n = {n}, out_len {len}");
        }
    }
    // Small buffers: STATUS_FULL with the size the stream needs.
    full_sweep("probe_strings", &[], make_n("run_strings", 4 * kinds + 3));
}

/// The fixture's `SmallVec`, described as a user would (docs/containers.md),
/// with expressions that exercise the operators the JIT compiles.
pub(crate) const SMALLVEC_TOML: &str = r#"
[[container]]
name = "fx::SmallVec"
args = ["T", "N"]
elem = "T"
layout = "array"

[container.fields]
data = "data_"
size = "size_"
cap = "cap_"
flags = { offset = 14, width = 1 }

[container.array]
data = "data"
len = "size"
cap = "cap"
heap = "align(cap * sizeof(T), 8) / 8 * 8 + (flags & 1) * 0 + (size >> 40) % 0 - (i8(flags) < 0)"
inline = "!(flags & 1) || data == this + offsetof(buf_) && N > 0"
"#;

#[test]
fn jit_described_small_vectors() {
    let f = crate::describe::parse::to_feature("smallvec.toml", SMALLVEC_TOML);
    for n in [0, 3, 4, 5, 100] {
        let s = same("probe_smalls", &["arg0"], &[&f], &[make_n("smalls", n)]);
        // `few`: its address, then len 3, cap 4, heap 0 (inline): the first words.
        assert_eq!(s[0][1..4], [3, 4, 0], "n = {n}");
    }
}

#[test]
fn jit_described_owned_pointers() {
    let toml = r#"
[[container]]
name = "fx::OwnedPtrs"
elem = "pointee:items"
layout = "owned_pointers"
[container.fields]
items = "items"
n = "n"
cap = "cap"
[container.owned_pointers]
data = "items"
len = "n"
cap = "cap"
heap = "cap * 8"
"#;
    let f = crate::describe::parse::to_feature("owned.toml", toml);
    for n in [0, 1, 37] {
        let addr = make_n("owned", n);
        let s = same("probe_owned", &["arg0"], &[&f], &[addr]);
        // address, len, cap, heap, then per element: pointer, descended, (len, heap cap).
        assert_eq!(
            s[0][..4],
            [addr, n as u64, n as u64 + 3, 8 * (n as u64 + 3)]
        );
        assert_eq!(s[0].len(), 4 + 4 * n as usize, "n = {n}: {:?}", s[0]);
        // The decoder: 24 + heap + each string (32 + its heap capacity, if any).
        let m = measurer("probe_owned", &["arg0"], &[&f]);
        let (roots, streams) = interp(&m, &[addr]).expect("interp");
        let total = crate::report::total_size(m.plan(), roots[0], &streams[0]).expect("size");
        let strings: u64 = (0..n as usize).map(|i| 32 + s[0][4 + 4 * i + 3]).sum();
        assert_eq!(total, 24 + 8 * (n as u64 + 3) + strings, "n = {n}");
    }
}

const SWISS_TOML: &str = r#"
[[container]]
name = "fx::Swiss"
args = ["T"]
elem = "T"
layout = "control_bytes"
[container.fields]
ctrl = "ctrl_"
slots = "slots_"
size = "size_"
capacity = "capacity_"
[container.control_bytes]
ctrl = "ctrl"
slots = "slots"
capacity = "capacity"
full = "i8(c) >= 0"
len = "size"
heap = "(capacity > 0) * (align(capacity + 16, alignof(T)) + capacity * sizeof(T))"

[[container]]
name = "fx::Grouped"
args = ["T"]
elem = "T"
layout = "control_bytes"
[container.fields]
ctrl = "ctrl_"
slots = "slots_"
size = "size_"
capacity = "capacity_"
[container.control_bytes]
ctrl = "ctrl"
slots = "slots"
capacity = "capacity"
full = "c < 0x80"
ctrl_at = "ctrl + i / 15 * 16 + i % 15"
len = "size"
heap = "capacity / 15 * 16 + capacity * sizeof(T)"
"#;

#[test]
fn jit_described_swiss_tables() {
    let f = crate::describe::parse::to_feature("swiss.toml", SWISS_TOML);
    for n in [0u64, 1, 7, 40, 300] {
        let addr = make_n("swisses", n as i32);
        let s = same("probe_swisses", &["arg0"], &[&f], &[addr]);
        let w = &s[0];
        // The capacity the fixture chose: 0, or 2^k − 1 ≥ 2n + 1.
        let c = if n == 0 {
            0
        } else {
            (1u64..).map(|k| (1 << k) - 1).find(|c| *c > 2 * n).unwrap()
        };
        let sheap = if c == 0 {
            0
        } else {
            (c + 16).div_ceil(8) * 8 + 32 * c
        };
        assert_eq!(w[..4], [addr, n, c, sheap], "n = {n}");
        // Then per full slot: string length and heap capacity.
        let strings = &w[4..4 + 2 * n as usize];
        let g = &w[4 + 2 * n as usize..];
        let gc = (2 * n / 15 + 1) * 15;
        assert_eq!(
            g[..4],
            [addr + 32, n, gc, gc / 15 * 16 + 32 * gc],
            "n = {n}"
        );
        let gstrings = &g[4..4 + 2 * n as usize];
        let l = &g[4 + 2 * n as usize..];
        let lheap = if c == 0 {
            0
        } else {
            (c + 16).div_ceil(8) * 8 + 8 * c
        };
        assert_eq!(
            l,
            [addr + 64, n, c, lheap],
            "n = {n}: the longs read nothing"
        );
        // Slot order: element j sits at slot 2j (< c), so slot order is j's order; lengths are j % 12 or 40 + j (every fifth), as the fixture made them.
        let lens: Vec<u64> = strings.iter().step_by(2).copied().collect();
        let want: Vec<u64> = (0..n)
            .map(|j| if j % 5 == 4 { 40 + j } else { j % 12 })
            .collect();
        assert_eq!(lens, want, "n = {n}");
        let glens: Vec<u64> = gstrings.iter().step_by(2).copied().collect();
        let want: Vec<u64> = (0..n).map(|j| if j % 3 > 0 { 3 } else { 50 + j }).collect();
        assert_eq!(glens, want, "n = {n}");
        // The decoder: each table's sizeof + heap (the slots hold the strings), and each
        // string's heap capacity.
        let m = measurer("probe_swisses", &["arg0"], &[&f]);
        let (roots, streams) = interp(&m, &[addr]).expect("interp");
        let total = crate::report::total_size(m.plan(), roots[0], &streams[0]).expect("size");
        let caps: u64 = strings.iter().chain(gstrings).skip(1).step_by(2).sum();
        assert_eq!(
            total,
            96 + sheap + (gc / 15 * 16 + 32 * gc) + lheap + caps,
            "n = {n}"
        );
    }
}

const CHAINS_TOML: &str = r#"
[[container]]
name = "fx::Chained"
args = ["K", "V"]
elem = "fx::Pair<{K}, {V}>"
layout = "node_chains"
[container.fields]
size = "size_"
n = "buckets_"
table = "table_"
[container.node_chains]
buckets = "table"
bucket_count = "n"
value_offset = "0"
next_offset = "align(align(sizeof(K), alignof(V)) + sizeof(V), 8)"
node_size = "align(align(sizeof(K), alignof(V)) + sizeof(V), 8) + 8"
len = "size"
heap = "(n > 1) * n * 8"

[[container]]
name = "fx::Tagged"
elem = "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >"
layout = "tagged_pointer"
[container.fields]
ptr = "ptr_"
[container.tagged_pointer]
pointer = "ptr & ~3"
owned = "(ptr & 3) == 2"

[[owned]]
in = "*::Chains"
pointee_base = "fx::PartBase"
"#;

/// The (length, heap capacity) pairs of the strings' map's nodes, `w[4..]`, node by node in
/// `order`: each length is the one `objects.cpp` gives node j (4 characters, or 30 + j for
/// every third). Returns the capacities' sum.
fn chained_strings(w: &[u64], order: &[u64], n: u64) -> u64 {
    let words = &w[4..4 + 2 * n as usize];
    let lens: Vec<u64> = words.iter().step_by(2).copied().collect();
    let want: Vec<u64> = order
        .iter()
        .map(|j| if j % 3 > 0 { 4 } else { 30 + j })
        .collect();
    assert_eq!(lens, want, "n = {n}");
    words.iter().skip(1).step_by(2).sum()
}

#[test]
fn jit_described_node_chains_tagged_and_owned_pointers() {
    let f = crate::describe::parse::to_feature("chains.toml", CHAINS_TOML);
    for n in [0u64, 1, 2, 9, 100] {
        let addr = make_n("chains", n as i32);
        let s = same("probe_chains", &["arg0"], &[&f], &[addr]);
        let w = &s[0];
        let b = if n == 0 {
            1
        } else {
            (0..).map(|k| 1u64 << k).find(|b| *b >= n / 2).unwrap()
        };
        let table = if b > 1 { 8 * b } else { 0 };
        // The strings' map: address, len, buckets, table + n nodes of 48 bytes.
        assert_eq!(w[..4], [addr, n, b, table + 48 * n], "n = {n}");
        // Then (len, heap cap) per node, bucket by bucket, each chain newest first.
        let order: Vec<u64> = (0..b)
            .flat_map(|k| (0..n).filter(move |j| j % b == k).rev())
            .collect();
        let caps = chained_strings(w, &order, n);
        let rest = &w[4 + 2 * n as usize..];
        // The ints' map reads nothing per node; its nodes are 24 bytes.
        assert_eq!(rest[..4], [addr + 24, n, b, table + 24 * n], "n = {n}");
        // owned: one string of 20 + n characters; shared and null: none.
        assert_eq!(rest[5..9], [1, 1, 32, 20 + n], "n = {n}: {rest:?}");
        assert_eq!(rest[11..14], [0, 0, 0], "n = {n}: shared");
        assert_eq!(rest[15..18], [0, 0, 0], "n = {n}: null");
        // part: pointer, descended, its name (25 characters); no_part: null.
        assert_eq!((rest[19], rest[20]), (1, 25), "n = {n}: {rest:?}");
        assert_eq!(
            rest[22..],
            [0, 0],
            "n = {n}: no_part, and not_owned is stubbed"
        );
        let m = measurer("probe_chains", &["arg0"], &[&f]);
        let (roots, streams) = interp(&m, &[addr]).expect("interp");
        let total = crate::report::total_size(m.plan(), roots[0], &streams[0]).expect("size");
        let owned_cap = rest[9];
        let part_cap = rest[21];
        // sizeof Chains (2 × 24 + 3 × 8 + 3 × 8), both maps' blocks, the strings' heap,
        // the owned string (32 + cap), the Part (40 + its name's heap).
        assert_eq!(
            total,
            96 + 2 * table + 72 * n + caps + 32 + owned_cap + 40 + part_cap,
            "n = {n}"
        );
    }
}

/// `fx::Chained` whose bucket pairs may share a tree (`objects.cpp`'s `make_tree_chains`:
/// a 48-byte `std::map<long, void*>`, root at 8 + 8, 48-byte nodes, the node at 40).
fn tree_chains_toml() -> String {
    let chained = &CHAINS_TOML[..CHAINS_TOML
        .find("[[container]]\nname = \"fx::Tagged\"")
        .expect("Tagged")];
    format!(
        "{chained}[container.node_chains.tree]\nsize = \"48\"\nroot = \"8 + 8\"\nnode_size = \"32 + 16\"\nchain = \"40\"\n"
    )
}

/// Buckets 0/1 and B-2/B-1 sharing a tree each: JIT = interpreter, every tree walked once in
/// key order where its even bucket stands, the tree objects and their nodes charged once.
#[test]
fn jit_described_node_chains_with_trees() {
    let f = crate::describe::parse::to_feature("tree_chains.toml", &tree_chains_toml());
    for n in [0u64, 1, 3, 9, 40, 100] {
        let addr = make_n("tree_chains", n as i32);
        let s = same("probe_tree_chains", &["arg0"], &[&f], &[addr]);
        let w = &s[0];
        let b = (3..).map(|k| 1u64 << k).find(|b| *b >= n / 2).unwrap();
        let pair_of = |j: u64| match j % b {
            0 | 1 => Some(0),
            k if k >= b - 2 => Some(b - 2),
            _ => None,
        };
        let tree_nodes = (0..n).filter(|j| pair_of(*j).is_some()).count() as u64;
        let trees = [0, b - 2]
            .iter()
            .filter(|p| (0..n).any(|j| pair_of(j) == Some(**p)))
            .count() as u64;
        let heap = 8 * b + 48 * n + 48 * trees + 48 * tree_nodes;
        assert_eq!(w[..4], [addr, n, b, heap], "n = {n}");
        // Bucket order; a tree where its even bucket stands, in key order; chains newest
        // first.
        let order: Vec<u64> = (0..b)
            .flat_map(|k| -> Vec<u64> {
                match k {
                    0 => (0..n).filter(|j| pair_of(*j) == Some(0)).collect(),
                    k if k == b - 2 => (0..n).filter(|j| pair_of(*j) == Some(k)).collect(),
                    k if k == 1 || k == b - 1 => vec![],
                    k => (0..n).filter(|j| j % b == k).rev().collect(),
                }
            })
            .collect();
        let caps = chained_strings(w, &order, n);
        // The empty map: the shared one-bucket table, whose partner bucket is outside it.
        let rest = &w[4 + 2 * n as usize..];
        assert_eq!(rest, [addr + 24, 0, 1, 0], "n = {n}");
        let m = measurer("probe_tree_chains", &["arg0"], &[&f]);
        let (roots, streams) = interp(&m, &[addr]).expect("interp");
        let total = crate::report::total_size(m.plan(), roots[0], &streams[0]).expect("size");
        assert_eq!(total, 48 + heap + caps, "n = {n}");
    }
}

/// A tree shared by two bucket pairs holds more nodes than the map's size: both walkers
/// fail the sample as corrupt (chained nodes differ from the map's size).
#[test]
fn jit_a_tree_in_two_pairs_fails_like_the_interpreter() {
    let f = crate::describe::parse::to_feature("tree_chains.toml", &tree_chains_toml());
    let m = measurer("probe_tree_chains", &["arg0"], &[&f]);
    let addr = make_n("tree_chains", 40);
    let (roots, _) = interp(&m, &[addr]).expect("interp");
    let code = Mapped::new(&compile(m.plan(), &roots).expect("compile"));
    // SAFETY: make_tree_chains' object: {size_, buckets_, table_} first, 32 buckets; the
    // pair (10, 11) held one node each, the tree of (0, 1) holds four.
    unsafe {
        let table = *((addr + 16) as *const *mut u64);
        *table.add(10) = *table;
        *table.add(11) = *table;
    }
    assert!(interp(&m, &[addr]).is_err());
    let (r, s) = jit(&code, &[addr]);
    assert_eq!(s, STATUS_CORRUPT);
    assert_eq!(r.frame.err_code, ErrorCode::ChainCount as u64);
}

#[test]
fn jit_nested_vectors_and_plain_ints() {
    same("probe_nested", &["arg0"], &[], &[make("nested")]);
    same("probe_ints", &["arg0"], &[], &[make_n("ints", 1000)]);
}

#[test]
fn jit_maps_sets_and_captured_keys() {
    for name in ["smap", "imap", "umap", "iumap"] {
        let probe = format!("probe_{name}");
        let a = make(name);
        let plain = same(&probe, &["arg0"], &[], &[a]);
        let captured = same(&probe, &["arg0"], &["capture-keys"], &[a]);
        assert!(captured[0].len() > plain[0].len(), "{name}: keys captured");
    }
    same("probe_sset", &["arg0"], &[], &[make("sset")]);
    same("probe_uset", &["arg0"], &[], &[make("uset")]);
}

/// The bench's map with its nodes in key order in memory (the walk's stride prefetch steady)
/// and shuffled (never steady): the same streams as the interpreter's and the in-process
/// walker's, and, the keys and strings being the same, the same words node by node.
#[test]
fn jit_map_walk_in_memory_order_or_not() {
    // SAFETY: the fixture's `make_bench_map(n, offset, shuffled)`.
    let make: extern "C" fn(i32, i32, i32) -> u64 =
        unsafe { std::mem::transmute::<*mut c_void, _>(sym("make_bench_map")) };
    let n = 3000;
    let [ordered, shuffled] =
        [0, 1].map(|order| same("probe_imap", &["arg0"], &[], &[make(n, 48, order)]));
    let nodes = |words: &[u64]| words[words.len() - 2 * n as usize..].to_vec();
    assert_eq!(nodes(&ordered[0]), nodes(&shuffled[0]));
    // Each node's string: "value number i on the heap", on the heap.
    let first = nodes(&ordered[0]);
    assert_eq!(first[0], "value number 0 on the heap".len() as u64);
}

#[test]
fn jit_lists_and_deques() {
    same("probe_slist", &["arg0"], &[], &[make("slist")]);
    for n in [0, 1, 100, 128, 129, 5000] {
        same("probe_ideque", &["arg0"], &[], &[make_n("ideque", n)]);
    }
    same("probe_sdeque", &["arg0"], &[], &[make("sdeque")]);
}

#[test]
fn jit_optional_variant_pair_arrays_bits() {
    same("probe_mixed", &["arg0"], &[], &[make("mixed")]);
}

#[test]
fn jit_every_kind_together() {
    for f in [
        &[][..],
        &["capture-keys"][..],
        &["chase-raw-pointers", "capture-keys"][..],
    ] {
        same("probe_everything", &["arg0"], f, &[make("everything")]);
    }
}

/// `--values`: every scalar read, by both walkers alike (the plan says which).
#[test]
fn jit_values_agree_with_the_interpreter() {
    let values = crate::plan::build::VALUES;
    for (probe, object) in [
        ("probe_everything", make("everything")),
        ("probe_mixed", make("mixed")),
        ("probe_ints", make_n("ints", 1000)),
    ] {
        let plain = same(probe, &["arg0"], &[], &[object]);
        let with = same(probe, &["arg0"], &[values], &[object]);
        assert!(with[0].len() > plain[0].len(), "{probe}: values read");
    }
}

#[test]
fn jit_smart_pointers_sharing_and_cycles() {
    let s = same("probe_pointers", &["arg0"], &[], &[make("pointers")]);
    assert!(!s[0].is_empty());
    same("probe_tree", &["arg0"], &[], &[make("tree")]);
}

#[test]
fn jit_chase_raw_pointers() {
    same("probe_raw", &["arg0"], &[], &[make("raw")]);
    same(
        "probe_raw",
        &["arg0"],
        &["chase-raw-pointers"],
        &[make("raw")],
    );
}

#[test]
fn jit_polymorphic_inheritance() {
    let f = ["polymorphic-inheritance"];
    let s = same("probe_base", &["arg0"], &f, &[make("derived")]);
    assert_ne!(s[0][0], u64::MAX, "the dynamic type was found");
    // Without the feature the root reads nothing: an empty stream.
    let plain = same("probe_base", &["arg0"], &[], &[make("derived")]);
    assert_eq!(plain, vec![Vec::<u64>::new()]);
    same(
        "probe_holder",
        &["arg0"],
        &["polymorphic-inheritance", "chase-raw-pointers"],
        &[make("holder")],
    );
}

#[test]
fn jit_two_roots() {
    same(
        "probe_two",
        &["arg0", "arg1"],
        &[],
        &[make_n("strings", 10), make("imap")],
    );
    // The same object twice: each root has its own visited set.
    let p = make("pointers");
    same("probe_pointers", &["arg0", "arg0"], &[], &[p, p]);
}

#[test]
fn jit_visited_set_capacity() {
    // 200,000 unique_ptrs: the set fills at 131,072 (the root is one of them).
    let s = same(
        "probe_uniques",
        &["arg0"],
        &[],
        &[make_n("uniques", 200_000)],
    );
    let descended = s[0][3..].chunks(2).filter(|p| p[1] == 1).count();
    assert_eq!(descended, 131_072 - 1);
}

#[test]
fn jit_visited_set_keys_closer_than_a_granule() {
    // Pointers into one int array, each twice: the first descends, the second not; past
    // the capacity nothing descends (the root and the array's heap block are keys too).
    for (n, want) in [(1_000, 1_000), (60_000, 60_000), (140_000, 131_072 - 2)] {
        let s = same(
            "probe_intptrs",
            &["arg0"],
            &["chase-raw-pointers"],
            &[make_n("intptrs", n)],
        );
        let descended = s[0][3..].chunks(3).filter(|p| p[1] == 1).count();
        assert_eq!(descended, want, "{n} ints");
    }
}

#[test]
fn jit_visited_set_keys_a_region_apart() {
    // Keys at the same offsets of three 64 MiB regions share a home slot: the second and
    // third go on to their second home or the probe, and their repeats are still found.
    for n in [1, 500, 3_000] {
        let s = same(
            "probe_intptrs",
            &["arg0"],
            &["chase-raw-pointers"],
            &[make_n("farptrs", n)],
        );
        let flags: Vec<u64> = s[0][3..].chunks(3).map(|p| p[1]).collect();
        let half = flags.len() / 2;
        assert_eq!(half, 3 * n as usize);
        assert!(
            flags[..half].iter().all(|&d| d == 1),
            "{n}: first pass descends"
        );
        assert!(flags[half..].iter().all(|&d| d == 0), "{n}: repeats do not");
    }
}

#[test]
fn jit_output_buffer_full_never_overflows() {
    full_sweep("probe_smap", &["capture-keys"], make("smap"));
    // The vector<string> loop checks its room once for all elements.
    full_sweep("probe_strings", &[], make_n("strings", 20));
    full_sweep("probe_mixed", &[], make("mixed"));
}

/// Every too-small buffer gives STATUS_FULL without a byte written past it; a big enough
/// one gives the interpreter's stream.
fn full_sweep(probe: &str, features: &[&str], addr: u64) {
    let m = measurer(probe, &["arg0"], features);
    let (roots, want) = interp(&m, &[addr]).expect("interp");
    let code = Mapped::new(&compile(m.plan(), &roots).expect("compile"));
    let need = 8 + want[0].len();
    for len in (0..need).step_by(7).chain([need - 1]) {
        let mut r = Run::new(&[addr], len);
        assert_eq!(r.go(&code, len), STATUS_FULL, "out_len {len}");
        assert_eq!(
            r.frame.out_used as usize, need,
            "size needed, out_len {len}"
        );
    }
    for len in [need, need + 5, need + 8] {
        let mut r = Run::new(&[addr], len);
        assert_eq!(r.go(&code, len), STATUS_DONE);
        assert_eq!(r.frame.out_used as usize, need);
        assert_eq!(r.streams(1), want);
    }
    // A re-run on the same scratch after STATUS_FULL starts afresh (new generation).
    let mut r = Run::new(&[addr], need);
    assert_eq!(r.go(&code, 8), STATUS_FULL);
    assert_eq!(r.go(&code, need), STATUS_DONE);
    assert_eq!(r.streams(1), want);
}

#[test]
fn jit_code_is_position_independent_without_relocations() {
    // `compile` refuses any relocation it cannot resolve inside the blob; the same bytes
    // then run at two different addresses.
    let m = measurer("probe_tree", &["arg0"], &[]);
    let addr = make("tree");
    let (roots, want) = interp(&m, &[addr]).expect("interp");
    let w = compile(m.plan(), &roots).expect("compile");
    let a = Mapped::new(&w);
    let b = Mapped::new(&w);
    assert_ne!(a.base, b.base);
    for code in [&a, &b] {
        let (r, s) = jit(code, &[addr]);
        assert_eq!(s, STATUS_DONE);
        assert_eq!(r.streams(1), want);
    }
}

#[test]
fn jit_link_rejects_foreign_relocations() {
    use cranelift_codegen::ir::types::I64;
    use cranelift_codegen::ir::{
        AbiParam, ExtFuncData, ExternalName, Function, InstBuilder, Signature, UserExternalName,
        UserFuncName,
    };
    use cranelift_codegen::isa::CallConv;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
    let isa = link::isa().expect("isa");
    let mut sig = Signature::new(CallConv::SystemV);
    sig.returns.push(AbiParam::new(I64));
    let mut f = Function::with_name_signature(UserFuncName::user(0, 0), sig.clone());
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut f, &mut fctx);
        let block = b.create_block();
        b.switch_to_block(block);
        let sr = b.import_signature(sig);
        // A call to something outside the blob (namespace 1, e.g. a libc function).
        let name = b
            .func
            .declare_imported_user_function(UserExternalName::new(1, 7));
        let fr = b.import_function(ExtFuncData {
            name: ExternalName::user(name),
            signature: sr,
            colocated: false,
            patchable: false,
        });
        let call = b.ins().call(fr, &[]);
        let r = b.inst_results(call)[0];
        b.ins().return_(&[r]);
        b.seal_all_blocks();
        b.finalize(isa.frontend_config());
    }
    assert!(matches!(
        link::link(&isa, vec![f]),
        Err(JitError::Relocation(_))
    ));
}

#[test]
fn jit_corrupt_objects_fail_like_the_interpreter() {
    let m = measurer("probe_ints", &["arg0"], &[]);
    let code_of = |m: &Measurer, a: u64| {
        let (roots, _) = interp(m, &[a]).map(|x| (x.0, ())).unwrap_or((vec![], ()));
        roots
    };
    let good = make_n("ints", 3);
    let roots = code_of(&m, good);
    let code = Mapped::new(&compile(m.plan(), &roots).expect("compile"));
    // finish before start; then an absurd count.
    for words in [[0x2000u64, 0x1000, 0x3000], [0, 1 << 40, 1 << 40]] {
        let obj = Box::new(words);
        let a = obj.as_ptr() as u64;
        assert!(interp(&m, &[a]).is_err());
        let (r, s) = jit(&code, &[a]);
        assert_eq!(s, STATUS_CORRUPT);
        assert_eq!(r.frame.err_addr, a);
        assert!(matches!(
            check_status(&r.frame),
            Err(JitError::Corrupt { .. })
        ));
    }
    // A list claiming 5 nodes whose chain ends at once.
    let m = measurer("probe_slist", &["arg0"], &[]);
    let (roots, _) = interp(&m, &[make("slist")]).expect("interp");
    let code = Mapped::new(&compile(m.plan(), &roots).expect("compile"));
    let obj = Box::new([0u64, 0, 5]);
    let a = obj.as_ptr() as u64;
    assert!(interp(&m, &[a]).is_err());
    let (r, s) = jit(&code, &[a]);
    assert_eq!(s, STATUS_CORRUPT);
    assert_eq!(r.frame.err_code, ErrorCode::ListShort as u64);
}

#[test]
fn jit_refuses_plans_with_dangling_nodes() {
    let mut p = crate::plan::Plan::default();
    p.nodes.push(crate::plan::Node {
        name: "a0".into(),
        type_names: vec![],
        static_size: 8,
        is_primitive: false,
        op: crate::plan::Op::RawPointer { target: Some(7) },
        dynamic: true,
        readable: String::new(),
        value: None,
        opaque_union: false,
        foreign: false,
    });
    assert!(matches!(compile(&p, &[0]), Err(JitError::NoSuchNode(7))));
    assert!(matches!(compile(&p, &[3]), Err(JitError::NoSuchNode(3))));
    assert!(matches!(
        compile(&p, &[0; 17]),
        Err(JitError::TooManyRoots(17))
    ));
}

#[test]
fn jit_bad_frame_is_refused() {
    let m = measurer("probe_ints", &["arg0"], &[]);
    let a = make_n("ints", 3);
    let (roots, _) = interp(&m, &[a]).expect("interp");
    let code = Mapped::new(&compile(m.plan(), &roots).expect("compile"));
    let mut r = Run::new(&[a, a], 1024);
    assert_eq!(r.go(&code, 1024), STATUS_BAD_FRAME);
    let mut r = Run::new(&[a], 1024);
    r.frame.out = r.out.as_mut_ptr() as u64;
    r.frame.out_len = 1024;
    r.frame.scratch = r.scratch.as_mut_ptr() as u64;
    r.frame.scratch_len = 1024;
    assert_eq!(code.call(&mut r.frame), STATUS_BAD_FRAME);
}

/// Runs `f` on a thread with a big stack (deep walks recurse in both backends).
fn on_big_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("join")
}

#[test]
fn jit_deep_chains_match_and_stop_at_the_same_depth() {
    on_big_stack(|| {
        let m = measurer("probe_node", &["arg0"], &["chase-raw-pointers"]);
        let ok = make_n("chain", 20_000);
        let (roots, want) = interp(&m, &[ok]).expect("interp");
        let code = Mapped::new(&compile(m.plan(), &roots).expect("compile"));
        let mut r = Run::new(&[ok], 1 << 20);
        r.frame.stack_len = RECOMMENDED_STACK;
        assert_eq!(r.go(&code, 1 << 20), STATUS_DONE);
        assert_eq!(r.streams(1), want);
        // The deepest chain the interpreter accepts (two levels per node).
        let edge = make_n("chain", (MAX_DEPTH / 2) as i32);
        let (_, want) = interp(&m, &[edge]).expect("interp at the edge");
        let mut r = Run::new(&[edge], 1 << 20);
        r.frame.stack_len = RECOMMENDED_STACK;
        assert_eq!(r.go(&code, 1 << 20), STATUS_DONE);
        assert_eq!(r.streams(1), want);
        // The pointer is the chain's last member: tail calls, the default stack is enough.
        let mut r = Run::new(&[edge], 1 << 20);
        assert_eq!(r.go(&code, 1 << 20), STATUS_DONE);
        assert_eq!(r.streams(1), want);
        // A chain whose pointer comes before a string takes a frame per node: the default
        // stack is too small, and that is a status, not a crash; a big one is enough.
        let rm = measurer("probe_rnode", &["arg0"], &["chase-raw-pointers"]);
        let rchain = make_n("rchain", 20_000);
        let (roots, want) = interp(&rm, &[rchain]).expect("interp");
        let rcode = Mapped::new(&compile(rm.plan(), &roots).expect("compile"));
        let mut r = Run::new(&[rchain], 1 << 20);
        assert_eq!(r.go(&rcode, 1 << 20), STATUS_STACK);
        let mut r = Run::new(&[rchain], 1 << 20);
        r.frame.stack_len = RECOMMENDED_STACK;
        assert_eq!(r.go(&rcode, 1 << 20), STATUS_DONE);
        assert_eq!(r.streams(1), want);
        // Deeper than MAX_DEPTH: both backends refuse.
        let deep = make_n("chain", (MAX_DEPTH / 2 + 1) as i32);
        assert!(interp(&m, &[deep]).is_err());
        let mut r = Run::new(&[deep], 1 << 20);
        assert_eq!(r.go(&code, 1 << 20), STATUS_CORRUPT);
        assert_eq!(r.frame.err_code, ErrorCode::TooDeep as u64);
    });
}

#[test]
fn jit_unseeded_register_roots() {
    // A root copied from registers is not in the visited set: a pointer back to the
    // copy's address would be followed. Check the bit only changes seeding.
    let m = measurer("probe_raw", &["arg0"], &["chase-raw-pointers"]);
    let a = make("raw");
    let (roots, want) = interp(&m, &[a]).expect("interp");
    let code = Mapped::new(&compile(m.plan(), &roots).expect("compile"));
    let mut r = Run::new(&[a], 4096);
    r.frame.unseeded = 1;
    assert_eq!(r.go(&code, 4096), STATUS_DONE);
    assert_eq!(r.streams(1), want);
}

/// Every plan node of every probe of the footprint fixtures compiles (no unsupported node,
/// no relocation). The fixtures' objects live in other processes, so their streams are
/// compared by the end-to-end journeys once `--mode jit` runs them in the target.
#[test]
fn jit_compiles_every_fixture_plan() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| Some(n.strip_suffix(".cpp")?.to_string()))
        .filter(|n| n.starts_with("footprint_"))
        .collect();
    names.sort();
    let mut compiled = 0;
    for name in names {
        let src = std::fs::read_to_string(dir.join(format!("{name}.cpp"))).expect("source");
        let exe = crate::interp::live_tests::build_fixture(&name, &[]);
        let binary = Binary::open(&exe).expect("open fixture");
        // `printf("PROBE entry SYMBOL ARGS FEATURES\n")` lines with literal symbols.
        for line in src.lines() {
            let Some(rest) = line.split("\"PROBE ").nth(1) else {
                continue;
            };
            let w: Vec<&str> = rest.split("\\n").next().unwrap_or("").split(' ').collect();
            if w.len() != 4 || w.iter().any(|s| s.contains('%')) {
                continue;
            }
            let syms = find_function(&binary, w[1]).expect("symbols");
            let Some(s) = syms.first() else { continue };
            let args: Vec<String> = w[2].split(',').map(String::from).collect();
            let features: Vec<String> = if w[3] == "-" {
                vec![]
            } else {
                w[3].split(',').map(String::from).collect()
            };
            let m = Measurer::new(&binary, s, &args, &features, w[0] == "return")
                .unwrap_or_else(|e| panic!("{name} {}: {e}", w[1]));
            let plan = m.plan();
            let dynamic: Vec<NodeId> = (0..plan.nodes.len())
                .filter(|&i| plan.nodes[i].dynamic)
                .collect();
            for id in &dynamic {
                compile(plan, &[*id]).unwrap_or_else(|e| panic!("{name} {} node {id}: {e}", w[1]));
                compiled += 1;
            }
            for chunk in dynamic.chunks(MAX_ROOTS) {
                compile(plan, chunk).unwrap_or_else(|e| panic!("{name} {}: {e}", w[1]));
            }
        }
    }
    assert!(compiled > 50, "only {compiled} nodes compiled");
}

/// What a walk of a garbage object came to.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Stream(Vec<Vec<u8>>),
    /// The address and the interpreter's words for the error.
    Corrupt(u64, String),
    Fault,
}

/// Runs the walker in a forked child, so that a bad pointer is an outcome, not a crash of
/// the test process. The child only calls the code and writes to a pipe.
fn jit_in_child(code: &Mapped, addr: u64) -> Outcome {
    let len = 1 << 22;
    let mut r = Run::new(&[addr], len);
    r.frame.out = r.out.as_mut_ptr() as u64;
    r.frame.out_len = len as u64;
    r.frame.scratch = r.scratch.as_mut_ptr() as u64;
    r.frame.scratch_len = SCRATCH_BYTES;
    let mut fds = [0i32; 2];
    // SAFETY: pipe, fork, and in the child only the walker call, write and _exit (no
    // allocation, no locks); the parent reads the pipe and reaps the child by pid.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        let pid = libc::fork();
        assert!(pid >= 0);
        if pid == 0 {
            libc::close(fds[0]);
            let s = code.call(&mut r.frame);
            let hdr = [s, r.frame.out_used, r.frame.err_addr, r.frame.err_code];
            libc::write(fds[1], hdr.as_ptr() as *const c_void, 32);
            if s == STATUS_DONE {
                let mut done = 0usize;
                let n = r.frame.out_used as usize;
                while done < n {
                    let w =
                        libc::write(fds[1], r.out.as_ptr().add(done) as *const c_void, n - done);
                    if w <= 0 {
                        break;
                    }
                    done += w as usize;
                }
            }
            libc::_exit(0);
        }
        libc::close(fds[1]);
        let mut f = std::fs::File::from_raw_fd(fds[0]);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut bytes).expect("read pipe");
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        if libc::WIFSIGNALED(status) || bytes.len() < 32 {
            // (The frame lives in the child's memory: its err_root is checked elsewhere.)
            return Outcome::Fault;
        }
        let s = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        match s {
            STATUS_DONE => Outcome::Stream(split_streams(&bytes[32..], 1).expect("split")),
            STATUS_CORRUPT => {
                let w = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
                let what = ErrorCode::from_u64(w(24)).map(ErrorCode::describe);
                Outcome::Corrupt(w(16), what.unwrap_or_default())
            }
            other => panic!("status {other}"),
        }
    }
}

use std::os::fd::FromRawFd;

/// Tiny deterministic PRNG (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Garbage objects: an arena of words that are zero, small counts, or addresses inside
/// the arena. Both backends must agree: the same stream, both refusing a corrupt object, or
/// (for the JIT) a fault where the interpreter could not read.
#[test]
fn jit_fuzz_garbage_objects_agree_with_the_interpreter() {
    const ARENA: usize = 1 << 17; // words; pointers go to the first quarter
    let cases: &[(&str, &[&str])] = &[
        ("probe_everything", &["capture-keys", "chase-raw-pointers"]),
        ("probe_smap", &["capture-keys"]),
        ("probe_umap", &["capture-keys"]),
        ("probe_slist", &[]),
        ("probe_ideque", &[]),
        ("probe_sdeque", &[]),
        ("probe_mixed", &[]),
        ("probe_pointers", &[]),
        ("probe_raw", &["chase-raw-pointers"]),
        ("probe_nested", &[]),
    ];
    // OI_FUZZ_ROUNDS / OI_FUZZ_SEED explore further than the default run.
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let rounds = env("OI_FUZZ_ROUNDS").unwrap_or(60);
    let mut rng = Rng(env("OI_FUZZ_SEED").unwrap_or(0x1234_5678_9abc_def1) | 1);
    let mut tally = [0usize; 3];
    for (probe, features) in cases {
        let m = measurer(probe, &["arg0"], features);
        // Roots from a real walk of a good object of the same type.
        let good = match *probe {
            "probe_ideque" => make_n("ideque", 10),
            p => make(p.trim_start_matches("probe_")),
        };
        let (roots, _) = interp(&m, &[good]).expect("interp");
        let code = Mapped::new(&compile(m.plan(), &roots).expect("compile"));
        for round in 0..rounds {
            let mut arena = vec![0u64; ARENA];
            let base = arena.as_ptr() as u64;
            for w in arena.iter_mut() {
                *w = match rng.next() % 8 {
                    0..=2 => 0,
                    3 => rng.next() % 40,
                    // An address in the first quarter, near the others.
                    _ => base + 8 * (rng.next() % (ARENA as u64 / 4)),
                };
            }
            let addr = base + 8 * (rng.next() % 64);
            let want = match interp(&m, &[addr]) {
                Ok((_, s)) => Outcome::Stream(s),
                Err(MeasureError::Walk {
                    source: crate::interp::WalkError::Corrupt { addr, what },
                    ..
                }) => Outcome::Corrupt(addr, what),
                Err(_) => Outcome::Fault,
            };
            let got = jit_in_child(&code, addr);
            let ok = match (&want, &got) {
                (a, b) if a == b => true,
                // The interpreter's message may go on with the number it saw.
                (Outcome::Corrupt(a, w), Outcome::Corrupt(b, v)) => {
                    a == b && w.starts_with(v.as_str())
                }
                // The interpreter reads whole objects, the walker only the fields it needs:
                // an unreadable object may still be walked or refused by the walker.
                (Outcome::Fault, _) => true,
                _ => false,
            };
            assert!(
                ok,
                "{probe} round {round}: interpreter {want:?}, JIT {got:?}"
            );
            tally[match want {
                Outcome::Stream(_) => 0,
                Outcome::Corrupt(..) => 1,
                Outcome::Fault => 2,
            }] += 1;
            drop(arena);
        }
    }
    eprintln!("fuzz outcomes (stream, corrupt, fault): {tally:?}");
}

#[test]
fn jit_fault_leaves_the_root_being_walked_in_the_frame() {
    let m = measurer("probe_two", &["arg0", "arg1"], &[]);
    let (good_a, good_b) = (make_n("strings", 3), make("imap"));
    let (roots, _) = interp(&m, &[good_a, good_b]).expect("interp");
    let code = Mapped::new(&compile(m.plan(), &roots).expect("compile"));
    // A map whose root node pointer is unmapped (and a node count that makes it walked).
    let mut bad = [0u64; 6];
    bad[2] = 0x10; // _M_header._M_parent (header at +8)
    bad[5] = 3; // _M_node_count
    let bad_addr = bad.as_ptr() as u64;
    let (status, frame) = walk_frame_in_child(&code, &[good_a, bad_addr]);
    assert!(libc::WIFSIGNALED(status), "the walk of the bad map faults");
    assert_eq!(libc::WTERMSIG(status), libc::SIGSEGV);
    assert_eq!(frame.err_root, 1, "root 1 was being walked");
}

/// Runs `code` over the roots `args` in a forked child whose frame lies in a page shared
/// with the parent, so that a fault ends only the child and the parent still sees what the
/// walk left in the frame: the child's wait status and that frame.
fn walk_frame_in_child(code: &Mapped, args: &[u64]) -> (i32, WalkFrame) {
    let mut out = vec![0u8; 1 << 16];
    let mut scratch = vec![0u64; (SCRATCH_BYTES / 8) as usize];
    // SAFETY: a shared anonymous page for the frame; the child only calls the walker and
    // exits; the parent reaps it by pid, copies the frame and unmaps the page.
    unsafe {
        let page = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(page, libc::MAP_FAILED);
        let frame = page as *mut WalkFrame;
        frame.write(WalkFrame {
            nargs: args.len() as u64,
            out: out.as_mut_ptr() as u64,
            out_len: out.len() as u64,
            scratch: scratch.as_mut_ptr() as u64,
            scratch_len: SCRATCH_BYTES,
            ..Default::default()
        });
        (&mut (*frame).args)[..args.len()].copy_from_slice(args);
        let pid = libc::fork();
        assert!(pid >= 0);
        if pid == 0 {
            code.call(&mut *frame);
            libc::_exit(0);
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        let left = *frame;
        libc::munmap(page, 4096);
        (status, left)
    }
}

/// The tree walk's prefetches read a right child's `left` only in a page the walk has
/// already read: a map whose extra node's right child lies in an unreadable page ends as the
/// interpreter's "tree larger than its node count", never as a fault. The right child in a
/// readable page whose `left` points into the unreadable one is only prefetched (a hint
/// that never faults).
#[test]
fn jit_tree_prefetch_never_faults_before_the_interpreter_stops() {
    let m = measurer("probe_imap", &["arg0"], &[]);
    let (roots, _) = interp(&m, &[make("imap")]).expect("interp");
    let code = Mapped::new(&compile(m.plan(), &roots).expect("compile"));
    // SAFETY: three fresh private pages, the last made unreadable; the walker runs in a
    // forked child (a fault ends only the child, reaped by pid); the frame lives in a
    // shared page so that the parent sees its status.
    unsafe {
        let len = 3 * 4096;
        let base = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(base, libc::MAP_FAILED);
        let b = base as u64;
        let unreadable = b + 2 * 4096;
        assert_eq!(
            libc::mprotect(unreadable as *mut c_void, 4096, libc::PROT_NONE),
            0
        );
        let put = |addr: u64, v: u64| (addr as *mut u64).write(v);
        // map<int, string>: header at +8 (parent +16), count at +40; nodes: left +16,
        // right +24, key +32, the string at +40 (pointer, length, inline buffer at +56).
        let (map, x, l, r) = (b, b + 0x100, b + 0x200, b + 0x300);
        for node in [x, l, r] {
            put(node + 40, node + 56);
        }
        put(map + 16, x);
        put(map + 40, 1); // one node, but the tree has two: corrupt at the second
        put(x + 16, l);
        for (right, r_left) in [(unreadable + 0x100, 0), (r, unreadable + 0x100)] {
            put(x + 24, right);
            put(r + 16, r_left);
            assert!(interp(&m, &[map]).is_err());
            let (status, frame) = walk_frame_in_child(&code, &[map]);
            assert!(
                !libc::WIFSIGNALED(status),
                "right child {right:#x}: the walk faulted"
            );
            assert_eq!(frame.status, STATUS_CORRUPT);
            assert_eq!(frame.err_code, ErrorCode::RbLarge as u64);
            assert_eq!(frame.err_addr, map);
        }
        libc::munmap(base, len);
    }
}

/// A discriminated union (`Op::Union`, a `[[union]]` rule): the JIT in this process and the
/// interpreter write the same stream and the decoder the same size, for every case: a string
/// member (heap), a long, "none", and a tag no case names; the tag 8 bytes before the union.
#[test]
fn jit_discriminated_union_agrees_with_the_interpreter() {
    use crate::containers::string::StringLayout;
    use crate::plan::Op;
    let node = |name: &str, size: u64, op: Op| plan_node(name, name, size, op);
    let string = StringLayout {
        ptr_off: 0,
        len_off: 8,
        cap_off: 16,
        char_size: 1,
        size: 32,
    };
    let mut plan = Plan::default();
    plan.nodes.extend([
        node(
            "a0",
            40,
            Op::Struct {
                members: vec![(0, 1), (8, 2)],
                padding: 0,
                adapter: false,
            },
        ),
        node("tag", 8, Op::Leaf),
        node(
            "u",
            32,
            Op::Union {
                disc: -8,
                width: 8,
                cases: vec![(1, Some((0, 3))), (2, Some((0, 4))), (0, None)],
            },
        ),
        node("s", 32, Op::String(string)),
        node("i", 8, Op::Leaf),
    ]);
    plan.compute_dynamic();
    let text: &'static [u8] = Box::leak(vec![b'x'; 40].into_boxed_slice());
    let mem = RemoteReader::new(std::process::id() as i32);
    for (tag, size) in [(1u64, 40 + 40), (2, 40), (0, 40), (7, 40)] {
        // tag; the union: a heap string (pointer, length 40, capacity 40) or a long.
        let obj: &'static [u64; 5] = Box::leak(Box::new([tag, text.as_ptr() as u64, 40, 40, 0]));
        let addr = obj.as_ptr() as u64;
        let jit = in_process_streams(&plan, &[0], &[addr]);
        let interp = crate::interp::walk::run(&plan, 0, addr, &mem, true, 0).expect("interp");
        assert_eq!(jit[0], interp, "tag {tag}");
        let total = crate::report::total_size(&plan, 0, &interp).expect("decode");
        assert_eq!(total, size, "tag {tag}");
    }
}

/// A cost probe's `OI_COST_*` setting `k` (a number), or `default`.
fn cost_var(k: &str, default: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the cost probes (`string_loop_cost`, `map_walk_cost`) share: their rounds
/// (`OI_COST_REPS`), whether they flush the caches before each walk (`OI_COST_FLUSH`) and
/// run the C++ walk too (`OI_COST_NATIVE`), and the 64 MiB sweep that flushes them.
struct CostProbe {
    reps: usize,
    native_too: bool,
    sweep: Option<Vec<u8>>,
}

impl CostProbe {
    fn from_env() -> Self {
        Self {
            reps: cost_var("OI_COST_REPS", 21),
            native_too: cost_var("OI_COST_NATIVE", 1) != 0,
            sweep: (cost_var("OI_COST_FLUSH", 1) != 0).then(|| vec![0u8; 64 << 20]),
        }
    }

    /// Leaves the caches as a sampled call finds them after a sleep (when flushing).
    fn flush_caches(&mut self, round: usize) {
        for b in self.sweep.iter_mut().flatten().step_by(64) {
            *b = b.wrapping_add(round as u8);
        }
    }

    /// Each round: the caches flushed, `walk` timed, then (with the C++ walk) the caches
    /// flushed again and `native` timed. The times in ns, and what `native` returned, summed
    /// (kept, so that the walk is not optimised away).
    fn time_rounds(
        &mut self,
        mut walk: impl FnMut(),
        mut native: impl FnMut() -> usize,
    ) -> (Vec<f64>, Vec<f64>, usize) {
        let (mut walk_ns, mut native_ns, mut sink) = (Vec::new(), Vec::new(), 0usize);
        for round in 0..self.reps {
            self.flush_caches(round);
            let t = std::time::Instant::now();
            walk();
            walk_ns.push(t.elapsed().as_nanos() as f64);
            if self.native_too {
                self.flush_caches(round);
                let t = std::time::Instant::now();
                sink = sink.wrapping_add(native());
                native_ns.push(t.elapsed().as_nanos() as f64);
            }
        }
        (walk_ns, native_ns, sink)
    }
}

/// The middle of `v` (NaN when empty).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The cost of the `vector<string>` loop, by hand: not a test.
/// `cargo test --release -p oi-user string_loop_cost -- --ignored --nocapture` walks a million
/// strings of the pause bench's kind (nine in ten alike) and of random lengths 0–39 with the
/// target's walker and with a hand-written C++ walk, each after the caches were flushed by a
/// 64 MiB sweep (as a sampled call finds them after a sleep), and prints the medians, the
/// stream's bytes, and the ratios. The walker's time is given twice: with `Run::go`'s setup
/// (which reads `/proc/self/maps` for the heap ranges) and for the call alone, which is what
/// the stub's time stamps in a real target measure. `OI_COST_REPS=N` sets the rounds;
/// `OI_COST_FLUSH=0` skips the sweeps and `OI_COST_NATIVE=0` the C++ walk, for counting the
/// walker's instructions under `valgrind --tool=cachegrind --branch-sim=yes` as the
/// difference of two runs.
#[test]
#[ignore = "cost probe, asserts nothing: run by hand (see above)"]
fn string_loop_cost() {
    let mut probe = CostProbe::from_env();
    let n = cost_var("OI_COST_N", 1_000_000) as i32;
    let m = measurer("probe_strings", &["arg0"], &[]);
    // SAFETY: the fixture's own walk of a vector it built.
    let native: extern "C" fn(u64) -> usize =
        unsafe { std::mem::transmute(sym("native_walk_strings")) };
    let only = std::env::var("OI_COST_DATA").unwrap_or_default();
    for data in ["varied_strings", "bench_strings"] {
        if !only.is_empty() && only != data {
            continue;
        }
        let v = make_n(data, n);
        let roots = m.roots();
        let w = compile(m.plan(), &roots).expect("compile");
        if let Ok(path) = std::env::var("OI_COST_DUMP") {
            std::fs::write(format!("{path}.{data}.bin"), &w.code).expect("dump");
        }
        let code = Mapped::new(&w);
        let out_len = 24 * n as usize + 4096;
        let mut r = Run::new(&[v], out_len);
        let mut call_ns = Vec::new();
        let (jit_ns, native_ns, sink) = probe.time_rounds(
            || {
                assert_eq!(r.go(&code, out_len), STATUS_DONE);
                call_ns.push(r.call_ns as f64);
            },
            || native(v),
        );
        let (j, c, nat) = (median(jit_ns), median(call_ns), median(native_ns));
        println!(
            "{data} of {n}: walker {:.0} µs, native {:.0} µs, {:.2}×; the call alone {:.0} µs, \
             {:.2}×; stream {} bytes ({sink})",
            j / 1e3,
            nat / 1e3,
            j / nat,
            c / 1e3,
            c / nat,
            r.frame.out_used
        );
    }
}

/// The cost of the `map<int,string>` walk, by hand: not a test.
/// `cargo test --release -p oi-user map_walk_cost -- --ignored --nocapture` builds the pause
/// bench's map (`OI_COST_N` nodes, 100,000; its first node at `OI_COST_OFFSET` mod 128, 48 as
/// the bench pins it) and walks it with the target's walker and with the bench fixture's C++
/// walk in turns, each after the caches were flushed by a 64 MiB sweep (`OI_COST_FLUSH=0`:
/// warm), and prints the medians. `OI_COST_NATIVE=0` skips the C++ walk and `OI_COST_DUMP`
/// writes the walker's code, as for `string_loop_cost`.
#[test]
#[ignore = "cost probe, asserts nothing: run by hand (see above)"]
fn map_walk_cost() {
    let mut probe = CostProbe::from_env();
    let n = cost_var("OI_COST_N", 100_000) as i32;
    let offset = cost_var("OI_COST_OFFSET", 48) as i32;
    let shuffled = cost_var("OI_COST_SHUFFLED", 0) as i32;
    let m = measurer("probe_imap", &["arg0"], &[]);
    type Make = extern "C" fn(i32, i32, i32) -> u64;
    type Walk = extern "C" fn(u64) -> usize;
    type Offset = extern "C" fn(u64) -> i64;
    // SAFETY: the fixture's own functions, with these signatures, on a map it built.
    let (make, native, at) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Make>(sym("make_bench_map")),
            std::mem::transmute::<*mut c_void, Walk>(sym("native_walk_bench_map")),
            std::mem::transmute::<*mut c_void, Offset>(sym("bench_map_offset")),
        )
    };
    let map = make(n, offset, shuffled);
    let w = compile(m.plan(), &m.roots()).expect("compile");
    if let Ok(path) = std::env::var("OI_COST_DUMP") {
        std::fs::write(format!("{path}.map.bin"), &w.code).expect("dump");
    }
    let code = Mapped::new(&w);
    let out_len = 24 * n as usize + 4096;
    let mut r = Run::new(&[map], out_len);
    let (jit_ns, native_ns, sink) = probe.time_rounds(
        || assert_eq!(r.go(&code, out_len), STATUS_DONE),
        || native(map),
    );
    let (j, nat) = (median(jit_ns), median(native_ns));
    println!(
        "map<int,string> of {n} at {} mod 128: walker {:.0} µs, native {:.0} µs, {:.2}×, \
         stream {} bytes ({sink})",
        at(map),
        j / 1e3,
        nat / 1e3,
        j / nat,
        r.frame.out_used
    );
}
