//! Which functions `oi-trace calls` instruments: the entry function, and either every function
//! of the binary that defines it minus the C++ runtime (the default), or every function of any
//! file the process maps whose name matches a `--filter` glob; minus `--exclude` globs.
//!
//! Names are compared demangled, without parameters and without clone suffixes (`shop::parse`
//! for `shop::parse(std::string const&) [clone .isra.0]`); globs know `*` (any run of
//! characters, `::` included) and `?` (one character), through the `wildmatch` crate (small,
//! no dependencies; a full glob engine would add `[...]` classes that collide with names like
//! `f[abi:cxx11]`).
//!
//! The default leaves out (the exact rule, [`runtime_reason`]):
//! - the C++ runtime and standard library: names starting with `std::`, `__gnu_cxx::`,
//!   `__cxxabiv1::`, `__gnu_debug::` (templates instantiated in the binary included);
//! - names reserved to the implementation: starting with `__` or with `_` and an upper-case
//!   letter (`__cxa_throw`, `__libc_csu_init`, `_GLOBAL__sub_I_main`, `_ZTh…` thunks), and the
//!   start-up and tear-down code `_init`, `_fini`, `_start`, `frame_dummy`,
//!   `register_tm_clones`, `deregister_tm_clones`;
//! - thunks (`non-virtual thunk to …`): they only adjust `this` and jump to the function;
//! - `.cold` parts of functions, which are not functions (a jump into one stays in its
//!   function).
//!
//! A `--filter` is explicit, so it may select any of these too (except `.cold` parts).
//!
//! Pure: reads files, never touches a process.

use std::collections::HashMap;

use wildmatch::WildMatch;

use crate::debuginfo::{FunctionSymbol, symbols::defined_functions};
pub use crate::probe::scope::File;

/// A function to instrument.
#[derive(Debug, Clone)]
pub struct Function {
    /// Index into the file list given to [`select`].
    pub file: usize,
    pub symbol: FunctionSymbol,
    /// Demangled, without parameters and clone suffixes: the name in the tree.
    pub name: String,
    /// One of the entry functions (opens a window).
    pub is_entry: bool,
}

/// The `.cold` parts of the functions of one file, by the address range they cover, with the
/// address of the function they belong to (by name, when that function is in the file).
#[derive(Debug, Default, Clone)]
pub struct ColdParts {
    parts: Vec<(u64, u64, Option<u64>)>,
}

impl ColdParts {
    /// The function address whose `.cold` part holds `address`, if one does.
    pub fn owner_of(&self, address: u64) -> Option<Option<u64>> {
        let i = self
            .parts
            .partition_point(|&(start, _, _)| start <= address);
        let &(start, size, owner) = self.parts.get(i.checked_sub(1)?)?;
        (address < start + size.max(1)).then_some(owner)
    }

    /// The `.cold` parts that belong to the function at `owner`: (address, size).
    pub fn of(&self, owner: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.parts
            .iter()
            .filter(move |p| p.2 == Some(owner))
            .map(|&(a, s, _)| (a, s))
    }
}

/// The user's globs.
#[derive(Debug, Default)]
pub struct Patterns {
    filters: Vec<WildMatch>,
    excludes: Vec<WildMatch>,
}

impl Patterns {
    pub fn new(filters: &[String], excludes: &[String]) -> Self {
        Self {
            filters: filters.iter().map(|g| WildMatch::new(g)).collect(),
            excludes: excludes.iter().map(|g| WildMatch::new(g)).collect(),
        }
    }

    pub fn has_filters(&self) -> bool {
        !self.filters.is_empty()
    }

    fn keeps(&self, name: &str, default_reason: Option<&str>) -> bool {
        if self.excludes.iter().any(|g| g.matches(name)) {
            return false;
        }
        if self.filters.is_empty() {
            default_reason.is_none()
        } else {
            self.filters.iter().any(|g| g.matches(name))
        }
    }
}

/// The name a function has in the tree: the core's (demangled without parameters, return type
/// and clone suffixes).
pub fn tree_name(mangled: &str) -> String {
    crate::symbolize::function_name(mangled)
}

/// Whether a symbol names a `.cold` part (`f.cold`, `_Z1fv.cold.3`, `f.part.0.cold`).
pub fn is_cold_part(mangled: &str) -> bool {
    mangled.split('.').skip(1).any(|part| part == "cold")
}

/// Why the default set leaves a function out, or `None` when it keeps it (module doc).
pub fn runtime_reason(mangled: &str, demangled: &str, name: &str) -> Option<&'static str> {
    const RUNTIME_NAMESPACES: [&str; 4] = ["std::", "__gnu_cxx::", "__cxxabiv1::", "__gnu_debug::"];
    const STARTUP: [&str; 6] = [
        "_init",
        "_fini",
        "_start",
        "frame_dummy",
        "register_tm_clones",
        "deregister_tm_clones",
    ];
    if is_cold_part(mangled) {
        return Some("a .cold part");
    }
    if RUNTIME_NAMESPACES.iter().any(|ns| name.starts_with(ns)) {
        return Some("the C++ standard library");
    }
    if demangled.contains("thunk to ") || mangled.starts_with("_ZT") {
        return Some("a thunk");
    }
    let reserved = name.starts_with("__")
        || (name.starts_with('_') && name[1..].starts_with(|c: char| c.is_ascii_uppercase()));
    if reserved || STARTUP.contains(&name) {
        return Some("the C and C++ runtime");
    }
    None
}

/// What [`select`] found.
pub struct Selection {
    pub functions: Vec<Function>,
    /// Per file (same index as the file list): its `.cold` parts.
    pub cold: Vec<ColdParts>,
}

