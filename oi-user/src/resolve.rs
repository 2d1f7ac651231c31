//! From a user's SYMBOL to the files and offsets to attach to, in one process or in every
//! process of a cgroup. Files are opened through `/proc/PID/root` so containers work.
//!
//! A function is every copy of it that runs its code: its own out-of-line code, the clones
//! g++ made of it (`.isra`, `.constprop`, `.part`; never the `.cold` parts), and every place
//! it was inlined (from DWARF). Each copy is a site with its own points and, when probed,
//! its own walk plan (a clone's or an inlined copy's parameters are where DWARF says).

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use crate::{
    debuginfo::{
        Binary, FunctionSymbol, callers,
        dwarf::{self, DieRef},
        points::{self, PointKind, ProbePoint},
        symbols::{self, Fit, Query},
    },
    error::{Error, Result},
    inferior::procfs,
};

/// A copy of a function probed where DWARF, not the calling convention, says where its
/// parameters are: a clone (g++ changed its parameters) or an inlined copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CopyAt {
    /// Its DIE: an inlined subroutine; `None` for the concrete DIE of the probed symbol.
    pub die: Option<DieRef>,
    /// The probed instruction, where the locations are read.
    pub pc: u64,
    /// `pc` is the copy's own entry (where a parameter's entry value is its register).
    pub at_entry: bool,
}

/// What kind of copy of its function a site is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Copy {
    /// The function's own out-of-line code.
    OutOfLine,
    /// An out-of-line clone g++ made of it (`isra.0`, `constprop.0`, `part.0`).
    Clone(String),
    /// Its code inlined into another function (`into`, when DWARF names it).
    Inlined { into: Option<String>, die: DieRef },
}

/// One copy of a function in one file, ready to attach uprobes to.
#[derive(Clone)]
pub struct Resolved {
    /// The file as the target process names it.
    pub target_path: PathBuf,
    /// The same file reachable from our mount namespace.
    pub host_path: PathBuf,
    /// (device, inode): what the kernel's uprobe is really attached to.
    pub file_id: (u64, u64),
    pub binary: Arc<Binary>,
    /// The copy's symbol; for an inlined copy, one made up: the function's linkage name,
    /// and its code from the inlined entry to the end of that range.
    pub symbol: FunctionSymbol,
    /// The instructions to put uprobes on (see [`place`]); empty until placed.
    pub points: Vec<ProbePoint>,
    /// Which function this is a copy of: its linkage (mangled) name, clone suffix removed.
    pub function: String,
    /// How the function's name matched the query.
    pub fit: Fit,
    pub copy: Copy,
}

impl Resolved {
    /// Where DWARF rather than the calling convention places the parameters of this copy:
    /// clones and inlined copies, at their (first) point.
    pub fn copy_at(&self) -> Option<CopyAt> {
        let pc = self.points.first()?.address;
        match &self.copy {
            Copy::OutOfLine => None,
            Copy::Clone(_) => Some(CopyAt {
                die: None,
                pc,
                at_entry: true,
            }),
            Copy::Inlined { die, .. } => Some(CopyAt {
                die: Some(*die),
                pc,
                at_entry: false,
            }),
        }
    }

