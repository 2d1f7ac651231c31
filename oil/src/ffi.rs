//! The C ABI under `include/oil.h`. Strings go out through an `append` callback of the
//! caller's (C++ appends them to a `std::string`), so no memory crosses the boundary with an
//! owner to agree on; a type handle is a pointer to a cache entry that lives as long as the
//! process.
//!
//! Every function catches panics (a bug here becomes an error message, never an unwinding
//! through C++ frames) and reports failures through the error callback with a one-line
//! message starting `oil: `.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

pub use crate::abi::OilSteady;
use crate::{Error, Format, Options, TypeWalker};

/// The opaque handle C++ holds: a [`TypeWalker`]'s compiled entry.
pub struct OilType {
    _private: [u8; 0],
}

/// `void append(void* ctx, const char* bytes, size_t len)`.
pub type AppendFn = unsafe extern "C" fn(ctx: *mut c_void, bytes: *const c_char, len: usize);

/// Report formats of [`oil_report`].
pub const OIL_JSON: c_int = 0;
pub const OIL_JSON_PRETTY: c_int = 1;
pub const OIL_TREE: c_int = 2;

fn send(append: Option<AppendFn>, ctx: *mut c_void, text: &str) {
    if let Some(f) = append {
        // SAFETY: the caller's callback and context, called as its signature says with bytes
        // that live for the call.
        unsafe { f(ctx, text.as_ptr().cast(), text.len()) }
    }
}

fn fail(append: Option<AppendFn>, ctx: *mut c_void, e: &Error) {
    send(append, ctx, &format!("oil: {e}"));
}

/// Runs `f`, turning a panic into an internal error.
fn guarded<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        Err(Error::Internal(what))
    })
}

/// C strings `ptrs[..n]` (none when null).
///
/// # Safety
/// `ptrs` points to `n` NUL-terminated strings, or is null.
unsafe fn strings(ptrs: *const *const c_char, n: usize) -> Result<Vec<String>, Error> {
    if ptrs.is_null() || n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the caller's promise.
    let ptrs = unsafe { std::slice::from_raw_parts(ptrs, n) };
    ptrs.iter()
        .map(|&p| {
            if p.is_null() {
                return Err(Error::Internal("a null feature name".into()));
            }
            // SAFETY: the caller's promise.
            Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        })
        .collect()
}

/// The walker of a type: `type_name` is `typeid(T).name()`, `type_size` its `sizeof` (0:
/// unknown), `hints[..nhints]` addresses in the modules that describe it (the caller's code,
/// the vtable, the `type_info` object), `features[..nfeatures]` OI feature names. Returns
/// null on failure, after sending the message to `error(error_ctx, …)`.
///
/// # Safety
/// `type_name` is a NUL-terminated string; `hints` points to `nhints` pointers (or is null);
/// `features` to `nfeatures` NUL-terminated strings (or is null); `error` is null or a
/// function with [`AppendFn`]'s signature.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oil_type_lookup(
    type_name: *const c_char,
    type_size: usize,
    hints: *const *const c_void,
    nhints: usize,
    features: *const *const c_char,
    nfeatures: usize,
    error: Option<AppendFn>,
    error_ctx: *mut c_void,
) -> *const OilType {
    let r = guarded(|| {
        if type_name.is_null() {
            return Err(Error::BadTypeName(String::new()));
        }
        // SAFETY: the caller's promise.
        let name = unsafe { CStr::from_ptr(type_name) }.to_string_lossy();
        let hints: Vec<usize> = if hints.is_null() {
            Vec::new()
        } else {
            // SAFETY: the caller's promise.
            unsafe { std::slice::from_raw_parts(hints, nhints) }
                .iter()
                .map(|&h| h as usize)
                .filter(|&h| h != 0)
                .collect()
        };
        // SAFETY: the caller's promise.
        let features = unsafe { strings(features, nfeatures) }?;
        let size = (type_size != 0).then_some(type_size as u64);
        crate::lookup(&name, size, &hints, &Options { features })
    });
    match r {
        Ok(w) => std::ptr::from_ref(w.compiled).cast(),
        Err(e) => {
            fail(error, error_ctx, &e);
            std::ptr::null()
        }
    }
}

/// # Safety
/// `ty` is null or a handle from [`oil_type_lookup`].
unsafe fn walker(ty: *const OilType) -> Result<TypeWalker, Error> {
    if ty.is_null() {
        return Err(Error::Internal("a null type handle".into()));
    }
    // SAFETY: handles are `&'static Compiled` cast by `oil_type_lookup`, never freed.
    let compiled = unsafe { &*ty.cast::<crate::resolve::Compiled>() };
    Ok(TypeWalker { compiled })
}