/// Picks the functions to instrument among `files`. `entry` is the set of (file index, address)
/// of the entry function(s); `entry_files` the files that define them (the default set's
/// scope). Entry functions are always kept.
pub fn select(
    files: &[File],
    entries: &[(usize, u64)],
    patterns: &Patterns,
) -> Result<Selection, crate::debuginfo::SymbolError> {
    let mut functions = Vec::new();
    let mut cold = Vec::with_capacity(files.len());
    for (index, file) in files.iter().enumerate() {
        let symbols = defined_functions(&file.binary)?;
        let defines_entry = entries.iter().any(|&(f, _)| f == index);
        let mut by_name: HashMap<&str, u64> = HashMap::new();
        for s in &symbols {
            if !is_cold_part(&s.mangled) {
                by_name.insert(&s.mangled, s.address);
            }
        }
        let mut parts: Vec<(u64, u64, Option<u64>)> = symbols
            .iter()
            .filter(|s| is_cold_part(&s.mangled))
            .map(|s| {
                let owner = s
                    .mangled
                    .find(".cold")
                    .and_then(|i| by_name.get(&s.mangled[..i]).copied());
                (s.address, s.size, owner)
            })
            .collect();
        parts.sort_unstable();
        cold.push(ColdParts { parts });
        // The default set covers the entry's own binary; filters may reach any file.
        if !defines_entry && !patterns.has_filters() {
            continue;
        }
        for symbol in symbols {
            if is_cold_part(&symbol.mangled) {
                continue;
            }
            let is_entry = entries.contains(&(index, symbol.address));
            let name = tree_name(&symbol.mangled);
            let keep = is_entry
                || patterns.keeps(
                    &name,
                    runtime_reason(&symbol.mangled, &symbol.demangled, &name),
                );
            if keep {
                functions.push(Function {
                    file: index,
                    symbol,
                    name,
                    is_entry,
                });
            }
        }
    }
    Ok(Selection { functions, cold })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(mangled: &str) -> Option<&'static str> {
        let demangled = crate::debuginfo::symbols::demangle(mangled);
        runtime_reason(mangled, &demangled, &tree_name(mangled))
    }

    #[test]
    fn the_runtime_rule() {
        for kept in [
            "_ZN4shop6handleEi",
            "_ZN4shop5parseEi.isra.0",
            "main",
            "work",
            "_ZZ4mainENKUlvE_clEv",
            "_ZN4shop6LedgerC2Ev",
            "_Znwm", // a replacement operator new in the program is the program's
        ] {
            assert_eq!(reason(kept), None, "{kept}");
        }
        for (left, why) in [
            (
                "_ZNSt6vectorIiSaIiEE9push_backERKi",
                "the C++ standard library",
            ),
            (
                "_ZN9__gnu_cxx13new_allocatorIiE8allocateEmPKv",
                "the C++ standard library",
            ),
            ("__cxa_throw", "the C and C++ runtime"),
            ("__libc_csu_init", "the C and C++ runtime"),
            ("_GLOBAL__sub_I_main", "the C and C++ runtime"),
            (
                "_Z41__static_initialization_and_destruction_0ii",
                "the C and C++ runtime",
            ),
            ("_start", "the C and C++ runtime"),
            ("frame_dummy", "the C and C++ runtime"),
            ("_ZThn8_N4shop4Dog5speakEv", "a thunk"),
            ("_ZN4shop5parseEi.cold", "a .cold part"),
            ("work.part.0.cold", "a .cold part"),
        ] {
            assert_eq!(reason(left), Some(why), "{left}");
        }
    }

    #[test]
    fn tree_names_drop_parameters_and_clone_suffixes() {
        assert_eq!(tree_name("_ZN4shop5parseEi.isra.0"), "shop::parse");
        assert_eq!(tree_name("_Z3fooi.part.0.constprop.0"), "foo");
        assert_eq!(tree_name("work.part.0"), "work");
        assert_eq!(tree_name("main"), "main");
        assert!(is_cold_part("_Z3foov.cold"));
        assert!(is_cold_part("foo.cold.1"));
        assert!(!is_cold_part("_ZN4shop8coldplayEv"));
    }

    #[test]
    fn globs_match_qualified_names() {
        let p = Patterns::new(
            &["shop::*".into(), "*::parse".into()],
            &["shop::skip*".into()],
        );
        assert!(p.keeps("shop::handle", None));
        assert!(p.keeps("other::parse", None));
        assert!(!p.keeps("shop::skip_me", None));
        assert!(!p.keeps("other::handle", None));
        // A filter is explicit: it may select what the default leaves out.
        let std = Patterns::new(&["std::vector*".into()], &[]);
        assert!(std.keeps(
            "std::vector<int>::push_back",
            Some("the C++ standard library")
        ));
        let default = Patterns::new(&[], &["*::debug*".into()]);
        assert!(default.keeps("shop::handle", None));
        assert!(!default.keeps("shop::handle", Some("a thunk")));
        assert!(!default.keeps("shop::debug_dump", None));
    }

    #[test]
    fn cold_parts_belong_to_their_function() {
        let parts = ColdParts {
            parts: vec![(0x100, 0x10, Some(0x40)), (0x200, 0x20, None)],
        };
        assert_eq!(parts.owner_of(0x105), Some(Some(0x40)));
        assert_eq!(parts.owner_of(0x210), Some(None));
        assert_eq!(parts.owner_of(0x110), None);
        assert_eq!(parts.owner_of(0x50), None);
        assert_eq!(parts.of(0x40).collect::<Vec<_>>(), [(0x100, 0x10)]);
    }
}
