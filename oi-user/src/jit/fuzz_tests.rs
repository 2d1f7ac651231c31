//! Random plans over random memory: the JIT and the interpreter must agree on shapes no real
//! type produces (fields outside their objects, odd index sizes, dangling-looking layouts),
//! which is where the compile-time error paths live.
//!
//! Plans are DAGs through containers and aggregates (so a walk stays small) and may close
//! cycles only through pointers (bounded by the visited set). Memory is an arena between
//! PROT_NONE guard pages whose words are zero, small numbers or addresses inside it. The
//! walker runs in a forked child with a time limit; a walk too big to compare is skipped.
//!
//! OIL's two walkers of one root run on the same plan and memory, compiled into this process
//! as OIL compiles them: the exact count-only walker (`LocalWalker::compile_totals`) must give
//! the sized walker's outcome and total, and the optimistic one
//! (`LocalWalker::compile_totals_optimistic`, OIL's steady state) either hands over (any
//! status but `STATUS_DONE`, or a fault that OIL's handler can return from) or gives the
//! exact walker's total; where the exact walker finds the object corrupt or faults, it must
//! hand over. Its faults are caught in the child by a handler that checks what `oil::guard`
//! needs to recover one: the instruction in walker code and a chain of walker frames up to
//! the entry's caller, followed by the handler's own `jit::frame_chain`. Some memory fills
//! hold wild words (near 2^64, at 2^47 and above), so that differences wrap around and
//! addresses leave the canonical range.

use std::ffi::c_void;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use super::frame_chain::frame_chain;
use super::in_process::LocalWalker;
use super::tests::{Mapped, plan_node};
use super::*;
use crate::containers::deque::DequeLayout;
use crate::containers::deque::LibcxxDeque;
use crate::containers::hashtable::HashLayout;
use crate::containers::list::ListLayout;
use crate::containers::optional::OptionalLayout;
use crate::containers::rbtree::RbLayout;
use crate::containers::string::StringLayout;
use crate::containers::variant::VariantLayout;
use crate::containers::vector::{LibcxxBits, VectorBoolLayout, VectorLayout};
use crate::interp::{RemoteReader, WalkError};
use crate::plan::{Capture, Node, Op, Plan};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// An offset for a word field of an object of `size` bytes: usually inside, sometimes not.
fn off(r: &mut Rng, size: u64) -> u64 {
    if r.chance(5) {
        size + r.below(16)
    } else {
        8 * r.below(size.saturating_sub(7) / 8 + 1)
    }
}

