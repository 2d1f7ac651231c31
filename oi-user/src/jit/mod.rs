//! The JIT backend: compiles a walk [`Plan`] into position-independent x86-64 machine code
//! that runs *inside* the target, on the frozen thread, and writes the same data stream as
//! the interpreter (`interp`) into a buffer of the data segment.
//!
//! Never touches a process itself: [`compile`] is pure (plan in, bytes out); mapping and
//! running the bytes is `inferior`'s job. [`cache::WalkerCache`] keeps compiled walkers in
//! memory and under `~/.cache/oi-trace/jit`, keyed by the plan's content.
//!
//! The generated code makes no calls outside itself and no syscalls, and carries no
//! relocations: calls between its own functions are PC-relative and patched here, once,
//! when the functions are laid out (any other relocation fails the compilation); constants
//! are read RIP-relative from inside the code. It only needs to be mapped readable and
//! executable, at any address.
//!
//! Pipeline: `codegen` (plan → Cranelift IR, one function per node that needs its own
//! frame, mirroring `interp::walk` check for check) → `link` (IR → machine code, layout,
//! call patching).
//!
//! ## Calling the walker
//! `extern "sysv64" fn walk(frame: *mut WalkFrame) -> u64` at `code + entry`, entered as by a
//! `call` (rsp ≡ 8 mod 16 at its first instruction, a return address on top) on a private
//! stack of `frame.stack_len` bytes (at least 256 KiB; see [`RECOMMENDED_STACK`]). It returns
//! the status it also stores in `frame.status` ([`STATUS_DONE`] …) and preserves the
//! callee-saved registers of the System V ABI. `frame` and `scratch` must be 8-byte
//! aligned. It reads target memory with plain loads: a bad pointer faults (SIGSEGV/SIGBUS),
//! which the tracer contains; it writes only to `frame`, `out[..out_len]`, `scratch` and its
//! own stack.
//!
//! ## Output layout (`frame.out`, `frame.out_used` bytes)
//! For each root, in order: one little-endian `u64` byte count `n`, then the `n` stream
//! bytes of that root, exactly the bytes `interp::run` returns (LEB128 words, whose meaning
//! is documented in `plan`). [`split_streams`] splits it back into per-root streams for `report::decode`.
//!
//! ## A buffer too small
//! The walk never writes past `out + out_len`; when the output does not fit it goes on to the
//! end only counting, and returns [`STATUS_FULL`] with `out_used` = the bytes it needs. The
//! tracer grows the buffer to that size and runs the walk again (the target is still
//! frozen, so the second walk sees the same memory).
//!
//! ## Bounds (kept identical to the interpreter's, or the streams would differ)
//! Element counts ≤ `interp::walk::MAX_ELEMENTS`, 1 GiB per array read, 129-deep red-black
//! descent, nesting ≤ [`MAX_DEPTH`] (the interpreter's limit), captured keys ≤ 1 MiB, deque map
//! checks, and the visited set of docs/semantics.md, "Pointers, sharing and cycles": one per root,
//! seeded with the root's address unless its bit in `frame.unseeded` is set, 131,072 addresses at
//! most. The set lives in `frame.scratch` (≥ [`SCRATCH_BYTES`]) as an open-addressing table whose
//! slots carry a generation tag: each root takes the next generation, so a fresh sample costs
//! nothing to reset (start from zeroed memory and keep `frame.generation` between calls).
//! OIL's optimistic count-only walker (`in_process::LocalWalker::compile_totals_optimistic`)
//! has no table: it assumes every insertion succeeds, records the keys (32 at most) in its
//! own frame and compares them at the end, returning [`STATUS_REVISIT`] when one repeats or
//! they do not fit; its total is then the exact walker's to give. It walks one root, and
//! its entry takes no frame: `extern "sysv64" fn(obj, bias, stack_len) -> (status, total)`,
//! the pair in rax:rdx (`LocalWalker::entry_address`; `LocalWalker::call` still takes a
//! frame and fills in `status` and `total`).

pub mod cache;
mod codegen;
pub mod frame_chain;
pub mod in_process;
mod link;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;

use crate::plan::{NodeId, Plan};

/// Offset of the walk function inside `code` and the bytes themselves.
#[derive(Debug, Clone)]
pub struct CompiledWalker {
    pub code: Vec<u8>,
    /// Offset of the walk function in `code`.
    pub entry: u64,
}

