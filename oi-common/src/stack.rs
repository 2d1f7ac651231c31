//! User stacks captured in the kernel: the frame limit, and the compact unwind tables that the
//! eBPF unwinder (`oi-ebpf/src/stack.rs`) reads and user space (`oi-user/src/unwind`) writes.
//!
//! User space compiles each mapped file's `.eh_frame` into [`Row`]s, one per address range
//! with the same rule, sorted by address and stored once per file in one big array; each
//! traced process gets a sorted list of its executable mappings ([`ProcessMappings`]) that
//! points into that array. The kernel side finds the mapping of a pc, then the row of the pc
//! (two binary searches), and steps one frame with it.

/// Most frames one stack holds (innermost first); deeper stacks are cut and counted.
pub const MAX_FRAMES: usize = 48;
/// Rows the row array holds, for every file of every traced process together (16 MiB).
pub const MAX_ROWS: u32 = 1 << 21;
/// Iterations of the binary search over at most [`MAX_ROWS`] rows.
pub const ROW_SEARCH_STEPS: u32 = 22;
/// Executable mappings of one process the kernel knows; the rest are counted as dropped.
pub const MAX_MAPPINGS: usize = 256;
/// Iterations of the binary search over at most [`MAX_MAPPINGS`] mappings.
pub const MAPPING_SEARCH_STEPS: u32 = 9;
/// Processes whose mappings the kernel knows at once.
pub const MAX_UNWIND_PROCESSES: u32 = 8192;

/// What a [`Row`] says about the frame of the instructions it covers (x86-64).
pub mod rule {
    /// No call frame information here (a gap between functions, code without CFI): step by
    /// the frame pointer.
    pub const NONE: u8 = 0;
    /// CFA = rsp + `cfa_offset`.
    pub const CFA_RSP: u8 = 1;
    /// CFA = rbp + `cfa_offset`.
    pub const CFA_RBP: u8 = 2;
    /// A PLT entry (its CFI is an expression gcc and ld always write the same way):
    /// CFA = rsp + 8, plus 8 more once `(pc & 15) >= cfa_offset` (past the entry's `push`).
    pub const CFA_PLT: u8 = 3;
    /// The return address is undefined: the outermost frame (`_start`, a thread's start).
    pub const END: u8 = 4;
    /// A rule the kernel cannot follow (a DWARF expression, a register saved in another
    /// register): the walk stops here and the stack counts as truncated.
    pub const UNSUPPORTED: u8 = 5;
}

/// One row of a file's unwind table: from `pc` up to the next row's `pc`, the frame is found
/// by `rule`. Addresses are offsets from the file's table base (see [`Mapping::bias`]).
/// The return address is always at CFA − 8 on x86-64 (the `call` pushed it there).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Row {
    pub pc: u32,
    pub cfa_offset: u16,
    /// One of the [`rule`] constants.
    pub rule: u8,
    /// The caller's rbp is saved at CFA + 8 × `rbp_slot` (always below the CFA, so negative);
    /// 0 when rbp still holds the caller's value.
    pub rbp_slot: i8,
}

/// One executable mapping of a process, with its file's rows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    /// Runtime addresses `start..end` of the mapping.
    pub start: u64,
    pub end: u64,
    /// pc − `bias` is the offset the file's rows use.
    pub bias: u64,
    /// The file's rows: `first_row..first_row + rows` of the row array; `rows == 0` when the
    /// file has no usable `.eh_frame` (the walk steps by the frame pointer there).
    pub first_row: u32,
    pub rows: u32,
}

/// The executable mappings of one process, sorted by `start` (map value keyed by tgid).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcessMappings {
    pub count: u32,
    /// Changes with every list user space writes (never reused within a run): the kernel's
    /// per-CPU cache of the rows it found last holds a row only for the generation it was
    /// found in, so a process that maps something else at an address is never given a stale
    /// row.
    pub generation: u32,
    pub entries: [Mapping; MAX_MAPPINGS],
}

/// Indices of the unwinder's per-CPU counters (user space sums the CPUs).
pub mod counter {
    /// Stacks walked.
    pub const STACKS: u32 = 0;
    /// Frames stepped by the frame pointer for want of a row (code without CFI, JIT code,
    /// a process or mapping the tables do not know).
    pub const FRAMES_WITHOUT_CFI: u32 = 1;
    /// Stacks that stopped before their end: [`super::MAX_FRAMES`] reached, a rule the
    /// kernel cannot follow, an unreadable or non-advancing stack.
    pub const TRUNCATED_STACKS: u32 = 2;
    pub const COUNT: u32 = 3;
}

/// What the test-only program `oi-ebpf/src/bin/stack_check.rs` does at each hit (bits of its
/// `MODE` global): nothing but count (0), walk by frame pointers (`bpf_get_stack`), walk with
/// the CFI tables (`user_stack`), send the [`StackSample`].
pub mod check_mode {
    pub const FRAME_POINTERS: u32 = 1;
    pub const CFI: u32 = 2;
    pub const SEND: u32 = 4;
}

/// One hit of the test-only program: the same stack walked both ways.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StackSample {
    pub tgid: u32,
    pub tid: u32,
    /// Frames `user_stack` wrote.
    pub cfi_frames: u32,
    /// Frames `bpf_get_stack(BPF_F_USER_STACK)` wrote.
    pub fp_frames: u32,
    pub cfi: [u64; MAX_FRAMES],
    pub fp: [u64; MAX_FRAMES],
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: as below.
    unsafe impl aya::Pod for super::StackSample {}
    // SAFETY: #[repr(C)] structs of integers without implicit padding, so every bit pattern is
    // a valid value.
    unsafe impl aya::Pod for super::Row {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Mapping {}
    // SAFETY: as above (`_pad` makes the padding before `entries` explicit).
    unsafe impl aya::Pod for super::ProcessMappings {}
}
