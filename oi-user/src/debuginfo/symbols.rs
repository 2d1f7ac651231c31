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
    // Demangling every symbol of a large program costs far more than the rest of the lookup;
    // a substring test leaves only the few symbols that can match to demangle.
    let required = required_identifier(&query);
    let mut found: Vec<FunctionSymbol> = Vec::new();
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if required.is_some_and(|id| !name.contains(id)) {
            continue;
        }
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
                // A symbol outside its section (a damaged file) is skipped.
                sym.address().checked_sub(s.address())?.checked_add(off)
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

/// Words cpp_demangle writes itself rather than copying them from the mangled name: builtin
/// types, keywords of expressions and special names, and the classes `std` abbreviates (`Sa`,
/// `Sb`, `Ss`, `Si`, `So`, `Sd`). Every other identifier of a demangled name was spelled out
/// in the mangled one.
const DEMANGLER_WORDS: &str = "\
    _Accum _BitInt _Fract _Sat __float128 __int128 __vector abi alias alignof allocator \
    anonymous auto basic_iostream basic_istream basic_ostream basic_string bfloat16_t \
    block bool char char16_t char32_t char8_t char_traits class clone complex const \
    const_cast construction constructors decimal128 decimal32 decimal64 decltype delete \
    destructors double dynamic_cast enum false float for function global guard half \
    hidden imaginary in init int invocation iostream istream java keyed lambda literal \
    long name namespace new noexcept non nullptr nullptr_t offset operator ostream \
    override parm reference reinterpret_cast resource restrict short signed sizeof \
    static_cast std string template temporary this throw thunk to transaction true type \
    typeid typeinfo union unnamed unsigned variable virtual void volatile vtable vtt \
    wchar_t wrapper";

/// An identifier that every symbol [`matches`] accepts for the (normalized) `query` contains
/// verbatim, so that only those few symbols need demangling: the function's own name, which
/// the Itanium ABI spells out as `<length><name>` (`gen::f4999_0` is `_ZN3gen7f4999_0…`);
/// for a mangled or C query, a piece of the query. `None` where that cannot be relied on:
/// operators, lambdas and other `{…}` names, words of [`DEMANGLER_WORDS`], non-ASCII names,
/// and anything this reading cannot take apart.
fn required_identifier(query: &str) -> Option<&str> {
    if !query.is_ascii() || query.contains("operator") || query.contains('{') {
        return None;
    }
    // Template arguments and ABI tags follow the name (`f<int>[abi:cxx11]`).
    let mut name = last_component(query)?;
    let name = loop {
        let trimmed = name.trim_end();
        name = match trimmed.as_bytes().last() {
            Some(b'>') => strip_trailing_group(trimmed, b'<', b'>')?,
            Some(b']') => strip_trailing_group(trimmed, b'[', b']')?,
            _ => break trimmed,
        };
    };
    // A return type may precede it (`void f<int>`).
    let id = name
        .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
        .next()?;
    let spelled_by_demangler = DEMANGLER_WORDS.split_ascii_whitespace().any(|w| w == id)
        || id.starts_with("_Float")
        || id.starts_with(|c: char| c.is_ascii_digit());
    (!id.is_empty() && !spelled_by_demangler).then_some(id)
}

/// The last `::`-separated component of a function name before its parameter list, brackets
/// balanced (`ns::f<a::b>(int)` gives `f<a::b>`); `None` if the brackets do not balance.
fn last_component(query: &str) -> Option<&str> {
    const ANONYMOUS: &str = "(anonymous namespace)";
    let bytes = query.as_bytes();
    let mut depth = 0u32;
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'(' if query[i..].starts_with(ANONYMOUS) => i += ANONYMOUS.len() - 1,
            b'(' if depth == 0 => return Some(&query[start..i]),
            b'<' | b'(' | b'[' => depth += 1,
            b'>' | b')' | b']' => depth = depth.checked_sub(1)?,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    Some(&query[start..])
}

/// `s` without the bracketed group it ends with (`f<a<b>>` gives `f`).
fn strip_trailing_group(s: &str, open: u8, close: u8) -> Option<&str> {
    let mut depth = 0u32;
    for (i, &b) in s.as_bytes().iter().enumerate().rev() {
        if b == close {
            depth += 1;
        } else if b == open {
            depth -= 1;
            if depth == 0 {
                return Some(&s[..i]);
            }
        }
    }
    None
}

