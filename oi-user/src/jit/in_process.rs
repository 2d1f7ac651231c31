//! The in-process backend (OIL): the same walker as the target backend, compiled with
//! cranelift-jit into executable memory of *this* process, for a program that measures its
//! own objects.
//!
//! The IR is `codegen::generate`'s, function for function, so both backends walk a plan
//! with one body of code and write the same stream (`tests.rs` runs every differential test
//! on both). Only the last step differs: instead of `link`'s relocation-free blob for
//! another process, cranelift-jit (the crate's intended use: code for the current process)
//! places the functions in one contiguous reservation of this process
//! (`ArenaMemoryProvider`, so the PC-relative calls between them always reach), resolves
//! their calls, and maps them read-execute (never writable and executable at once). The
//! code is tuned for this CPU (`cranelift-native`), since it never leaves this process.
//!
//! Never runs the code: the caller gives it a stack and contains its faults (a walk reads
//! whatever the object's pointers say), as the `oil` crate does. Like the target backend,
//! the code calls nothing outside itself (a relocation to anything else fails the
//! compilation), so no symbol of this process is ever looked up.

use std::ops::Range;
use std::sync::Mutex;

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::ir::ExternalName;
use cranelift_codegen::isa::unwind::UnwindInst;
use cranelift_codegen::{Context, FinalizedRelocTarget};
use cranelift_jit::{ArenaMemoryProvider, JITBuilder, JITModule};
use cranelift_module::{Module, default_libcall_names};

use super::{JitError, WalkFrame, check_plan, codegen, link};
use crate::plan::{NodeId, Plan};

/// Address space reserved for one walker's code (only what is used is ever mapped
/// accessible). Walkers of the largest plans seen are a few MiB.
const CODE_RESERVATION: usize = 256 << 20;

/// What a walker writes.
#[derive(Clone, Copy)]
enum Output {
    Stream,
    /// The stream and the total.
    Sized,
    /// The total only.
    TotalOnly,
    /// The total only, without the visited-set table (`compile_totals_optimistic`).
    TotalOptimistic,
}

/// The optimistic walker's entry (`codegen::entry`): `(obj, bias, stack_len)` in, `(status,
/// total)` out in rax:rdx.
type OptimisticEntry = unsafe extern "sysv64" fn(u64, u64, u64) -> StatusTotal;

/// Two words returned in rax:rdx (System V: a 16-byte struct of two integers).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct StatusTotal {
    pub status: u64,
    pub total: u64,
}

/// A walker compiled into this process. The code stays mapped as long as this value lives.
pub struct LocalWalker {
    /// The entry function: `extern "sysv64" fn(*mut WalkFrame) -> u64`, or an
    /// [`OptimisticEntry`] when `optimistic`.
    entry: usize,
    optimistic: bool,
    /// The entry calls no function and saves no callee-saved register (`Self::leaf_entry`).
    leaf: bool,
    code: Range<usize>,
    /// The entry function's own code, within `code`.
    entry_code: Range<usize>,
    /// Owns the executable memory; only touched again to free it (`Drop`). A mutex makes
    /// the walker `Sync` without ever being locked while the code runs.
    module: Mutex<Option<JITModule>>,
}

impl std::fmt::Debug for LocalWalker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalWalker")
            .field(
                "code",
                &format_args!("{:#x}..{:#x}", self.code.start, self.code.end),
            )
            .finish()
    }
}

fn err(e: impl std::fmt::Display) -> JitError {
    JitError::Codegen(e.to_string())
}

impl LocalWalker {
    /// Compiles the walk of `roots` (plan nodes, in argument order) into this process.
    pub fn compile(plan: &Plan, roots: &[NodeId]) -> Result<Self, JitError> {
        Self::build(plan, roots, Output::Stream)
    }

    /// The same walker, which also adds up the roots' inclusive sizes as it walks and
    /// leaves them in `WalkFrame::total` (what `report::total_size` gives from the stream).
    pub fn compile_sized(plan: &Plan, roots: &[NodeId]) -> Result<Self, JitError> {
        Self::build(plan, roots, Output::Sized)
    }

    /// The walker of [`Self::compile_sized`] without the stream: the same loads, checks and
    /// `WalkFrame::total`, and nothing written to `out` (`out_used` stays 0), for a caller
    /// that wants the inclusive size only.
    pub fn compile_totals(plan: &Plan, roots: &[NodeId]) -> Result<Self, JitError> {
        Self::build(plan, roots, Output::TotalOnly)
    }

