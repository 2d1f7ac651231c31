//! Bare uprobes for the bench's baselines: perf events of the kernel's `uprobe` PMU on one
//! process, with no eBPF program and no trace buffer: what any probe at that place costs at
//! the least. They can sit on any file offset, where bpftrace (Debian's build has no
//! probe-offset support) can only probe a function's first instruction; the allocs baseline
//! needs the places `oi-trace allocs` itself probes.
//!
//! The kernel sets a perf uprobe's breakpoint in the whole process (its `mm`) and filters
//! by the event's thread only when it counts, so every thread pays the hit. The counters are
//! not read: a counter opened with `inherit` to follow the threads started later would make
//! the kernel copy the probe's path from the new thread's memory (ours is not there) and
//! fail the target's clone with EFAULT.

use std::{ffi::CString, fs, os::fd::FromRawFd as _, path::Path};

use anyhow::{Context as _, Result, bail};

/// perf_event_open's flag for a close-on-exec descriptor (not in the `libc` crate).
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// One bare uprobe (or uretprobe), attached while it lives.
pub struct BareUprobe {
    _file: fs::File,
}

impl BareUprobe {
    /// A uprobe (a uretprobe if `ret`) at `offset` of `path`, in the process of `pid`.
    pub fn attach(path: &Path, offset: u64, ret: bool, pid: i32) -> Result<Self> {
        let pmu = "/sys/bus/event_source/devices/uprobe";
        let kind: u32 = fs::read_to_string(format!("{pmu}/type"))
            .context("the kernel's uprobe PMU")?
            .trim()
            .parse()?;
        let ret_bit = if ret {
            // "config:N": the bit of `config` that makes the probe a uretprobe.
            let format = fs::read_to_string(format!("{pmu}/format/retprobe"))?;
            let bit: u32 = format
                .trim()
                .strip_prefix("config:")
                .context("retprobe format")?
                .parse()?;
            1u64 << bit
        } else {
            0
        };
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())?;
        // struct perf_event_attr (PERF_ATTR_SIZE_VER7, 128 bytes) as words: type and size,
        // config, and for a uprobe config1 = the file's path, config2 = the offset. Every
        // other field zero: counting, enabled at once, no `inherit` (see the module doc).
        let mut attr = [0u64; 16];
        attr[0] = u64::from(kind) | (128u64 << 32);
        attr[1] = ret_bit;
        attr[7] = c_path.as_ptr() as u64;
        attr[8] = offset;
        // SAFETY: `attr` is a valid perf_event_attr of the size it declares and `c_path`
        // outlives the call; the result is a new descriptor or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr.as_ptr(),
                pid as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            bail!(
                "perf_event_open of a uprobe at {}+{offset:#x}: {}",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: a descriptor the kernel just returned, owned by nobody else.
        let file = unsafe { fs::File::from_raw_fd(fd as i32) };
        Ok(Self { _file: file })
    }
}
