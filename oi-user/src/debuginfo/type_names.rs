//! Finding a type's DWARF definition by its C++ name, as a program names its own types at
//! run time: `typeid(T).name()` gives the Itanium-mangled type (`N3app5StateE`), which
//! [`demangle_type`] turns into `app::State`, and [`DebugInfo::find_type`] finds the class,
//! struct or union definition of that name in one binary's DWARF.
//!
//! The demangler and g++'s DWARF spell the same type differently (`unsigned long` against
//! `long unsigned int`, `3ul` against `3`, `> >` against `>>`), so names are compared in the
//! [`canonical`] form, where both spellings meet. Pure: reads the DWARF it is given, nothing
//! else; never guesses (a name that matches no definition is `None`, not the nearest one).

use cpp_demangle::{DemangleOptions, Symbol};

use super::dwarf::{DebugInfo, DieRef, DwarfError};

/// The C++ name of an Itanium-mangled *type* (what `std::type_info::name()` returns with
/// GCC and Clang, e.g. `St6vectorIiSaIiEE`), or `None` if it is not one. A leading `*`
/// (GCC's mark of a type with internal linkage) is ignored.
pub fn demangle_type(mangled: &str) -> Option<String> {
    let mangled = mangled.strip_prefix('*').unwrap_or(mangled);
    if mangled.is_empty() || mangled.starts_with("_Z") {
        return None;
    }
    let sym = Symbol::new(mangled.as_bytes()).ok()?;
    sym.demangle_with_options(&DemangleOptions::new()).ok()
}

