//! What the running kernel can do, asked once per run (like bpftrace's `bpffeature`): every
//! caller asks [`KernelFeatures::get`] rather than probing on its own, and what a tool falls back
//! to is said to the user once, by the tool, from these answers.
//!
//! Probing loads a two-instruction eBPF program and tries a link that must fail in a telling
//! way; it never attaches anything that could fire. Never changes system state beyond that.

use std::{
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    sync::OnceLock,
};

use aya_obj::generated::{bpf_attach_type, bpf_attr, bpf_cmd, bpf_insn, bpf_prog_type};

/// The answers, computed on first use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelFeatures {
    /// `BPF_LINK_CREATE` with `BPF_TRACE_UPROBE_MULTI` (Linux 6.6): one link attaches a program
    /// to many offsets of one file, each with its own cookie.
    pub uprobe_multi_link: bool,
}

/// Names features to treat as missing, comma-separated (`uprobe-multi`): how the tests and
/// benchmarks exercise the fallbacks of older kernels on this one.
pub const DISABLE_ENV: &str = "OI_TRACE_DISABLE_FEATURES";

impl KernelFeatures {
    pub fn get() -> &'static Self {
        static FEATURES: OnceLock<KernelFeatures> = OnceLock::new();
        FEATURES.get_or_init(|| {
            let disabled = std::env::var(DISABLE_ENV).unwrap_or_default();
            let off = |name: &str| disabled.split(',').any(|d| d.trim() == name);
            Self {
                uprobe_multi_link: !off("uprobe-multi") && probe_uprobe_multi_link(),
            }
        })
    }
}

/// The `bpf(2)` system call.
///
/// # Safety
/// `attr` must be valid for `cmd` (pointers in it valid for the call's duration).
pub(crate) unsafe fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> std::io::Result<i64> {
    // SAFETY: the caller guarantees `attr` is a valid attribute block for `cmd`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            size_of::<bpf_attr>() as libc::c_uint,
        )
    };
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The BTF a program is loaded with: the object's BTF (loaded) and the program's function and
/// line records. Needed by programs that pass callbacks to helpers (`bpf_loop`).
pub(crate) struct ProgramBtf<'a> {
    pub btf: std::os::fd::BorrowedFd<'a>,
    pub func_info: &'a [aya_obj::generated::bpf_func_info],
    pub func_info_rec_size: usize,
    pub line_info: &'a [aya_obj::generated::bpf_line_info],
    pub line_info_rec_size: usize,
}

/// Loads raw BTF into the kernel.
pub(crate) fn load_btf(raw: &[u8]) -> std::io::Result<OwnedFd> {
    // SAFETY: bpf_attr is a plain C union of integers; all-zero is its documented default.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the BTF_LOAD member of the union we own.
    let load = unsafe { &mut attr.__bindgen_anon_7 };
    load.btf = raw.as_ptr() as u64;
    load.btf_size = raw.len() as u32;
    // SAFETY: `raw` outlives the call.
    let fd = unsafe { sys_bpf(bpf_cmd::BPF_BTF_LOAD, &mut attr) }?;
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// How many instructions the verifier processed to accept the program `fd`
/// (`bpf_prog_info.verified_insns`, Linux 5.16): the figure the kernel holds against its limit
/// of 1,000,000. `None` where the kernel does not say.
pub(crate) fn verified_instructions(fd: std::os::fd::BorrowedFd<'_>) -> Option<u32> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: bpf_prog_info and bpf_attr are plain C structs of integers; all-zero is valid.
    let mut info: aya_obj::generated::bpf_prog_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the OBJ_GET_INFO_BY_FD member of the union we own.
    let get = unsafe { &mut attr.info };
    get.bpf_fd = fd.as_raw_fd() as u32;
    get.info_len = size_of_val(&info) as u32;
    get.info = (&raw mut info) as u64;
    // SAFETY: `info` outlives the call and is `info_len` bytes long.
    unsafe { sys_bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr) }.ok()?;
    (info.verified_insns > 0).then_some(info.verified_insns)
}

