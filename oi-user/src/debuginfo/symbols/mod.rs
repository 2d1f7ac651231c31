//! Function symbols: find what the user named, mangled or demangled, with or without its
//! parameter list, and say where it lives in the file (the offset uprobes attach to).
//! g++'s `.cold` parts are never a function of their own (see [`cold_part`]).

use cpp_demangle::Symbol;
use object::{Object as _, ObjectSection as _, ObjectSymbol as _, SymbolKind};

use super::{Binary, ElfError};
use crate::cpp_name;

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

/// Every defined function in `binary` whose name matches `query` (see [`Query`]), one entry
/// per address (aliases such as C1/C2 constructors collapse), with how well it matches. The
/// `.cold` parts g++ splits off functions are never among them: they are no function's
/// entry (see [`cold_part`]); its clones (`.isra`, `.constprop`, `.part`) are.
pub fn find_functions(binary: &Binary, query: &Query) -> Result<Vec<Found>, SymbolError> {
    let obj = binary.object()?;
    // Demangling every symbol of a large program costs far more than the rest of the lookup;
    // a substring test leaves only the few symbols that can match to demangle.
    let required = query.required_identifier();
    let mut found: Vec<Found> = Vec::new();
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if required.is_some_and(|id| !name.contains(id)) || is_cold_part(name) {
            continue;
        }
        let Some((fit, demangled)) = query.fit(name) else {
            continue;
        };
        if found.iter().any(|f| f.symbol.address == sym.address()) {
            continue;
        }
        found.extend(function_symbol(&obj, &sym, demangled).map(|symbol| Found { symbol, fit }));
    }
    Ok(found)
}

/// A variable with a fixed address (a global, a namespace-scope or static member variable)
/// found in a binary's symbol tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariableSymbol {
    pub mangled: String,
    /// Demangled (`shop::(anonymous namespace)::hidden`); equals `mangled` for C.
    pub demangled: String,
    /// ELF virtual address (`st_value`).
    pub address: u64,
    pub fit: Fit,
}

/// Every defined data object in `binary` whose name matches `query` as a function's name
/// would ([`Query`]: unique suffixes, anonymous namespaces left out unless typed), one entry
/// per address. The compiler's own objects (vtables, type infos, guard variables, TLS
/// wrappers) are never among them.
pub fn find_variables(binary: &Binary, query: &Query) -> Result<Vec<VariableSymbol>, SymbolError> {
    let obj = binary.object()?;
    let required = query.required_identifier();
    let mut found: Vec<VariableSymbol> = Vec::new();
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if sym.kind() != SymbolKind::Data || sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if required.is_some_and(|id| !name.contains(id)) || is_special_object(name) {
            continue;
        }
        // A variable whose type mentions std::string carries g++'s ABI tag in its symbol
        // (`shop::tagged[abi:cxx11]`), which no one types and DWARF does not name.
        let fitted = match query.fit(name) {
            Some((fit, demangled)) => Some((fit, without_abi_tags(&demangled))),
            None => query.fit(&without_abi_tags(&demangle(name))),
        };
        let Some((fit, demangled)) = fitted else {
            continue;
        };
        if found.iter().any(|f| f.address == sym.address()) {
            continue;
        }
        found.push(VariableSymbol {
            mangled: name.to_string(),
            demangled,
            address: sym.address(),
            fit,
        });
    }
    Ok(found)
}

