//! The hijack on a live process, with hand-written walkers (so it is tested apart from the
//! JIT): code runs inside a frozen thread on a private stack, faults and endless loops are
//! contained, registers come back exactly, and the segments leave no trace in the maps.

use std::time::Duration;

use nix::{
    sys::wait::{WaitPidFlag, WaitStatus, waitpid},
    unistd::Pid,
};
use oi_e2e::{Fixture, FixtureBuild, SIGUSR1, maps_of, privileged};
use oi_trace::inferior::{
    Tracer,
    bootstrap::{self, Bootstrap},
    hijack::{CallEnd, Held, Segments},
    remote,
};
use oi_trace::jit::WalkFrame;

/// rdi = frame: out[0] = *(u64*)args[0]; out_used = 8; status = 0; return 0.
const READ_ARG0: &[u8] = &[
    0x48, 0x8b, 0x47, 0x40, // mov rax, [rdi+64]
    0x48, 0x8b, 0x4f, 0x10, // mov rcx, [rdi+16]
    0x48, 0x8b, 0x00, // mov rax, [rax]
    0x48, 0x89, 0x01, // mov [rcx], rax
    0x48, 0xc7, 0x47, 0x08, 0x08, 0, 0, 0, // mov qword [rdi+8], 8
    0x31, 0xc0, // xor eax, eax
    0x48, 0x89, 0x07, // mov [rdi], rax
    // Clobber callee-saved registers: the restore must not rely on the walker's manners.
    0x48, 0x31, 0xdb, // xor rbx, rbx
    0x4d, 0x31, 0xe4, // xor r12, r12
    0x66, 0x0f, 0xef, 0xc0, // pxor xmm0, xmm0
    0xc3, // ret
];
/// Sets every bit of xmm0, then never returns.
const SPIN: &[u8] = &[
    0x66, 0x0f, 0x76, 0xc0, // pcmpeqd xmm0, xmm0
    0xeb, 0xfe, // jmp to itself
];

fn frame(seg: &Segments, arg0: u64) -> WalkFrame {
    let (scratch, scratch_len) = seg.scratch();
    let mut args = [0; 16];
    args[0] = arg0;
    WalkFrame {
        out: seg.output,
        out_len: seg.output_len,
        scratch,
        scratch_len,
        nargs: 1,
        args,
        ..WalkFrame::default()
    }
}

/// The thread's x87/SSE state, as ptrace shows it.
fn fpregs(tid: i32) -> Vec<u8> {
    let mut fp = [0u8; 512];
    // SAFETY: PTRACE_GETFPREGS writes one 512-byte user_fpregs_struct to the pointer.
    let rc = unsafe { libc::ptrace(libc::PTRACE_GETFPREGS, tid, 0usize, fp.as_mut_ptr()) };
    assert_eq!(rc, 0, "GETFPREGS");
    fp.to_vec()
}

/// Freezes the fixture's main thread as the trigger would (SIGSTOP to that thread).
fn freeze(pid: i32) {
    // SAFETY: tgkill with plain integers.
    unsafe {
        libc::syscall(libc::SYS_tgkill, pid, pid, libc::SIGSTOP);
    }
    loop {
        match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::__WALL)).expect("wait") {
            WaitStatus::Stopped(_, nix::sys::signal::Signal::SIGSTOP) => return,
            WaitStatus::Stopped(p, sig) => nix::sys::ptrace::cont(p, sig).expect("cont"),
            _ => nix::sys::ptrace::cont(Pid::from_raw(pid), None).expect("cont"),
        }
    }
}