/// Loads `insns` as a kprobe-type program with the expected attach type of multi-uprobe links.
pub(crate) fn load_uprobe_multi_program(
    insns: &[bpf_insn],
    name: &str,
    btf: Option<&ProgramBtf<'_>>,
    log: Option<&mut Vec<u8>>,
) -> std::io::Result<OwnedFd> {
    let license = c"GPL";
    // SAFETY: bpf_attr is a plain C union of integers; all-zero is its documented default.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the PROG_LOAD member of the union we own.
    let load = unsafe { &mut attr.__bindgen_anon_3 };
    load.prog_type = bpf_prog_type::BPF_PROG_TYPE_KPROBE as u32;
    load.expected_attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
    load.insn_cnt = insns.len() as u32;
    load.insns = insns.as_ptr() as u64;
    load.license = license.as_ptr() as u64;
    for (dst, src) in load.prog_name.iter_mut().zip(name.bytes().take(15)) {
        *dst = src as libc::c_char;
    }
    if let Some(btf) = btf {
        load.prog_btf_fd = btf.btf.as_raw_fd() as u32;
        load.func_info_rec_size = btf.func_info_rec_size as u32;
        load.func_info = btf.func_info.as_ptr() as u64;
        load.func_info_cnt = btf.func_info.len() as u32;
        load.line_info_rec_size = btf.line_info_rec_size as u32;
        load.line_info = btf.line_info.as_ptr() as u64;
        load.line_info_cnt = btf.line_info.len() as u32;
    }
    if let Some(log) = log {
        load.log_level = 1;
        load.log_size = log.len() as u32;
        load.log_buf = log.as_mut_ptr() as u64;
    }
    // SAFETY: every pointer in `attr` (instructions, license, BTF records, log) outlives the
    // call.
    let fd = unsafe { sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr) }?;
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// libbpf's probe: a multi-uprobe link on `/` fails with EBADF where the link type exists (the
/// path is checked after the attach type), and with EINVAL or similar where it does not.
fn probe_uprobe_multi_link() -> bool {
    const EXIT_ZERO: [bpf_insn; 2] = [
        // mov r0, 0
        insn(0xb7),
        // exit
        insn(0x95),
    ];
    let Ok(program) = load_uprobe_multi_program(&EXIT_ZERO, "oi_probe", None, None) else {
        return false;
    };
    let path = c"/";
    let offset: u64 = 0;
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the LINK_CREATE member of the union we own.
    let link = unsafe { &mut attr.link_create };
    link.__bindgen_anon_1.prog_fd = program.as_raw_fd() as u32;
    link.attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
    link.__bindgen_anon_3.uprobe_multi.path = path.as_ptr() as u64;
    link.__bindgen_anon_3.uprobe_multi.offsets = &raw const offset as u64;
    link.__bindgen_anon_3.uprobe_multi.cnt = 1;
    // SAFETY: the path and offset outlive the call.
    match unsafe { sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr) } {
        Ok(fd) => {
            // Not expected; a link on `/` exists, so the link type does too.
            // SAFETY: a fresh descriptor we own.
            drop(unsafe { OwnedFd::from_raw_fd(fd as i32) });
            true
        }
        Err(e) => e.raw_os_error() == Some(libc::EBADF),
    }
}

/// An instruction on r0 with no immediate (registers are bitfields, zero here).
const fn insn(code: u8) -> bpf_insn {
    bpf_insn {
        code,
        _bitfield_align_1: [],
        _bitfield_1: aya_obj::generated::__BindgenBitfieldUnit::new([0]),
        off: 0,
        imm: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux 6.6 and later have multi-uprobe links; the machines this project runs on have 6.18.
    #[test]
    fn this_kernel_has_multi_uprobe_links() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root");
            return;
        }
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release.trim().split(['.', '-']);
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        assert_eq!(
            KernelFeatures::get().uprobe_multi_link,
            (major, minor) >= (6, 6),
            "kernel {release}"
        );
    }
}
