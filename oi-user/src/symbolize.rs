//! Code addresses of a live process → the functions they are in, inlined frames included: the
//! one symbolizer of the profilers (`allocs` stacks, `calls` nodes).
//!
//! Built on blazesym, which reads the ELF symbols and DWARF line and inline tables of the files
//! a process maps (through `/proc/PID/map_files`, so deleted binaries and other mount
//! namespaces work; with symbolic paths when that needs a capability we lack), including
//! separate debug files found by build-id or debuglink. Names come back mangled and are
//! demangled here by `debuginfo`'s one demangler, without parameters (`shop::Cart::add`), with
//! the `[clone .isra.0]`-style suffixes of -O2 copies removed so that a function and its clones
//! are one name.
//!
//! Symbolization needs the process alive: results are cached per (pid, address), so a
//! profiler that symbolizes new addresses as they appear (at every report, say) can still name
//! them after the process has exited. Never touches the process beyond reading `/proc`.

use std::{collections::HashMap, num::NonZeroU32, sync::Arc};

use blazesym::{
    Pid,
    symbolize::{
        Input, Symbolized, Symbolizer as Blaze,
        source::{Process, Source},
    },
};

use crate::debuginfo::symbols::demangle_without_params;

/// One frame of a symbolized address, innermost first when an address expands to several
/// (the functions inlined at it, then the function that holds the code).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Demangled, without parameters or clone suffixes; `[unknown]` when nothing names it.
    pub function: Arc<str>,
    /// The name as the file gives it (the linkage name: mangled for C++), for exports that
    /// carry both (pprof's `system_name`); `[unknown]` when nothing names it.
    pub symbol: Arc<str>,
    /// The function was inlined here: it has no frame of its own on the machine stack.
    pub inlined: bool,
    /// `file:line` of the address within `function`, when the DWARF says.
    pub source: Option<Arc<str>>,
}

/// The name given to addresses nothing names (a stripped library without symbols, JIT code, an
/// address of a process that exited before it was symbolized).
pub const UNKNOWN: &str = "[unknown]";

/// A caching symbolizer for the addresses of any number of processes.
pub struct Symbolizer {
    blaze: Blaze,
    /// Whether `/proc/PID/map_files` is readable (CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE); else
    /// the symbolic paths of `/proc/PID/maps` are used, which fail for deleted files.
    map_files: bool,
    cache: HashMap<(u32, u64), Arc<[Frame]>>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    pub fn new() -> Self {
        let blaze = Blaze::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            // Demangled by `debuginfo`, the one demangler, without parameters.
            .enable_demangling(false)
            .build();
        Self {
            blaze,
            map_files: map_files_readable(),
            cache: HashMap::new(),
        }
    }

    /// The frames of every address of `pid`, innermost first per address; cached, so asking
    /// again costs a lookup. `addrs` are absolute addresses as the process sees them. For
    /// return addresses taken from a stack, pass the address minus one, so that the call
    /// instruction is named (a call at the very end of a function would otherwise name the
    /// next one).
    pub fn frames(&mut self, pid: u32, addrs: &[u64]) -> Vec<Arc<[Frame]>> {
        let missing: Vec<u64> = {
            let mut m: Vec<u64> = addrs
                .iter()
                .copied()
                .filter(|a| !self.cache.contains_key(&(pid, *a)))
                .collect();
            m.sort_unstable();
            m.dedup();
            m
        };
        if !missing.is_empty() {
            let symbolized = self.lookup(pid, &missing);
            for (addr, frames) in missing.into_iter().zip(symbolized) {
                self.cache.insert((pid, addr), frames);
            }
        }
        addrs
            .iter()
            .map(|a| self.cache[&(pid, *a)].clone())
            .collect()
    }

    fn lookup(&self, pid: u32, addrs: &[u64]) -> Vec<Arc<[Frame]>> {
        let unknown = || -> Arc<[Frame]> { Arc::from(vec![unknown_frame()]) };
        let Some(nonzero) = NonZeroU32::new(pid) else {
            return addrs.iter().map(|_| unknown()).collect();
        };
        let symbolize = |map_files: bool| {
            let mut process = Process::new(Pid::Pid(nonzero));
            process.map_files = map_files;
            process.perf_map = false;
            let source = Source::Process(process);
            self.blaze
                .symbolize(&source, Input::AbsAddr(addrs))
                .map(|results| results.iter().map(frames_of).collect::<Vec<_>>())
        };
        // `map_files` refused after all (a capability dropped since): the symbolic paths.
        match symbolize(self.map_files).or_else(|e| match self.map_files {
            true => symbolize(false),
            false => Err(e),
        }) {
            Ok(frames) => frames,
            // The process is gone or its maps unreadable: nothing can be named now.
            Err(_) => addrs.iter().map(|_| unknown()).collect(),
        }
    }
}