/// Stores the inclusive size of `object` in `*size`; 0 on success, -1 on failure (the
/// message goes to `error(error_ctx, …)`).
///
/// # Safety
/// `ty` is a handle from [`oil_type_lookup`], `object` points to an object of that type,
/// `size` is writable, `error` is null or an [`AppendFn`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oil_size(
    ty: *const OilType,
    object: *const c_void,
    size: *mut u64,
    error: Option<AppendFn>,
    error_ctx: *mut c_void,
) -> c_int {
    // SAFETY: the caller's promises, passed on.
    let r = guarded(|| unsafe { walker(ty)?.size(object) });
    match r {
        Ok(s) if !size.is_null() => {
            // SAFETY: the caller's promise.
            unsafe { size.write(s) };
            0
        }
        Ok(_) => 0,
        Err(e) => {
            fail(error, error_ctx, &e);
            -1
        }
    }
}

/// The steady state of `oil::size` when `oil.h` cannot call the walker itself (a walker
/// that is no leaf, a thread's first call, a handler check that is due): the optimistic
/// walker entered on the caller's stack
/// (`run::walk_steady`), its status and total passed back as the walker returns them (the
/// call into the walker is this function's last act, so it needs no frame of its own).
/// A status other than 0 (not compiled yet, no room on this stack, a fault, a corrupt
/// object, a shared pointee...) sends the caller to [`oil_size`], which also gives up the
/// optimistic walker for a type whose pointees are shared. `thread` is the calling thread's
/// own `oil_thread`, zeroed before its first use and used by no other thread. Touches no
/// thread-local of this library and panics nowhere (so it needs no `catch_unwind`).
///
/// # Safety
/// `ty` is null or a handle from [`oil_type_lookup`], `object` points to an object of that
/// type, `thread` is null or as said above.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oil_size_steady(
    ty: *const OilType,
    object: *const c_void,
    thread: *mut crate::guard::ThreadState,
) -> OilSteady {
    if ty.is_null() || thread.is_null() {
        return crate::abi::NOT_MEASURED;
    }
    // SAFETY: handles are `&'static Compiled` cast by `oil_type_lookup`, never freed; the
    // thread state is the caller's, for this thread only.
    let (c, st) = unsafe { (&*ty.cast::<crate::resolve::Compiled>(), &mut *thread) };
    crate::run::walk_steady(c, object as usize, st)
}

/// Sends the report of `object` in `format` ([`OIL_JSON`], [`OIL_JSON_PRETTY`],
/// [`OIL_TREE`]) to `append(out_ctx, …)`; 0 on success, -1 on failure (the message goes to
/// `append(error_ctx, …)`).
///
/// # Safety
/// As [`oil_size`]; `append` is an [`AppendFn`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oil_report(
    ty: *const OilType,
    object: *const c_void,
    format: c_int,
    append: Option<AppendFn>,
    out_ctx: *mut c_void,
    error_ctx: *mut c_void,
) -> c_int {
    let r = guarded(|| {
        let format = match format {
            OIL_JSON => Format::Json,
            OIL_JSON_PRETTY => Format::JsonPretty,
            OIL_TREE => Format::Tree,
            other => return Err(Error::Internal(format!("unknown report format {other}"))),
        };
        // SAFETY: the caller's promises, passed on.
        unsafe { walker(ty)?.report(object, format) }
    });
    match r {
        Ok(text) => {
            send(append, out_ctx, &text);
            0
        }
        Err(e) => {
            fail(append, error_ctx, &e);
            -1
        }
    }
}

/// How many walkers this process has built (for tests: concurrent first calls build once).
#[unsafe(no_mangle)]
pub extern "C" fn oil_compilations() -> u64 {
    crate::compilations()
}

// `oil_thread` in oil.h is three words.
const _: () = assert!(std::mem::size_of::<crate::guard::ThreadState>() == 24);

// `oil_type_head` in oil.h: three words at the start of every handle.
const _: () = {
    use std::mem::offset_of;

    use crate::abi::SteadyHead;
    use crate::resolve::Compiled;
    assert!(offset_of!(Compiled, head) == 0);
    assert!(offset_of!(SteadyHead, leaf_entry) == 0);
    assert!(offset_of!(SteadyHead, bias) == 8);
    assert!(offset_of!(SteadyHead, handlers_changed) == 16);
};
