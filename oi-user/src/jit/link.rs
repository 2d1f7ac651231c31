//! Cranelift IR functions → one blob of position-independent x86-64 code.
//!
//! Each function is compiled with `is_pic` and laid out 16-byte aligned, the entry first;
//! the prefetch function (`codegen::FN_PREFETCH`) is four bytes of machine code instead.
//! The only relocations accepted are PC-relative calls between these functions
//! (`X86CallPCRel4` / `X86PCRel4` to a function of this blob): their displacement depends
//! only on the layout, so they are resolved here and the blob runs at any address. Any other
//! relocation (an absolute address, a libcall, a GOT entry) fails the compilation.

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{ExternalName, Function};
use cranelift_codegen::isa::{self, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{Context, FinalizedRelocTarget};

use super::codegen::{FN_ENTRY, FN_PREFETCH, PREFETCH_CODE};
use super::{CompiledWalker, JitError};

pub(super) fn isa() -> Result<OwnedTargetIsa, JitError> {
    let err = |e: &dyn std::fmt::Display| JitError::Codegen(e.to_string());
    // Baseline x86-64 only: the code runs in another process, maybe on another CPU model.
    isa::lookup_by_name("x86_64-unknown-linux-gnu")
        .map_err(|e| err(&e))?
        .finish(flags(true)?)
        .map_err(|e| err(&e))
}

/// The code generation settings of every walker; `is_pic` for code that runs in another
/// process (cranelift-jit, for code of this process, requires it off).
pub(super) fn flags(is_pic: bool) -> Result<settings::Flags, JitError> {
    let err = |e: &dyn std::fmt::Display| JitError::Codegen(e.to_string());
    let mut flags = settings::builder();
    for (k, v) in [
        ("is_pic", if is_pic { "true" } else { "false" }),
        ("opt_level", "speed"),
        // An outline probestack would be a call to a libcall; frames are small anyway.
        ("enable_probestack", "false"),
        ("enable_verifier", "true"),
        ("preserve_frame_pointers", "true"),
    ] {
        flags.set(k, v).map_err(|e| err(&e))?;
    }
    Ok(settings::Flags::new(flags))
}

/// A compiled function: its bytes and its calls to other functions of the blob
/// (offset in the bytes, kind, callee id, addend).
struct Compiled {
    bytes: Vec<u8>,
    calls: Vec<(u32, Reloc, u32, i64)>,
}

fn compile_one(isa: &OwnedTargetIsa, func: Function) -> Result<Compiled, JitError> {
    // Names of the callees, taken before compiling borrows the context.
    let names = func.params.user_named_funcs().clone();
    let mut ctx = Context::for_function(func);
    let code = ctx
        .compile(isa.as_ref(), &mut ControlPlane::default())
        .map_err(|e| JitError::Codegen(format!("{:?}", e.inner)))?;
    let bytes = code.code_buffer().to_vec();
    let mut calls = Vec::new();
    for r in code.buffer.relocs() {
        let callee = match &r.target {
            FinalizedRelocTarget::ExternalName(ExternalName::User(name)) => names
                .get(*name)
                .filter(|n| n.namespace == 0)
                .map(|n| n.index),
            _ => None,
        };
        match (r.kind, callee) {
            (Reloc::X86CallPCRel4 | Reloc::X86PCRel4, Some(callee)) => {
                calls.push((r.offset, r.kind, callee, r.addend))
            }
            _ => {
                return Err(JitError::Relocation(format!(
                    "{:?} to {:?} at +{:#x}",
                    r.kind, r.target, r.offset
                )));
            }
        }
    }
    Ok(Compiled { bytes, calls })
}

/// Compiles `funcs` (indexed by function id) and lays them out; resolves their mutual calls.
pub(super) fn link(isa: &OwnedTargetIsa, funcs: Vec<Function>) -> Result<CompiledWalker, JitError> {
    let mut compiled = Vec::with_capacity(funcs.len());
    for (i, f) in funcs.into_iter().enumerate() {
        // The prefetch is machine code of its own (Cranelift cannot emit the instruction).
        compiled.push(if i == FN_PREFETCH as usize {
            Compiled {
                bytes: PREFETCH_CODE.to_vec(),
                calls: Vec::new(),
            }
        } else {
            compile_one(isa, f)?
        });
    }
    let mut code = Vec::new();
    let mut starts = Vec::with_capacity(compiled.len());
    for c in &compiled {
        while code.len() % 16 != 0 {
            code.push(0xcc); // int3 between functions
        }
        starts.push(code.len() as u64);
        code.extend_from_slice(&c.bytes);
    }
    for (c, &start) in compiled.iter().zip(&starts) {
        for &(offset, kind, callee, addend) in &c.calls {
            let target = *starts.get(callee as usize).ok_or_else(|| {
                JitError::Relocation(format!("call to unknown function {callee}"))
            })?;
            let at = start + u64::from(offset);
            // S + A - P, in 32 bits.
            let disp = (target as i64).wrapping_add(addend).wrapping_sub(at as i64);
            let disp = i32::try_from(disp).map_err(|_| {
                JitError::Relocation(format!("{kind:?} displacement {disp} out of range"))
            })?;
            let at = at as usize;
            let slot = code
                .get_mut(at..at + 4)
                .ok_or_else(|| JitError::Relocation(format!("{kind:?} outside the code")))?;
            slot.copy_from_slice(&disp.to_le_bytes());
        }
    }
    Ok(CompiledWalker {
        entry: starts.get(FN_ENTRY as usize).copied().unwrap_or(0),
        code,
    })
}
