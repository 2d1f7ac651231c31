//! A cache of compiled walkers, in memory and on disk (`<cache>/jit/`, see `disk_cache` for
//! where and why it can be trusted), so that an unchanged probe costs no Cranelift work on the
//! next run.
//!
//! Content-addressed: the key is a hash of the plan (its nodes' `Debug` form, which spells
//! every field, and its sizing), the roots and this oi-trace build, so a changed plan or
//! compiler can never pick up stale code. (`plan_cache` spares the DWARF work that makes the plan.) The only side effects
//! are files under the cache directory; an entry whose MAC fails is ignored and rewritten.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{CompiledWalker, JitError, compile};
use crate::disk_cache::{DiskCache, stable_hash};
use crate::plan::{NodeId, Plan};

/// Bumped whenever the generated code changes for the same plan (3: vector<string> groups
/// stored string by string; 2: LEB128 stream, byte
/// count headers, `WalkFrame::total`).
const CODEGEN_VERSION: u32 = 3;
const MAGIC: &[u8; 8] = b"OIJIT\0\0\x01";

/// Cache key of (plan, roots) for this compiler.
pub fn key(plan: &Plan, roots: &[NodeId]) -> u64 {
    stable_hash((
        CODEGEN_VERSION,
        format!("{:?}", (&plan.nodes, plan.sizing)),
        roots,
    ))
}

pub struct WalkerCache {
    disk: Option<DiskCache>,
    mem: Mutex<HashMap<u64, Arc<CompiledWalker>>>,
}

impl WalkerCache {
    /// A cache backed by `disk`; `None`: memory only.
    pub fn new(disk: Option<DiskCache>) -> Self {
        Self {
            disk,
            mem: Mutex::new(HashMap::new()),
        }
    }

    /// The trusted on-disk cache of walkers for this user (`<cache>/jit`), if there is one.
    pub fn default_disk() -> Option<DiskCache> {
        DiskCache::open("jit")
    }

    /// The walker of (plan, roots): from memory, from disk, or compiled (then stored); and
    /// whether it was found rather than compiled.
    pub fn get_or_compile(
        &self,
        plan: &Plan,
        roots: &[NodeId],
    ) -> Result<(Arc<CompiledWalker>, bool), JitError> {
        let k = key(plan, roots);
        if let Some(w) = self.lock().get(&k) {
            return Ok((w.clone(), true));
        }
        let (w, found) = match self.load(k) {
            Some(w) => (w, true),
            None => {
                let w = compile(plan, roots)?;
                self.store(k, &w);
                (w, false)
            }
        };
        let w = Arc::new(w);
        self.lock().insert(k, w.clone());
        Ok((w, found))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<CompiledWalker>>> {
        // A panic elsewhere cannot leave the map half-updated: keep using it.
        self.mem.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn load(&self, k: u64) -> Option<CompiledWalker> {
        decode(&self.disk.as_ref()?.load(&entry_name(k))?)
    }

    fn store(&self, k: u64, w: &CompiledWalker) {
        if let Some(disk) = &self.disk {
            disk.store(&entry_name(k), &encode(w));
        }
    }
}

fn entry_name(k: u64) -> String {
    format!("{k:016x}.walker")
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
            readable: String::new(),
            value: None,
            opaque_union: false,
            foreign: false,
        });
        p.compute_dynamic();
        p
    }

    #[test]
    fn jit_cache_round_trip_and_keys() {
        let dir = std::env::temp_dir().join(format!("oi-jit-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = WalkerCache::new(DiskCache::open_in(&dir, "jit"));
        let (w1, found) = a.get_or_compile(&plan(8), &[0]).expect("compile");
        assert!(!found, "compiled the first time");
        // A second cache (a new run) finds it on disk.
        let b = WalkerCache::new(DiskCache::open_in(&dir, "jit"));
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