/// The walker's only argument; lives in the data segment, filled by the tracer.
///
/// The first 24 words (through `args`) are the buffers, the visited-set generation and the
/// roots; the fields after `args` carry what the interpreter also gets per walk (seeding,
/// load bias) and what error reports need.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct WalkFrame {
    /// out: [`STATUS_DONE`], [`STATUS_FULL`] (grow `out` to `out_used` and run again),
    /// [`STATUS_CORRUPT`], [`STATUS_STACK`], [`STATUS_BAD_FRAME`].
    pub status: u64,
    /// out: bytes written to `out`; with [`STATUS_FULL`], the bytes the output needs.
    pub out_used: u64,
    /// Output buffer; never written past `out + out_len`.
    pub out: u64,
    pub out_len: u64,
    /// Memory for the visited-address sets, at least [`SCRATCH_BYTES`], zeroed once.
    pub scratch: u64,
    pub scratch_len: u64,
    /// in/out: last generation tag used in `scratch` (start at 0, keep it between calls).
    pub generation: u64,
    /// Number of roots; must equal the number `compile` was given.
    pub nargs: u64,
    /// Address of each root object (objects that came in registers copied by the caller).
    pub args: [u64; 16],
    /// in: bit i set: root i is a copy of register contents, do not seed the visited set
    /// with its address (the interpreter's `seed = false`).
    pub unseeded: u64,
    /// in: load bias of the probed binary (runtime − ELF addresses), for
    /// polymorphic-inheritance's vtable ranges.
    pub bias: u64,
    /// in: bytes of stack the walker may use below its entry stack pointer (0: 256 KiB).
    pub stack_len: u64,
    /// out, with [`STATUS_CORRUPT`]: which root, an [`ErrorCode`] and the object's address.
    /// `err_root` is also written as each root's walk begins, so after a fault it names the
    /// root being walked.
    pub err_root: u64,
    pub err_code: u64,
    pub err_addr: u64,
    /// out, with [`STATUS_DONE`]: the inclusive sizes of the roots, added up, when the walker
    /// was compiled with sizes (`in_process::LocalWalker::compile_sized`); else 0.
    pub total: u64,
    /// in: entries of `heaps` in use (at most [`crate::interp::heap::MAX_HEAPS`]).
    pub heaps_len: u64,
    /// in: address ranges `[start, end)` that may hold glibc heap chunks, for
    /// chase-raw-pointers' heap blocks (`interp::heap`); the interpreter reads the same
    /// ranges from the process's maps.
    pub heaps: [[u64; 2]; crate::interp::heap::MAX_HEAPS],
}

impl WalkFrame {
    /// Fills `heaps` with the first [`crate::interp::heap::MAX_HEAPS`] of `ranges`.
    pub fn set_heaps(&mut self, ranges: &[(u64, u64)]) {
        let n = ranges.len().min(self.heaps.len());
        for (slot, r) in self.heaps.iter_mut().zip(&ranges[..n]) {
            *slot = [r.0, r.1];
        }
        self.heaps_len = n as u64;
    }

    /// [`Self::set_heaps`] with process `pid`'s ranges, when `plan` charges heap blocks.
    pub fn set_heaps_of(&mut self, plan: &Plan, pid: i32) {
        if plan.charges_heap_blocks() {
            self.set_heaps(&crate::interp::heap::ranges_of(pid));
        }
    }
}

/// The walk finished; `out_used` bytes of output.
pub const STATUS_DONE: u64 = 0;
/// The output buffer is too small: `out_used` is the size it needs (the walk went on to the
/// end counting, writing nothing past `out_len`). Grow it and run the walk again.
pub const STATUS_FULL: u64 = 1;
/// A corrupt object (the interpreter's `WalkError::Corrupt`): see `err_*`.
pub const STATUS_CORRUPT: u64 = 2;
/// The walk nested deeper than `stack_len` allows (give it a bigger stack).
pub const STATUS_STACK: u64 = 3;
/// `nargs` or `scratch_len` do not match what the code was compiled for.
pub const STATUS_BAD_FRAME: u64 = 4;
/// An optimistic walker (`in_process::LocalWalker::compile_totals_optimistic`) met a pointee
/// twice, or more pointees than it records: run the exact walker (with the visited set).
pub const STATUS_REVISIT: u64 = 5;