    /// The walker of [`Self::compile_totals`] that assumes every pointer it follows reaches
    /// an object not seen before in the walk (true of a valid object that shares nothing):
    /// no visited-set table, no `scratch`, `out` or `generation` read. It records what it
    /// assumed and checks it at the end: the same total as the exact walker, or
    /// [`super::STATUS_REVISIT`] (a shared or cyclic pointee, or more than a few dozen
    /// pointees), and then the caller runs the exact one. Not for plans that charge heap
    /// blocks, and for one root only (errors otherwise). Its entry takes its inputs in
    /// registers (see [`Self::entry_address`]); [`Self::call`] still takes a frame.
    pub fn compile_totals_optimistic(plan: &Plan, roots: &[NodeId]) -> Result<Self, JitError> {
        Self::build(plan, roots, Output::TotalOptimistic)
    }

    fn build(plan: &Plan, roots: &[NodeId], output: Output) -> Result<Self, JitError> {
        check_plan(plan, roots)?;
        let isa = cranelift_native::builder()
            .map_err(err)?
            .finish(link::flags(false)?)
            .map_err(err)?;
        let fc = isa.frontend_config();
        let funcs = match output {
            Output::Stream => codegen::generate(plan, roots, fc, false)?,
            Output::Sized => codegen::generate(plan, roots, fc, true)?,
            Output::TotalOnly => codegen::generate_totals(plan, roots, fc)?,
            Output::TotalOptimistic => codegen::generate_totals_optimistic(plan, roots, fc)?,
        };
        let count = funcs.len();
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        let arena = ArenaMemoryProvider::new_with_size(CODE_RESERVATION).map_err(err)?;
        builder.memory_provider(Box::new(arena));
        let mut module = JITModule::new(builder);
        // Function ids are the index of each function, as `codegen` names its callees.
        let mut ids = Vec::with_capacity(count);
        for (i, f) in funcs.iter().enumerate() {
            let id = module
                .declare_anonymous_function(&f.signature)
                .map_err(err)?;
            if id.as_u32() as usize != i {
                return Err(err(format!("function {i} was declared as {id}")));
            }
            ids.push(id);
        }
        let mut sizes = Vec::with_capacity(count);
        let mut leaf = false;
        let mut ctx = Context::new();
        for (i, (f, &id)) in funcs.into_iter().zip(&ids).enumerate() {
            // The prefetch is machine code of its own (Cranelift cannot emit the instruction).
            if i == codegen::FN_PREFETCH as usize {
                module
                    .define_function_bytes(id, 16, &codegen::PREFETCH_CODE, &[])
                    .map_err(|e| JitError::Codegen(format!("{e:?}")))?;
                sizes.push(codegen::PREFETCH_CODE.len());
                continue;
            }
            // Callee names, before defining borrows the context.
            let names = f.params.user_named_funcs().clone();
            ctx.func = f;
            module
                .define_function(id, &mut ctx)
                .map_err(|e| JitError::Codegen(format!("{e:?}")))?;
            let code = ctx
                .compiled_code()
                .ok_or_else(|| err("no code after compiling"))?;
            for r in code.buffer.relocs() {
                let own = match &r.target {
                    FinalizedRelocTarget::ExternalName(ExternalName::User(name)) => names
                        .get(*name)
                        .is_some_and(|n| n.namespace == 0 && (n.index as usize) < count),
                    FinalizedRelocTarget::Func(_) => true,
                    _ => false,
                };
                if !own || !matches!(r.kind, Reloc::X86CallPCRel4 | Reloc::X86PCRel4) {
                    return Err(JitError::Relocation(format!(
                        "{:?} to {:?} at +{:#x}",
                        r.kind, r.target, r.offset
                    )));
                }
            }
            if i == codegen::FN_ENTRY as usize {
                let calls = code
                    .buffer
                    .relocs()
                    .iter()
                    .any(|r| r.kind == Reloc::X86CallPCRel4);
                let saves = code
                    .buffer
                    .unwind_info
                    .iter()
                    .any(|(_, u)| matches!(u, UnwindInst::SaveReg { .. }));
                leaf = !calls && !saves;
            }
            sizes.push(code.code_info().total_size as usize);
            ctx.clear();
        }
        module.finalize_definitions().map_err(err)?;
        let starts: Vec<usize> = ids
            .iter()
            .map(|&id| module.get_finalized_function(id) as usize)
            .collect();
        let code = starts.iter().copied().min().unwrap_or(0)
            ..starts
                .iter()
                .zip(&sizes)
                .map(|(s, n)| s + n)
                .max()
                .unwrap_or(0);
        let entry = starts
            .get(codegen::FN_ENTRY as usize)
            .copied()
            .ok_or_else(|| err("no entry function"))?;
        let entry_code = entry..entry + sizes[codegen::FN_ENTRY as usize];
        Ok(Self {
            entry,
            optimistic: matches!(output, Output::TotalOptimistic),
            leaf,
            code,
            entry_code,
            module: Mutex::new(Some(module)),
        })
    }

