//! The walkers of this process, one per (type, module, features), built at first use and
//! kept for the life of the process.
//!
//! Each key has its own once-cell, so concurrent first calls for one type wait for one
//! build (the registry's lock is held only to find or add the cell, never while building),
//! and calls for other types build in parallel. A failed build is kept too: a type without
//! debug information does not get it later, and asking again must stay cheap.
//!
//! Never frees an entry: handles given to C++ callers are `'static`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, OnceLock};

use crate::Error;
use crate::resolve::Compiled;

/// What identifies one walker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// The type name as the caller gave it (mangled, or a C++ name from the Rust API).
    pub type_name: String,
    pub size: Option<u64>,
    /// The module of the caller's first hint (its own code): two modules may define
    /// different types of one name.
    pub module: Option<PathBuf>,
    /// Sorted, without duplicates (their order does not change the walk).
    pub features: Vec<String>,
}

type Slot = OnceLock<Result<Compiled, Error>>;

static REGISTRY: LazyLock<Mutex<HashMap<Key, &'static Slot>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

static BUILDS: AtomicU64 = AtomicU64::new(0);

/// How many walkers this process has built (found, planned and compiled), failed ones
/// included: what a test counts to see that concurrent first calls build once.
pub fn builds() -> u64 {
    BUILDS.load(Ordering::Relaxed)
}

/// The entry of `key`, built by `build` if it is the first call for it.
pub fn get_or_build(
    key: Key,
    build: impl FnOnce() -> Result<Compiled, Error>,
) -> Result<&'static Compiled, Error> {
    let slot: &'static Slot = {
        let mut map = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key)
            .or_insert_with(|| Box::leak(Box::new(OnceLock::new())))
    };
    slot.get_or_init(|| {
        BUILDS.fetch_add(1, Ordering::Relaxed);
        build()
    })
    .as_ref()
    .map_err(Clone::clone)
}
