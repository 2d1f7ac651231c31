//! Measurers (walk plan and argument locations) cached on disk, so that a second run on an
//! unchanged binary does no DWARF work (`<cache>/plans`; see `disk_cache` for where that is
//! and why it can be trusted).
//!
//! The key is everything a measurer is derived from: the binary's identity (its build-id, or
//! its path, size and modification time when it has none), the function, the requested
//! arguments, the features, entry or return probe, and this oi-trace build. Each file is
//! sealed with the machine's MAC: a damaged or forged file is ignored and rebuilt.

use crate::debuginfo::{Binary, FunctionSymbol};
use crate::disk_cache::{DiskCache, stable_hash};
use crate::footprint::measure::{CopyAt, MeasureError, Measurer};

/// Where a measurer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Cache,
    Dwarf,
}

pub struct PlanCache {
    disk: Option<DiskCache>,
}

impl PlanCache {
    /// A cache backed by `disk`; `None`: no caching.
    pub fn new(disk: Option<DiskCache>) -> Self {
        Self { disk }
    }

    /// The trusted on-disk cache of plans for this user (`<cache>/plans`), if there is one.
    pub fn default_disk() -> Option<DiskCache> {
        DiskCache::open("plans")
    }

    /// The measurer of `function`'s `args` in `binary`: from the cache, or built from DWARF
    /// (then stored). Errors are never cached: they are reported again, from the DWARF.
    pub fn get_or_build(
        &self,
        binary: &Binary,
        function: &FunctionSymbol,
        at: Option<&CopyAt>,
        args: &[String],
        features: &[String],
        is_return: bool,
    ) -> Result<(Measurer, Source), MeasureError> {
        let name = self.disk.as_ref().map(|_| {
            let key = stable_hash((
                binary_identity(binary),
                &function.mangled,
                function.address,
                at,
                args,
                features,
                is_return,
            ));
            format!("{key:016x}.plan")
        });
        let cached = |disk: &DiskCache, name: &str| Measurer::from_bytes(&disk.load(name)?);
        if let (Some(disk), Some(name)) = (&self.disk, &name)
            && let Some(m) = cached(disk, name)
        {
            return Ok((m, Source::Cache));
        }
        let m = Measurer::new_at(binary, function, at, args, features, is_return)?;
        if let (Some(disk), Some(name), Some(bytes)) = (&self.disk, &name, m.to_bytes()) {
            disk.store(name, &bytes);
        }
        Ok((m, Source::Dwarf))
    }
}

/// The build-id when there is one (it changes whenever the code or its debug info does);
/// otherwise where the file is, its size and its modification time.
fn binary_identity(binary: &Binary) -> String {
    if let Ok(obj) = binary.object()
        && let Ok(Some(id)) = object::Object::build_id(&obj)
        && !id.is_empty()
    {
        return id.iter().map(|b| format!("{b:02x}")).collect();
    }
    let mtime = std::fs::metadata(binary.path())
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}:{}:{mtime}",
        binary.path().display(),
        binary.bytes().len()
    )
}