fn random_plan(r: &mut Rng) -> Plan {
    let n = 2 + r.below(9) as usize;
    let mut p = Plan::default();
    if r.chance(50) {
        p.sizing = crate::plan::Sizing::Real;
    }
    for i in 0..n {
        let size = 8 + 8 * r.below(8);
        // Aggregate / container children come later (a DAG); pointers may go anywhere.
        let later = |r: &mut Rng| -> Option<usize> {
            (i + 1 < n).then(|| i + 1 + r.below((n - i - 1) as u64) as usize)
        };
        let any = |r: &mut Rng| r.below(n as u64) as usize;
        let op = match (r.below(20), later(r)) {
            (0, _) | (_, None) if r.chance(50) => Op::Leaf,
            (1, _) => Op::Bitfield,
            (2, Some(_)) => {
                let k = 1 + r.below(3);
                let members = (0..k)
                    .filter_map(|_| Some((off(r, size), later(r)?)))
                    .collect();
                Op::Struct {
                    members,
                    padding: 0,
                    adapter: false,
                }
            }
            (3, Some(c)) => Op::Array {
                elem: c,
                offset: r.below(16),
                count: r.below(7),
                stride: 1 + r.below(24),
                exclusive: 0,
            },
            (4, Some(c)) => Op::Pair {
                first: (off(r, size), c),
                second: (off(r, size), later(r).unwrap_or(c)),
            },
            (5, Some(c)) => Op::Vector {
                layout: VectorLayout {
                    start_off: off(r, size),
                    finish_off: off(r, size),
                    eos_off: off(r, size),
                    elem_size: 8 + 8 * r.below(4),
                    size,
                },
                elem: c,
            },
            (6, _) => Op::String(StringLayout {
                ptr_off: off(r, size),
                len_off: off(r, size),
                cap_off: off(r, size),
                char_size: [1, 2, 4][r.below(3) as usize],
                size: 32,
            }),
            (7, Some(c)) => Op::VectorBool {
                layout: VectorBoolLayout {
                    start_p: off(r, size),
                    start_bit: off(r, size),
                    finish_p: off(r, size),
                    finish_bit: off(r, size),
                    eos_off: off(r, size),
                    size,
                    libcxx: (r.below(2) == 1).then(|| LibcxxBits {
                        size_off: off(r, size),
                        cap_off: off(r, size),
                    }),
                },
                elem: c,
            },
            (8, Some(c)) => {
                let mut s = [0; 4];
                let mut f = [0; 4];
                for x in s.iter_mut().chain(f.iter_mut()) {
                    *x = off(r, size);
                }
                Op::Deque {
                    layout: DequeLayout {
                        map_off: off(r, size),
                        map_size_off: off(r, size),
                        start: s,
                        finish: f,
                        elem_size: 8 + 8 * r.below(4),
                        size,
                        libcxx: (r.below(2) == 1).then(|| LibcxxDeque {
                            first: off(r, size),
                            begin: off(r, size),
                            end: off(r, size),
                            end_cap: off(r, size),
                            start: off(r, size),
                            count: off(r, size),
                        }),
                    },
                    elem: c,
                }
            }
            (9, Some(c)) => Op::List {
                layout: ListLayout {
                    head_off: off(r, size),
                    next_off: 0,
                    size_off: off(r, size),
                    value_off: 16,
                    node_size: 24 + 8 * r.below(4),
                    elem_size: 8 * r.below(3),
                    size,
                    counted: r.below(2) == 1,
                },
                elem: c,
            },
            (10, Some(c)) => Op::RbTree {
                layout: RbLayout {
                    header_off: off(r, size),
                    root_link: crate::containers::rbtree::PARENT,
                    left_off: crate::containers::rbtree::LEFT,
                    right_off: crate::containers::rbtree::RIGHT,
                    count_off: off(r, size),
                    value_off: 32,
                    value_size: 8 * r.below(3),
                    node_size: 16 + 8 * r.below(6),
                    size,
                },
                elem: c,
                is_map: false,
            },
            (11, Some(c)) => Op::Hashtable {
                layout: HashLayout {
                    bucket_count_off: off(r, size),
                    before_begin_off: off(r, size),
                    count_off: off(r, size),
                    value_off: 8,
                    value_size: 8 * r.below(3),
                    node_size: 32,
                    size,
                },
                elem: c,
                is_map: false,
            },
            (12, Some(c)) => Op::Entry {
                key: (off(r, size), c),
                value: (off(r, size), later(r).unwrap_or(c)),
                capture: match r.below(4) {
                    0 => None,
                    1 => Some(Capture::Scalar {
                        size: r.below(12),
                        signed: r.chance(50),
                    }),
                    2 => Some(Capture::Address),
                    _ => Some(Capture::String(StringLayout {
                        ptr_off: off(r, 32),
                        len_off: off(r, 32),
                        cap_off: 16,
                        char_size: 1 + r.below(2),
                        size: 32,
                    })),
                },
            },
            (13, Some(c)) => Op::Optional {
                layout: OptionalLayout {
                    value_off: off(r, size),
                    engaged_off: r.below(size + 2),
                },
                elem: c,
            },
            (14, Some(_)) => Op::Variant {
                layout: VariantLayout {
                    storage_off: off(r, size),
                    index_off: r.below(size),
                    index_size: 1 + r.below(8),
                },
                alternatives: (0..1 + r.below(3)).filter_map(|_| later(r)).collect(),
            },
            (15, _) => {
                let target = r.chance(80).then(|| any(r));
                Op::SmartPtr {
                    offset: off(r, size),
                    target,
                    control: (target.is_some() && r.chance(50)).then(|| {
                        crate::plan::ControlBlock {
                            offset: off(r, size),
                            inplace_at: 16,
                            inplace_extra: 16 + 8 * r.below(2),
                            separate: 24,
                        }
                    }),
                }
            }
            (16, _) => Op::RefWrap {
                offset: off(r, size),
                target: r.chance(80).then(|| any(r)),
            },
            (17, _) if r.chance(50) => Op::RawPointer {
                target: r.chance(80).then(|| any(r)),
            },
            (17, _) => Op::HeapPointer {
                target: r.chance(80).then(|| any(r)),
                lone: r.below(64),
            },
            (19, Some(_)) => Op::Union {
                // The discriminator may sit before the union, inside it or past it, as in
                // the class around a real one; values repeat so the first match must win.
                disc: r.below(size + 24) as i64 - 16,
                width: [1, 2, 4, 8][r.below(4) as usize],
                cases: (0..1 + r.below(4))
                    .map(|_| {
                        let member = later(r).filter(|_| r.chance(80));
                        (r.below(3), member.map(|m| (off(r, size), m)))
                    })
                    .collect(),
            },
            (18, Some(c)) => Op::Poly {
                // Vtable "ranges" over the arena's addresses are filled in by the caller.
                candidates: vec![(0, 0, any(r))],
                fallback: c,
            },
            _ => Op::Leaf,
        };
        p.nodes.push(Node {
            name: format!("n{i}"),
            // A few types, so that visit tags differ (one address seen as two types is two
            // objects) and repeat (the same type through two paths is one).
            type_names: vec![format!("T{}", i % 3)],
            static_size: size,
            is_primitive: false,
            op,
            dynamic: false,
            readable: String::new(),
            value: None,
            opaque_union: false,
            foreign: false,
        });
    }
    p.compute_dynamic();
    p
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Stream(Vec<u8>),
    Corrupt(u64, String),
    Fault,
    /// Took too long or too much output to be worth comparing.
    Big,
    /// An optimistic walk handed over with this status (`STATUS_REVISIT`, `STATUS_STACK`).
    HandOver(u64),
    /// A fault that OIL's handler could not return from (where, and why): a crash of the
    /// user's program.
    Crash(String),
}

