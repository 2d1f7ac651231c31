//! From a user's SYMBOL to the files and offsets to attach to, in one process or in every
//! process of a cgroup. Files are opened through `/proc/PID/root` so containers work.

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use crate::{
    debuginfo::{Binary, FunctionSymbol, find_function},
    error::{Error, Result},
    target::procfs,
};

/// One function in one file, ready to attach a uprobe to.
#[derive(Clone)]
pub struct Resolved {
    /// The file as the target process names it.
    pub target_path: PathBuf,
    /// The same file reachable from our mount namespace.
    pub host_path: PathBuf,
    /// (device, inode): what the kernel's uprobe is really attached to.
    pub file_id: (u64, u64),
    pub binary: Arc<Binary>,
    pub symbol: FunctionSymbol,
}

/// Opened binaries, keyed by (device, inode), so each file is mapped and scanned once.
#[derive(Default)]
pub struct BinaryCache {
    files: HashMap<(u64, u64), Option<Arc<Binary>>>,
}

impl BinaryCache {
    fn open(&mut self, host_path: &std::path::Path) -> Option<((u64, u64), Arc<Binary>)> {
        let id = procfs::file_id(host_path)?;
        let binary = self
            .files
            .entry(id)
            .or_insert_with(|| Binary::open(host_path).ok().map(Arc::new))
            .clone()?;
        Some((id, binary))
    }
}

/// Every definition of `query` in the files `pid` executes.
pub fn in_process(cache: &mut BinaryCache, pid: i32, query: &str) -> Result<Vec<Resolved>> {
    let mut found = Vec::new();
    for target_path in procfs::executable_files(pid)? {
        let host_path = procfs::host_path(pid, &target_path);
        found.extend(in_file(cache, &target_path, &host_path, query)?);
    }
    Ok(found)
}

/// Definitions of `query` in one file.
pub fn in_file(
    cache: &mut BinaryCache,
    target_path: &std::path::Path,
    host_path: &std::path::Path,
    query: &str,
) -> Result<Vec<Resolved>> {
    let Some((file_id, binary)) = cache.open(host_path) else {
        return Ok(Vec::new());
    };
    let symbols = find_function(&binary, query).map_err(|e| Error::input(e.to_string()))?;
    Ok(symbols
        .into_iter()
        .map(|symbol| Resolved {
            target_path: target_path.to_path_buf(),
            host_path: host_path.to_path_buf(),
            file_id,
            binary: binary.clone(),
            symbol,
        })
        .collect())
}

/// Exactly one definition, or an error that says what the user can do.
pub fn exactly_one(query: &str, place: &str, found: Vec<Resolved>) -> Result<Resolved> {
    match found.len() {
        0 => Err(Error::input(format!(
            "symbol {query:?} not found in {place} (give a function name as in the source, \
             `ns::Class::method`, or its mangled name)"
        ))),
        1 => Ok(found.into_iter().next().expect("one element")),
        n => Err(Error::input(format!(
            "symbol {query:?} is ambiguous in {place}, {n} candidates: {} (add the parameter \
             list or use the mangled name)",
            found
                .iter()
                .map(|r| format!(
                    "{} [{}] in {}",
                    r.symbol.demangled,
                    r.symbol.mangled,
                    r.target_path.display()
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ))),
    }
}