    /// `clone .isra.0`, `inlined into shop::tally_a`, `out of line`.
    pub fn describe_copy(&self) -> String {
        match &self.copy {
            Copy::OutOfLine => "out of line".into(),
            Copy::Clone(suffix) => format!("clone .{suffix}"),
            Copy::Inlined { into: Some(f), .. } => format!("inlined into {f}"),
            Copy::Inlined { into: None, .. } => "inlined".into(),
        }
    }
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

/// Every copy of every function matching `query` in the files `pid` executes; only those of
/// its executable when it defines a function of exactly that name. The libraries are then
/// not read at all: looking for inlined copies means scanning every unit of their debug
/// information (libc's alone took a tenth of a second), for a function they cannot contain
/// unless they were built from the program's own sources.
pub fn in_process(cache: &mut BinaryCache, pid: i32, query: &str) -> Result<Vec<Resolved>> {
    let query = Query::parse(query);
    let mut found = Vec::new();
    // The executable comes first (see `executable_files`).
    let mut files = procfs::executable_files(pid)?.into_iter();
    if let Some(exe) = files.next() {
        found.extend(in_file(cache, &exe.target, &exe.host, &query)?);
    }
    if found.iter().any(|r| r.fit == Fit::Exact) {
        return Ok(found);
    }
    for file in files {
        found.extend(in_file(cache, &file.target, &file.host, &query)?);
    }
    Ok(found)
}

/// The copies of the functions matching `query` in one file: out-of-line ones from the
/// symbol table, inlined ones from DWARF (none when the file has no debug information).
pub fn in_file(
    cache: &mut BinaryCache,
    target_path: &std::path::Path,
    host_path: &std::path::Path,
    query: &Query,
) -> Result<Vec<Resolved>> {
    let Some((file_id, binary)) = cache.open(host_path) else {
        return Ok(Vec::new());
    };
    let found = symbols::find_functions(&binary, query).map_err(|e| Error::input(e.to_string()))?;
    let site = |symbol: FunctionSymbol, function: String, fit: Fit, copy: Copy| Resolved {
        target_path: target_path.to_path_buf(),
        host_path: host_path.to_path_buf(),
        file_id,
        binary: binary.clone(),
        symbol,
        points: Vec::new(),
        function,
        fit,
        copy,
    };
    let mut out = Vec::new();
    let mut bases: Vec<String> = Vec::new();
    for f in found {
        let base = symbols::base_name(&f.symbol.mangled).to_string();
        let copy = match symbols::clone_suffix(&f.symbol.mangled) {
            Some(suffix) => Copy::Clone(suffix.to_string()),
            None => Copy::OutOfLine,
        };
        if !bases.contains(&base) {
            bases.push(base.clone());
        }
        out.push(site(f.symbol, base, f.fit, copy));
    }
    // Inlined copies: a file without debug information has none we can know of.
    let inlined = dwarf::with_debug_info(&binary, |di| {
        let inlined = di.inlined_copies(query, &bases).ok()?;
        let into: Vec<Option<String>> = inlined
            .copies
            .iter()
            .map(|c| di.enclosing_function(c.die).ok().flatten())
            .collect();
        Some((inlined, into))
    });
    if let Ok(Some((inlined, into))) = inlined {
        for (copy, into) in inlined.copies.into_iter().zip(into) {
            let Some(&(_, fit)) = inlined
                .functions
                .iter()
                .find(|(name, _)| *name == copy.linkage_name)
            else {
                continue;
            };
            let Some(symbol) = inlined_symbol(
                &binary,
                &copy.linkage_name,
                copy.entry,
                copy.end,
                into.as_deref(),
            ) else {
                continue;
            };
            out.push(site(
                symbol,
                copy.linkage_name,
                fit,
                Copy::Inlined {
                    into,
                    die: copy.die,
                },
            ));
        }
    }
    Ok(out)
}

/// A made-up symbol for an inlined copy: the function's linkage name, its code from `entry`
/// to `end` (at least one instruction's worth, so that its first instruction is checked).
fn inlined_symbol(
    binary: &Binary,
    linkage: &str,
    entry: u64,
    end: u64,
    into: Option<&str>,
) -> Option<FunctionSymbol> {
    use object::{Object as _, ObjectSection as _};
    let obj = binary.object().ok()?;
    let section = obj
        .sections()
        .find(|s| s.address() <= entry && entry < s.address() + s.size())?;
    let (offset, size) = section.file_range()?;
    let file_offset = offset + (entry - section.address());
    let room = size - (entry - section.address());
    let name = symbols::bare_name(&symbols::demangle(linkage));
    Some(FunctionSymbol {
        mangled: linkage.to_string(),
        demangled: match into {
            Some(f) => format!("{name} (inlined into {f})"),
            None => format!("{name} (inlined)"),
        },
        address: entry,
        size: end.saturating_sub(entry).max(15).min(room),
        file_offset,
    })
}

/// The copies of exactly one function among `found` (the best-matching names only); an
/// error that lists the candidates when they are copies of several functions.
pub fn one_function(query: &str, place: &str, found: Vec<Resolved>) -> Result<Vec<Resolved>> {
    let Some(best) = found.iter().map(|r| r.fit).min() else {
        return Err(Error::input(format!(
            "symbol {query:?} not found in {place} (give a function name as in the source, \
             `ns::Class::method`, or its mangled name)"
        )));
    };
    let found: Vec<Resolved> = found.into_iter().filter(|r| r.fit == best).collect();
    let mut functions: Vec<(&str, &std::path::Path)> = Vec::new();
    for r in &found {
        let key = (r.function.as_str(), r.target_path.as_path());
        if !functions.contains(&key) {
            functions.push(key);
        }
    }
    if functions.len() == 1 {
        return Ok(found);
    }
    let listed: Vec<String> = functions
        .iter()
        .map(|&(function, path)| {
            let demangled = found
                .iter()
                .find(|r| r.function == function && r.target_path == path)
                .map_or_else(
                    || symbols::demangle(function),
                    |r| match r.copy {
                        Copy::Inlined { .. } => symbols::demangle(function),
                        _ => r.symbol.demangled.clone(),
                    },
                );
            format!("{demangled} [{function}] in {}", path.display())
        })
        .collect();
    Err(Error::input(format!(
        "symbol {query:?} is ambiguous in {place}, {} candidates: {} (add the parameter list \
         or use the mangled name)",
        functions.len(),
        listed.join("; ")
    )))
}

/// Chooses the points of every site: an out-of-line copy's entry, or with `is_return`
/// every instruction that returns from it; an inlined copy's entry. Sites that cannot be
/// probed are left out with a note, unless none is left: then the first reason is the
/// error. Returns the notes the user should read once.
pub fn place_all(sites: &mut Vec<Resolved>, is_return: bool) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let mut first_error = None;
    let mut inlined_returns = 0;
    let mut kept = Vec::new();
    for mut site in sites.drain(..) {
        if is_return && matches!(site.copy, Copy::Inlined { .. }) {
            inlined_returns += 1;
            continue;
        }
        match place(&mut site, is_return) {
            Ok(n) => {
                notes.extend(n);
                kept.push(site);
            }
            Err(e) => {
                notes.push(format!("{} is not probed: {e}", site.describe_copy()));
                first_error.get_or_insert(e);
            }
        }
    }
    if inlined_returns > 0 {
        notes.push(format!(
            "{inlined_returns} inlined cop{} of the function ha{} no return instruction of \
             {} own: returns there are not probed",
            if inlined_returns == 1 { "y" } else { "ies" },
            if inlined_returns == 1 { "s" } else { "ve" },
            if inlined_returns == 1 { "its" } else { "their" },
        ));
    }
    if kept.is_empty() {
        return Err(first_error.unwrap_or_else(|| {
            Error::input(
                "the function is only inlined: a return probe needs an out-of-line copy, which \
                 has return instructions"
                    .to_string(),
            )
        }));
    }
    *sites = kept;
    Ok(notes)
}

