//! The footprint trigger's types (`oi-ebpf/src/bin/footprint.rs` writes them, `oi-user`'s
//! `footprint::trigger` reads them): per-probe configuration and counters, the registers of a
//! hit and the event that carries them. Plain `#[repr(C)]` data only: no logic beyond the
//! cookie's packing, which both sides must compute alike.

/// Most probes one tracer may arm; index space of [`ProbeConfig`] and [`ProbeCounters`].
pub const MAX_PROBES: u32 = 64;
/// Most processes tracked at once in the seized / busy / announced maps.
pub const MAX_PROCESSES: u32 = 8192;
/// Size of the event ring buffer (must be a power of two and a multiple of the page size).
pub const RING_BYTES: u32 = 256 * 1024;

/// How a probe decides whether a hit belongs to the traced set.
pub mod filter {
    /// Only hits of the process whose tgid is [`super::ProbeConfig::tgid`].
    pub const PID: u32 = 0;
    /// Hits of any process inside the cgroup [`super::ProbeConfig::cgroup_id`] or below it.
    pub const CGROUP: u32 = 1;
}

/// Bits of [`ProbeConfig::flags`].
pub mod flags {
    /// Count hits, never freeze a thread.
    pub const COUNT_ONLY: u32 = 1;
}

/// Per-probe configuration, written by the tracer before the probe is attached.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeConfig {
    /// Sample every Nth hit (N ≥ 1).
    pub every: u64,
    /// cgroup v2 id (the directory's inode) for [`filter::CGROUP`].
    pub cgroup_id: u64,
    /// Depth of that cgroup below the cgroup2 root, for `bpf_get_current_ancestor_cgroup_id`.
    pub cgroup_level: u32,
    /// Target process for [`filter::PID`].
    pub tgid: u32,
    /// One of the [`filter`] constants.
    pub filter: u32,
    /// [`flags`] bits.
    pub flags: u32,
}

/// Per-probe counters, updated atomically by the eBPF program.
///
/// `hits` counts hits that passed the filter; of every Nth hit exactly one of `sampled`,
/// `dropped` or `unseen` is incremented. `filtered` counts hits of processes outside the
/// traced set; `unseen`, Nth hits at a point flagged [`point::NO_SAMPLE`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeCounters {
    pub hits: u64,
    pub sampled: u64,
    pub dropped: u64,
    pub filtered: u64,
    pub unseen: u64,
}

/// Flags of one attach point, in the high 32 bits of its attach cookie (the low 32 bits are
/// the probe's index).
pub mod point {
    /// Count hits here, never freeze: what a sample would measure is not visible at this
    /// point (a return through a tail call holds no result in any register).
    pub const NO_SAMPLE: u32 = 1;

    /// The attach cookie of a point of probe `index` with `flags`.
    pub const fn cookie(index: u32, flags: u32) -> u64 {
        index as u64 | (flags as u64) << 32
    }
}

/// The registers at the probed instruction (a function's entry, one of its return
/// instructions, or the entry of an inlined copy), System V x86-64.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryRegs {
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub r8: u64,
    pub r9: u64,
    pub rsp: u64,
    pub rip: u64,
    /// Return value; meaningful for return probes only.
    pub rax: u64,
    /// The rest, for arguments an inlined copy or a clone keeps outside the ABI's registers.
    pub rbx: u64,
    pub rbp: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    /// Low eightbytes of xmm0–xmm15 (float and double arguments and results). The eBPF side
    /// cannot see them and leaves zeros; the tracer reads them from the stopped thread's FPU
    /// state when a measured argument lives there.
    pub xmm: [u64; 16],
}

impl EntryRegs {
    /// The six integer argument registers, in ABI order.
    pub fn int_args(&self) -> [u64; 6] {
        [self.rdi, self.rsi, self.rdx, self.rcx, self.r8, self.r9]
    }
}

/// Kinds of [`Event`].
pub mod event {
    /// A sampled hit: the thread `tid` has been sent SIGSTOP and the process is marked busy.
    pub const SAMPLE: u32 = 1;
    /// First hit of a process in the traced cgroup that the tracer has not seized yet.
    pub const NEW_PROCESS: u32 = 2;
}

/// One ring-buffer record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// One of the [`event`] constants.
    pub kind: u32,
    /// Index of the probe (its attach cookie).
    pub probe: u32,
    pub tgid: u32,
    pub tid: u32,
    /// The hit's number in the probe's `hits` counter (1-based).
    pub hit: u64,
    /// `bpf_ktime_get_ns()` at the hit.
    pub time_ns: u64,
    pub regs: EntryRegs,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all four are #[repr(C)] structs of integers without padding, so every bit
    // pattern is a valid value.
    unsafe impl aya::Pod for super::ProbeConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ProbeCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::EntryRegs {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Event {}
}
