//! Types the allocation profiler shares with its eBPF program (owner: the allocs work):
//! `oi-ebpf/src/bin/allocs.rs` writes them, `oi-user/src/allocs` reads them.
//!
//! The kernel side keeps, per thread, the one allocator call it is inside ([`Open`]: the
//! outermost one, by the stack pointer), per live block its [`Block`], per allocating stack a
//! [`Stack`] (by a hash of its frames) and the [`SiteStats`] of the blocks allocated there (by
//! the stack's site index, [`Stack::site`]; index 0 holds the allocations whose stack could not
//! be stored).

use crate::stack::MAX_FRAMES;

/// The most thread slots (one per thread id modulo their count, see [`Open`]): the kernel's
/// `pid_max` rounded up to a power of two, at most this many.
pub const MAX_THREAD_SLOTS: u32 = 1 << 16;
/// Bounds of a lifetime histogram (`--buckets`); a histogram has one bucket more.
pub const MAX_BUCKETS: usize = 15;

/// What an allocator function does, in the low byte of its attach cookie: where its size and
/// pointer arguments are and how its result is read.
pub mod function {
    /// `malloc(size)`, `operator new(size, …)`, `valloc(size)`, `pvalloc(size)`,
    /// `mallocx(size, flags)`, `tc_malloc(size)` …: size in rdi, the block in rax.
    pub const MALLOC: u64 = 1;
    /// `calloc(n, size)`: n × size bytes.
    pub const CALLOC: u64 = 2;
    /// `realloc(ptr, size)`, `rallocx(ptr, size, flags)`: a free of ptr and an allocation.
    pub const REALLOC: u64 = 3;
    /// `reallocarray(ptr, n, size)`.
    pub const REALLOCARRAY: u64 = 4;
    /// `memalign(align, size)`, `aligned_alloc(align, size)`: size in rsi.
    pub const MEMALIGN: u64 = 5;
    /// `posix_memalign(&ptr, align, size)`: size in rdx, the block written to `*ptr` when it
    /// returns 0.
    pub const POSIX_MEMALIGN: u64 = 6;
    /// `free(ptr)`, every `operator delete`, `dallocx`, `sdallocx`, `tc_free` …: ptr in rdi.
    pub const FREE: u64 = 7;

    pub const fn is_free(f: u64) -> bool {
        f == FREE
    }
}

/// The attach cookie: the probe's kind (bits 60-63), its x86 condition code for conditional
/// jumps (bits 56-59), flags (bits 8-15) and the [`function`] (bits 0-7).
pub mod cookie {
    /// The first instruction of an allocator function.
    pub const ENTRY: u64 = 0;
    /// A `ret`: the result is in rax.
    pub const RETURN: u64 = 1;
    /// A `jmp` to another hooked function (directly or through a PLT slot that names one):
    /// its entry at the same stack pointer is part of this call.
    pub const TAIL: u64 = 2;
    /// A `jmp` out to code that is not hooked and returns in this function's place: the call
    /// ends here, its result unseen (calloc's tail call of `memset` excepted: the block is in
    /// rdi, see [`RESULT_IN_RDI`]).
    pub const LEAVE: u64 = 3;
    /// [`TAIL`] when the condition holds.
    pub const TAIL_IF: u64 = 4;
    /// [`LEAVE`] when the condition holds.
    pub const LEAVE_IF: u64 = 5;
    /// A uretprobe on a C allocation function (the kernel's return trampoline): the function
    /// has returned, rsp is its entry's plus 8 and the result is in rax.
    pub const UPROBE_RETURN: u64 = 6;

