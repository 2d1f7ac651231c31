//! OIL: a program measures its own objects, with the numbers oi-trace gives.
//!
//! C++ programs `#include <oil.h>` (in `oil/include`) and link `liboil.so`:
//! `oil::json(obj)`, `oil::tree(obj)` and `oil::size(obj)` give the report oi-trace prints
//! for that object as a probed function's `arg0`, byte for byte, and its inclusive size.
//! Rust programs that hold C++ objects over FFI use [`lookup`] and [`TypeWalker`], or
//! [`json`], [`tree`] and [`size`] (this crate's rlib).
//!
//! The work is oi-trace's core, once: the type's name (`typeid(T).name()`) → its definition
//! in the DWARF of the module that uses it (`resolve`, through `debuginfo`) → `typegraph` →
//! `plan` → a walker compiled into this process with cranelift-jit (`jit::in_process`, the
//! same IR as the walker oi-trace injects) → run on the calling thread (`run`, with faults
//! contained by `guard`) → decoded by `report`. The plan of each (type, module, features) is
//! built once per process (`cache`), and with it the walkers, each compiled at its first use:
//! one that writes the stream for `json`/`tree` (then decoded), and two that only add up the
//! size for `size` (no stream, no decoding): an optimistic one without the visited set, which
//! says when an object shares a pointee, and the exact one for those. In the steady state
//! `size` is one call from `oil.h` (`ffi::oil_size_steady`, with a per-thread state the
//! header keeps) into the optimistic walker on the caller's own stack (`guard`): no system
//! call, no allocation, no thread-local of this library.
//!
//! A corrupt object never kills the program: the native walk runs where a fault is caught,
//! and then the interpreter, reading through `process_vm_readv` on our own pid, says which
//! read failed (see `guard` for why this and not a pre-check against `/proc/self/maps`).
//! Every failure is an [`Error`] with a one-line message; nothing here panics across the C
//! boundary (`ffi`).

pub mod ffi;

mod abi;
mod cache;
mod guard;
mod modules;
mod resolve;
mod run;

use std::ffi::c_void;

/// OI feature names, as oi-trace's `--feature`: `chase-raw-pointers`, `capture-keys`,
/// `polymorphic-inheritance`; and `sizes-oi` for OI's sizes instead of the real ones
/// (oi-trace's `--sizes oi`).
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub features: Vec<String>,
}

/// The report formats (oi-trace's `--format json`, `--format json --pretty`, `--format tree`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    JsonPretty,
    Tree,
}

/// Why a measurement failed, in one line.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("`{0}` is not a C++ type name (expected typeid(T).name() or a qualified name)")]
    BadTypeName(String),
    #[error("cannot find the type `{ty}`: {reason}{}", others_note(*others))]
    NotFound {
        ty: String,
        reason: String,
        /// Other modules looked into, in vain.
        others: usize,
    },
    #[error(
        "`{ty}` has {dwarf} bytes in the debug information of {module} but {size} in this \
         program (built from other sources?)"
    )]
    SizeMismatch {
        ty: String,
        module: String,
        dwarf: String,
        size: u64,
    },
    #[error("{0}")]
    Build(String),
    #[error("walking `{ty}` at {addr:#x} failed: {reason}")]
    Walk {
        ty: String,
        addr: u64,
        reason: String,
    },
    #[error("the object's address is null")]
    Null,
    #[error("oil was called again on this thread during a measurement (from a signal handler?)")]
    Reentrant,
    #[error("internal error: {0}")]
    Internal(String),
}

fn others_note(others: usize) -> String {
    match others {
        0 => String::new(),
        1 => " (nor in the 1 other loaded module)".into(),
        n => format!(" (nor in the {n} other loaded modules)"),
    }
}

/// The compiled walker of one type (with one set of features), kept for the life of the
/// process.
pub struct TypeWalker {
    compiled: &'static resolve::Compiled,
}

impl TypeWalker {
    /// The type's C++ name (as the demangler spells it).
    pub fn name(&self) -> &str {
        &self.compiled.name
    }

