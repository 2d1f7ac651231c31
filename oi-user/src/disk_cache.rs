//! What the on-disk caches (`jit::cache` for compiled walkers, `plan_cache` for plans) share:
//! a place only this user (or root) can write, entries sealed with a keyed MAC, writes a
//! concurrent reader never sees half done, and a hash that is stable across runs.
//!
//! What is read back from here is compiled or injected into another process by a privileged
//! tracer, so nothing is taken from a place another user can write (the rule OpenSSH's
//! StrictModes applies to keys):
//! - under euid 0 the caches live in `/var/cache/oi-trace`; `$XDG_CACHE_HOME` (and, for other
//!   users, `~/.cache`) is used only when every directory on its path is owned by the euid or
//!   root and writable by nobody else (a root-owned sticky directory such as `/tmp` is
//!   accepted: others cannot replace what we create in it);
//! - directories are created 0700 and entries 0600; an entry or directory owned by someone
//!   else, or writable by others, is ignored (the work is redone in memory and the planted file
//!   is left as it is), and stderr says so once;
//! - every entry carries a keyed BLAKE3 MAC of its name and contents, with a per-machine key
//!   (`key`, 0600, beside the caches), so a planted or edited entry is rejected even where
//!   permissions were loosened later. The key never leaves that file.

use std::collections::HashSet;
use std::fs::{DirBuilder, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// Where root's caches live unless a trusted `$XDG_CACHE_HOME` says otherwise.
const ROOT_CACHE: &str = "/var/cache/oi-trace";
const MAC_LEN: usize = 32;
/// Entries are plans and walkers of a few MiB at most; a bigger file is not one of ours.
const MAX_ENTRY: u64 = 256 << 20;

/// One cache directory (`<root>/<what>`) whose entries are sealed with the machine's key.
pub struct DiskCache {
    dir: PathBuf,
    key: [u8; MAC_LEN],
    /// Entries found untrusted this run: never overwritten, never read.
    refused: Mutex<HashSet<String>>,
}

impl DiskCache {
    /// The cache `what` under the trusted root for this user, created if needed; `None` (said
    /// once on stderr) when there is no trusted place for it: the caller works in memory.
    pub fn open(what: &str) -> Option<Self> {
        Self::open_in(&root()?, what)
    }

    /// The cache `what` under `root` (`<root>/<what>`, the key in `<root>/key`).
    pub fn open_in(root: &Path, what: &str) -> Option<Self> {
        let trusted = || -> Result<Self, String> {
            make_private_dir(root)?;
            let dir = root.join(what);
            make_private_dir(&dir)?;
            let key = machine_key(root)?;
            Ok(Self {
                dir,
                key,
                refused: Mutex::new(HashSet::new()),
            })
        };
        trusted()
            .map_err(|why| warn_once(&format!("not using the cache {}: {why}", root.display())))
            .ok()
    }

    /// The payload stored under `name`, when it is ours, untouched and sealed by our key.
    pub fn load(&self, name: &str) -> Option<Vec<u8>> {
        if self.is_refused(name) {
            return None;
        }
        let path = self.dir.join(name);
        let file = match open_entry(&path) {
            Ok(Some(file)) => file,
            Ok(None) => return None,
            Err(why) => {
                self.refuse(name, &path, &why);
                return None;
            }
        };
        let mut bytes = Vec::new();
        file.take(MAX_ENTRY).read_to_end(&mut bytes).ok()?;
        let (mac, payload) = bytes.split_at_checked(MAC_LEN)?;
        // A damaged or forged entry: ignored, and replaced by the next store.
        (mac == self.mac(name, payload).as_slice()).then(|| payload.to_vec())
    }

    /// Best effort: a cache that cannot be written only costs the work again next time.
    pub fn store(&self, name: &str, payload: &[u8]) {
        if self.is_refused(name) {
            return;
        }
        let path = self.dir.join(name);
        // Write a private file then rename it: a concurrent reader never sees half an entry.
        let tmp = self.dir.join(format!(".{name}.tmp{}", std::process::id()));
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(&self.mac(name, payload))?;
                f.write_all(payload)
            });
        if written.is_err() || std::fs::rename(&tmp, &path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    /// Keyed BLAKE3 of the entry's name and payload: an entry moved to another name fails too.
    fn mac(&self, name: &str, payload: &[u8]) -> [u8; MAC_LEN] {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(&(name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(payload);
        *h.finalize().as_bytes()
    }

    fn is_refused(&self, name: &str) -> bool {
        self.lock().contains(name)
    }

    fn refuse(&self, name: &str, path: &Path, why: &str) {
        self.lock().insert(name.to_string());
        warn_once(&format!(
            "ignoring the cache entry {}: {why}; rebuilt in memory",
            path.display()
        ));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The directory the caches go under, for this effective user.
fn root() -> Option<PathBuf> {
    let euid = effective_uid();
    let xdg = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let home = (euid != 0)
        .then(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .flatten();
    for base in xdg.into_iter().chain(home) {
        match trusted_path(&base, euid) {
            Ok(()) => return Some(base.join("oi-trace")),
            Err(why) => warn_once(&format!(
                "not using the cache under {}: {why}",
                base.display()
            )),
        }
    }
    (euid == 0).then(|| PathBuf::from(ROOT_CACHE))
}

/// Every existing directory from `/` down to `path` is owned by `euid` or root and writable by
/// nobody else (root-owned sticky directories excepted). Missing tails are created 0700 later.
fn trusted_path(path: &Path, euid: u32) -> Result<(), String> {
    let mut existing = path.to_path_buf();
    while !existing.exists() {
        if !existing.pop() {
            return Err("no existing parent".into());
        }
    }
    let real = existing
        .canonicalize()
        .map_err(|e| format!("{}: {e}", existing.display()))?;
    for dir in real.ancestors() {
        let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (uid, mode) = (meta.uid(), meta.mode());
        if uid != euid && uid != 0 {
            return Err(format!("{} is owned by uid {uid}", dir.display()));
        }
        let sticky_root = uid == 0 && mode & libc::S_ISVTX != 0;
        if mode & 0o022 != 0 && !sticky_root {
            return Err(format!(
                "{} is writable by others (mode {:o})",
                dir.display(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

/// Creates `dir` 0700 if missing; then it must be a directory of ours that nobody else can
/// write.
fn make_private_dir(dir: &Path) -> Result<(), String> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => {
            // A parent may be missing (a fresh $XDG_CACHE_HOME): make the chain, still 0700.
            DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    owned_and_private(&meta).map_err(|why| format!("{} {why}", dir.display()))
}

/// Owned by the euid and not writable by group or others.
fn owned_and_private(meta: &std::fs::Metadata) -> Result<(), String> {
    let euid = effective_uid();
    if meta.uid() != euid {
        return Err(format!("is owned by uid {} (not {euid})", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "is writable by others (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Opens an entry without following a symlink: `Ok(None)` when there is none, `Err(why)` when
/// it is not a private regular file of ours.
fn open_entry(path: &Path) -> Result<Option<File>, String> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err("a symbolic link".into()),
        Err(_) => return Ok(None),
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    owned_and_private(&meta)?;
    Ok(Some(file))
}

/// The machine's MAC key: `<root>/key`, 32 random bytes, created once, 0600.
fn machine_key(root: &Path) -> Result<[u8; MAC_LEN], String> {
    let path = root.join("key");
    if !path.exists() {
        let mut key = [0u8; MAC_LEN];
        getrandom::fill(&mut key).map_err(|e| format!("no randomness for the key: {e}"))?;
        // Write it aside, then link it in place: two first runs agree on one whole key.
        let tmp = root.join(format!(".key.tmp{}", std::process::id()));
        let made = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&key))
            .and_then(|()| std::fs::hard_link(&tmp, &path));
        let _ = std::fs::remove_file(&tmp);
        if let Err(e) = made
            && e.kind() != std::io::ErrorKind::AlreadyExists
        {
            return Err(format!("cannot create {}: {e}", path.display()));
        }
    }
    let file = open_entry(&path)
        .map_err(|why| format!("the key {} is untrusted: {why}", path.display()))?
        .ok_or_else(|| format!("cannot read {}", path.display()))?;
    let mut key = [0u8; MAC_LEN];
    let mut rest = Vec::new();
    let mut reader = file.take(MAC_LEN as u64 + 1);
    reader
        .read_to_end(&mut rest)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if rest.len() != MAC_LEN {
        return Err(format!("{} is not a key", path.display()));
    }
    key.copy_from_slice(&rest);
    Ok(key)
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// One warning about the caches per run: enough to know why nothing was cached.
fn warn_once(message: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!("oi-trace: warning: {message}");
    }
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
/// plans or code may differ, never picks up what an older build stored. A name, not a seal:
/// entries are protected by the MAC.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("oi-disk-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn entries_round_trip_and_forgeries_fail() {
        let root = scratch("mac");
        let cache = DiskCache::open_in(&root, "jit").expect("a fresh private cache");
        cache.store("a", b"payload");
        assert_eq!(cache.load("a").as_deref(), Some(&b"payload"[..]));
        let path = root.join("jit/a");
        let meta = std::fs::metadata(&path).expect("entry");
        assert_eq!(meta.mode() & 0o777, 0o600);
        let dir_meta = std::fs::metadata(root.join("jit")).expect("dir");
        assert_eq!(dir_meta.mode() & 0o777, 0o700);
        // One payload byte changed: the MAC fails.
        let mut bytes = std::fs::read(&path).expect("entry");
        *bytes.last_mut().expect("byte") ^= 1;
        std::fs::write(&path, &bytes).expect("edit");
        assert_eq!(cache.load("a"), None);
        // A valid entry copied to another name fails: the name is sealed too.
        cache.store("a", b"payload");
        std::fs::copy(&path, root.join("jit/b")).expect("copy");
        assert_eq!(cache.load("b"), None);
        // A second cache on the same root shares the key.
        let again = DiskCache::open_in(&root, "jit").expect("reopen");
        assert_eq!(again.load("a").as_deref(), Some(&b"payload"[..]));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn loosened_entries_and_directories_are_not_used() {
        use std::os::unix::fs::PermissionsExt as _;
        let root = scratch("perm");
        let cache = DiskCache::open_in(&root, "plans").expect("cache");
        cache.store("e", b"x");
        let path = root.join("plans/e");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        assert_eq!(cache.load("e"), None, "a world-writable entry is ignored");
        cache.store("e", b"y");
        assert_eq!(
            std::fs::metadata(&path).expect("entry").mode() & 0o777,
            0o666,
            "and left as it is"
        );
        std::fs::set_permissions(root.join("plans"), std::fs::Permissions::from_mode(0o777))
            .expect("chmod dir");
        assert!(DiskCache::open_in(&root, "plans").is_none());
        let _ = std::fs::remove_dir_all(&root);
    }
}