    /// The function's blocks are glibc's: the usable size is read from the chunk header.
    pub const GLIBC: u64 = 1 << 8;
    /// At a [`LEAVE`]: the block is in rdi (calloc tail-calling `memset(block, 0, n)`).
    pub const RESULT_IN_RDI: u64 = 1 << 9;
    /// At an [`ENTRY`]: the first instruction is itself a [`TAIL`] jump.
    pub const TAIL_AT_ENTRY: u64 = 1 << 10;
    /// At an [`ENTRY`]: a C function whose return is seen by a uretprobe ([`UPROBE_RETURN`]);
    /// nothing unwinds through it, so its call always ends there, and an entry at the same
    /// stack pointer while it is open is a tail callee.
    pub const C_RETURN: u64 = 1 << 11;
    /// At an [`ENTRY`]: an `operator new` whose block comes from a hooked C allocation
    /// function it calls directly (libstdc++'s `operator new` → `malloc`): the return of the
    /// first such call (`Open::inner_sp`), with a block, closes this outermost call; it has no
    /// return probes of its own. A call that tail-jumps to it takes the flag over.
    pub const INNER_CLOSED: u64 = 1 << 12;
    /// The function's blocks are jemalloc's: the usable size is jemalloc's size class of the
    /// request (and of its alignment, see the `ALIGN_*` sources), a pure function of both.
    pub const JEMALLOC: u64 = 1 << 13;

    /// At an [`ENTRY`] (bits 16-19): where the request's alignment is, for jemalloc's size
    /// classes. None (0): the function takes no alignment.
    pub const ALIGN_RDI: u64 = 1;
    /// The second argument: `posix_memalign`, aligned `operator new`.
    pub const ALIGN_RSI: u64 = 2;
    /// A page (`valloc`).
    pub const ALIGN_PAGE: u64 = 3;
    /// jemalloc's `flags` argument in rsi (`mallocx`), or in rdx (`rallocx`):
    /// `MALLOCX_LG_ALIGN` is its low six bits.
    pub const ALIGN_FLAGS_RSI: u64 = 4;
    pub const ALIGN_FLAGS_RDX: u64 = 5;
    const ALIGN_SHIFT: u32 = 16;

    const KIND_SHIFT: u32 = 60;
    const CONDITION_SHIFT: u32 = 56;

    pub const fn encode(kind: u64, function: u64, flags: u64) -> u64 {
        (kind << KIND_SHIFT) | (flags & 0xff00) | (function & 0xff)
    }

    pub const fn with_condition(cookie: u64, cc: u8) -> u64 {
        cookie | (((cc & 0xf) as u64) << CONDITION_SHIFT)
    }

    pub const fn kind(cookie: u64) -> u64 {
        cookie >> KIND_SHIFT
    }

    pub const fn function(cookie: u64) -> u64 {
        cookie & 0xff
    }

    pub const fn flags(cookie: u64) -> u64 {
        cookie & 0xff00
    }

    pub const fn with_align(cookie: u64, source: u64) -> u64 {
        cookie | ((source & 0xf) << ALIGN_SHIFT)
    }

    pub const fn align_source(cookie: u64) -> u64 {
        (cookie >> ALIGN_SHIFT) & 0xf
    }

    pub const fn condition(cookie: u64) -> u8 {
        ((cookie >> CONDITION_SHIFT) & 0xf) as u8
    }
}

/// The allocator call a thread is inside: only the outermost. One slot per thread id (an array
/// indexed by the thread id modulo its size, which is `pid_max` where that is at most
/// [`MAX_THREAD_SLOTS`]): `owner` says whose it is, and a slot another thread left reads as no
/// call. Where `pid_max` is larger, two live threads may share a slot: a thread never takes
/// a slot that holds another thread's open call, and its own call is counted as
/// [`counter::THREADS_FULL`] instead (the program's `SHARED_SLOTS`).
/// A free (function [`function::FREE`]) is counted at its entry and stays here as the thread's
/// "pending free" (`arg` the pointer, `sp` its entry's stack pointer) until the thread's next
/// hooked entry: a free of the same pointer at the same or a lower stack pointer is the same
/// request (`operator delete` → `free`, by a tail jump or a call) and is not counted again.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Open {
    /// The stack pointer at the entry: the slot of the return address. Its `ret` (or a tail
    /// jump out of it) runs with the same stack pointer.
    pub sp: u64,
    /// Requested bytes.
    pub size: u64,
    /// realloc's old block; posix_memalign's `void **`; a pending free's pointer.
    pub arg: u64,
    pub stack: u64,
    /// The stack's site index ([`Stack::site`]).
    pub site: u32,
    pub _pad: u32,
    /// The [`function`] and cookie flags of the entry.
    pub function: u32,
    pub flags: u32,
    /// Set by a tail jump to a hooked function: its entry at `sp` belongs to this call.
    pub tail: u32,
    /// Non-zero: this allocation is sampled (always, without sampling).
    pub sampled: u32,
    /// `--sample-bytes`: the allocations this one stands for, × [`WEIGHT_ONE`].
    pub weight: u64,
    /// [`cookie::INNER_CLOSED`]: the stack pointer at the entry of the first C allocation
    /// function called inside this call (0: none yet). Only that function's return closes the
    /// call; a deeper one (the exception object of a `bad_alloc`, a `new_handler`'s own
    /// allocations) does not.
    pub inner_sp: u64,
    /// The request's alignment (0: none), for jemalloc's size classes.
    pub align: u64,
    /// The pid_tgid of the thread whose slot this is.
    pub owner: u64,
}

