//! Which capabilities each step needs, whether we hold them, and giving up those we no longer
//! need.
//!
//! oi-trace runs as root or as a user whose copy of the binary carries file capabilities
//! (`setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep`). What each step needs, measured on Linux
//! 6.18:
//! - loading the eBPF programs and creating their maps: `CAP_BPF` and `CAP_PERFMON` (tracing
//!   programs read user memory);
//! - attaching a uprobe as a perf event: `CAP_SYS_ADMIN` (since Linux 6.16, and in the stable
//!   kernels that took the same fix, a perf-event uprobe is no longer open to `CAP_PERFMON`);
//!   a multi-uprobe link (`BPF_TRACE_UPROBE_MULTI`, Linux 6.6) needs only `CAP_BPF` and
//!   `CAP_PERFMON`, so the trigger falls back to one when the perf event is refused;
//! - freezing and walking a process: `CAP_SYS_PTRACE`, or the same uid as the target (and no
//!   Yama restriction);
//! - resuming a process that a killed oi-trace left stopped (the guardian): `CAP_KILL`, or the
//!   same uid; undoing the patches it left in one (`inject`): `CAP_SYS_PTRACE` and
//!   `CAP_DAC_OVERRIDE` too (`GUARDIAN_INJECT`);
//! - reading `/proc/PID/map_files` (`CAP_SYS_ADMIN` or `CAP_CHECKPOINT_RESTORE`): finding the
//!   unused code bytes a process's first remote system calls run through, self-restoring if
//!   oi-trace is killed meanwhile. So it is done before the capabilities are dropped
//!   (`InTarget::find_bootstrap`); without either, a target's own `syscall` is borrowed.
//!
//! Capabilities are read from `/proc/self/status` and given up with `capset(2)` directly: the
//! few lines do not justify a dependency.

/// A capability, by its number in `linux/capability.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap(pub u32, pub &'static str);

pub const KILL: Cap = Cap(5, "CAP_KILL");
pub const SYS_PTRACE: Cap = Cap(19, "CAP_SYS_PTRACE");
pub const SYS_ADMIN: Cap = Cap(21, "CAP_SYS_ADMIN");
pub const PERFMON: Cap = Cap(38, "CAP_PERFMON");
pub const BPF: Cap = Cap(39, "CAP_BPF");

pub const DAC_OVERRIDE: Cap = Cap(1, "CAP_DAC_OVERRIDE");
pub const DAC_READ_SEARCH: Cap = Cap(2, "CAP_DAC_READ_SEARCH");

/// What loading the eBPF programs takes.
pub const TO_LOAD: &[Cap] = &[BPF, PERFMON];
/// What sampling one process takes once its probes are attached: ptrace (freeze, walk, read),
/// resuming it, and files (its binaries through /proc, our outputs). No eBPF, no admin.
pub const AFTER_ARMING: &[Cap] = &[SYS_PTRACE, KILL, DAC_OVERRIDE, DAC_READ_SEARCH];
/// What the guardian takes to resume a process a killed oi-trace left stopped.
pub const GUARDIAN: &[Cap] = &[KILL];
/// What the guardian of a run that patches code (`inject`) takes to undo the patches a killed
/// oi-trace left: ptrace (stop the threads, unmap), and writing the original bytes through
/// `/proc/PID/mem`, a file of the target's user.
pub const GUARDIAN_INJECT: &[Cap] = &[KILL, SYS_PTRACE, DAC_OVERRIDE];

/// The capabilities of `set` ("CapEff", "CapPrm") this process holds, as a bit mask.
fn held(set: &str) -> u64 {
    read_mask(set).unwrap_or(0)
}

fn read_mask(set: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(set)?.strip_prefix(':'))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
}

/// Those of `caps` missing from our effective set, by name (`CAP_BPF and CAP_PERFMON`).
pub fn missing(caps: &[Cap]) -> Option<String> {
    let have = held("CapEff");
    let names: Vec<&str> = caps
        .iter()
        .filter(|c| have & (1 << c.0) == 0)
        .map(|c| c.1)
        .collect();
    (!names.is_empty()).then(|| names.join(" and "))
}

/// Says which capabilities are missing before anything fails for lack of them in a less
/// telling way (a process's files unreadable look like a missing symbol; the kernel refuses a
/// map without saying why). CAP_SYS_ADMIN stands in for CAP_BPF and CAP_PERFMON, as it does in
/// the kernel (and on kernels older than 5.8, which lack them).
pub fn check_footprints() -> Result<(), String> {
    let Some(effective) = read_mask("CapEff") else {
        return Ok(()); // Cannot tell: let the kernel decide.
    };
    let last_cap: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(BPF.0);
    let has = |cap: Cap| effective & (1 << cap.0) != 0;
    let admin = has(SYS_ADMIN);
    let mut missing: Vec<&str> = [BPF, PERFMON]
        .into_iter()
        .filter(|&cap| !(admin || (cap.0 <= last_cap && has(cap))))
        .map(|cap| cap.1)
        .collect();
    if !has(SYS_PTRACE) {
        missing.push(SYS_PTRACE.1);
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "missing capabilit{} {}: oi-trace needs CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (run it \
         as root, or give this copy `setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep`)",
        if missing.len() == 1 { "y" } else { "ies" },
        missing.join(", ")
    ))
}

/// Why a step that needs `caps` was refused, for the one-line error.
pub fn refusal(step: &str, caps: &[Cap]) -> String {
    match missing(caps) {
        Some(names) => format!(
            "{step} needs {names}, which this process lacks: run as root, or give this copy of \
             oi-trace `setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep` (docs/privileges.md, \
             \"Running without root\")"
        ),
        None => format!(
            "{step} was refused by the kernel although {} are held",
            names(caps)
        ),
    }
}

fn names(caps: &[Cap]) -> String {
    caps.iter().map(|c| c.1).collect::<Vec<_>>().join(" and ")
}

/// Keeps only `keep` (of those we hold) in the effective and permitted sets, none inheritable
/// and no ambient ones: what is dropped cannot be taken back. Capabilities belong to a thread:
/// call it on the thread that keeps working (threads started later inherit its sets). Best
/// effort: returns whether the kernel agreed.
pub fn keep_only(keep: &[Cap]) -> bool {
    let permitted = held("CapPrm");
    let mask = keep.iter().fold(0u64, |m, c| m | (1 << c.0)) & permitted;
    // SAFETY: prctl with plain integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let word = |i: u32| Data {
        effective: (mask >> (32 * i)) as u32,
        permitted: (mask >> (32 * i)) as u32,
        inheritable: 0,
    };
    let data = [word(0), word(1)];
    // SAFETY: capset reads a version-3 header and two data words, which we pass.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    ret == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_what_is_missing() {
        // Tests run as root (every capability) or as a user (none of these).
        let root = held("CapEff") & (1 << BPF.0) != 0;
        let text = refusal("loading the eBPF programs", TO_LOAD);
        if root {
            assert!(text.contains("refused by the kernel although CAP_BPF and CAP_PERFMON"));
        } else {
            assert!(text.starts_with("loading the eBPF programs needs CAP_BPF and CAP_PERFMON"));
        }
    }
}