/// The arena: `words` words between two PROT_NONE pages.
struct Arena {
    map: *mut c_void,
    len: usize,
    base: u64,
    words: usize,
    /// How many words from `base` the last fill's pointers aim at.
    span: u64,
}

impl Arena {
    fn new(words: usize) -> Self {
        let body = (words * 8).next_multiple_of(4096);
        let len = body + 2 * 4096;
        // SAFETY: a fresh anonymous mapping owned by this value; its first and last page
        // are made inaccessible, the body stays read-write.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            let base = (map as *mut u8).add(4096);
            assert_eq!(
                libc::mprotect(
                    base as *mut c_void,
                    body,
                    libc::PROT_READ | libc::PROT_WRITE
                ),
                0
            );
            // The words sit at the end of the body, right before the guard page.
            let base = base as u64 + (body - words * 8) as u64;
            Arena {
                map,
                len,
                base,
                words,
                span: 0,
            }
        }
    }

    fn fill(&mut self, r: &mut Rng) {
        let base = self.base;
        let n = self.words as u64;
        // One fill in four has wild words too (one in ten words); some fills point into a
        // few words only, so that pointees are shared and cycles close.
        let wild = r.chance(25);
        let span = if r.chance(30) { 8 } else { n.min(96) };
        self.span = span;
        // SAFETY: `words` words at `base` are mapped read-write and owned by this arena.
        let w = unsafe { std::slice::from_raw_parts_mut(base as *mut u64, self.words) };
        for x in w.iter_mut() {
            *x = match r.below(10) {
                0..=2 => 0,
                3..=4 => r.below(6),
                5 if wild => {
                    let near = base + 8 * r.below(span);
                    wild_word(r, near)
                }
                // Pointers cluster, so that differences (counts) stay small.
                _ => base + 8 * r.below(span),
            };
        }
    }
}