/// Demangles a C++ name; other names come back unchanged.
pub fn demangle(name: &str) -> String {
    Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle().ok())
        .unwrap_or_else(|| name.to_string())
}

/// Demangles a C++ name without its parameter list and return type (`ns::C::f`); `None` for
/// names that are not mangled C++.
pub fn demangle_without_params(name: &str) -> Option<String> {
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
    fn required_identifier_is_the_function_name() {
        let cases = [
            ("gen::f4999_0", Some("f4999_0")),
            ("shop::Ledger::inspect(int) const", Some("inspect")),
            ("ns::f<a::b<c>>(std::map<int, int>)", Some("f")),
            ("void ns::f<int>[abi:cxx11](int)", Some("f")),
            ("std::vector<int> ns::X::g<int>()", Some("g")),
            ("shop::Ledger::~Ledger()", Some("Ledger")),
            ("(anonymous namespace)::helper(int)", Some("helper")),
            (
                "_ZN4shop6Ledger7inspectEi",
                Some("_ZN4shop6Ledger7inspectEi"),
            ),
            ("std::allocator<char>::allocator()", None),
            ("std::basic_string<char>::~basic_string", None),
            ("shop::Ledger::operator==(shop::Ledger const&)", None),
            ("main::{lambda()#1}::operator()() const", None),
            ("f>(int)", None),
            ("decltype(auto) std::get<0>(std::tuple<int>&)", None),
            ("void (*ns::f<int>(int))(int)", None),
        ];
        for (query, want) in cases {
            assert_eq!(required_identifier(&normalize(query)), want, "{query}");
        }
    }

    /// Every symbol that matches a query contains the identifier required of it: checked on
    /// names that stress the mangling (substitutions, std abbreviations, templates, clones).
    #[test]
    fn required_identifier_never_rejects_a_match() {
        let names = [
            "_ZN4shop6Ledger7inspectEi",
            "_ZN3gen7f4999_0ERKNS_5T4999E",
            "_ZNSaIcEC2Ev",
            "_ZNSaIcED1Ev",
            "_ZNSsC1ERKSs",
            "_ZNSsD2Ev",
            "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEC2EPKcRKS3_",
            "_ZNSt6vectorIiSaIiEE9push_backERKi",
            "_ZNSt6vectorIiSaIiEEC2ERKS1_",
            "_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE4sizeEv",
            "_ZNSolsEi",
            "_ZNSo5flushEv",
            "_ZNSiD0Ev",
            "_ZNSdC1EPSt15basic_streambufIcSt11char_traitsIcEE",
            "_Z1fIiEvT_",
            "_ZN1A1fIiEEvT_",
            "_ZN2ns1fB5cxx11Ev",
            "_ZZ1gvEN1S1hEv",
            "_ZN12_GLOBAL__N_16helperEi",
            "_ZThn8_N4shop4Dog5speakEv",
            "_ZN4shop6LedgerD2Ev",
            "_Z3fooi.constprop.0",
            "_Z3foov.cold",
            "_ZN4shop6LedgereqERKS0_",
            "_ZZ4mainENKUlvE_clEv",
            "_ZNKSt4hashIiEclEi",
            "_ZNSt8__detail9__variant7__get_nILm1ERNS0_15_Variadic_unionIJiNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEEEEEEDcOT0_",
            "_ZN1A1fIiEEPFviET_",
            "_ZN1A1fIiEEMNS_1BEFivET_",
            "_ZSt4moveIRiEONSt16remove_referenceIT_E4typeEOS2_",
            "work",
            "_GLOBAL__sub_I_main.cpp",
        ];
        for name in names {
            let full = normalize(&demangle(name));
            let bare = demangle_without_params(name).map(|b| normalize(&b));
            for query in [Some(name.to_string()), Some(full), bare]
                .into_iter()
                .flatten()
            {
                assert!(matches(name, &query).is_some(), "{name} vs {query}");
                if let Some(id) = required_identifier(&query) {
                    assert!(
                        name.contains(id),
                        "{name} lacks {id:?} required by {query:?}"
                    );
                }
            }
        }
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
