//! Multi-uprobe links (`BPF_LINK_CREATE` with `BPF_TRACE_UPROBE_MULTI`, Linux 6.6): one link
//! puts a program on any number of offsets of one file, each with its own cookie, instead of one
//! perf event per offset. Attaching thousands of probes then takes one system call per file.
//!
//! aya 0.14 has no such link, and the kernel only accepts programs loaded with that expected
//! attach type, which aya's `UProbe::load` cannot set. So the program is loaded a second time
//! here: aya-obj (aya's own object reader, already a dependency of aya) parses the same ELF and
//! relocates the program against the maps aya created — the same map descriptors, so both
//! copies share every map — and a raw `bpf(BPF_PROG_LOAD)` loads it with the attach type. The
//! aya copy stays available for the one-perf-event-per-offset fallback of older kernels
//! (`crate::kernel_features` says which to use).
//!
//! Never attaches anything the caller did not list; dropping a link detaches all its probes.

use std::{
    collections::{HashMap, HashSet},
    ffi::CString,
    os::{
        fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::Path,
};

use aya::{Ebpf, maps::Map};
use aya_obj::generated::{bpf_attach_type, bpf_attr, bpf_cmd};

use crate::kernel_features::{ProgramBtf, load_btf, load_uprobe_multi_program, sys_bpf};

#[derive(Debug, thiserror::Error)]
pub enum MultiError {
    #[error("reading the eBPF object for a multi-uprobe link: {0}")]
    Object(String),
    #[error("eBPF program {0} missing from its object")]
    MissingProgram(String),
    #[error("the kernel refused eBPF program {name} as a multi-uprobe program: {source}{log}")]
    Load {
        name: String,
        source: std::io::Error,
        log: String,
    },
    #[error("attaching {count} uprobes to {path} in one link: {source}")]
    Attach {
        path: String,
        count: usize,
        source: std::io::Error,
    },
}

/// A program loaded for multi-uprobe links.
pub struct MultiProgram {
    fd: OwnedFd,
}

/// One multi-uprobe link: detached when dropped.
pub struct MultiLink {
    _fd: OwnedFd,
    pub probes: usize,
}

impl MultiProgram {
    /// Instructions the verifier processed to accept this program, where the kernel says.
    pub fn verified_instructions(&self) -> Option<u32> {
        crate::kernel_features::verified_instructions(self.fd.as_fd())
    }

    /// Loads program `name` of `object` (the ELF that `ebpf` was loaded from) for multi-uprobe
    /// links, sharing the maps `ebpf` created. Call it before taking maps out of `ebpf`.
    pub fn load(object: &[u8], ebpf: &Ebpf, name: &str) -> Result<Self, MultiError> {
        let mut obj =
            aya_obj::Object::parse(object).map_err(|e| MultiError::Object(e.to_string()))?;
        // The program's BTF, as aya prepares it (programs that give helpers callbacks need
        // their function records).
        let btf = match aya::features().btf() {
            Some(features) => obj
                .fixup_and_sanitize_btf(features)
                .map_err(|e| MultiError::Object(e.to_string()))?
                .map(|btf| load_btf(&btf.to_bytes()))
                .transpose()
                .map_err(|e| MultiError::Object(format!("loading its BTF: {e}")))?,
            None => None,
        };
        let fds: HashMap<&str, BorrowedFd<'_>> = ebpf
            .maps()
            .filter_map(|(name, map)| Some((name, map_fd(map)?)))
            .collect();
        let text_sections: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
        let definitions: Vec<(String, aya_obj::Map)> = obj.maps.drain().collect();
        obj.relocate_maps(
            definitions.iter().filter_map(|(name, def)| {
                fds.get(name.as_str())
                    .map(|fd| (name.as_str(), fd.as_raw_fd(), def))
            }),
            &text_sections,
        )
        .map_err(|e| MultiError::Object(e.to_string()))?;
        obj.relocate_calls(&text_sections)
            .map_err(|e| MultiError::Object(e.to_string()))?;
        obj.sanitize_functions(aya::features());
        let program = obj
            .programs
            .get(name)
            .ok_or_else(|| MultiError::MissingProgram(name.to_string()))?;
        let function = obj
            .functions
            .get(&program.function_key())
            .ok_or_else(|| MultiError::MissingProgram(name.to_string()))?;
        let program_btf = btf.as_ref().map(|fd| ProgramBtf {
            btf: fd.as_fd(),
            func_info: &function.func_info.func_info,
            func_info_rec_size: function.func_info_rec_size,
            line_info: &function.line_info.line_info,
            line_info_rec_size: function.line_info_rec_size,
        });
        let load = |log| {
            load_uprobe_multi_program(&function.instructions, name, program_btf.as_ref(), log)
        };
        match load(None) {
            Ok(fd) => Ok(Self { fd }),
            Err(first) => {
                // Again with the verifier's log, for the error message only.
                let mut log = vec![0u8; 16 << 20];
                let _ = load(Some(&mut log));
                let text = String::from_utf8_lossy(&log);
                let text = text.trim_end_matches('\0').trim();
                // The whole log, for whoever debugs the program.
                if let Some(path) = std::env::var_os("OI_TRACE_VERIFIER_LOG") {
                    let _ = std::fs::write(path, text);
                }
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                let log = if tail.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (verifier: {})",
                        tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
                    )
                };
                Err(MultiError::Load {
                    name: name.to_string(),
                    source: first,
                    log,
                })
            }
        }
    }

    /// Attaches this program to `offsets` of the file `path` (offsets into the file, as for
    /// uprobes), with `cookies[i]` for `offsets[i]`; only in process `pid` if given.
    pub fn attach(
        &self,
        path: &Path,
        offsets: &[u64],
        cookies: &[u64],
        pid: Option<u32>,
    ) -> Result<MultiLink, MultiError> {
        self.attach_as(path, offsets, cookies, pid, false)
    }

    /// [`Self::attach`], as uretprobes when `returns` (`BPF_F_UPROBE_MULTI_RETURN`: the program
    /// runs when the function at each offset returns, through the kernel's return trampoline).
    pub fn attach_as(
        &self,
        path: &Path,
        offsets: &[u64],
        cookies: &[u64],
        pid: Option<u32>,
        returns: bool,
    ) -> Result<MultiLink, MultiError> {
        const BPF_F_UPROBE_MULTI_RETURN: u32 = 1;
        assert_eq!(offsets.len(), cookies.len(), "one cookie per offset");
        let error = |source| MultiError::Attach {
            path: path.display().to_string(),
            count: offsets.len(),
            source,
        };
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| error(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
        // SAFETY: bpf_attr is a plain C union of integers; all-zero is its documented default.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // SAFETY: writing the LINK_CREATE member of the union we own.
        let link = unsafe { &mut attr.link_create };
        link.__bindgen_anon_1.prog_fd = self.fd.as_raw_fd() as u32;
        link.attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
        // SAFETY: writing the uprobe_multi member of the union we own.
        let multi = unsafe { &mut link.__bindgen_anon_3.uprobe_multi };
        multi.path = c_path.as_ptr() as u64;
        multi.offsets = offsets.as_ptr() as u64;
        multi.cookies = cookies.as_ptr() as u64;
        multi.cnt = offsets.len() as u32;
        multi.pid = pid.unwrap_or(0);
        multi.flags = if returns {
            BPF_F_UPROBE_MULTI_RETURN
        } else {
            0
        };
        // SAFETY: the path, offsets and cookies outlive the call.
        let fd = unsafe { sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr) }.map_err(error)?;
        Ok(MultiLink {
            // SAFETY: the kernel returned a new descriptor that nothing else owns.
            _fd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
            probes: offsets.len(),
        })
    }
}

/// The descriptor of any kind of map aya created.
fn map_fd(map: &Map) -> Option<BorrowedFd<'_>> {
    let data = match map {
        Map::Array(d)
        | Map::BloomFilter(d)
        | Map::HashMap(d)
        | Map::LpmTrie(d)
        | Map::LruHashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::PerfEventArray(d)
        | Map::ProgramArray(d)
        | Map::Queue(d)
        | Map::RingBuf(d)
        | Map::Stack(d)
        | Map::StackTraceMap(d)
        | Map::Unsupported(d) => d,
        _ => return None,
    };
    Some(data.fd().as_fd())
}