    /// Where the walker's code lies: a fault with its instruction pointer in this range is
    /// the walk's (the code calls nothing outside it).
    pub fn code_range(&self) -> Range<usize> {
        self.code.clone()
    }

    /// Where the entry function's own code lies (within [`Self::code_range`]).
    pub fn entry_range(&self) -> Range<usize> {
        self.entry_code.clone()
    }

    /// The address of the entry function, for a caller that enters it through its own
    /// trampoline (the `oil` crate's fault recovery on the caller's stack):
    /// `extern "sysv64" fn(*mut WalkFrame) -> u64`, or for an optimistic walker
    /// `extern "sysv64" fn(obj, bias, stack_len) -> StatusTotal` (one root, seeded; the
    /// frame fields of those names; the total is 0 unless the status is `STATUS_DONE`).
    /// The same contract as [`Self::call`] applies, and the code lives only as long as
    /// `self`.
    pub fn entry_address(&self) -> usize {
        self.entry
    }

    /// Whether the entry is an optimistic walker's (inputs in registers, see
    /// [`Self::entry_address`]).
    pub fn is_optimistic(&self) -> bool {
        self.optimistic
    }

    /// Whether the entry is a leaf that keeps every callee-saved register: it calls no
    /// function and its prologue saves none of them (its code uses only caller-saved
    /// registers), and it keeps its frame pointer (`rbp`) from its prologue to its epilogue.
    /// Then a walk that faults can be made to return to its caller straight from the entry's
    /// frame (stack pointer `rbp + 16`, return address `[rbp + 8]`, the caller's `rbp` at
    /// `[rbp]`), with nothing else to restore: such an entry may be called directly, without
    /// a trampoline that saves registers (the `oil` crate's steady state). A leaf entry
    /// reads no `stack_len` (nothing in it recurses): it may be called with two arguments.
    pub fn leaf_entry(&self) -> bool {
        self.leaf
    }

    /// Runs the walk described by `frame` on the calling thread and stack; returns the status
    /// (also in `frame.status`). See the module doc of `jit` for the frame's contract.
    ///
    /// # Safety
    /// `frame.out[..out_len]` and `frame.scratch[..scratch_len]` must be writable memory that
    /// nothing else uses during the call, and at least `frame.stack_len` bytes (256 KiB if 0)
    /// of the current stack must be free below the caller. The walk reads the objects at
    /// `frame.args` with plain loads: a bad pointer in them faults (SIGSEGV/SIGBUS), which
    /// the caller must be ready to contain.
    pub unsafe fn call(&self, frame: &mut WalkFrame) -> u64 {
        if self.optimistic {
            // One seeded root, as the entry takes it; the frame says the rest.
            if frame.nargs != 1 || frame.unseeded & 1 != 0 {
                frame.status = super::STATUS_BAD_FRAME;
                return frame.status;
            }
            // SAFETY: the entry was generated with this signature (`codegen::entry`) and is
            // finalized; the caller upholds the contract above.
            let r = unsafe {
                std::mem::transmute::<usize, OptimisticEntry>(self.entry)(
                    frame.args[0],
                    frame.bias,
                    frame.stack_len,
                )
            };
            frame.status = r.status;
            frame.total = r.total;
            frame.out_used = 0;
            return r.status;
        }
        // SAFETY: the entry function was generated with this signature (System V, one
        // pointer argument, one u64 result) and is finalized; the caller upholds the
        // contract above; the code is alive while `self` is.
        unsafe {
            std::mem::transmute::<usize, unsafe extern "sysv64" fn(*mut WalkFrame) -> u64>(
                self.entry,
            )(frame)
        }
    }
}

impl Drop for LocalWalker {
    fn drop(&mut self) {
        let module = self
            .module
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(m) = module {
            // SAFETY: `&mut self`: nobody can be running this walker's code any more.
            unsafe { m.free_memory() };
        }
    }
}