fn unknown_frame() -> Frame {
    Frame {
        function: Arc::from(UNKNOWN),
        symbol: Arc::from(UNKNOWN),
        inlined: false,
        source: None,
    }
}

/// blazesym lists inlined calls outermost first (`f`, then `g` inlined into `f`, then `h` into
/// `g`); frames are innermost first, like a stack. The symbol's code location is where the
/// address stands in `f` (at the inlined call of `g`), and each inlined function's location is
/// where it stands in that function (the call of the next one; for the innermost, the
/// address's own instruction).
fn frames_of(symbolized: &Symbolized<'_>) -> Arc<[Frame]> {
    let Symbolized::Sym(sym) = symbolized else {
        return Arc::from(vec![unknown_frame()]);
    };
    let location = |info: Option<&blazesym::symbolize::CodeInfo<'_>>| -> Option<Arc<str>> {
        let info = info?;
        let file = info.to_path();
        let file = file.file_name().map_or_else(
            || file.to_string_lossy().into_owned(),
            |n| n.to_string_lossy().into_owned(),
        );
        Some(Arc::from(match info.line {
            Some(line) => format!("{file}:{line}"),
            None => file,
        }))
    };
    let names = std::iter::once(&*sym.name).chain(sym.inlined.iter().map(|f| &*f.name));
    let places = std::iter::once(location(sym.code_info.as_deref()))
        .chain(sym.inlined.iter().map(|f| location(f.code_info.as_ref())));
    let mut frames: Vec<Frame> = names
        .zip(places)
        .enumerate()
        .map(|(depth, (name, source))| Frame {
            function: Arc::from(function_name(name)),
            symbol: Arc::from(name),
            inlined: depth > 0,
            source,
        })
        .collect();
    frames.reverse();
    Arc::from(frames)
}

/// A symbol name as people read it: demangled without parameters, clone suffixes removed.
pub fn function_name(symbol: &str) -> String {
    let name = demangle_without_params(symbol).unwrap_or_else(|| strip_clone_suffix(symbol));
    strip_clone_suffix(&name)
}

/// `f [clone .isra.0]` → `f`, and for names the demangler does not take, `f.cold` → `f`.
fn strip_clone_suffix(name: &str) -> String {
    if let Some(at) = name.find(" [clone ") {
        return name[..at].to_string();
    }
    // C names of clones: `helper.constprop.0`, `helper.cold`, `helper.part.0`.
    for marker in [".isra.", ".constprop.", ".part.", ".cold", ".lto_priv."] {
        if let Some(at) = name.find(marker)
            && at > 0
        {
            return name[..at].to_string();
        }
    }
    name.to_string()
}

/// Whether this thread may read `/proc/PID/map_files` of others (CAP_SYS_ADMIN, or
/// CAP_CHECKPOINT_RESTORE since Linux 5.9). Capabilities belong to threads, and a profiler
/// thread may have dropped what the main thread keeps (the agent's do): so this thread's own
/// status, not the process's (`/proc/self` is the main thread's).
fn map_files_readable() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_CHECKPOINT_RESTORE: u32 = 40;
    let Ok(status) = std::fs::read_to_string("/proc/thread-self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN | 1 << CAP_CHECKPOINT_RESTORE) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_without_parameters_or_clone_suffixes() {
        assert_eq!(
            function_name("_ZN4shop6Ledger7inspectEi"),
            "shop::Ledger::inspect"
        );
        assert_eq!(function_name("_ZL6helperi.isra.0"), "helper");
        assert_eq!(function_name("_Z3fooi.constprop.0"), "foo");
        assert_eq!(function_name("_Z3foov.cold"), "foo");
        assert_eq!(function_name("malloc"), "malloc");
        assert_eq!(function_name("helper.part.0"), "helper");
    }

    /// Our own code, symbolized through our own pid: a function of this test binary is named,
    /// and an address in no mapping is unknown.
    #[test]
    #[inline(never)]
    fn symbolizes_this_process() {
        let here = symbolizes_this_process as *const () as u64;
        let mut symbolizer = Symbolizer::new();
        let pid = std::process::id();
        let frames = symbolizer.frames(pid, &[here, 8]);
        assert!(
            frames[0]
                .iter()
                .any(|f| f.function.contains("symbolizes_this_process")),
            "{:?}",
            frames[0]
        );
        assert_eq!(&*frames[1][0].function, UNKNOWN);
        // Cached: the same answer, without a second lookup.
        assert_eq!(symbolizer.frames(pid, &[here])[0], frames[0]);
    }
}
