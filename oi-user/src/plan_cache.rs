//! Measurers (walk plan and argument locations) cached on disk, so that a second run on an
//! unchanged binary does no DWARF work (`$XDG_CACHE_HOME/oi-trace/plans`, or
//! `~/.cache/oi-trace/plans`).
//!
//! The key is everything a measurer is derived from: the binary's identity (its build-id, or
//! its path, size and modification time when it has none), the function, the requested
//! arguments, the features, entry or return probe, and this oi-trace build. Each file carries
//! a checksum of its contents: a damaged or foreign file is ignored and rebuilt.

use std::path::PathBuf;

use crate::debuginfo::{Binary, FunctionSymbol};
use crate::disk_cache::{self, stable_hash};
use crate::measure::{MeasureError, Measurer};

/// Where a measurer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Cache,
    Dwarf,
}

pub struct PlanCache {
    dir: Option<PathBuf>,
}

impl PlanCache {
    /// A cache in `dir` (created on first store); `None`: no caching.
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self { dir }
    }

    pub fn default_dir() -> Option<PathBuf> {
        disk_cache::dir("plans")
    }

    /// The measurer of `function`'s `args` in `binary`: from the cache, or built from DWARF
    /// (then stored). Errors are never cached: they are reported again, from the DWARF.
    pub fn get_or_build(
        &self,
        binary: &Binary,
        function: &FunctionSymbol,
        args: &[String],
        features: &[String],
        is_return: bool,
    ) -> Result<(Measurer, Source), MeasureError> {
        let path = self.dir.as_ref().map(|dir| {
            let key = stable_hash((
                binary_identity(binary),
                &function.mangled,
                function.address,
                args,
                features,
                is_return,
            ));
            dir.join(format!("{key:016x}.plan"))
        });
        if let Some(m) = path.as_ref().and_then(|p| load(p)) {
            return Ok((m, Source::Cache));
        }
        let m = Measurer::new(binary, function, args, features, is_return)?;
        if let (Some(dir), Some(path), Some(bytes)) = (&self.dir, &path, m.to_bytes()) {
            disk_cache::store(dir, path, &seal(&bytes));
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

/// `checksum (u64 LE) ‖ payload`.
fn seal(payload: &[u8]) -> Vec<u8> {
    let mut out = stable_hash(payload).to_le_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

fn load(path: &std::path::Path) -> Option<Measurer> {
    let bytes = std::fs::read(path).ok()?;
    let (sum, payload) = bytes.split_at_checked(8)?;
    if u64::from_le_bytes(sum.try_into().ok()?) != stable_hash(payload) {
        return None;
    }
    Measurer::from_bytes(payload)
}