/// `name` without g++'s ABI tags (`[abi:cxx11]`).
fn without_abi_tags(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find("[abi:") {
        out.push_str(&rest[..at]);
        match rest[at..].find(']') {
            Some(end) => rest = &rest[at + end + 1..],
            None => {
                rest = &rest[at..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The Itanium ABI's special names (`_ZTV` vtable, `_ZTI`/`_ZTS` type info, `_ZTT` VTT,
/// `_ZTH`/`_ZTW` TLS init and wrapper, `_ZGV` guard variable, `_ZGR` lifetime-extended
/// temporary): objects of the compiler, no variable of the program.
fn is_special_object(mangled: &str) -> bool {
    ["_ZT", "_ZGV", "_ZGR"]
        .iter()
        .any(|p| mangled.starts_with(p))
}

/// [`find_functions`], keeping the best fits only (exact names over unique suffixes).
pub fn find_function(binary: &Binary, query: &str) -> Result<Vec<FunctionSymbol>, SymbolError> {
    let found = find_functions(binary, &Query::parse(query))?;
    let best = found.iter().map(|f| f.fit).min();
    Ok(found
        .into_iter()
        .filter(|f| Some(f.fit) == best)
        .map(|f| f.symbol)
        .collect())
}

/// A function symbol that matched a query, and how.
#[derive(Debug, Clone)]
pub struct Found {
    pub symbol: FunctionSymbol,
    pub fit: Fit,
}

/// How a name matched what the user typed; the better fit sorts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fit {
    /// The whole qualified name (or the mangled name), anonymous namespaces aside.
    Exact,
    /// Its last components (`DBImpl::Write` for `leveldb::DBImpl::Write`).
    Suffix,
}

/// The mangled name of the function a clone was made of: `f.isra.0`, `f.constprop.0.isra.0`
/// and `f.part.0` all give `f`. (`.cold` parts are no clones: see [`cold_part`].)
pub fn base_name(mangled: &str) -> &str {
    const CLONES: [&str; 4] = [".isra.", ".constprop.", ".part.", ".lto_priv."];
    CLONES
        .iter()
        .filter_map(|c| mangled.find(c))
        .min()
        .map_or(mangled, |at| &mangled[..at])
}

/// `isra.0`, `constprop.0.isra.0`: what g++ appended to make a clone, if anything.
pub fn clone_suffix(mangled: &str) -> Option<&str> {
    let base = base_name(mangled);
    (base.len() < mangled.len()).then(|| &mangled[base.len() + 1..])
}

/// The `.cold` part g++ split off `function` (its unlikely paths), if there is one.
pub fn cold_part(binary: &Binary, function: &FunctionSymbol) -> Option<FunctionSymbol> {
    let obj = binary.object().ok()?;
    let name = format!("{}.cold", function.mangled);
    obj.symbols()
        .filter(|s| s.kind() == SymbolKind::Text && !s.is_undefined())
        .find(|s| s.name() == Ok(name.as_str()))
        .and_then(|s| function_symbol(&obj, &s, demangle(&name)))
}

/// Whether the ELF symbol `name` is a `.cold` part (`f.cold`, `f.isra.0.cold`).
fn is_cold_part(name: &str) -> bool {
    name.ends_with(".cold") || name.contains(".cold.")
}

/// A function symbol of `obj`, with its file offset; `None` if it lies outside its section
/// (a damaged file).
fn function_symbol<'data>(
    obj: &object::File<'data>,
    sym: &object::Symbol<'data, '_>,
    demangled: String,
) -> Option<FunctionSymbol> {
    let file_offset = sym
        .section_index()
        .and_then(|i| obj.section_by_index(i).ok())
        .and_then(|s| {
            let (off, _) = s.file_range()?;
            sym.address().checked_sub(s.address())?.checked_add(off)
        })?;
    Some(FunctionSymbol {
        mangled: sym.name().ok()?.to_string(),
        demangled,
        address: sym.address(),
        size: sym.size(),
        file_offset,
    })
}

/// Every function `binary` defines (text symbols with an address), one entry per address: the
/// first name found for it, preferring the static symbol table. What the call-tree profiler
/// instruments when no filter narrows it.
pub fn defined_functions(binary: &Binary) -> Result<Vec<FunctionSymbol>, SymbolError> {
    let obj = binary.object()?;
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() || !seen.insert(sym.address()) {
            continue;
        }
        found.extend(function_symbol(&obj, &sym, demangle(name)));
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
/// typed, ranked by the qualified name's last components first: the function's own name,
/// then its class and namespaces from the inside out, then the parameter list (so
/// `DBImpl::Write(int)` brings every `DBImpl::Write` overload before anything else). Names
/// whose own name is too far from the query's to be a slip of the keyboard are left out.
pub fn closest(query: &str, names: &[String], n: usize) -> Vec<String> {
    let query = Query::parse(query);
    let q_parts = components(&query.qualified);
    let Some((q_last, q_rest)) = q_parts.split_last() else {
        return Vec::new();
    };
    let limit = (q_last.chars().count() / 3).max(2);
    let rest_limit = (q_rest.iter().map(|c| c.chars().count()).sum::<usize>() / 3).max(2);
    let mut scored: Vec<((usize, usize, usize), &String)> = names
        .iter()
        .filter_map(|name| {
            let (qualified, params, _) = split_function_name(&normalize(name));
            let qualified = without_anonymous(&qualified);
            let parts = components(&qualified);
            let (last, rest) = parts.split_last()?;
            let d_last = edit_distance(q_last, last);
            if d_last > limit {
                return None;
            }
            // The query's outer components against the name's, from the inside out.
            let d_rest: usize = q_rest
                .iter()
                .rev()
                .zip(rest.iter().rev().map(Some).chain(std::iter::repeat(None)))
                .map(|(q, c)| c.map_or(q.chars().count(), |c| edit_distance(q, c).min(q.len())))
                .sum();
            if d_rest > rest_limit {
                return None;
            }
            let d_params = match (&query.params, params) {
                (Some(q), Some(p)) => edit_distance(q, &p).min(q.len().max(p.len())),
                _ => 0,
            };
            Some(((d_last, d_rest, d_params), name))
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

/// Whether the ELF symbol `name` is what `query` names; returns its demangled form. See
/// [`Query`] for what matches.
pub fn matches(name: &str, query: &str) -> Option<String> {
    Query::parse(query)
        .fit(name)
        .map(|(_, demangled)| demangled)
}

/// What the user typed to name a function, parsed once: a mangled name, or a qualified name
/// with or without its parameter list. A name matches when
/// - it is the mangled name, or a clone of it (`_Z1fi` matches `_Z1fi.isra.0`);
/// - its qualified name is the query's, or ends with it at a `::` (`DBImpl::Write` matches
///   `leveldb::DBImpl::Write`), anonymous namespaces left out unless typed;
/// - and, if the query has a parameter list, the same parameter list, spelled either way
///   (`const T&` is `T const&`, `std::string` is its `basic_string`); trailing qualifiers
///   (`const`) are compared only when typed.
#[derive(Debug, Clone)]
pub struct Query {
    /// The query as typed, spaces normalized.
    raw: String,
    /// The qualified name without parameters.
    qualified: String,
    /// The parameter list, canonical, without its parentheses.
    params: Option<String>,
    /// What follows the parameter list (`const`), if typed.
    qualifiers: Option<String>,
}

impl Query {
    pub fn parse(query: &str) -> Self {
        let raw = normalize(query);
        let (qualified, params, qualifiers) = split_function_name(&raw);
        Self {
            qualified,
            params: params.map(|p| canonical_params(&p)),
            qualifiers: qualifiers.filter(|q| !q.is_empty()),
            raw,
        }
    }

    /// An identifier every matching symbol's name contains verbatim (see
    /// [`required_identifier`]).
    pub fn required_identifier(&self) -> Option<&str> {
        required_identifier(&self.raw)
    }

    /// How the ELF or DWARF linkage name `name` matches; with its demangled form.
    pub fn fit(&self, name: &str) -> Option<(Fit, String)> {
        let demangled = demangle(name);
        if name == self.raw || base_name(name) == self.raw {
            return Some((Fit::Exact, demangled));
        }
        let (qualified, params, qualifiers) = split_function_name(&normalize(&demangled));
        if let Some(q) = &self.params {
            if params.map(|p| canonical_params(&p)).as_ref() != Some(q) {
                return None;
            }
            if self.qualifiers.is_some() && qualifiers != self.qualifiers {
                return None;
            }
        }
        let mut forms = vec![qualified.clone()];
        if !self.qualified.contains(ANONYMOUS) {
            forms.push(without_anonymous(&qualified));
        }
        // `basic_json::push_back` for `basic_json<std::map, …>::push_back`: class templates
        // are typed without their arguments.
        if !self.qualified.contains('<') {
            let bare: Vec<String> = forms.iter().map(|f| without_template_args(f)).collect();
            forms.extend(bare);
        }
        let q_parts = components(&self.qualified);
        let fit = if forms.contains(&self.qualified) {
            Fit::Exact
        } else if forms.iter().any(|f| {
            f.ends_with(&self.qualified) && f[..f.len() - self.qualified.len()].ends_with("::")
        }) || forms
            .iter()
            .any(|f| skips_inner_namespaces(&q_parts, &components(f)))
        {
            Fit::Suffix
        } else if demangle_without_params(name).is_some_and(|b| normalize(&b) == self.raw) {
            // What the demangler gives without parameters (`f()::S::g() const`), verbatim.
            Fit::Exact
        } else {
            return None;
        };
        Some((fit, demangled))
    }
}

const ANONYMOUS: &str = "(anonymous namespace)";

/// `a::b<c::d>::f<int>` without template argument lists: `a::b::f`.
fn without_template_args(qualified: &str) -> String {
    let mut out = String::with_capacity(qualified.len());
    let mut depth = 0u32;
    for (i, c) in qualified.char_indices() {
        match c {
            // `operator<`, `operator<<`: no argument list.
            '<' if qualified[..i].ends_with("operator")
                || qualified[..i].ends_with("operator<") =>
            {
                out.push(c)
            }
            '<' => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Whether the typed components name the candidate's with inner namespaces left out (the
/// inline ones, such as `json_abi_v3_11_2` or `__cxx11`): the first, the last and the one
/// before it (the class) must be the candidate's, the rest in order among those between.
fn skips_inner_namespaces(typed: &[String], candidate: &[String]) -> bool {
    let (Some(tf), Some(tl), Some(cf), Some(cl)) = (
        typed.first(),
        typed.last(),
        candidate.first(),
        candidate.last(),
    ) else {
        return false;
    };
    if typed.len() < 3
        || typed.len() >= candidate.len()
        || tf != cf
        || tl != cl
        || typed[typed.len() - 2] != candidate[candidate.len() - 2]
    {
        return false;
    }
    let mut inner = candidate[1..candidate.len() - 2].iter();
    typed[1..typed.len() - 2]
        .iter()
        .all(|t| inner.by_ref().any(|c| c == t))
}

/// A demangled function name without its parameter list and clone annotations.
pub fn bare_name(demangled: &str) -> String {
    split_function_name(&normalize(demangled)).0
}

/// `a::(anonymous namespace)::b` without its anonymous namespaces: `a::b`.
fn without_anonymous(qualified: &str) -> String {
    qualified.replace("(anonymous namespace)::", "")
}

/// A normalized function name split into its qualified name, its parameter list (without
/// parentheses) and what follows it (`const`), clone annotations (` [clone .isra.0]`) and a
/// leading return type dropped. `void ns::f<a(b)>(int) const` gives (`ns::f<a(b)>`, `int`,
/// `const`); a name without a parameter list comes back whole.
fn split_function_name(name: &str) -> (String, Option<String>, Option<String>) {
    let mut name = name.to_string();
    while let Some(at) = name.find("[clone") {
        let end = name[at..].find(']').map_or(name.len(), |e| at + e + 1);
        name.replace_range(at..end, "");
    }
    let name = name.trim();
    let Some(open) = parameter_list_start(name) else {
        return (name.to_string(), None, None);
    };
    let Some(close) = matching_close(name, open) else {
        return (name.to_string(), None, None);
    };
    let head = name[..open].trim();
    let qualified = last_top_level_space(head).map_or(head, |at| head[at + 1..].trim());
    (
        qualified.to_string(),
        Some(name[open + 1..close].to_string()),
        Some(name[close + 1..].trim().to_string()),
    )
}

/// The `(` that opens the parameter list: the first one at bracket depth 0 that belongs to
/// no anonymous namespace, lambda name (`{lambda()#1}`), operator name (`operator()`) or
/// enclosing function (`g()::S::h()`).
fn parameter_list_start(name: &str) -> Option<usize> {
    let bytes = name.as_bytes();
    let mut depth = 0i32;
    let mut i = 0;
    while i < bytes.len() {
        if name[i..].starts_with(ANONYMOUS) {
            i += ANONYMOUS.len();
            continue;
        }
        if depth == 0 && name[i..].starts_with("operator") {
            // Skip the operator's own symbol (`()`, `<<`, `<`, `->`, …).
            i += "operator".len();
            if name[i..].starts_with("()") {
                i += 2;
            }
            while i < bytes.len() && b"<>=!+-*/%^&|~[],.".contains(&bytes[i]) {
                i += 1;
            }
            continue;
        }
        match bytes[i] {
            // `g()::S::h()`: the scope of a local class is a function with its parameters.
            b'(' if depth == 0 => match matching_close(name, i) {
                Some(close) if name[close + 1..].starts_with("::") => {
                    i = close + 1;
                    continue;
                }
                _ => return Some(i),
            },
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' | b')' | b']' | b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The `)` that closes the `(` at `open`.
fn matching_close(name: &str, open: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (i, b) in name.bytes().enumerate().skip(open) {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The last space outside brackets (between a return type and the name).
fn last_top_level_space(s: &str) -> Option<usize> {
    // `operator new` is one name.
    cpp_name::rfind(s, " ").filter(|&at| !s[..at].ends_with("operator"))
}

/// A parameter list as the demangler spells it: `const T&` becomes `T const&`, and
/// `std::string` its `basic_string`; spaces normalized.
fn canonical_params(params: &str) -> String {
    const STRING: &str =
        "std::__cxx11::basic_string<char,std::char_traits<char>,std::allocator<char>>";
    cpp_name::split(&normalize(params), ",")
        .into_iter()
        .map(|p| {
            let mut p = p.trim().to_string();
            if let Some(rest) = p.strip_prefix("const ") {
                // The pointer and reference marks end the type: `const` goes before them.
                let marks = rest.len() - rest.trim_end_matches(['*', '&']).len();
                let (ty, ptr) = rest.split_at(rest.len() - marks);
                p = format!("{} const{ptr}", ty.trim_end());
            }
            let end = p.find([' ', '*', '&']).unwrap_or(p.len());
            if matches!(&p[..end], "std::string" | "string") {
                p = format!("{STRING}{}", &p[end..]);
            }
            normalize(&p)
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The `::`-separated components of a qualified name, brackets balanced.
fn components(qualified: &str) -> Vec<String> {
    cpp_name::split(qualified, "::")
        .into_iter()
        .map(str::to_string)
        .collect()
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
    sym.demangle_with_options(
        &cpp_demangle::DemangleOptions::new()
            .no_params()
            .no_return_type(),
    )
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

/// The file offset of ELF virtual address `address`, through the section that holds it.
pub fn file_offset_of(binary: &Binary, address: u64) -> Option<u64> {
    let obj = binary.object().ok()?;
    obj.sections().find_map(|s| {
        let (off, size) = s.file_range()?;
        let delta = address.checked_sub(s.address())?;
        (delta < size).then_some(off + delta)
    })
}

/// The name of the function a PLT stub at `address` jumps to (the dynamic symbol of its GOT
/// slot's relocation), or `None` when no stub is there.
pub fn plt_target(binary: &Binary, address: u64) -> Option<String> {
    use object::{ObjectSymbolTable as _, RelocationTarget};
    let offset = usize::try_from(file_offset_of(binary, address)?).ok()?;
    let bytes = binary.bytes().get(offset..offset.checked_add(16)?)?;
    let slot = super::code::plt_slot(bytes, address)?;
    let obj = binary.object().ok()?;
    let (_, relocation) = obj.dynamic_relocations()?.find(|(at, _)| *at == slot)?;
    let RelocationTarget::Symbol(index) = relocation.target() else {
        return None;
    };
    let name = obj
        .dynamic_symbol_table()?
        .symbol_by_index(index)
        .ok()?
        .name()
        .ok()?;
    Some(name.to_string())
}

#[cfg(test)]
mod tests;
