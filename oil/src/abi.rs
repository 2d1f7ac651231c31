//! OIL's binary interface with `oil.h`, in one place: what the steady state returns
//! (`OilSteady`), the head of a type's handle the header reads (`SteadyHead`), and the entry a
//! type without a direct walker has (`oil_not_direct`). Layouts only: no logic, and nothing
//! here may change without `oil/include/oil.h` changing with it.

use std::sync::atomic::{AtomicBool, AtomicUsize};

/// What [`oil_size_steady`](crate::ffi::oil_size_steady) returns (in rax:rdx): the walker's
/// status and, when it is 0 (`STATUS_DONE`), the inclusive size; any other status means "call
/// [`oil_size`](crate::ffi::oil_size)", which takes the general path (and gives the same
/// number).
#[repr(C)]
pub struct OilSteady {
    pub status: u64,
    pub size: u64,
}

/// What `run::walk_steady` returns when it did not walk: a status no walker returns.
pub const NOT_MEASURED: OilSteady = OilSteady {
    status: u64::MAX,
    size: 0,
};

/// `oil_type_head::leaf_entry` of a type with no walker that `oil.h` may call directly (not
/// compiled yet, not a leaf, given up): called like one, it returns [`NOT_MEASURED`], so
/// that the header needs no test of its own for it and goes to `oil_size_steady`.
#[unsafe(no_mangle)]
pub extern "sysv64" fn oil_not_direct(_object: u64, _bias: u64) -> OilSteady {
    NOT_MEASURED
}

/// What `oil.h`'s steady state reads of a type, at the start of its handle (an `oil_type*`
/// is a `&'static Compiled`): the layout is part of the interface (`oil_type_head` there).
#[repr(C)]
pub struct SteadyHead {
    /// The optimistic walker's entry when it is a leaf that may be called directly
    /// (`LocalWalker::leaf_entry`, registered with `guard::register_leaf_entry`), otherwise
    /// and once given up (as `Compiled::steady_entry`) [`oil_not_direct`], which returns a
    /// status that sends `oil.h` to its slow path.
    pub leaf_entry: AtomicUsize,
    /// `Compiled::bias`, the entry's second argument.
    pub bias: u64,
    /// `guard::handlers_changed`: no direct call while it is raised.
    pub handlers_changed: &'static AtomicBool,
}
