//! A segment of ours inside a target, within reach of a library: a code part and a data
//! part, placed in one free hole whose every byte is within ±2 GiB ([`REACH`]) of every
//! byte of the library, so that a 5-byte `jmp rel32` from any of its functions reaches the
//! code, and the relocated instructions' RIP-relative operands still reach their targets.
//!
//! The code part is private anonymous memory, written while RW and then made RX by
//! [`Segment::seal`]: never RWX. The data part is a memfd created *in the target* by a remote
//! `memfd_create`, mapped `MAP_SHARED` RW there, opened by oi-trace through
//! `/proc/PID/fd/N` (which works across pid and mount namespaces) and mapped here too; then
//! the target's descriptor is closed by a remote `close`, so the target keeps no fd of ours,
//! only the mapping. Removal is one remote `munmap` per part.
//!
//! Never maps anything the target could not unmap itself, and never leaves a part mapped
//! when a later step of [`Segment::create`] fails.

use std::{fs::OpenOptions, os::fd::AsRawFd as _};

use memmap2::MmapMut;
use serde::{Deserialize, Serialize};

use crate::inferior::{
    bootstrap,
    hijack::Held,
    procfs,
    remote::{self, RemoteError},
};

pub const PAGE: u64 = 4096;
/// How far a segment byte may lie from a library byte: 2 GiB, less a margin that keeps
/// every `rel32` (taken from the end of its instruction) in range.
pub const REACH: u64 = (1 << 31) - (16 << 20);
/// The name the memfd shows in the target's `/proc/PID/maps` ([`MEMFD_PATH`]).
const MEMFD_NAME: &[u8] = b"oi-trace-inject\0";
/// How the data part shows in `/proc/PID/maps` and `/proc/PID/fd`.
pub const MEMFD_PATH: &str = "/memfd:oi-trace-inject";

#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    #[error(
        "no free hole of {len} bytes within 2 GiB of every library to patch \
         ({lo:#x}..{hi:#x})"
    )]
    NoHole { len: u64, lo: u64, hi: u64 },
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error("the data part through /proc/{pid}/fd/{fd}: {source}")]
    Local {
        pid: i32,
        fd: u64,
        source: std::io::Error,
    },
    #[error("the code part has no room left for {0} bytes")]
    Full(usize),
    #[error("code written at {0:#x} lies outside the code part, or after it was sealed")]
    OutsideCode(u64),
}

/// One mapping of ours in the target: what a `munmap` removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub addr: u64,
    pub len: u64,
}

impl Part {
    pub fn contains(&self, addr: u64) -> bool {
        (self.addr..self.addr + self.len).contains(&addr)
    }
}

/// The segment mapped into one process (see the module's comment).
pub struct Segment {
    pid: i32,
    code: Part,
    data: Part,
    /// What the code part will hold once sealed (0xCC where nothing was placed).
    image: Vec<u8>,
    used: u64,
    sealed: bool,
    /// Our `MAP_SHARED` view of the data part.
    view: MmapMut,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("pid", &self.pid)
            .field("code", &self.code)
            .field("data", &self.data)
            .field("used", &self.used)
            .field("sealed", &self.sealed)
            .finish()
    }
}

/// The addresses `[lo, hi)` a segment may occupy to be within [`REACH`] of every span
/// (`[start, end)` of each library to patch), or None when no address is.
pub fn window(spans: &[(u64, u64)]) -> Option<(u64, u64)> {
    let lo = spans.iter().map(|s| s.1.saturating_sub(REACH)).max()?;
    let hi = spans.iter().map(|s| s.0.saturating_add(REACH)).min()?;
    (lo < hi).then_some((lo, hi))
}

/// The span `[start, end)` of every mapping of the file that maps `addr` in `pid`.
pub fn library_span(pid: i32, addr: u64) -> Option<(u64, u64)> {
    let maps = procfs::mappings(pid).ok()?;
    let file = &maps.iter().find(|m| (m.start..m.end).contains(&addr))?.path;
    let of_file = maps.iter().filter(|m| &m.path == file);
    let start = of_file.clone().map(|m| m.start).min()?;
    let end = of_file.map(|m| m.end).max()?;
    Some((start, end))
}