/// Chooses the points of `site` (see [`place_all`]).
pub fn place(site: &mut Resolved, is_return: bool) -> Result<Vec<String>> {
    let placed = if is_return {
        let cold = symbols::cold_part(&site.binary, &site.symbol);
        points::returns(&site.binary, &site.symbol, cold.as_ref())
    } else {
        points::entry(&site.binary, &site.symbol)
    }
    .map_err(|e| Error::input(e.to_string()))?;
    site.points = placed.points;
    let mut notes = placed.notes;
    // A clone IPA-SRA made may have lost its result: its returns are counted, not measured.
    if is_return
        && let Copy::Clone(suffix) = &site.copy
        && suffix.contains("isra")
    {
        for p in &mut site.points {
            if p.kind == PointKind::Return {
                p.kind = PointKind::NoResult;
            }
        }
        notes.push(format!(
            "{}: returns of this clone are counted, not measured: IPA-SRA may have removed its \
             result (summary: `unseen`)",
            site.symbol.demangled
        ));
    }
    Ok(notes)
}

/// Why the out-of-line copies among `sites` may never run: one line per copy that no code
/// of its file refers to.
pub fn unreachable_notes(sites: &[Resolved]) -> Vec<String> {
    let mut notes = Vec::new();
    for site in sites {
        if matches!(site.copy, Copy::Inlined { .. }) {
            continue;
        }
        let refs = callers::references(&site.binary, site.symbol.address);
        if refs.code > 0 {
            continue;
        }
        notes.push(if refs.data > 0 {
            format!(
                "{} ({}) has no caller in {}: only data refers to it (a vtable or a table of \
                 function pointers), so only calls through those reach it",
                site.symbol.demangled,
                site.describe_copy(),
                site.target_path.display()
            )
        } else {
            format!(
                "{} ({}) has no caller in {}: nothing refers to it",
                site.symbol.demangled,
                site.describe_copy(),
                site.target_path.display()
            )
        });
    }
    notes
}

/// The error for a symbol that `pid` defines nowhere: the closest names it does define, and,
/// when its executable is stripped, how to get the symbols back.
pub fn not_found(cache: &mut BinaryCache, pid: i32, query: &str, place: &str) -> Error {
    let files = procfs::executable_files(pid).unwrap_or_default();
    let mut names = Vec::new();
    let mut stripped = None;
    for (i, file) in files.iter().enumerate() {
        let Some((_, binary)) = cache.open(&file.host) else {
            continue;
        };
        // Shared libraries of the system are usually stripped; only the program matters here.
        if i == 0 && !symbols::has_symbol_table(&binary) {
            stripped = Some((file.target.clone(), binary.clone()));
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
