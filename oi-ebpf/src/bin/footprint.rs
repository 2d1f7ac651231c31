//! The trigger: a uprobe program that counts hits exactly and freezes every Nth one.
//!
//! One program serves every probe and every point of it (an entry, a return instruction, an
//! inlined copy; return probes are uprobes on return instructions, never uretprobes, whose
//! rewritten return address breaks C++ exception unwinding). The attach cookie says which
//! probe fired (low 32 bits) and how (`point` flags, high 32 bits). On a hit the
//! program filters by pid or cgroup, counts, and on every Nth hit of a process the tracer has
//! seized and is not already walking it marks the process busy, stops the thread with
//! `bpf_send_signal_thread(SIGSTOP)` and sends an [`Event`] with the registers of the hit.
//! It never freezes a process the tracer has not seized: an unseized process would stop whole.
#![no_std]
#![no_main]

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_NOEXIST, pt_regs},
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns,
        generated::{
            bpf_get_attach_cookie, bpf_get_current_ancestor_cgroup_id, bpf_send_signal_thread,
        },
    },
    macros::{map, uprobe},
    maps::{Array, HashMap, RingBuf},
    programs::ProbeContext,
};
use oi_common::{
    EntryRegs, Event, MAX_PROBES, MAX_PROCESSES, ProbeConfig, ProbeCounters, RING_BYTES, event,
    filter, flags, point,
};

const SIGSTOP: u32 = 19;

#[map]
static CONFIG: Array<ProbeConfig> = Array::with_max_entries(MAX_PROBES, 0);

#[map]
static COUNTERS: Array<ProbeCounters> = Array::with_max_entries(MAX_PROBES, 0);

/// tgids the tracer has seized (ptrace): only these may be frozen.
#[map]
static SEIZED: HashMap<u32, u8> = HashMap::with_max_entries(MAX_PROCESSES, 0);

/// tgid → tid of the thread being sampled; the tracer removes the entry when the sample ends.
#[map]
static BUSY: HashMap<u32, u32> = HashMap::with_max_entries(MAX_PROCESSES, 0);

/// tgids already reported by a NEW_PROCESS event, so a busy new process sends one event only.
#[map]
static ANNOUNCED: HashMap<u32, u8> = HashMap::with_max_entries(MAX_PROCESSES, 0);

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

#[uprobe]
pub fn oi_entry(ctx: ProbeContext) -> u32 {
    on_hit(ctx.as_ptr(), ctx.regs);
    0
}

/// Increments one counter; the counters are shared by all CPUs, so the add must be atomic.
#[inline(always)]
fn bump(counter: *mut u64) -> u64 {
    // SAFETY: `counter` points into an array map value, which lives as long as the map and is
    // 8-byte aligned; all concurrent accesses go through atomics (exact hit numbers).
    unsafe { oi_ebpf::add(counter, 1) }
}

#[inline(always)]
fn on_hit(ctx: *mut core::ffi::c_void, regs: *mut pt_regs) {
    // SAFETY: the context pointer is the one the kernel passed to this program.
    let cookie = unsafe { bpf_get_attach_cookie(ctx) };
    let probe = cookie as u32;
    let point_flags = (cookie >> 32) as u32;
    let Some(config) = CONFIG.get(probe) else {
        return;
    };
    let Some(counters) = COUNTERS.get_ptr_mut(probe) else {
        return;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;

    let in_scope = if config.filter == filter::PID {
        tgid == config.tgid
    } else {
        // SAFETY: a plain helper call without pointers.
        let ancestor = unsafe { bpf_get_current_ancestor_cgroup_id(config.cgroup_level as i32) };
        ancestor == config.cgroup_id
    };
    if !in_scope {
        // SAFETY: `counters` is a valid pointer into the map value (see `bump`).
        bump(unsafe { &raw mut (*counters).filtered });
        return;
    }
    // SAFETY: as above.
    let hit = bump(unsafe { &raw mut (*counters).hits });
    if config.flags & flags::COUNT_ONLY != 0 {
        return;
    }
    let nth = config.every != 0 && hit % config.every == 0;

    if SEIZED.get_ptr(tgid).is_none() {
        // A process in the cgroup the tracer does not know yet: tell it once, freeze nothing.
        if config.filter == filter::CGROUP && ANNOUNCED.insert(tgid, 1, BPF_NOEXIST as u64).is_ok()
        {
            send_new_process(probe, tgid, tid, hit);
        }
        if nth {
            // SAFETY: as above.
            bump(unsafe { &raw mut (*counters).dropped });
        }
        return;
    }
    if !nth {
        return;
    }
    if point_flags & point::NO_SAMPLE != 0 {
        // SAFETY: as above.
        bump(unsafe { &raw mut (*counters).unseen });
        return;
    }
    // SAFETY: as above.
    let dropped = unsafe { &raw mut (*counters).dropped };
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        bump(dropped);
        return;
    };
    // The busy flag is a test-and-set: only one thread of a process is sampled at a time.
    if BUSY.insert(tgid, tid, BPF_NOEXIST as u64).is_err() {
        entry.discard(0);
        bump(dropped);
        return;
    }
    // SAFETY: `regs` is the pt_regs the kernel passed to this program, readable for its run.
    let r = unsafe { &*regs };
    entry.write(Event {
        kind: event::SAMPLE,
        probe,
        tgid,
        tid,
        hit,
        // SAFETY: a plain helper call.
        time_ns: unsafe { bpf_ktime_get_ns() },
        regs: EntryRegs {
            rdi: r.rdi,
            rsi: r.rsi,
            rdx: r.rdx,
            rcx: r.rcx,
            r8: r.r8,
            r9: r.r9,
            rsp: r.rsp,
            rip: r.rip,
            rax: r.rax,
            rbx: r.rbx,
            rbp: r.rbp,
            r10: r.r10,
            r11: r.r11,
            r12: r.r12,
            r13: r.r13,
            r14: r.r14,
            r15: r.r15,
            xmm: [0; 16],
        },
    });
    // SAFETY: a plain helper call; the signal goes to the current thread only.
    if unsafe { bpf_send_signal_thread(SIGSTOP) } != 0 {
        let _ = BUSY.remove(tgid);
        entry.discard(0);
        bump(dropped);
        return;
    }
    entry.submit(0);
    // SAFETY: as above.
    bump(unsafe { &raw mut (*counters).sampled });
}

#[inline(always)]
fn send_new_process(probe: u32, tgid: u32, tid: u32, hit: u64) {
    let event = Event {
        kind: event::NEW_PROCESS,
        probe,
        tgid,
        tid,
        hit,
        // SAFETY: a plain helper call.
        time_ns: unsafe { bpf_ktime_get_ns() },
        regs: EntryRegs::default(),
    };
    // A full ring buffer loses the announcement; the ANNOUNCED entry is then removed so the
    // next hit tries again.
    if EVENTS.output::<Event>(&event, 0).is_err() {
        let _ = ANNOUNCED.remove(tgid);
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