impl Segment {
    /// Maps a segment of `code_len` bytes of code and `data_len` bytes of shared data (each
    /// rounded up to pages) into the process of the held thread (every thread of which the
    /// caller has stopped), within reach of every span in `near`. `announce` hears where
    /// the parts will be before each attempt to map them (the guardian's copy: a kill of
    /// oi-trace from then on leaves nothing behind).
    pub fn create(
        h: &mut Held,
        near: &[(u64, u64)],
        code_len: u64,
        data_len: u64,
        announce: &mut dyn FnMut(&[Part]),
    ) -> Result<Self, SegmentError> {
        let pid = h.tgid;
        let code_len = code_len.max(1).next_multiple_of(PAGE);
        let data_len = data_len.max(1).next_multiple_of(PAGE);
        let total = code_len + data_len;
        // Above the highest file mapping lie only the stack and its guard gap.
        let ceiling = procfs::mappings(pid)
            .ok()
            .and_then(|maps| maps.iter().map(|m| m.end).max())
            .unwrap_or(0);
        let (lo, hi) = window(near).unwrap_or((0, 0));
        let hi = hi.min(ceiling);
        let no_hole = SegmentError::NoHole { len: total, lo, hi };
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let mut base = None;
        for _ in 0..8 {
            let Some(at) = bootstrap::free_hole_within(pid, total, lo, hi) else {
                break;
            };
            announce(&[
                Part {
                    addr: at,
                    len: code_len,
                },
                Part {
                    addr: at + code_len,
                    len: data_len,
                },
            ]);
            match h.mmap(at, code_len, rw, libc::MAP_FIXED_NOREPLACE) {
                Ok(got) if got == at => {
                    base = Some(at);
                    break;
                }
                // A kernel without MAP_FIXED_NOREPLACE may place it elsewhere.
                Ok(got) => {
                    h.munmap(got, code_len)?;
                    break;
                }
                // Taken meanwhile by the target itself: look again.
                Err(RemoteError::Syscall {
                    errno: nix::errno::Errno::EEXIST,
                    ..
                }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let base = base.ok_or(no_hole)?;
        let code = Part {
            addr: base,
            len: code_len,
        };
        let data = Part {
            addr: base + code_len,
            len: data_len,
        };
        match map_data(h, code, data) {
            Ok(view) => Ok(Self {
                pid,
                code,
                data,
                image: vec![0xcc; code_len as usize],
                used: 0,
                sealed: false,
                view,
            }),
            Err(e) => {
                let _ = h.munmap(code.addr, code.len);
                Err(e)
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Room for `len` bytes of code (16-byte aligned): their address in the target.
    pub fn code_at(&mut self, len: usize) -> Result<u64, SegmentError> {
        let at = self.used.next_multiple_of(16);
        if self.sealed || at + len as u64 > self.code.len {
            return Err(SegmentError::Full(len));
        }
        self.used = at + len as u64;
        Ok(self.code.addr + at)
    }

    /// Places `bytes` at `addr` (given by [`Self::code_at`]); written by [`Self::seal`].
    pub fn write(&mut self, addr: u64, bytes: &[u8]) -> Result<(), SegmentError> {
        let offset = addr
            .checked_sub(self.code.addr)
            .filter(|o| !self.sealed && o + bytes.len() as u64 <= self.used)
            .ok_or(SegmentError::OutsideCode(addr))?;
        self.image[offset as usize..][..bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    /// Writes the code placed so far into the code part, then makes it RX. No more code can
    /// be placed afterwards.
    pub fn seal(&mut self, h: &mut Held) -> Result<(), SegmentError> {
        remote::write_memory(self.pid, self.code.addr, &self.image)?;
        h.mprotect(
            self.code.addr,
            self.code.len,
            libc::PROT_READ | libc::PROT_EXEC,
        )?;
        self.sealed = true;
        Ok(())
    }

    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    pub fn code(&self) -> Part {
        self.code
    }

    pub fn data_part(&self) -> Part {
        self.data
    }

    /// The target address of the data part.
    pub fn data_addr(&self) -> u64 {
        self.data.addr
    }

    /// Our view of the data part. The target writes it concurrently: untrusted bytes.
    pub fn data(&self) -> &[u8] {
        &self.view
    }

    /// Our view of the data part, for the words the tracer writes (before the code runs).
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.view
    }

    /// The aligned word at `offset` of the data part, read once (the target may be writing
    /// it); None outside the part.
    pub fn word(&self, offset: usize) -> Option<u64> {
        if !offset.is_multiple_of(8) || offset + 8 > self.view.len() {
            return None;
        }
        // SAFETY: in bounds and 8-byte aligned (the mapping is page-aligned); a volatile
        // read of a plain integer another process may be writing tears at worst, which an
        // aligned 8-byte load on x86-64 does not.
        Some(unsafe { std::ptr::read_volatile(self.view.as_ptr().add(offset).cast::<u64>()) })
    }

    /// Both parts: what removal unmaps.
    pub fn parts(&self) -> [Part; 2] {
        [self.code, self.data]
    }

    pub fn contains(&self, addr: u64) -> bool {
        self.code.contains(addr) || self.data.contains(addr)
    }

    /// Unmaps both parts from the process of the held thread. The caller has made sure no
    /// thread is inside (see `patch`).
    pub fn remove(self, h: &mut Held) -> Result<(), SegmentError> {
        unmap(h, &self.parts())
    }
}

/// One remote `munmap` per part; every part is tried, the first failure reported.
pub fn unmap(h: &mut Held, parts: &[Part]) -> Result<(), SegmentError> {
    let mut first = Ok(());
    for part in parts {
        if let Err(e) = h.munmap(part.addr, part.len) {
            first = first.and(Err(e.into()));
        }
    }
    first
}

/// The data part: a memfd made in the target (its name written at the start of the code
/// part, still RW), sized and mapped here, mapped there, the target's fd closed.
fn map_data(h: &mut Held, code: Part, data: Part) -> Result<MmapMut, SegmentError> {
    let pid = h.tgid;
    remote::write_memory(pid, code.addr, MEMFD_NAME)?;
    let fd = h.syscall(
        "memfd_create",
        libc::SYS_memfd_create,
        [code.addr, libc::MFD_CLOEXEC as u64, 0, 0, 0, 0],
    )?;
    let local = |source| SegmentError::Local { pid, fd, source };
    let result = (|| {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/fd/{fd}"))
            .map_err(local)?;
        file.set_len(data.len).map_err(local)?;
        let shared = (libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE) as u64;
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let got = h.syscall(
            "mmap",
            libc::SYS_mmap,
            [data.addr, data.len, rw, shared, fd, 0],
        )?;
        if got != data.addr {
            let _ = h.munmap(got, data.len);
            return Err(SegmentError::NoHole {
                len: data.len,
                lo: data.addr,
                hi: data.addr + data.len,
            });
        }
        // SAFETY: a MAP_SHARED view of a memfd that nothing truncates (only we hold its size
        // and the target never sees the fd); the target writes it concurrently, which is
        // why it is only ever read as untrusted bytes or single volatile words.
        match unsafe { MmapMut::map_mut(file.as_raw_fd()) } {
            Ok(view) => Ok(view),
            Err(e) => {
                let _ = h.munmap(data.addr, data.len);
                Err(local(e))
            }
        }
    })();
    // The target keeps the mapping, never the descriptor.
    let closed = h.syscall("close", libc::SYS_close, [fd, 0, 0, 0, 0, 0]);
    let view = result?;
    if let Err(e) = closed {
        let _ = h.munmap(data.addr, data.len);
        return Err(e.into());
    }
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_keeps_every_byte_within_reach_of_every_span() {
        let lib = (0x7f00_0000_0000, 0x7f00_0020_0000);
        let (lo, hi) = window(&[lib]).unwrap();
        assert_eq!(lo, lib.1 - REACH);
        assert_eq!(hi, lib.0 + REACH);
        // Two libraries 3 GiB apart share the 1 GiB between their reaches.
        let far = (lib.0 + (3 << 30), lib.1 + (3 << 30));
        let (lo, hi) = window(&[lib, far]).unwrap();
        assert_eq!((lo, hi), (far.1 - REACH, lib.0 + REACH));
        // 5 GiB apart: nothing.
        let too_far = (lib.0 + (5 << 30), lib.1 + (5 << 30));
        assert_eq!(window(&[lib, too_far]), None);
        assert_eq!(window(&[]), None);
    }
}
