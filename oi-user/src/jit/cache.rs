//! A cache of compiled walkers, in memory and on disk (`~/.cache/oi-trace/jit/`), so that an
//! unchanged probe costs no Cranelift work on the next run.
//!
//! Content-addressed: the key is a hash of the plan (its `Debug` form, which spells every
//! field), the roots and this compiler's version, so a changed plan or compiler can never
//! pick up stale code. (Skipping the DWARF work too needs the plan itself cached by whoever
//! builds it; this cache only answers "plan → code".) The only side effects are files under
//! the cache directory; a corrupt or unreadable entry is ignored and rewritten.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{CompiledWalker, JitError, compile};
use crate::plan::{NodeId, Plan};

/// Bumped whenever the generated code changes for the same plan.
const CODEGEN_VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"OIJIT\0\0\x01";

/// Cache key of (plan, roots) for this compiler.
pub fn key(plan: &Plan, roots: &[NodeId]) -> u64 {
    // FNV-1a over the Debug text: stable across runs (unlike std's RandomState).
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
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    CODEGEN_VERSION.hash(&mut h);
    env!("CARGO_PKG_VERSION").hash(&mut h);
    format!("{:?}", plan.nodes).hash(&mut h);
    roots.hash(&mut h);
    h.finish()
}

pub struct WalkerCache {
    dir: Option<PathBuf>,
    mem: Mutex<HashMap<u64, Arc<CompiledWalker>>>,
}

impl WalkerCache {
    /// A cache in `dir` (created on first store); `None`: memory only.
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            mem: Mutex::new(HashMap::new()),
        }
    }

    /// `$XDG_CACHE_HOME/oi-trace/jit` or `~/.cache/oi-trace/jit`.
    pub fn default_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
        Some(base.join("oi-trace").join("jit"))
    }

    /// The walker of (plan, roots): from memory, from disk, or compiled (then stored).
    pub fn get_or_compile(
        &self,
        plan: &Plan,
        roots: &[NodeId],
    ) -> Result<Arc<CompiledWalker>, JitError> {
        let k = key(plan, roots);
        if let Some(w) = self.lock().get(&k) {
            return Ok(w.clone());
        }
        let w = match self.load(k) {
            Some(w) => w,
            None => {
                let w = compile(plan, roots)?;
                self.store(k, &w);
                w
            }
        };
        let w = Arc::new(w);
        self.lock().insert(k, w.clone());
        Ok(w)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<CompiledWalker>>> {
        // A panic elsewhere cannot leave the map half-updated: keep using it.
        self.mem.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn path(&self, k: u64) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(format!("{k:016x}.walker")))
    }

    fn load(&self, k: u64) -> Option<CompiledWalker> {
        decode(&std::fs::read(self.path(k)?).ok()?)
    }

    /// Best effort: a cache that cannot be written only costs a compilation next time.
    fn store(&self, k: u64, w: &CompiledWalker) {
        let (Some(dir), Some(path)) = (self.dir.as_ref(), self.path(k)) else {
            return;
        };
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        // Write then rename: a concurrent reader never sees half a file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, encode(w)).is_ok() && std::fs::rename(&tmp, &path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// `MAGIC, entry (u64 LE), code length (u64 LE), code`.
fn encode(w: &CompiledWalker) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + w.code.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&w.entry.to_le_bytes());
    out.extend_from_slice(&(w.code.len() as u64).to_le_bytes());
    out.extend_from_slice(&w.code);
    out
}

fn decode(bytes: &[u8]) -> Option<CompiledWalker> {
    let rest = bytes.strip_prefix(MAGIC)?;
    let word = |b: &[u8]| Some(u64::from_le_bytes(b.get(..8)?.try_into().ok()?));
    let entry = word(rest)?;
    let len = usize::try_from(word(rest.get(8..)?)?).ok()?;
    let code = rest.get(16..)?;
    (code.len() == len && (entry as usize) < len.max(1)).then(|| CompiledWalker {
        code: code.to_vec(),
        entry,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::containers::string::StringLayout;
    use crate::plan::{Node, Op};

    fn plan(len_off: u64) -> Plan {
        let mut p = Plan::default();
        p.nodes.push(Node {
            name: "a0".into(),
            type_names: vec!["std::string".into()],
            static_size: 32,
            is_primitive: false,
            op: Op::String(StringLayout {
                ptr_off: 0,
                len_off,
                cap_off: 16,
                char_size: 1,
                size: 32,
            }),
            dynamic: false,
        });
        p.compute_dynamic();
        p
    }

    #[test]
    fn jit_cache_round_trip_and_keys() {
        let dir = std::env::temp_dir().join(format!("oi-jit-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = WalkerCache::new(Some(dir.clone()));
        let w1 = a.get_or_compile(&plan(8), &[0]).expect("compile");
        // A second cache (a new run) finds it on disk.
        let b = WalkerCache::new(Some(dir.clone()));
        let k = key(&plan(8), &[0]);
        let loaded = b.load(k).expect("on disk");
        assert_eq!(loaded.code, w1.code);
        assert_eq!(loaded.entry, w1.entry);
        // A different plan is a different key.
        assert_ne!(key(&plan(8), &[0]), key(&plan(24), &[0]));
        assert_ne!(key(&plan(8), &[0]), key(&plan(8), &[0, 0]));
        // Truncated or foreign files are ignored.
        assert!(decode(&encode(&w1)[..30]).is_none());
        assert!(decode(b"not a walker").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
