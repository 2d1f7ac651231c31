//! Unit tests of `guard`.

use oi_trace::containers::string::StringLayout;
use oi_trace::jit::{self, SCRATCH_BYTES, STATUS_DONE};
use oi_trace::plan::{Node, Op, Plan};

use super::*;

/// A plan of one `std::string`-shaped root (pointer, length, capacity).
fn string_walker() -> LocalWalker {
    LocalWalker::compile(&string_plan(), &[0]).expect("compile")
}

fn string_plan() -> Plan {
    let mut plan = Plan::default();
    plan.nodes.push(Node {
        name: "a0".into(),
        type_names: vec!["string".into()],
        static_size: 32,
        is_primitive: false,
        op: Op::String(StringLayout {
            ptr_off: 0,
            len_off: 8,
            cap_off: 16,
            char_size: 1,
            size: 32,
        }),
        dynamic: false,
        readable: "std::string".into(),
        value: None,
        opaque_union: false,
        foreign: false,
    });
    plan.compute_dynamic();
    plan
}

/// A hole: an address range where nothing is mapped.
fn hole() -> u64 {
    // SAFETY: mapping and unmapping a fresh page to get an address nothing is at.
    unsafe {
        let p = libc::mmap(
            ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        libc::munmap(p, 4096);
        p as u64
    }
}

#[test]
fn a_leaf_entry_called_directly_returns_from_a_fault() {
    let w = LocalWalker::compile_totals_optimistic(&string_plan(), &[0]).expect("compile");
    assert!(w.leaf_entry(), "a string's optimistic walk is a leaf");
    assert!(register_code(w.code_range()));
    assert!(register_leaf_entry(w.entry_range()));
    with_thread_state(check_handlers).expect("handlers");
    type Entry = unsafe extern "sysv64" fn(u64, u64, u64) -> DirectResult;
    // SAFETY: the optimistic entry's signature (`LocalWalker::entry_address`); its code
    // is registered as a leaf entry, so a fault returns from it.
    let entry = unsafe { std::mem::transmute::<usize, Entry>(w.entry_address()) };
    let obj: [u64; 4] = [0x1000, 40, 40, 0];
    // SAFETY: as above; the object is a live local.
    let r = unsafe { entry(obj.as_ptr() as u64, 0, 0) };
    assert_eq!((r.status, r.second), (STATUS_DONE, 32 + 40));
    let hole = hole();
    let keep = std::hint::black_box([1u64, 2, 3]);
    // SAFETY: as above; the load at the hole faults and the handler returns.
    let r = unsafe { entry(hole + 8, 0, 0) };
    assert_eq!(r.status, STATUS_FAULT);
    assert_eq!(r.second, hole + 8, "the faulting address");
    assert_eq!(std::hint::black_box(keep), [1, 2, 3]);
    // SAFETY: as above.
    let r = unsafe { entry(obj.as_ptr() as u64, 0, 0) };
    assert_eq!((r.status, r.second), (STATUS_DONE, 72));
}

fn walk(
    w: &LocalWalker,
    stack: &mut WalkStack,
    scratch: &mut [u64],
    addr: u64,
) -> (u64, usize, Vec<u8>) {
    let mut out = vec![0u8; 512];
    let mut frame = WalkFrame {
        out: out.as_mut_ptr() as u64,
        out_len: 512,
        scratch: scratch.as_mut_ptr() as u64,
        scratch_len: SCRATCH_BYTES,
        nargs: 1,
        stack_len: jit::RECOMMENDED_STACK,
        ..Default::default()
    };
    frame.args[0] = addr;
    let (status, fault) = run_walker(stack, w, &mut frame).expect("run");
    out.truncate(frame.out_used as usize);
    (status, fault, out)
}

#[test]
fn a_faulting_walk_returns_and_the_next_one_runs() {
    let w = string_walker();
    let mut stack = WalkStack::new(8 << 20).expect("stack");
    let mut scratch = vec![0u64; (SCRATCH_BYTES / 8) as usize];
    // A heap string of 40 characters (its pointer is outside the object).
    let obj: [u64; 4] = [0x1000, 40, 40, 0];
    let good = obj.as_ptr() as u64;
    let (s, _, out) = walk(&w, &mut stack, &mut scratch, good);
    assert_eq!(
        (s, out),
        (STATUS_DONE, vec![2, 0, 0, 0, 0, 0, 0, 0, 40, 40])
    );
    // An address where nothing is mapped: the first load faults, the walk returns.
    let hole = hole();
    let (s, fault, _) = walk(&w, &mut stack, &mut scratch, hole + 8);
    assert_eq!(s, STATUS_FAULT);
    assert!((hole..hole + 4096).contains(&(fault as u64)), "{fault:#x}");
    // Disarmed after the fault, armed again for the next walk.
    assert!(THREAD.with(|t| t.active.get().is_none()));
    let (s, _, out) = walk(&w, &mut stack, &mut scratch, good);
    assert_eq!(
        (s, out),
        (STATUS_DONE, vec![2, 0, 0, 0, 0, 0, 0, 0, 40, 40])
    );
    // The same on this thread's own stack (a test thread's 2 MiB leave room): a fault
    // resumes in the trampoline with the caller's registers intact.
    assert!(register_code(w.code_range()));
    let direct = |addr: u64, scratch: &mut [u64]| {
        let mut out = vec![0u8; 512];
        let mut frame = WalkFrame {
            out: out.as_mut_ptr() as u64,
            out_len: 512,
            scratch: scratch.as_mut_ptr() as u64,
            scratch_len: SCRATCH_BYTES,
            nargs: 1,
            ..Default::default()
        };
        frame.args[0] = addr;
        // SAFETY: the walker's code is registered and alive; the frame's buffers outlive
        // the call.
        let (status, fault) =
            with_thread_state(|st| unsafe { run_direct(st, w.entry_address(), &mut frame) })
                .expect("run")
                .expect("room on a test thread's stack");
        out.truncate(frame.out_used as usize);
        (status, fault, out)
    };
    let keep = std::hint::black_box([1u64, 2, 3]);
    let (s, fault, _) = direct(hole + 8, &mut scratch);
    assert_eq!(s, STATUS_FAULT);
    assert!((hole..hole + 4096).contains(&(fault as u64)), "{fault:#x}");
    assert_eq!(std::hint::black_box(keep), [1, 2, 3]);
    let (s, _, out) = direct(good, &mut scratch);
    assert_eq!(
        (s, out),
        (STATUS_DONE, vec![2, 0, 0, 0, 0, 0, 0, 0, 40, 40])
    );
    // Deep work runs on the walk stack too.
    let depth = on_stack(&mut stack, || {
        fn down(n: u32) -> u32 {
            let pad = std::hint::black_box([n; 64]);
            if n == 0 { pad[0] } else { down(n - 1) + 1 }
        }
        down(10_000)
    });
    assert_eq!(depth, 10_000);
}