/// A word no valid object holds, near `near` (an arena address): just below 2^64 (a small
/// difference from a small number, once it wraps), a negative small number, `near` with a
/// bit at 47 or above set (no canonical user address), or just below 2^47.
fn wild_word(r: &mut Rng, near: u64) -> u64 {
    match r.below(5) {
        0 => u64::MAX - 8 * r.below(8),
        1 => 0u64.wrapping_sub(r.below(6)),
        2 => near | 1 << (47 + r.below(17)),
        3 => near.wrapping_add(1 << 63),
        _ => (1 << 47) - 8 * (1 + r.below(8)),
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this value owns.
        unsafe {
            libc::munmap(self.map, self.len);
        }
    }
}

/// A walker to run in the child: the target backend's (a stream), or one of OIL's compiled
/// into this process (a total only, and its faults caught as OIL catches them).
#[derive(Clone, Copy)]
enum Walker<'a> {
    Target(&'a Mapped),
    Oil(&'a LocalWalker),
}

/// The header the child writes after a fault it caught: not a status.
const CAUGHT: u64 = 0xfa17_0000;

/// The walker code of the child's walk (`Walker::Oil`), for its fault handler.
static CODE_START: AtomicUsize = AtomicUsize::new(0);
static CODE_END: AtomicUsize = AtomicUsize::new(0);
/// The pipe the child's fault handler writes its header to.
static CHILD_PIPE: AtomicI32 = AtomicI32::new(-1);

/// The child's SIGSEGV/SIGBUS handler for an OIL walker: writes `[CAUGHT, rip, fault
/// address, recoverable, 0]` and exits. Recoverable is what `oil::guard::recover` needs to
/// return from a direct walk: the instruction in walker code and, from the interrupted
/// frame pointer up, walker frames to the first return address outside walker code, the
/// entry's caller (the trampoline, or `oil.h` for a leaf entry), followed by the same
/// [`frame_chain`] as the handler's.
extern "C" fn on_child_fault(_sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let code = CODE_START.load(Ordering::Relaxed)..CODE_END.load(Ordering::Relaxed);
    // SAFETY: SA_SIGINFO: `ctx` is the interrupted ucontext_t and `info` the kernel's
    // siginfo. The chain is followed only when the instruction is in walker code, as
    // `frame_chain` requires; a broken chain that still faults here kills the child, which
    // counts as a crash (as it would kill a program in OIL's handler).
    unsafe {
        let gregs = &(*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs;
        let rip = gregs[libc::REG_RIP as usize] as usize;
        let rsp = gregs[libc::REG_RSP as usize] as usize;
        let rbp = gregs[libc::REG_RBP as usize] as usize;
        let in_code = |a: usize| code.contains(&a);
        let ok = in_code(rip) && frame_chain(rsp, rbp, in_code, |a| !in_code(a)).is_some();
        let hdr = [CAUGHT, rip as u64, (*info).si_addr() as u64, ok as u64, 0];
        libc::write(
            CHILD_PIPE.load(Ordering::Relaxed),
            hdr.as_ptr() as *const c_void,
            40,
        );
        libc::_exit(0);
    }
}

/// The walk's outcome and the total a walker compiled with sizes added up.
fn run_child(walker: Walker<'_>, addr: u64) -> (Outcome, u64) {
    const OUT: usize = 1 << 16;
    let mut out = vec![0u64; OUT / 8];
    let mut scratch = vec![0u64; (SCRATCH_BYTES / 8) as usize];
    let mut frame = WalkFrame {
        nargs: 1,
        out: out.as_mut_ptr() as u64,
        out_len: OUT as u64,
        scratch: scratch.as_mut_ptr() as u64,
        scratch_len: SCRATCH_BYTES,
        // The fuzz thread's stack is 256 MiB.
        stack_len: 64 << 20,
        ..Default::default()
    };
    frame.args[0] = addr;
    frame.set_heaps(&crate::interp::heap::ranges_of(std::process::id() as i32));
    let mut fds = [0i32; 2];
    // SAFETY: pipe, fork; the child only arms an alarm (and, for OIL's walkers, a fault
    // handler that writes and exits), calls the walker, writes to the pipe and _exits (no
    // allocation, no locks); the parent reaps it by pid.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        let pid = libc::fork();
        assert!(pid >= 0);
        if pid == 0 {
            libc::close(fds[0]);
            libc::alarm(2);
            let s = match walker {
                Walker::Target(code) => code.call(&mut frame),
                Walker::Oil(w) => {
                    let code = w.code_range();
                    CODE_START.store(code.start, Ordering::Relaxed);
                    CODE_END.store(code.end, Ordering::Relaxed);
                    CHILD_PIPE.store(fds[1], Ordering::Relaxed);
                    let mut act: libc::sigaction = std::mem::zeroed();
                    act.sa_sigaction = on_child_fault as *const () as usize;
                    act.sa_flags = libc::SA_SIGINFO;
                    for sig in [libc::SIGSEGV, libc::SIGBUS] {
                        libc::sigaction(sig, &act, std::ptr::null_mut());
                    }
                    w.call(&mut frame)
                }
            };
            let hdr = [
                s,
                frame.out_used,
                frame.err_addr,
                frame.err_code,
                frame.total,
            ];
            libc::write(fds[1], hdr.as_ptr() as *const c_void, 40);
            if s == STATUS_DONE && matches!(walker, Walker::Target(_)) {
                let mut done = 0usize;
                let n = frame.out_used as usize;
                while done < n {
                    let p = (out.as_ptr() as *const u8).add(done);
                    let w = libc::write(fds[1], p as *const c_void, n - done);
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
        let oil = matches!(walker, Walker::Oil(_));
        if libc::WIFSIGNALED(status) {
            let o = match libc::WTERMSIG(status) {
                libc::SIGALRM => Outcome::Big,
                sig if oil => Outcome::Crash(format!("killed by signal {sig}")),
                _ => Outcome::Fault,
            };
            return (o, 0);
        }
        let w = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
        let o = match w(0) {
            STATUS_DONE if oil => Outcome::Stream(Vec::new()),
            STATUS_DONE => {
                let s = split_streams(&bytes[40..], 1).expect("split");
                Outcome::Stream(s.into_iter().next().unwrap_or_default())
            }
            STATUS_CORRUPT => Outcome::Corrupt(
                w(16),
                ErrorCode::from_u64(w(24))
                    .map(ErrorCode::describe)
                    .unwrap_or_default(),
            ),
            CAUGHT if w(24) == 1 => Outcome::Fault,
            CAUGHT => Outcome::Crash(format!(
                "a fault at {:#x} (reading {:#x}) that OIL cannot return from",
                w(8),
                w(16)
            )),
            s @ (STATUS_REVISIT | STATUS_STACK) if oil => Outcome::HandOver(s),
            STATUS_FULL | STATUS_STACK => Outcome::Big,
            other => panic!("status {other}"),
        };
        (o, w(32))
    }
}

#[test]
fn jit_fuzz_random_plans_agree_with_the_interpreter() {
    // Both backends recurse as deep as pointer chains go.
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(fuzz_random_plans)
        .expect("spawn")
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p));
}

fn fuzz_random_plans() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    // 200 plans by default, as OIL's two walkers also run on each (CI time); hunt with
    // more: OI_FUZZ_PLANS, OI_FUZZ_SEED (odd: the seed is ORed with 1) and
    // OI_FUZZ_KEEP_GOING=1 (OIL's failures printed, the run goes on, fails at the end).
    let plans = env("OI_FUZZ_PLANS").unwrap_or(200);
    let mut r = Rng(env("OI_FUZZ_SEED").unwrap_or(0x5eed_1234_abcd_0001) | 1);
    // Hunting: OIL's failures are printed and counted, and the run goes on.
    let keep_going = env("OI_FUZZ_KEEP_GOING").is_some_and(|k| k != 0);
    let mem = RemoteReader::new(std::process::id() as i32);
    let mut tally = std::collections::BTreeMap::<&str, usize>::new();
    let mut arena = Arena::new(512);
    for i in 0..plans {
        let mut plan = random_plan(&mut r);
        arena.fill(&mut r);
        // Poly candidates: "vtable ranges" around some arena addresses (bias 0).
        for n in plan.nodes.iter_mut() {
            if let Op::Poly { candidates, .. } = &mut n.op {
                let lo = arena.base + 8 * r.below(64);
                candidates[0].0 = lo;
                candidates[0].1 = lo + 8 * r.below(64);
            }
        }
        let code = match compile(&plan, &[0]) {
            Ok(w) => Mapped::new(&w),
            Err(JitError::Unsupported { .. }) => continue,
            Err(e) => panic!("plan {i}: {e}\n{plan:#?}"),
        };
        let sized = Mapped::new(&super::compile_sized(&plan, &[0]).expect("compile with sizes"));
        // The root among the words that pointers aim at.
        let addr = arena.base + 8 * r.below(arena.span.min(32));
        let (got, _) = run_child(Walker::Target(&code), addr);
        if got == Outcome::Big {
            *tally.entry("big").or_default() += 1;
            continue;
        }
        let want = match crate::interp::run(&plan, 0, addr, &mem, true, 0) {
            Ok(s) => Outcome::Stream(s),
            Err(WalkError::Corrupt { addr, what }) => Outcome::Corrupt(addr, what),
            Err(_) => Outcome::Fault,
        };
        let ok = match (&want, &got) {
            (a, b) if a == b => true,
            (Outcome::Corrupt(a, w), Outcome::Corrupt(b, v)) => a == b && w.starts_with(v.as_str()),
            (Outcome::Fault, _) => true,
            _ => false,
        };
        assert!(
            ok,
            "plan {i} at {addr:#x}: interpreter {want:?}, JIT {got:?}\n{plan:#?}"
        );
        // The walker that adds up sizes: the same stream and the decoder's total, or, where
        // the decoder refuses the stream, a corrupt walk (its caller then asks the
        // interpreter and the decoder, and gets their error).
        // What OIL's exact walker must give: the sized walker's outcome and total.
        let mut exact = (got.clone(), 0);
        if let Outcome::Stream(stream) = &got {
            let (sized_got, total) = run_child(Walker::Target(&sized), addr);
            match crate::report::total_size(&plan, 0, stream) {
                Ok(t) => assert_eq!(
                    (&sized_got, total),
                    (&got, t),
                    "plan {i} at {addr:#x}: sizes added up by the walker\n{plan:#?}"
                ),
                Err(e) => assert!(
                    matches!(sized_got, Outcome::Corrupt(..)),
                    "plan {i} at {addr:#x}: decoder says {e}, sized walker {sized_got:?}\n{plan:#?}"
                ),
            }
            exact = (sized_got, total);
        }
        match check_oil(&plan, addr, exact) {
            Ok(Some(o)) => *tally.entry(o).or_default() += 1,
            Ok(None) => {}
            Err(why) => {
                // The root's words to the arena's end (16 at most), arena addresses as
                // offsets from its base.
                let n = ((arena.base + 8 * arena.words as u64 - addr) / 8).min(16) as usize;
                // SAFETY: `n` words from `addr` lie inside the arena.
                let words = unsafe { std::slice::from_raw_parts(addr as *const u64, n) };
                let words: Vec<String> = words
                    .iter()
                    .map(|&w| match w.wrapping_sub(arena.base) {
                        d if d < 8 * arena.words as u64 => format!("base+{d:#x}"),
                        _ => format!("{w:#x}"),
                    })
                    .collect();
                let base = arena.base;
                let at = addr - base;
                let what = format!(
                    "plan {i} at base+{at:#x} (base {base:#x}): {why}\nwords {words:?}\n{plan:#?}"
                );
                assert!(keep_going, "{what}");
                eprintln!("FAILED {what}");
                *tally.entry("oil: FAILED").or_default() += 1;
            }
        }
        *tally
            .entry(match want {
                Outcome::Stream(ref s) if s.is_empty() => "empty",
                Outcome::Stream(_) => "stream",
                Outcome::Corrupt(..) => "corrupt",
                _ => "fault",
            })
            .or_default() += 1;
    }
    eprintln!("random plans: {tally:?}");
    assert!(!tally.contains_key("oil: FAILED"), "OIL's walkers failed");
}

/// OIL's two walkers of plan `i` on the root at `addr` (see the module doc), given the
/// exact outcome and total (the sized walker's, or the stream walker's outcome where it did
/// not finish). How the optimistic walk ended, for the tally (`None` for a plan OIL has no
/// optimistic walker for: it charges heap blocks), or what went wrong.
fn check_oil(
    plan: &Plan,
    addr: u64,
    exact: (Outcome, u64),
) -> Result<Option<&'static str>, String> {
    if plan.charges_heap_blocks() {
        return Ok(None);
    }
    // Where the exact walker finds the object corrupt or faults, which of the two, the place
    // and the error may differ (it may check a field before the walk comes to it, or read
    // one that faults): OIL then asks the interpreter, which names its own.
    let plain = |(o, total): (Outcome, u64)| match o {
        Outcome::Stream(_) => (Outcome::Stream(Vec::new()), total),
        Outcome::Corrupt(..) | Outcome::Fault => (Outcome::Fault, 0),
        o => (o, 0),
    };
    let want = plain(exact);
    let totals = LocalWalker::compile_totals(plan, &[0]).map_err(|e| e.to_string())?;
    let got = plain(run_child(Walker::Oil(&totals), addr));
    let mut wrong = Vec::new();
    if got != want {
        wrong.push(format!(
            "OIL's exact walker {got:?}, the sized walker {want:?}"
        ));
    }
    let optimistic =
        LocalWalker::compile_totals_optimistic(plan, &[0]).map_err(|e| e.to_string())?;
    let (o, total) = run_child(Walker::Oil(&optimistic), addr);
    let why = match (&want.0, &o) {
        (_, Outcome::Crash(_)) => Some("a crash of the user's program"),
        (Outcome::Stream(_), Outcome::Stream(_)) if total != want.1 => Some("a wrong total"),
        // The exact walk did not finish in time: nothing to compare the optimistic one with.
        (Outcome::Big, _) => None,
        (_, Outcome::Stream(_)) if want.0 != Outcome::Stream(Vec::new()) => {
            Some("counted an object the exact walker does not")
        }
        (_, Outcome::Big) => Some("ran past the time limit where the exact walker finished"),
        _ => None,
    };
    if let Some(why) = why {
        wrong.push(format!(
            "the optimistic walker {o:?} (total {total}), exact {want:?}: {why}"
        ));
    }
    if !wrong.is_empty() {
        return Err(wrong.join("; "));
    }
    Ok(Some(match o {
        Outcome::Stream(_) => "oil: counted",
        Outcome::Corrupt(..) => "oil: corrupt",
        Outcome::Fault => "oil: fault caught",
        _ => "oil: handed over",
    }))
}