    /// The inclusive size of the object at `obj` (the report's root `size`).
    ///
    /// # Safety
    /// `obj` must point to an object of this type that no other thread modifies during the
    /// call (a concurrent change can give an inconsistent report; a dangling pointer inside
    /// the object gives an [`Error::Walk`], never a crash).
    pub unsafe fn size(&self, obj: *const c_void) -> Result<u64, Error> {
        run::size(self.compiled, obj as usize)
    }

    /// The report of the object at `obj`, as oi-trace prints it for a probed `arg0`.
    ///
    /// # Safety
    /// As [`Self::size`].
    pub unsafe fn report(&self, obj: *const c_void, format: Format) -> Result<String, Error> {
        match run::measure(self.compiled, obj as usize, Some(format))? {
            run::Output::Text(t) => Ok(t),
            run::Output::Size(_) => Err(Error::Internal("a size instead of a report".into())),
        }
    }
}

/// The walker of `type_name` (what `typeid(T).name()` returns, or a C++ name such as
/// `app::State`), built at the first call for it and kept.
///
/// `size`: the program's `sizeof`, checked against the DWARF. `hints`: addresses inside the
/// module(s) whose debug information describes the type (the caller's code, the object's
/// vtable, the `type_info` object); the module of the first one is part of the cache key.
/// Without hints every loaded module is searched, the executable first.
pub fn lookup(
    type_name: &str,
    size: Option<u64>,
    hints: &[usize],
    opts: &Options,
) -> Result<TypeWalker, Error> {
    let mut features = opts.features.clone();
    // Real sizes unless the caller asks for OI's rules (`sizes-oi`), as oi-trace's `--sizes`.
    use oi_trace::footprint::measure::{SIZES_OI, SIZES_REAL};
    if !features.iter().any(|f| f == SIZES_OI || f == SIZES_REAL) {
        features.push(SIZES_REAL.to_string());
    }
    features.sort();
    features.dedup();
    // An unknown feature is an error before any file is read.
    oi_trace::footprint::measure::options_for(&features)
        .map_err(|e| Error::Build(e.to_string()))?;
    let module = hints
        .first()
        .and_then(|&h| modules::by_addresses(&[h], false).pop())
        .map(|m| m.path);
    let key = cache::Key {
        type_name: type_name.to_string(),
        size,
        module,
        features: features.clone(),
    };
    let compiled = cache::get_or_build(key, || {
        run::on_walk_stack(|| {
            let name = resolve::cxx_name(type_name)?;
            resolve::compile(&name, size, hints, &features)
        })
    })?;
    Ok(TypeWalker { compiled })
}

/// How many walkers this process has built (found, planned and compiled; failures count):
/// concurrent first calls for one type build once.
pub fn compilations() -> u64 {
    cache::builds()
}

/// The JSON report (oi-trace's `--format json`) of the C++ object at `obj` of type
/// `type_name` (see [`lookup`]).
///
/// # Safety
/// As [`TypeWalker::size`].
pub unsafe fn json(obj: *const c_void, type_name: &str, opts: &Options) -> Result<String, Error> {
    // SAFETY: the caller's promise, passed on.
    unsafe { lookup(type_name, None, &[], opts)?.report(obj, Format::Json) }
}

/// The tree report (oi-trace's `--format tree`); see [`json`].
///
/// # Safety
/// As [`TypeWalker::size`].
pub unsafe fn tree(obj: *const c_void, type_name: &str, opts: &Options) -> Result<String, Error> {
    // SAFETY: the caller's promise, passed on.
    unsafe { lookup(type_name, None, &[], opts)?.report(obj, Format::Tree) }
}

/// The inclusive size of the object; see [`json`].
///
/// # Safety
/// As [`TypeWalker::size`].
pub unsafe fn size(obj: *const c_void, type_name: &str, opts: &Options) -> Result<u64, Error> {
    // SAFETY: the caller's promise, passed on.
    unsafe { lookup(type_name, None, &[], opts)?.size(obj) }
}