/// The weight of an allocation that stands for itself alone (fixed point: 1.0).
pub const WEIGHT_ONE: u64 = 1024;

/// One live block (map value keyed by its address).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Block {
    pub size: u64,
    pub usable: u64,
    /// `bpf_ktime_get_ns()` when the allocation returned.
    pub time_ns: u64,
    /// The allocating stack's id (key of the stack and site maps).
    pub stack: u64,
    pub tid: u32,
    /// The allocating stack's site index ([`Stack::site`]).
    pub site: u32,
    /// The allocations it stands for, × [`WEIGHT_ONE`] (`--sample-bytes`).
    pub weight: u64,
}

/// One slot of the live table's array half (indexed by a hash of the address): `addr` 0 is
/// free, an odd `addr` (block addresses are even) is being written by the allocating CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveSlot {
    pub addr: u64,
    pub block: Block,
}

/// One allocating stack (map value keyed by its id, a hash of the process and the frames).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Stack {
    pub tgid: u32,
    /// Frames used.
    pub len: u32,
    /// Where its [`SiteStats`] are: the index in the site array, given when the stack is first
    /// stored (1, 2, …; 0 is for allocations without a stored stack).
    pub site: u32,
    pub _pad: u32,
    /// Innermost first: the allocator's entry, then return addresses.
    pub frames: [u64; MAX_FRAMES],
}

/// What one site (allocating stack) has seen: one value per CPU in the kernel (each CPU adds
/// to its own, in a per-CPU array indexed by [`Stack::site`]), summed by user space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteStats {
    pub allocs: u64,
    /// Requested bytes.
    pub bytes: u64,
    /// Usable bytes (the requested size where the allocator does not say).
    pub usable_bytes: u64,
    /// Frees of this site's blocks.
    pub frees: u64,
    pub freed_bytes: u64,
    pub freed_usable_bytes: u64,
    /// Freed blocks by lifetime: < bound 0, < bound 1, …, ≥ the last bound.
    pub lifetimes: [u64; MAX_BUCKETS + 1],
    /// `--sample-bytes` estimates: allocations and frees × [`WEIGHT_ONE`], and bytes.
    pub est_allocs: u64,
    pub est_bytes: u64,
    pub est_frees: u64,
    pub est_freed_bytes: u64,
}

/// Adds another count of the same site (another CPU's, or another stack's of the same
/// place): every field, lifetimes bucket by bucket.
impl core::ops::AddAssign<&SiteStats> for SiteStats {
    fn add_assign(&mut self, s: &SiteStats) {
        self.allocs += s.allocs;
        self.bytes += s.bytes;
        self.usable_bytes += s.usable_bytes;
        self.frees += s.frees;
        self.freed_bytes += s.freed_bytes;
        self.freed_usable_bytes += s.freed_usable_bytes;
        for (sum, n) in self.lifetimes.iter_mut().zip(s.lifetimes) {
            *sum += n;
        }
        self.est_allocs += s.est_allocs;
        self.est_bytes += s.est_bytes;
        self.est_frees += s.est_frees;
        self.est_freed_bytes += s.est_freed_bytes;
    }
}

