//! Remote system calls before our own code exists in the target (to map it) and after it is
//! gone (to unmap it).
//!
//! A remote syscall points the thread at a `syscall` instruction with the call's registers.
//! Were the tracer killed meanwhile, the kernel would let the thread run on from there with
//! those registers. So, where the target has room for it, the instruction is one of ours,
//! written into the unused tail of an executable mapping (the bytes after the end of an ELF
//! segment's code, which share its last page but are never executed), and followed by code
//! that puts back every register the call changes and jumps to where the thread was: a
//! thread let go at any instant still returns intact. Only without such room is a `syscall`
//! of the target's own code borrowed, and that brief window stays open.

use std::os::unix::fs::FileExt;

use object::{Object, ObjectSegment, SegmentFlags};

use super::procfs::{self, Mapping};
use super::remote::{self, Regs, RemoteError};
use crate::debuginfo::Binary;

/// Where a thread's remote syscalls go while our segments do not serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bootstrap {
    /// Unused bytes at this address, room for [`restoring_syscall`] and a note.
    Slack(u64),
    /// A `syscall` instruction of the target's own code.
    Borrowed(u64),
}

impl Bootstrap {
    /// Slack if the target has some, else a borrowed `syscall`.
    pub fn find(tgid: i32) -> Result<Self, RemoteError> {
        match find_slack(tgid) {
            Some(addr) => Ok(Self::Slack(addr)),
            None => remote::find_syscall_instruction(tgid).map(Self::Borrowed),
        }
    }
}

/// Length of [`restoring_syscall`]'s code.
pub const STUB_LEN: u64 = 2 + 9 * 10 + 6 + 8;
/// Offset in the slack of the note of a region being reserved (see `Held::reserve`).
pub const NOTE: u64 = 112;
pub const NOTE_LEN: usize = 24;
const NOTE_MAGIC: u64 = u64::from_le_bytes(*b"OITRPEND");
/// Room the slack must have: the stub and the note.
const SLACK_NEEDED: u64 = NOTE + NOTE_LEN as u64;

/// The note that a region of `len` bytes is being reserved at `addr`.
pub fn note(addr: u64, len: u64) -> Vec<u8> {
    [NOTE_MAGIC, addr, len]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

/// The note left in the slack at `at`, if any.
pub fn read_note(pid: i32, at: u64) -> Option<(u64, u64)> {
    let mut bytes = [0u8; NOTE_LEN];
    remote::read_memory(pid, at + NOTE, &mut bytes).ok()?;
    let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
    (word(0) == NOTE_MAGIC).then(|| (word(1), word(2)))
}

/// Whether `[addr, addr + len)` is exactly a run of anonymous mappings with free pages on
/// both sides: what a reservation of ours looks like, however far it got.
pub fn is_lone_anonymous(pid: i32, addr: u64, len: u64) -> bool {
    let end = addr + len;
    let maps = procfs::regions(pid);
    let inside: Vec<_> = maps
        .iter()
        .filter(|m| m.start < end && m.end > addr)
        .collect();
    let neighbours = maps.iter().any(|m| m.end == addr || m.start == end);
    !neighbours
        && inside.first().is_some_and(|m| m.start == addr)
        && inside.last().is_some_and(|m| m.end == end)
        && inside.windows(2).all(|w| w[0].end == w[1].start)
        && inside.iter().all(|m| m.anonymous)
}

/// A page-aligned address for `len` bytes in the highest hole of `pid`'s address space
/// that leaves a free page on each side, below the stack's neighbourhood.
pub fn free_hole(pid: i32, len: u64) -> Option<u64> {
    free_hole_within(pid, len, FLOOR, CEILING)
}

const PAGE: u64 = 4096;
const CEILING: u64 = 0x7f00_0000_0000;
const FLOOR: u64 = 0x1000_0000;

/// The highest page-aligned address for `len` bytes with the whole of `[addr, addr + len)`
/// inside `[lo, hi)` and a free page on each side, or None. The caller chooses `hi` away from
/// the stack (the stack's own guard gap is not a mapping).
pub fn free_hole_within(pid: i32, len: u64, lo: u64, hi: u64) -> Option<u64> {
    let lo = lo.max(FLOOR);
    let maps = procfs::regions(pid);
    let mut below_ceiling = maps.iter().rev().filter(|m| m.start < hi);
    let mut above = hi;
    loop {
        // The hole between the next mapping down (or the floor) and `above`.
        let next = below_ceiling.next();
        let floor = next.map_or(FLOOR, |m| m.end.saturating_add(PAGE).max(FLOOR));
        let top = above.saturating_sub(PAGE).min(hi);
        let start = floor.max(lo).next_multiple_of(PAGE);
        if let Some(at) = top.checked_sub(len).map(|a| a & !(PAGE - 1))
            && at >= start
        {
            return Some(at);
        }
        let m = next?;
        if m.end <= lo {
            return None;
        }
        above = above.min(m.start);
    }
}

/// `syscall`, then `mov` of every register a remote syscall changes (the arguments, the
/// number, and rcx/r11 that `syscall` itself clobbers) back to `to`, then `jmp` to `to.rip`.
/// Flags, rsp and the vector registers are untouched by the call, so the code needs no
/// memory of the target: everything is in immediates.
pub fn restoring_syscall(to: &Regs) -> Vec<u8> {
    let mut code = vec![0x0f, 0x05];
    for (rex, op, value) in [
        (0x48, 0xb8, to.rax),
        (0x48, 0xb9, to.rcx),
        (0x48, 0xba, to.rdx),
        (0x48, 0xbe, to.rsi),
        (0x48, 0xbf, to.rdi),
        (0x49, 0xb8, to.r8),
        (0x49, 0xb9, to.r9),
        (0x49, 0xba, to.r10),
        (0x49, 0xbb, to.r11),
    ] {
        code.extend([rex, op]);
        code.extend(value.to_le_bytes());
    }
    code.extend([0xff, 0x25, 0, 0, 0, 0]); // jmp [rip+0]: the quadword that follows
    code.extend(to.rip.to_le_bytes());
    debug_assert_eq!(code.len() as u64, STUB_LEN);
    code
}

/// Writes `bytes` at `addr` through `/proc/PID/mem`, which (like a debugger's breakpoint)
/// reaches read-only code pages: the process gets a private copy of the page.
pub fn poke(pid: i32, addr: u64, bytes: &[u8]) -> Result<(), RemoteError> {
    let mem = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .map_err(|_| RemoteError::Gone(pid))?;
    match mem.write_at(bytes, addr) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(_) => Err(RemoteError::Memory {
            addr,
            errno: nix::errno::Errno::EFAULT,
        }),
        Err(e) => Err(RemoteError::Memory {
            addr,
            errno: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        }),
    }
}

