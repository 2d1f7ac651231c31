//! What the on-disk caches (`jit::cache` for compiled walkers, `plan_cache` for plans) share:
//! where they live, a hash that is stable across runs, and writes a concurrent reader never
//! sees half done.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `$XDG_CACHE_HOME/oi-trace/<what>` or `~/.cache/oi-trace/<what>`.
pub fn dir(what: &str) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
    Some(base.join("oi-trace").join(what))
}

/// FNV-1a: unlike std's RandomState, the same value hashes the same in every run.
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

/// A hash of `value` that is the same in every run of this very oi-trace build: the build
/// (its executable's size and modification time) is part of it, so a rebuilt oi-trace, whose
/// plans or code may differ, never picks up what an older build stored.
pub fn stable_hash(value: impl Hash) -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    build_identity().hash(&mut h);
    value.hash(&mut h);
    h.finish()
}

fn build_identity() -> &'static (String, u64, u128) {
    static ID: OnceLock<(String, u64, u128)> = OnceLock::new();
    ID.get_or_init(|| {
        let meta = std::env::current_exe().and_then(std::fs::metadata);
        let (len, mtime) = meta
            .map(|m| {
                let mtime = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                (m.len(), mtime)
            })
            .unwrap_or((0, 0));
        (env!("CARGO_PKG_VERSION").to_string(), len, mtime)
    })
}

/// Best effort: a cache that cannot be written only costs the work again next time.
pub fn store(dir: &Path, path: &Path, bytes: &[u8]) {
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    // Write then rename: a concurrent reader never sees half a file.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, bytes).is_err() || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}