/// The spelling in which the demangler's and g++'s names of one type are equal: integer
/// type names in one order (`long unsigned int` → `unsigned long`), integer literals without
/// suffixes (`3ul` → `3`) or casts to an integer type (`(unsigned long)4` → `4`, the
/// demangler's spelling of a template's value argument), `bool` values as words (`(bool)1`
/// → `true`), ABI tags dropped (`[abi:cxx11]`), and one space only between two words
/// (`std::map<int, long> >` → `std::map<int,long>>`).
pub fn canonical(name: &str) -> String {
    let tokens = drop_integer_casts(tokenize(&strip_abi_tags(name)));
    let mut words: Vec<String> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        if is_int_keyword(&tokens[i]) {
            let start = i;
            while i < tokens.len() && is_int_keyword(&tokens[i]) {
                i += 1;
            }
            words.push(integer_type(&tokens[start..i]));
            continue;
        }
        words.push(strip_literal_suffix(&tokens[i]));
        i += 1;
    }
    let mut out = String::with_capacity(name.len());
    for w in &words {
        let word = |s: &str| {
            s.chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        };
        let prev_word = out
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if prev_word && word(w) {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

/// `name` without `[abi:…]` tags.
fn strip_abi_tags(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find("[abi:") {
        out.push_str(&rest[..at]);
        rest = rest[at..].find(']').map_or("", |end| &rest[at + end + 1..]);
    }
    out.push_str(rest);
    out
}

/// Words (identifiers and numbers, with their suffixes) and single punctuation characters;
/// whitespace separates tokens and is dropped.
fn tokenize(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in name.chars() {
        if c.is_alphanumeric() || c == '_' {
            cur.push(c);
            continue;
        }
        if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        if !c.is_whitespace() {
            out.push(c.to_string());
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Template value arguments without their casts: `( T ) N` → `N` when `T` is an integer
/// type (g++ writes `4` where the demangler writes `(unsigned long)4`), and `(bool)0`,
/// `(bool)1` → `false`, `true`. Other casts (`(Color)1`, which both spell so) stay.
fn drop_integer_casts(tokens: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "(" {
            let close = tokens[i + 1..]
                .iter()
                .position(|t| t == ")")
                .map(|k| i + 1 + k);
            if let Some(j) = close {
                let inner = &tokens[i + 1..j];
                let integer = !inner.is_empty() && inner.iter().all(|t| is_int_keyword(t));
                let boolean = matches!(inner, [t] if t == "bool");
                let sign = usize::from(tokens.get(j + 1).is_some_and(|t| t == "-"));
                let literal = tokens
                    .get(j + 1 + sign)
                    .is_some_and(|t| t.starts_with(|c: char| c.is_ascii_digit()));
                if literal && (integer || boolean) {
                    if boolean {
                        let v = strip_literal_suffix(&tokens[j + 1 + sign]);
                        out.push(if v == "0" { "false" } else { "true" }.to_string());
                        i = j + 2 + sign;
                    } else {
                        i = j + 1;
                    }
                    continue;
                }
            }
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    out
}

fn is_int_keyword(t: &str) -> bool {
    matches!(t, "signed" | "unsigned" | "short" | "long" | "int" | "char")
}

/// One spelling of a run of integer keywords, in any order.
fn integer_type(run: &[String]) -> String {
    let has = |k: &str| run.iter().any(|t| t == k);
    let longs = run.iter().filter(|t| *t == "long").count();
    let unsigned = has("unsigned");
    if has("char") {
        return match (unsigned, has("signed")) {
            (true, _) => "unsigned char",
            (false, true) => "signed char",
            _ => "char",
        }
        .to_string();
    }
    let base = if has("short") {
        "short"
    } else if longs >= 2 {
        "long long"
    } else if longs == 1 {
        "long"
    } else {
        "int"
    };
    if unsigned {
        format!("unsigned {base}")
    } else {
        base.to_string()
    }
}

/// `3ul` → `3`, `0x10u` → `0x10`; any other word unchanged.
fn strip_literal_suffix(t: &str) -> String {
    if !t.starts_with(|c: char| c.is_ascii_digit()) {
        return t.to_string();
    }
    t.trim_end_matches(['u', 'U', 'l', 'L']).to_string()
}

/// The scopes and the unqualified name of a qualified name, split at the `::` outside any
/// template argument list or parentheses: `std::map<a::b, c>` → `["std", "map<a::b, c>"]`.
fn split_scopes(name: &str) -> Vec<&str> {
    crate::cpp_name::split(name, "::")
}

impl DebugInfo<'_> {
    /// The definition of the class, struct or union named `name` (a C++ name, spelled as the
    /// demangler or the compiler spells it), the first in unit order whose byte size is
    /// `size` when given; `None` if no definition has that name (and size).
    pub fn find_type(&self, name: &str, size: Option<u64>) -> Result<Option<DieRef>, DwarfError> {
        let scopes = split_scopes(name.trim());
        let leaf = scopes.last().copied().unwrap_or_default();
        let base = leaf
            .split('<')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let want_leaf = canonical(leaf);
        let want = canonical(name);
        let candidates = self.definitions_where(|n| {
            n.split('<').next().unwrap_or_default().trim() == base && canonical(n) == want_leaf
        })?;
        for die in candidates {
            let Some(q) = self.qualified_name(die)? else {
                continue;
            };
            if canonical(&q) != want {
                continue;
            }
            let bytes = self.uint(die, gimli::constants::DW_AT_byte_size)?;
            if size.is_none_or(|s| bytes == Some(s)) {
                return Ok(Some(die));
            }
        }
        Ok(None)
    }

    /// The byte sizes of every definition named `name` (to explain a size mismatch).
    pub fn type_sizes(&self, name: &str) -> Result<Vec<u64>, DwarfError> {
        let scopes = split_scopes(name.trim());
        let want_leaf = canonical(scopes.last().copied().unwrap_or_default());
        let want = canonical(name);
        let mut sizes = Vec::new();
        for die in self.definitions_where(|n| canonical(n) == want_leaf)? {
            if self
                .qualified_name(die)?
                .is_some_and(|q| canonical(&q) == want)
                && let Some(b) = self.uint(die, gimli::constants::DW_AT_byte_size)?
                && !sizes.contains(&b)
            {
                sizes.push(b);
            }
        }
        Ok(sizes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_demangle() {
        assert_eq!(demangle_type("N3app5StateE").as_deref(), Some("app::State"));
        assert_eq!(
            demangle_type("St6vectorIiSaIiEE").as_deref(),
            Some("std::vector<int, std::allocator<int> >")
        );
        assert_eq!(
            demangle_type("*N12_GLOBAL__N_16HiddenE").as_deref(),
            Some("(anonymous namespace)::Hidden")
        );
        assert_eq!(demangle_type("_ZN3app1fEv"), None);
        assert_eq!(demangle_type(""), None);
    }

    #[test]
    fn demangler_and_dwarf_spellings_meet() {
        let same = |a: &str, b: &str| assert_eq!(canonical(a), canonical(b), "{a} vs {b}");
        same(
            "std::array<unsigned long, 3ul>",
            "std::array<long unsigned int, 3>",
        );
        same("Box<unsigned short, 2>", "Box<short unsigned int, 2>");
        same(
            "pair<long long const, unsigned char>",
            "pair<long long int const, unsigned char>",
        );
        same("less<long>", "less<long int>");
        same(
            "vector<int, std::allocator<int> >",
            "vector<int,std::allocator<int>>",
        );
        same("Box<char const*, 2>", "Box<char const *, 2>");
        same("Tagged[abi:cxx11]", "Tagged");
        same("Flag<true>", "Flag<true>");
        assert_ne!(canonical("Box<unsigned int>"), canonical("Box<int>"));
        assert_ne!(canonical("Box<signed char>"), canonical("Box<char>"));
        assert_ne!(canonical("Box<long>"), canonical("Box<long long>"));
        assert_eq!(canonical("unsigned"), "unsigned int");
    }

    #[test]
    fn template_value_arguments_meet_with_and_without_casts() {
        let same = |a: &str, b: &str| assert_eq!(canonical(a), canonical(b), "{a} vs {b}");
        // What `typeid(...).name()` demangles to, against what g++ writes in DWARF.
        let demangled =
            demangle_type("N4absl13InlinedVectorIiLm4ESaIiEEE").expect("a mangled type name");
        same(
            &demangled,
            "absl::InlinedVector<int, 4, std::allocator<int> >",
        );
        let demangled =
            demangle_type("3BoxIiLm4ELb1EL5Color1ELin3EL5Plain1EE").expect("a mangled type name");
        same(&demangled, "Box<int, 4, true, (Color)1, -3, (Plain)1>");
        same("Flags<(bool)0, (bool)1>", "Flags<false, true>");
        same("Shift<(long)-2>", "Shift<-2>");
        assert_ne!(canonical("Box<(unsigned long)4>"), canonical("Box<5>"));
        assert_ne!(canonical("Flags<(bool)0>"), canonical("Flags<true>"));
        // Parentheses that are no cast stay.
        same(
            "app::(anonymous namespace)::Hidden",
            "app::(anonymous namespace)::Hidden",
        );
        assert_ne!(canonical("F<void (int)>"), canonical("F<void>"));
    }

    #[test]
    fn scopes_split_outside_template_arguments() {
        assert_eq!(
            split_scopes("std::map<a::b, c::d>::node"),
            vec!["std", "map<a::b, c::d>", "node"]
        );
        assert_eq!(
            split_scopes("app::(anonymous namespace)::Hidden"),
            vec!["app", "(anonymous namespace)", "Hidden"]
        );
    }
}