/// Scratch memory the visited sets need (2^18 slots of address + generation).
pub const SCRATCH_BYTES: u64 = VISITED_SLOTS * 16;
/// Slots of the visited-set table: twice the capacity keeps linear probing short.
pub(crate) const VISITED_SLOTS: u64 = 1 << 18;
/// Stack used when `frame.stack_len` is 0.
pub const DEFAULT_STACK: u64 = 256 << 10;
/// Stack that lets the walker reach [`MAX_DEPTH`] like the interpreter in every shape. A
/// pointer that is the last thing its object walks (a linked list's `next`) is a tail call
/// and costs no stack, so plain chains fit the default; other recursion (a pointer before
/// more members, a recursive container) takes ~80 bytes a level, ~1.1 KiB when the level
/// walks a red-black tree. Map it lazily (`MAP_NORESERVE`): only the depth used is touched.
pub const RECOMMENDED_STACK: u64 = 64 << 20;
/// Deepest nesting walked: the interpreter's limit.
pub const MAX_DEPTH: u64 = crate::interp::walk::MAX_DEPTH as u64;
/// Most roots one walker takes (`WalkFrame::args`).
pub const MAX_ROOTS: usize = 16;

/// Why a walk stopped with [`STATUS_CORRUPT`]; the texts are the interpreter's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum ErrorCode {
    FieldOutside = 1,
    MemberOutside = 2,
    ElementCount = 3,
    ReadSize = 4,
    Vector = 5,
    VectorBool = 6,
    Deque = 7,
    DequeMap = 8,
    DequeBlock = 9,
    ListShort = 10,
    HashShort = 11,
    RbDeep = 12,
    RbLarge = 13,
    TooDeep = 14,
    String = 15,
    Optional = 16,
    Variant = 17,
    Key = 18,
    Described = 19,
    SwissCount = 20,
    ChainCount = 21,
    BtreeShape = 22,
}

impl ErrorCode {
    pub fn from_u64(v: u64) -> Option<Self> {
        use ErrorCode::*;
        Some(match v {
            1 => FieldOutside,
            2 => MemberOutside,
            3 => ElementCount,
            4 => ReadSize,
            5 => Vector,
            6 => VectorBool,
            7 => Deque,
            8 => DequeMap,
            9 => DequeBlock,
            10 => ListShort,
            11 => HashShort,
            12 => RbDeep,
            13 => RbLarge,
            14 => TooDeep,
            15 => String,
            16 => Optional,
            17 => Variant,
            18 => Key,
            19 => Described,
            20 => SwissCount,
            21 => ChainCount,
            22 => BtreeShape,
            _ => return None,
        })
    }