/// The child sees what the fuzz relies on: a pointer chain that closes a cycle is handed
/// over (`STATUS_REVISIT`) where the exact walker counts it, and a pointee in the guard page
/// faults in walker code with a chain of walker frames that OIL returns from.
#[test]
fn oil_walks_in_the_child_hand_over_and_fault_as_oil_sees_them() {
    // n0: a pointer to a pointer (n1), which points to itself or anywhere (n1).
    let node = |i: usize| Node {
        name: format!("n{i}"),
        type_names: vec![format!("T{i}")],
        static_size: 8,
        is_primitive: false,
        op: Op::SmartPtr {
            offset: 0,
            target: Some(1),
            control: None,
        },
        dynamic: false,
        readable: String::new(),
        value: None,
        opaque_union: false,
        foreign: false,
    };
    let mut plan = Plan {
        nodes: vec![node(0), node(1)],
        ..Default::default()
    };
    plan.compute_dynamic();
    let exact = LocalWalker::compile_totals(&plan, &[0]).expect("compile");
    let optimistic = LocalWalker::compile_totals_optimistic(&plan, &[0]).expect("compile");
    let arena = Arena::new(4);
    let b = arena.base;
    // SAFETY: the arena's four words, mapped read-write.
    let words = unsafe { std::slice::from_raw_parts_mut(b as *mut u64, 4) };
    // The root points to b + 8, which points to b + 16, which points back to b + 8.
    words.copy_from_slice(&[b + 8, b + 16, b + 8, 0]);
    assert_eq!(
        run_child(Walker::Oil(&exact), b),
        (Outcome::Stream(vec![]), 24)
    );
    assert_eq!(
        run_child(Walker::Oil(&optimistic), b),
        (Outcome::HandOver(STATUS_REVISIT), 0)
    );
    // The root points to the last word, which points into the guard page.
    words.copy_from_slice(&[b + 24, 0, 0, b + 32]);
    assert_eq!(run_child(Walker::Oil(&exact), b).0, Outcome::Fault);
    assert_eq!(run_child(Walker::Oil(&optimistic), b).0, Outcome::Fault);
}

