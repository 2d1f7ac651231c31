//! From a user's SYMBOL to the files and offsets to attach to, in one process or in every
//! process of a cgroup. Files are opened through `/proc/PID/root` so containers work.

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use crate::{
    debuginfo::{Binary, FunctionSymbol, dwarf, find_function, symbols},
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

/// The error for a symbol that `pid` defines nowhere: the closest names it does define, and,
/// when its executable is stripped, how to get the symbols back.
pub fn not_found(cache: &mut BinaryCache, pid: i32, query: &str, place: &str) -> Error {
    let files = procfs::executable_files(pid).unwrap_or_default();
    let mut names = Vec::new();
    let mut stripped = None;
    for (i, target_path) in files.iter().enumerate() {
        let Some((_, binary)) = cache.open(&procfs::host_path(pid, target_path)) else {
            continue;
        };
        // Shared libraries of the system are usually stripped; only the program matters here.
        if i == 0 && !symbols::has_symbol_table(&binary) {
            stripped = Some((target_path.clone(), binary.clone()));
        }
        names.extend(symbols::function_names(&binary).unwrap_or_default());
    }
    names.sort_unstable();
    names.dedup();
    let mut msg = format!("symbol {query:?} not found in {place}");
    let suggestions = symbols::closest(query, &names, 3);
    if !suggestions.is_empty() {
        msg += &format!("; did you mean {}?", suggestions.join(", "));
    } else if stripped.is_none() {
        msg += " (give a function name as in the source, `ns::Class::method`, or its mangled \
                name)";
    }
    if let Some((path, binary)) = stripped {
        let hint = binary
            .object()
            .map(|obj| dwarf::debug_info_hint(&obj))
            .unwrap_or_default();
        msg += &format!(
            "; {} is stripped (no symbol table, no debug information): {hint}",
            path.display()
        );
    }
    Error::input(msg)
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
