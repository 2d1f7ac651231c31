//! Function symbols: find what the user named, mangled or demangled, with or without its
//! parameter list, and say where it lives in the file (the offset uprobes attach to).

use cpp_demangle::{DemangleOptions, Symbol};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _, SymbolKind};

use super::{Binary, ElfError};

/// A function found in a binary's symbol tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSymbol {
    /// The name as stored in the ELF (mangled for C++).
    pub mangled: String,
    /// Demangled with parameters (`shop::Ledger::inspect(int) const`); equals `mangled` for C.
    pub demangled: String,
    /// ELF virtual address (`st_value`).
    pub address: u64,
    pub size: u64,
    /// Offset of the first instruction in the file: what the kernel's uprobe wants.
    pub file_offset: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error(transparent)]
    Elf(#[from] ElfError),
}

/// Every defined function in `binary` whose name matches `query` (see [`matches`]), one entry
/// per address (aliases such as C1/C2 constructors collapse).
pub fn find_function(binary: &Binary, query: &str) -> Result<Vec<FunctionSymbol>, SymbolError> {
    let obj = binary.object()?;
    let query = normalize(query);
    let mut found: Vec<FunctionSymbol> = Vec::new();
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        let Some(demangled) = matches(name, &query) else {
            continue;
        };
        if found.iter().any(|f| f.address == sym.address()) {
            continue;
        }
        let Some(file_offset) = sym
            .section_index()
            .and_then(|i| obj.section_by_index(i).ok())
            .and_then(|s| {
                let (off, _) = s.file_range()?;
                Some(sym.address() - s.address() + off)
            })
        else {
            continue;
        };
        found.push(FunctionSymbol {
            mangled: name.to_string(),
            demangled,
            address: sym.address(),
            size: sym.size(),
            file_offset,
        });
    }
    Ok(found)
}

/// The demangled names (with parameters) of every function `binary` defines, without repeats.
pub fn function_names(binary: &Binary) -> Result<Vec<String>, SymbolError> {
    let obj = binary.object()?;
    let mut names: Vec<String> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && !s.is_undefined() && s.address() != 0)
        .filter_map(|s| s.name().ok().map(demangle))
        .collect();
    names.sort_unstable();
    names.dedup();
    Ok(names)
}

/// Whether `binary` has a symbol table (`.symtab`); `strip` removes it.
pub fn has_symbol_table(binary: &Binary) -> bool {
    binary
        .object()
        .is_ok_and(|obj| obj.section_by_name(".symtab").is_some())
}

/// The at most `n` names among `names` (demangled, with parameters) closest to what the user
/// typed, by edit distance; a query without a parameter list is compared with the names
/// without theirs. Names too far to be a slip of the keyboard are left out.
pub fn closest(query: &str, names: &[String], n: usize) -> Vec<String> {
    let query = normalize(query);
    let with_params = query.contains('(');
    let limit = (query.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &String)> = names
        .iter()
        .filter_map(|name| {
            let full = normalize(name);
            let compared = if with_params {
                full
            } else {
                full.split_once('(')
                    .map_or(full.clone(), |(bare, _)| bare.to_string())
            };
            let d = edit_distance(&query, &compared);
            (d <= limit).then_some((d, name))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(n)
        .map(|(_, name)| name.clone())
        .collect()
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Far longer or shorter names cannot be close; skip the quadratic work.
    if a.len().abs_diff(b.len()) > a.len().max(b.len()) / 2 + 2 {
        return usize::MAX;
    }
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != cb))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Whether the ELF symbol `name` is what the (normalized) `query` names; returns its demangled
/// form. A query matches the mangled name, the demangled name with parameters, or the
/// demangled name without them (`ns::C::f` matches every overload of `ns::C::f`).
pub fn matches(name: &str, query: &str) -> Option<String> {
    let demangled = demangle(name);
    if name == query || normalize(&demangled) == query {
        return Some(demangled);
    }
    let bare = demangle_without_params(name)?;
    (normalize(&bare) == query).then_some(demangled)
}

/// Demangles a C++ name; other names come back unchanged.
pub fn demangle(name: &str) -> String {
    Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle().ok())
        .unwrap_or_else(|| name.to_string())
}

fn demangle_without_params(name: &str) -> Option<String> {
    let sym = Symbol::new(name).ok()?;
    sym.demangle_with_options(&DemangleOptions::new().no_params().no_return_type())
        .ok()
}

/// Removes spaces that do not separate two identifier characters, so that
/// `f(int, char const*)` and `f(int,char const *)` compare equal.
pub fn normalize(name: &str) -> String {
    let chars: Vec<char> = name.trim().chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(chars.len());
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let prev = out.chars().last();
            let next = chars[i + 1..].iter().find(|&&c| c != ' ').copied();
            if matches!((prev, next), (Some(p), Some(n)) if ident(p) && ident(n)) {
                out.push(' ');
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_drops_only_insignificant_spaces() {
        assert_eq!(normalize(" f(int, char const *) "), "f(int,char const*)");
        assert_eq!(normalize("unsigned long"), "unsigned long");
    }

    #[test]
    fn closest_names_by_edit_distance() {
        let names: Vec<String> = [
            "shop::inspect(shop::Ledger const&, long)",
            "shop::Ledger::audit(long) const",
            "shop::price(int)",
            "shop::price(double)",
            "main",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            closest("shop::inspectt", &names, 3),
            ["shop::inspect(shop::Ledger const&, long)"]
        );
        assert_eq!(
            closest("shop::prize", &names, 3),
            ["shop::price(double)", "shop::price(int)"]
        );
        assert_eq!(
            closest("shop::price(lnog)", &names, 3),
            ["shop::price(int)"]
        );
        assert!(closest("something::else::entirely", &names, 3).is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn matches_mangled_demangled_and_bare() {
        let m = "_ZN4shop6Ledger7inspectEi";
        assert_eq!(matches(m, m).as_deref(), Some("shop::Ledger::inspect(int)"));
        assert!(matches(m, &normalize("shop::Ledger::inspect(int)")).is_some());
        assert!(matches(m, "shop::Ledger::inspect").is_some());
        assert!(matches(m, "shop::Ledger::insp").is_none());
        assert!(matches("work", "work").is_some());
    }
}