/// A plan of the fuzz (seed 4, plan 652): an optional (8 bytes, flag at 0, value at 0)
/// whose value (a 16-byte leaf) is larger than itself, walked as the fallback of a 24-byte
/// polymorphic root (its words `[1, 0, 0]`: engaged, no vtable matches). Engaged, the
/// decoder charges it `8 − 16` (saturating: 0) + 16 = 16 bytes; OIL's walkers without a
/// stream must not take the shortcut of an optional of a plain value ("engaged or not, the
/// same size", `codegen/body.rs`), which would charge 8. No real type has a value larger
/// than its optional, but the walkers of one plan must agree.
#[test]
fn oil_walkers_charge_an_optional_larger_than_itself_as_the_decoder_does() {
    let node = |name: &str, size: u64, op: Op| plan_node(name, name, size, op);
    let optional = OptionalLayout {
        value_off: 0,
        engaged_off: 0,
    };
    // The root: a class whose vptr matches no candidate, measured as its fallback: the
    // optional, in the class's 24 bytes (so its value lies inside the object walked).
    let mut plan = Plan {
        nodes: vec![
            node(
                "P",
                24,
                Op::Poly {
                    candidates: vec![(0, 0, 1)],
                    fallback: 1,
                },
            ),
            node(
                "O",
                8,
                Op::Optional {
                    layout: optional,
                    elem: 2,
                },
            ),
            node("L", 16, Op::Leaf),
        ],
        ..Default::default()
    };
    plan.compute_dynamic();
    let root = Box::leak(Box::new([1u64, 0, 0])).as_mut_ptr() as u64;
    let mem = RemoteReader::new(std::process::id() as i32);
    let stream = crate::interp::run(&plan, 0, root, &mem, true, 0).expect("interpreter");
    let want = crate::report::total_size(&plan, 0, &stream).expect("decoder");
    let exact = LocalWalker::compile_totals(&plan, &[0]).expect("compile");
    let optimistic = LocalWalker::compile_totals_optimistic(&plan, &[0]).expect("compile");
    assert_eq!(
        run_child(Walker::Oil(&exact), root),
        (Outcome::Stream(vec![]), want),
        "the exact walker"
    );
    assert_eq!(
        run_child(Walker::Oil(&optimistic), root),
        (Outcome::Stream(vec![]), want),
        "the optimistic walker"
    );
}