    pub fn describe(self) -> String {
        use ErrorCode::*;
        match self {
            FieldOutside => "field outside its object".into(),
            MemberOutside => "member outside its object".into(),
            ElementCount => "implausible element count".into(),
            ReadSize => "implausible size".into(),
            Vector => "vector pointers out of order".into(),
            VectorBool => "vector<bool> pointers out of order".into(),
            Deque => "deque iterators out of order".into(),
            DequeMap => "deque map smaller than its blocks".into(),
            DequeBlock => "deque block out of order".into(),
            ListShort => "list shorter than its size".into(),
            HashShort => "hash table shorter than its size".into(),
            RbDeep => "red-black tree too deep".into(),
            RbLarge => "tree larger than its node count".into(),
            TooDeep => format!("nested deeper than {MAX_DEPTH} levels"),
            String => "string".into(),
            Optional => "optional".into(),
            Variant => "variant".into(),
            Key => "key".into(),
            Described => "implausible heap bytes".into(),
            SwissCount => crate::interp::walk::SWISS_COUNT.into(),
            ChainCount => crate::interp::walk::CHAIN_COUNT.into(),
            BtreeShape => crate::interp::walk::BTREE_SHAPE.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JitError {
    #[error("the walker takes at most {MAX_ROOTS} arguments, {0} requested")]
    TooManyRoots(usize),
    #[error("no plan node {0}")]
    NoSuchNode(NodeId),
    #[error("cannot compile the walk of `{node}`: {what}")]
    Unsupported { node: String, what: String },
    #[error("code generation failed: {0}")]
    Codegen(String),
    #[error(
        "the generated code needs a relocation ({0}); refusing code that is not position-independent"
    )]
    Relocation(String),
    #[error("walker output is malformed: {0}")]
    BadOutput(String),
    #[error("walk of root {root} found a corrupt object at {addr:#x}: {what}")]
    Corrupt { root: u64, addr: u64, what: String },
    #[error("the walker ran out of its {0}-byte stack (nesting too deep)")]
    Stack(u64),
    #[error("the walk frame does not match the compiled walker (nargs or scratch size)")]
    BadFrame,
    #[error("the output buffer is too small: {0} bytes needed")]
    Full(u64),
    #[error("the optimistic walk met a pointee twice (run the exact walker)")]
    Revisit,
}

/// Compiles the walk of `roots` (plan nodes of the measured arguments, in argument order).
pub fn compile(plan: &Plan, roots: &[NodeId]) -> Result<CompiledWalker, JitError> {
    check_plan(plan, roots)?;
    let isa = link::isa()?;
    let funcs = codegen::generate(plan, roots, isa.frontend_config(), false)?;
    link::link(&isa, funcs)
}

/// The target backend's walker compiled with sizes (as OIL's), for tests that compare it
/// with the decoder on garbage memory in a child process.
#[cfg(test)]
fn compile_sized(plan: &Plan, roots: &[NodeId]) -> Result<CompiledWalker, JitError> {
    check_plan(plan, roots)?;
    let isa = link::isa()?;
    let funcs = codegen::generate(plan, roots, isa.frontend_config(), true)?;
    link::link(&isa, funcs)
}

/// What code generation requires of (plan, roots), for either backend.
fn check_plan(plan: &Plan, roots: &[NodeId]) -> Result<(), JitError> {
    if roots.len() > MAX_ROOTS {
        return Err(JitError::TooManyRoots(roots.len()));
    }
    if let Some(&bad) = roots.iter().find(|&&r| r >= plan.nodes.len()) {
        return Err(JitError::NoSuchNode(bad));
    }
    check_references(plan)
}

/// Every node a plan node refers to exists (code generation indexes them freely).
fn check_references(plan: &Plan) -> Result<(), JitError> {
    let n = plan.nodes.len();
    for node in &plan.nodes {
        let refs = node.op.children();
        if let Some(&bad) = refs.iter().find(|&&r| r >= n) {
            return Err(JitError::NoSuchNode(bad));
        }
    }
    Ok(())
}

/// The outcome of a finished walk as a `Result`: `Ok(())` for [`STATUS_DONE`].
pub fn check_status(frame: &WalkFrame) -> Result<(), JitError> {
    match frame.status {
        STATUS_DONE => Ok(()),
        STATUS_FULL => Err(JitError::Full(frame.out_used)),
        STATUS_CORRUPT => Err(JitError::Corrupt {
            root: frame.err_root,
            addr: frame.err_addr,
            what: ErrorCode::from_u64(frame.err_code)
                .map(ErrorCode::describe)
                .unwrap_or_else(|| format!("error code {}", frame.err_code)),
        }),
        STATUS_REVISIT => Err(JitError::Revisit),
        STATUS_STACK => Err(JitError::Stack(if frame.stack_len == 0 {
            DEFAULT_STACK
        } else {
            frame.stack_len
        })),
        _ => Err(JitError::BadFrame),
    }
}

/// Splits the walker's output (`out[..out_used]`) into one stream per root, in the form
/// `report::decode` takes (`Measurer::walk_arg_streams` gives the same bytes).
pub fn split_streams(bytes: &[u8], nroots: usize) -> Result<Vec<Vec<u8>>, JitError> {
    let mut rest = bytes;
    let mut out = Vec::with_capacity(nroots);
    for root in 0..nroots {
        let (count, after) = rest
            .split_first_chunk::<8>()
            .ok_or_else(|| JitError::BadOutput(format!("no byte count for root {root}")))?;
        let n = usize::try_from(u64::from_le_bytes(*count))
            .ok()
            .filter(|&n| n <= after.len())
            .ok_or_else(|| {
                JitError::BadOutput(format!(
                    "root {root} claims {} bytes, {} left",
                    u64::from_le_bytes(*count),
                    after.len()
                ))
            })?;
        let (stream, tail) = after.split_at(n);
        out.push(stream.to_vec());
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(JitError::BadOutput("bytes after the last root".into()));
    }
    Ok(out)
}