/// Indices of the per-CPU counter array (user space sums the CPUs).
pub mod counter {
    /// Probe hits of threads in scope.
    pub const HITS: u32 = 0;
    /// Entries of a hooked function inside another hooked call (counted once, outside).
    pub const NESTED: u32 = 1;
    /// Frees of blocks not allocated while attached (or dropped), when no sampling is on.
    pub const UNKNOWN_FREES: u32 = 2;
    /// Allocations whose block did not fit the live table (`--max-live`).
    pub const DROPPED: u32 = 3;
    /// Allocations whose stack did not fit the stack table.
    pub const STACKS_FULL: u32 = 4;
    /// Allocations whose site did not fit the site table. (Sites are indexed by stack, and a
    /// stack that gets no site index is not stored: counted as [`STACKS_FULL`].)
    pub const SITES_FULL: u32 = 5;
    /// Allocator calls not tracked because the thread table had no slot.
    pub const THREADS_FULL: u32 = 6;
    /// Allocator calls left without their return (an exception through `operator new`, a
    /// longjmp): calls of functions that can be left that way, whose return is not probed by
    /// the kernel's return probes.
    pub const ABANDONED: u32 = 7;
    /// Allocations whose result no probe could see (a tail call out of the allocator).
    pub const UNSEEN: u32 = 8;
    /// Allocations that failed (NULL, or posix_memalign's error).
    pub const FAILED: u32 = 9;
    /// An allocation returned an address still live in the table: its free was missed; the old
    /// block is counted freed now.
    pub const REUSED: u32 = 10;
    /// Allocations not sampled (`--every`, `--sample-bytes`).
    pub const SKIPPED: u32 = 11;
    /// Mapping changes (`_dl_debug_state`) whose thread was let go before user space had
    /// looked at the new files (`MAPPED_HOLD_NS`).
    pub const HOLDS_EXPIRED: u32 = 12;
    /// Calls of C allocation functions (uretprobed) whose return the kernel did not report:
    /// nothing unwinds through C code, so the thread's next allocator call at the same or a
    /// higher stack pointer means the return probe did not run (the kernel keeps at most 64
    /// pending returns per thread and drops one it cannot allocate).
    pub const RETURNS_MISSED: u32 = 13;
    /// While sampling (`--every`, `--sample-bytes`): frees of blocks not in the table, which
    /// are either blocks not sampled or blocks allocated before attaching; only tracking every
    /// block could tell them apart. [`UNKNOWN_FREES`] counts such frees when every block is
    /// tracked.
    pub const UNTRACKED_FREES: u32 = 14;
    pub const COUNT: u32 = 15;
}

/// The longest a thread that reports a change of its process's mappings (the dynamic
/// linker's `_dl_debug_state`, called after a dlopen mapped its files and before their
/// constructors run) is held in the probe while user space hooks the new files.
pub const MAPPED_HOLD_NS: u64 = 1_000_000_000;

/// Where `struct r_debug`'s `r_state` lies (the dynamic linker's `_r_debug`: `int r_version`,
/// `link_map *r_map`, `r_brk`, then the state), and its values: `_dl_debug_state` runs at
/// `RT_ADD` (before a dlopen maps anything), `RT_DELETE` (before a dlclose unmaps) and
/// `RT_CONSISTENT` (after either): only the last can have new files to hook.
pub const R_STATE_OFFSET: u64 = 24;
pub const RT_CONSISTENT: u32 = 0;

/// Slots of the `MAPPED` array: mapping changes reported, and the last one user space has
/// handled (it writes that slot).
pub mod mapped {
    pub const REPORTED: u32 = 0;
    pub const HANDLED: u32 = 1;
}

/// A ring-buffer record: process `tgid` changed its mappings; its thread waits until the
/// `HANDLED` slot reaches `sequence`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Mapped {
    pub sequence: u64,
    pub tgid: u32,
    pub _pad: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: every type is #[repr(C)] of integers with explicit padding fields, so every bit
    // pattern is a valid value.
    unsafe impl aya::Pod for super::Open {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Block {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::LiveSlot {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Stack {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SiteStats {}
}

#[cfg(test)]
mod tests {
    use super::{cookie, function};

    #[test]
    fn cookies_round_trip() {
        let c = cookie::with_condition(
            cookie::encode(cookie::LEAVE_IF, function::CALLOC, cookie::GLIBC),
            0xc,
        );
        assert_eq!(cookie::kind(c), cookie::LEAVE_IF);
        assert_eq!(cookie::function(c), function::CALLOC);
        assert_eq!(cookie::flags(c), cookie::GLIBC);
        assert_eq!(cookie::condition(c), 0xc);
    }
}