/// The first executable file mapping of `tgid` whose tail, past the end of its ELF
/// segment's bytes, has room for the stub and the note.
fn find_slack(tgid: i32) -> Option<u64> {
    procfs::mappings(tgid)
        .ok()?
        .iter()
        .filter(|m| m.executable)
        .find_map(|m| slack_in(tgid, m))
}

fn slack_in(tgid: i32, m: &Mapping) -> Option<u64> {
    let (start, end, offset) = (m.start, m.end, m.offset);
    // The very file mapped here, whatever mount namespace or deletion it went through.
    let binary = Binary::open(format!("/proc/{tgid}/map_files/{start:x}-{end:x}")).ok()?;
    let obj = binary.object().ok()?;
    obj.segments().find_map(|seg| {
        let SegmentFlags::Elf { p_flags } = seg.flags() else {
            return None;
        };
        let (file_start, file_len) = seg.file_range();
        // Bytes beyond the file part would be zero-filled memory of the segment itself.
        if p_flags & object::elf::PF_X == 0 || seg.size() != file_len {
            return None;
        }
        let code_end = (file_start + file_len).checked_sub(offset)?;
        if code_end > end - start {
            return None;
        }
        // 16-byte aligned: the note's words stay aligned too.
        let at = (start + code_end).next_multiple_of(16);
        (code_end > 0 && end.saturating_sub(at) >= SLACK_NEEDED).then_some(at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stub_sets_each_register_once_and_jumps_to_rip() {
        // SAFETY: an all-zero register set is a valid value (plain integers).
        let mut to: Regs = unsafe { std::mem::zeroed() };
        to.rax = 0x1111;
        to.r11 = 0x2222;
        to.rip = 0x5555_0000_1234;
        let code = restoring_syscall(&to);
        assert_eq!(&code[..2], &[0x0f, 0x05]);
        assert_eq!(&code[2..4], &[0x48, 0xb8]);
        assert_eq!(u64::from_le_bytes(code[4..12].try_into().unwrap()), 0x1111);
        assert_eq!(&code[82..84], &[0x49, 0xbb]);
        assert_eq!(u64::from_le_bytes(code[84..92].try_into().unwrap()), 0x2222);
        assert_eq!(&code[92..98], &[0xff, 0x25, 0, 0, 0, 0]);
        assert_eq!(
            u64::from_le_bytes(code[98..106].try_into().unwrap()),
            0x5555_0000_1234
        );
    }
}