/// Freezes the main thread while it runs its loop in user code, as a probe hit would find it
/// (not inside a system call).
fn freeze_in_user_code(pid: i32) {
    loop {
        freeze(pid);
        if remote::get_regs(pid).expect("regs").orig_rax == u64::MAX {
            return;
        }
        nix::sys::ptrace::cont(Pid::from_raw(pid), None).expect("cont");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The fixture's checked loop (300,000,000 calls), started, with its process seized.
fn seized_loop() -> (Fixture, Tracer) {
    let binary = FixtureBuild::new("trigger")
        .shared_lib("trigger_lib")
        .build();
    let fixture = Fixture::start(&binary, &["loop", "300000000"]);
    let mut tracer = Tracer::default();
    tracer.seize(fixture.pid).expect("seize");
    fixture.signal(SIGUSR1);
    (fixture, tracer)
}

/// The loop finished with its own sum right, and the fixture runs on.
fn assert_loop_done(fixture: &mut Fixture) {
    let done = fixture.stdout.expect("done", Duration::from_secs(60));
    assert_eq!(
        done,
        format!("done 300000000 {}", 300_000_000u64 * 300_000_001)
    );
    fixture.assert_running();
}

/// What the kernel does when a tracer dies (the thread is let go as it is), then a new
/// tracer, as after a restart of oi-trace.
fn tracer_dies_and_restarts(pid: i32) -> Tracer {
    nix::sys::ptrace::detach(Pid::from_raw(pid), None).expect("detach");
    std::thread::sleep(Duration::from_millis(20));
    let mut tracer = Tracer::default();
    tracer.seize(pid).expect("seize again");
    tracer
}

#[test]
fn walkers_run_inside_the_target_and_leave_no_trace() {
    if !privileged() {
        return;
    }
    let (mut fixture, mut tracer) = seized_loop();
    let pid = fixture.pid;
    let maps_before = maps_of(pid);

    freeze(pid);
    let mut held = Held::begin(pid, pid, None).expect("hold");
    let bootstrap = held.bootstrap();
    let seg = Segments::create(&mut held, &[(READ_ARG0, 0), (SPIN, 0)]).expect("segments");
    assert!(
        !maps_of(pid).iter().any(|l| l
            .split_whitespace()
            .nth(1)
            .is_some_and(|p| p.starts_with("rwx"))),
        "no RWX mapping, ever"
    );
    held.end().expect("release");

    for round in 0..20 {
        freeze_in_user_code(pid);
        let mut held = Held::begin(pid, pid, Some(bootstrap)).expect("hold");
        let regs = remote::get_regs(pid).expect("regs");
        let mut expected = [0u8; 8];
        remote::read_memory(pid, regs.rsp, &mut expected).expect("read stack");
        let fp_before = fpregs(pid);
        // Expected to take from nothing to longer than it does: the tracer sleeps, then
        // polls, or polls at once.
        let expect = Duration::from_micros(100 * round);
        let end = held
            .call(
                &seg,
                seg.walkers[0],
                &frame(&seg, regs.rsp),
                Duration::from_secs(2),
                expect,
            )
            .expect("call");
        let CallEnd::Returned(back) = end else {
            panic!("round {round}, code at {:#x}: {end:?}", seg.base);
        };
        // The walker zeroed xmm0; the stub put the state back before the tracer saw it.
        assert_eq!(fpregs(pid), fp_before, "x87/SSE state restored by the stub");
        let mut out = [0u8; 8];
        remote::read_memory(pid, seg.output, &mut out).expect("output");
        assert_eq!(out, expected, "the walker read the target's memory");
        assert_eq!(back.prefix[..8], expected, "read back with the walk's end");
        assert!(back.ticks > 0, "the stub stamped the walk");
        held.end().expect("release");
    }

    // A bad pointer: the fault is caught and the thread goes on.
    freeze_in_user_code(pid);
    let mut held = Held::begin(pid, pid, Some(bootstrap)).expect("hold");
    let end = held
        .call(
            &seg,
            seg.walkers[0],
            &frame(&seg, 0x10),
            Duration::from_secs(2),
            Duration::ZERO,
        )
        .expect("call");
    assert!(
        matches!(end, CallEnd::Faulted { addr: 0x10, .. }),
        "{end:?}"
    );
    held.end().expect("release");

    // An endless walker is interrupted.
    freeze_in_user_code(pid);
    let mut held = Held::begin(pid, pid, Some(bootstrap)).expect("hold");
    let fp_before = fpregs(pid);
    let end = held
        .call(
            &seg,
            seg.walkers[1],
            &frame(&seg, 0),
            Duration::from_millis(100),
            Duration::from_millis(50),
        )
        .expect("call");
    assert!(matches!(end, CallEnd::TimedOut), "{end:?}");
    // The tracer put back what the stub saved on entry.
    assert_eq!(
        fpregs(pid),
        fp_before,
        "x87/SSE state restored after a timeout"
    );
    seg.destroy(&mut held).expect("unmap");
    held.end().expect("release");

    tracer.release(pid);
    assert_loop_done(&mut fixture);
    assert_eq!(maps_of(pid), maps_before, "segments unmapped");
    assert!(fixture.finish().success());
}

/// rdi = frame: a slow walk (10^7 iterations) that dirties registers, then returns.
const SLOW_CLOBBER: &[u8] = &[
    0xb9, 0x80, 0x96, 0x98, 0x00, // mov ecx, 10_000_000
    0x48, 0x31, 0xdb, // xor rbx, rbx
    0x48, 0xff, 0xc3, // inc rbx
    0x4d, 0x31, 0xff, // xor r15, r15 (another callee-saved register)
    0x66, 0x0f, 0xef, 0xc9, // pxor xmm1, xmm1
    0x48, 0xff, 0xc9, // dec rcx
    0x75, 0xee, // jnz back to `xor rbx, rbx`
    0x31, 0xc0, // xor eax, eax
    0xc3, // ret
];

/// The tracer vanishes (here: detaches without restoring anything) while a walker runs: the
/// stub must bring the thread back to its own code with every register intact, so the
/// fixture's checksum still comes out right.
#[test]
fn the_stub_restores_the_thread_when_the_tracer_is_gone() {
    if !privileged() {
        return;
    }
    let (mut fixture, mut tracer) = seized_loop();
    let pid = fixture.pid;
    freeze_in_user_code(pid);
    let mut held = Held::begin(pid, pid, None).expect("hold");
    let seg = Segments::create(&mut held, &[(SLOW_CLOBBER, 0)]).expect("segments");
    held.end().expect("release");
    for _ in 0..5 {
        freeze_in_user_code(pid);
        let mut held = Held::begin(pid, pid, None).expect("hold");
        held.prepare_call(&seg, seg.walkers[0], &frame(&seg, 0))
            .expect("prepare");
        tracer = tracer_dies_and_restarts(pid);
    }
    tracer.release(pid);
    assert_loop_done(&mut fixture);
    assert!(fixture.finish().success());
}

/// The system calls that map our segments run before any stub of ours exists: their
/// `syscall` is written into slack code bytes and restores the thread itself, so a tracer
/// that dies between setting the call's registers and taking them back leaves the thread
/// intact too. Done five times in a loop that checks its own sum.
#[test]
fn a_tracer_gone_during_a_bootstrap_syscall_leaves_the_thread_intact() {
    if !privileged() {
        return;
    }
    let (mut fixture, mut tracer) = seized_loop();
    let pid = fixture.pid;
    let maps_before = maps_of(pid);
    let Bootstrap::Slack(at) = Bootstrap::find(pid).expect("bootstrap") else {
        panic!("the fixture's code mappings have slack for the restoring stub");
    };
    for _ in 0..5 {
        freeze_in_user_code(pid);
        let saved = remote::get_regs(pid).expect("regs");
        bootstrap::poke(pid, at, &bootstrap::restoring_syscall(&saved)).expect("poke");
        let mut call = saved;
        call.rip = at;
        call.rax = libc::SYS_getpid as u64;
        call.orig_rax = u64::MAX;
        (call.rdi, call.rsi, call.rdx, call.r10, call.r8, call.r9) = (1, 2, 3, 4, 5, 6);
        remote::set_regs(pid, &call).expect("set regs");
        // The tracer dies here, mid-call.
        tracer = tracer_dies_and_restarts(pid);
    }
    tracer.release(pid);
    assert_loop_done(&mut fixture);
    assert_eq!(maps_of(pid), maps_before, "nothing was mapped");
    assert!(fixture.finish().success());
}
