//! Type names as C++ engineers write them, for the outputs people read (the tree, pictures,
//! growth tables): `std::string`, `std::map<int, std::string>`, `unsigned long`, where the
//! JSON keeps Object Introspection's spelling (`std::__cxx11::basic_string<int8_t, …>`, see
//! [`super::names`]). Never used for JSON or CSV, whose spelling is OI's.
//!
//! A name is first turned into a small tree ([`Ty`]), from one of two sources: the type graph
//! (base types by their DWARF names, template arguments as DWARF lists them, with
//! `DW_AT_default_value` saying which are defaults), or the compiler's text where the graph
//! knows no more (`std::allocator<…>`, which g++ describes without template parameters; types
//! only declared; template template arguments). One renderer applies the rules to both, each
//! rule a table:
//! - [`BASE_TYPES`]: g++'s base type names → source spelling (`long unsigned int` →
//!   `unsigned long`);
//! - [`INLINE_NAMESPACES`]: ABI namespaces nobody writes (`std::__cxx11::list` → `std::list`);
//! - [`DEFAULTS`]: per class template, the default of each parameter, as a function of the
//!   arguments before it (a map's allocator is `std::allocator<std::pair<const K, V>>`):
//!   trailing arguments equal to their default are dropped, as are those DWARF marks default;
//! - [`ALIASES`]: standard aliases (`std::basic_string<char>` → `std::string`).
//!
//! Written by hand: no crate parses C++ type names (cpp_demangle parses mangled symbols, and
//! our names come from DWARF, unmangled).

use super::{Kind, Qualifiers, Sigil, TemplateArg, TypeGraph, TypeId};

/// g++'s DWARF names of base types that people spell differently. Others (`int`, `char`,
/// `unsigned char`, `double`, `wchar_t`…) are already spelled as in source.
pub const BASE_TYPES: &[(&str, &str)] = &[
    ("short int", "short"),
    ("short unsigned int", "unsigned short"),
    ("long int", "long"),
    ("long unsigned int", "unsigned long"),
    ("long long int", "long long"),
    ("long long unsigned int", "unsigned long long"),
    ("__int128 unsigned", "unsigned __int128"),
];

/// Inline namespaces of the standard libraries (libstdc++'s new-ABI `__cxx11`, libc++'s
/// `__1`, Android NDK's `__ndk1`), which name mangling needs and people never write.
pub const INLINE_NAMESPACES: &[(&str, &str)] = &[
    ("std::__cxx11::", "std::"),
    ("std::__1::", "std::"),
    ("std::__ndk1::", "std::"),
];

/// The default of a template parameter, in terms of the arguments before it (their index).
#[derive(Debug, Clone, Copy)]
pub enum DefaultArg {
    /// No default (or one we do not drop).
    None,
    /// `std::allocator<A>`
    Allocator(usize),
    /// `std::allocator<std::pair<const K, V>>`
    PairAllocator(usize, usize),
    /// `std::char_traits<C>`
    CharTraits(usize),
    /// `std::less<T>`
    Less(usize),
    /// `std::hash<T>`
    Hash(usize),
    /// `std::equal_to<T>`
    EqualTo(usize),
    /// `std::default_delete<T>`
    DefaultDelete(usize),
    /// `std::deque<T>` (stack, queue)
    Deque(usize),
    /// `std::vector<T>` (priority_queue)
    Vector(usize),
}

use DefaultArg as D;

const SEQUENCE: &[DefaultArg] = &[D::None, D::Allocator(0)];
const SET: &[DefaultArg] = &[D::None, D::Less(0), D::Allocator(0)];
const MAP: &[DefaultArg] = &[D::None, D::None, D::Less(0), D::PairAllocator(0, 1)];
const UNORDERED_SET: &[DefaultArg] = &[D::None, D::Hash(0), D::EqualTo(0), D::Allocator(0)];
const UNORDERED_MAP: &[DefaultArg] = &[
    D::None,
    D::None,
    D::Hash(0),
    D::EqualTo(0),
    D::PairAllocator(0, 1),
];

/// Class templates with default arguments, after [`INLINE_NAMESPACES`] are removed: every
/// libstdc++ container oi-trace recognises, and the adapters and views around them.
pub const DEFAULTS: &[(&str, &[DefaultArg])] = &[
    ("std::vector", SEQUENCE),
    ("std::deque", SEQUENCE),
    ("std::list", SEQUENCE),
    ("std::forward_list", SEQUENCE),
    (
        "std::basic_string",
        &[D::None, D::CharTraits(0), D::Allocator(0)],
    ),
    ("std::basic_string_view", &[D::None, D::CharTraits(0)]),
    ("std::set", SET),
    ("std::multiset", SET),
    ("std::map", MAP),
    ("std::multimap", MAP),
    ("std::unordered_set", UNORDERED_SET),
    ("std::unordered_multiset", UNORDERED_SET),
    ("std::unordered_map", UNORDERED_MAP),
    ("std::unordered_multimap", UNORDERED_MAP),
    ("std::unique_ptr", &[D::None, D::DefaultDelete(0)]),
    ("std::stack", &[D::None, D::Deque(0)]),
    ("std::queue", &[D::None, D::Deque(0)]),
    ("std::priority_queue", &[D::None, D::Vector(0), D::Less(0)]),
];

/// (class template, its only argument left, the alias people write).
pub const ALIASES: &[(&str, &str, &str)] = &[
    ("std::basic_string", "char", "std::string"),
    ("std::basic_string", "wchar_t", "std::wstring"),
    ("std::basic_string", "char8_t", "std::u8string"),
    ("std::basic_string", "char16_t", "std::u16string"),
    ("std::basic_string", "char32_t", "std::u32string"),
    ("std::basic_string_view", "char", "std::string_view"),
    ("std::basic_string_view", "wchar_t", "std::wstring_view"),
    ("std::basic_string_view", "char8_t", "std::u8string_view"),
    ("std::basic_string_view", "char16_t", "std::u16string_view"),
    ("std::basic_string_view", "char32_t", "std::u32string_view"),
];

/// Deeper than this, a name is cut short (`…`): template arguments nest, they never cycle,
/// but a forged DWARF could make them deep.
const MAX_DEPTH: u32 = 32;

/// A type name as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    /// A named type (class, enum, fundamental) with its template arguments, if any, and what
    /// follows them (`::iterator`), already readable.
    Name {
        head: String,
        args: Option<Vec<Arg>>,
        rest: String,
    },
    Const(Box<Ty>),
    Volatile(Box<Ty>),
    Pointer(Box<Ty>),
    Reference(Box<Ty>),
    RvalueReference(Box<Ty>),
    /// `None`: of unknown bound (`int[]`).
    Array(Box<Ty>, Option<u64>),
    /// Shown as it is: template value arguments, function types, anything unparsed.
    Verbatim(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    pub ty: Ty,
    /// The debug information says this argument is the parameter's default.
    pub is_default: bool,
}

impl Ty {
    fn name(head: impl Into<String>) -> Self {
        Ty::Name {
            head: head.into(),
            args: None,
            rest: String::new(),
        }
    }

    fn template(head: &str, args: Vec<Ty>) -> Self {
        Ty::Name {
            head: head.into(),
            args: Some(
                args.into_iter()
                    .map(|ty| Arg {
                        ty,
                        is_default: false,
                    })
                    .collect(),
            ),
            rest: String::new(),
        }
    }
}

/// The readable name of type `id` (typedefs resolved).
pub fn readable(tg: &TypeGraph, id: TypeId) -> String {
    render(&of_type(tg, id, 0))
}

/// The readable name of a root's or member's declared type: as [`readable`], except that a
/// typedef of a fundamental type, an enum or an anonymous class keeps its name (`uint64_t`,
/// `size_t`, `Mode`), which is what the source says; a typedef of a named class shows the
/// class (`std::map<int, std::string>`), which says more than `Cache`.
pub fn declared(tg: &TypeGraph, id: TypeId) -> String {
    if let Kind::Typedef { name, .. } = &tg.get(id).kind
        && !name.is_empty()
    {
        let keeps_name = match &tg.get(tg.resolve(id)).kind {
            Kind::Primitive { .. } | Kind::Enum { name: None, .. } => true,
            Kind::Enum { .. } => false,
            Kind::Struct(st) => st.name.is_none(),
            _ => false,
        };
        if keeps_name {
            return name.clone();
        }
    }
    readable(tg, id)
}

/// `std::pair<const K, V>`: the element of a map, as people name it.
pub fn map_entry(tg: &TypeGraph, key: TypeId, value: TypeId) -> String {
    render(&Ty::template(
        "std::pair",
        vec![
            Ty::Const(Box::new(of_type(tg, key, 1))),
            of_type(tg, value, 1),
        ],
    ))
}

/// A name as the compiler wrote it (`std::vector<long unsigned int, std::allocator<long
/// unsigned int> >`), readable (`std::vector<unsigned long>`).
pub fn normalise(text: &str) -> String {
    render(&parse(text, 0))
}

/// The type graph's view of `id` as a [`Ty`].
fn of_type(tg: &TypeGraph, id: TypeId, depth: u32) -> Ty {
    if depth > MAX_DEPTH {
        return Ty::Verbatim("…".into());
    }
    let r = tg.resolve(id);
    match &tg.get(r).kind {
        Kind::Primitive {
            dwarf_name, name, ..
        } => {
            // A graph built without DWARF (tests) has no base type names: OI's will do.
            let n = if dwarf_name.is_empty() {
                name
            } else {
                dwarf_name
            };
            Ty::name(base_type(n))
        }
        Kind::Enum { name, .. } => match name {
            Some(n) => parse(n, depth + 1),
            None => Ty::Verbatim("(anonymous enum)".into()),
        },
        Kind::Pointer { target: None } => Ty::Pointer(Box::new(Ty::name("void"))),
        Kind::Pointer { target: Some(t) } => {
            if matches!(tg.get(tg.resolve(*t)).kind, Kind::Function) {
                Ty::Verbatim("(function pointer)".into())
            } else {
                let how = tg.indirection(r);
                let target = qualified(of_type(tg, *t, depth + 1), how.target);
                match how.sigil {
                    Sigil::Pointer => Ty::Pointer(Box::new(target)),
                    Sigil::Reference => Ty::Reference(Box::new(target)),
                    Sigil::RvalueReference => Ty::RvalueReference(Box::new(target)),
                }
            }
        }
        Kind::Array { elem, count } => {
            Ty::Array(Box::new(of_type(tg, *elem, depth + 1)), Some(*count))
        }
        Kind::Struct(st) => {
            let Some(name) = &st.name else {
                let what = if st.is_union { "union" } else { "struct" };
                return Ty::Verbatim(format!("(anonymous {what})"));
            };
            let parsed = parse(name, depth + 1);
            // The DWARF arguments replace the text's when they are the same list (they are
            // not where a template template argument is left out of DWARF).
            match parsed {
                Ty::Name {
                    head,
                    args: Some(text_args),
                    rest,
                } if text_args.len() == st.template_args.len() => {
                    let args = st
                        .template_args
                        .iter()
                        .zip(text_args)
                        .map(|(a, text)| match a {
                            TemplateArg::Value(_) => text,
                            TemplateArg::Type {
                                ty,
                                qualifiers,
                                is_default,
                            } => {
                                // Function types have no readable spelling in the graph.
                                let function =
                                    matches!(tg.get(tg.resolve(*ty)).kind, Kind::Function);
                                let inner = if function {
                                    text.ty
                                } else {
                                    qualified(of_type(tg, *ty, depth + 1), *qualifiers)
                                };
                                Arg {
                                    ty: inner,
                                    is_default: *is_default,
                                }
                            }
                        })
                        .collect();
                    Ty::Name {
                        head,
                        args: Some(args),
                        rest,
                    }
                }
                other => other,
            }
        }
        Kind::Typedef { name, .. } => Ty::name(name.clone()),
        Kind::Function => Ty::Verbatim("(function)".into()),
        Kind::Void => Ty::name("void"),
        Kind::Incomplete { name } => parse(name, depth + 1),
    }
}

/// `t` with the qualifiers the graph keeps apart (`const volatile T`).
fn qualified(t: Ty, q: Qualifiers) -> Ty {
    let t = if q.is_volatile {
        Ty::Volatile(Box::new(t))
    } else {
        t
    };
    if q.is_const {
        Ty::Const(Box::new(t))
    } else {
        t
    }
}

/// A base type's source spelling.
fn base_type(dwarf: &str) -> &str {
    BASE_TYPES
        .iter()
        .find(|(g, _)| *g == dwarf)
        .map_or(dwarf, |(_, s)| s)
}

fn strip_inline_namespaces(head: &str) -> String {
    for (ns, to) in INLINE_NAMESPACES {
        if let Some(rest) = head.strip_prefix(ns) {
            return format!("{to}{rest}");
        }
    }
    head.to_string()
}

/// The spelling of `t`.
pub fn render(t: &Ty) -> String {
    match t {
        Ty::Name { head, args, rest } => {
            let head = strip_inline_namespaces(head);
            let Some(args) = args else {
                return format!("{head}{rest}");
            };
            let shown: Vec<String> = args.iter().map(|a| render(&a.ty)).collect();
            let keep = kept(&head, args, &shown);
            let kept = &shown[..keep];
            if let [only] = kept
                && let Some((_, _, alias)) =
                    ALIASES.iter().find(|(h, arg, _)| *h == head && arg == only)
            {
                return format!("{alias}{rest}");
            }
            format!("{head}<{}>{rest}", kept.join(", "))
        }
        Ty::Const(inner) | Ty::Volatile(inner) => {
            let word = if matches!(t, Ty::Const(_)) {
                "const"
            } else {
                "volatile"
            };
            match inner.as_ref() {
                Ty::Pointer(_) | Ty::Reference(_) | Ty::RvalueReference(_) => {
                    format!("{} {word}", render(inner))
                }
                _ => format!("{word} {}", render(inner)),
            }
        }
        Ty::Pointer(inner) => format!("{}*", render(inner)),
        Ty::Reference(inner) => format!("{}&", render(inner)),
        Ty::RvalueReference(inner) => format!("{}&&", render(inner)),
        Ty::Array(..) => {
            // int[2][3]: the outer bound first, as C writes it.
            let mut dims = String::new();
            let mut cur = t;
            while let Ty::Array(inner, n) = cur {
                match n {
                    Some(n) => dims.push_str(&format!("[{n}]")),
                    None => dims.push_str("[]"),
                }
                cur = inner;
            }
            format!("{}{dims}", render(cur))
        }
        Ty::Verbatim(s) => s.clone(),
    }
}

/// How many of `args` to show: trailing ones that are their parameter's default go.
fn kept(head: &str, args: &[Arg], shown: &[String]) -> usize {
    let defaults = DEFAULTS
        .iter()
        .find(|(h, _)| *h == head)
        .map_or(&[][..], |(_, d)| *d);
    let mut keep = args.len();
    while keep > 0 {
        let i = keep - 1;
        let by_table = defaults
            .get(i)
            .and_then(|d| default_of(*d, args))
            .is_some_and(|d| render(&d) == shown[i]);
        if !(args[i].is_default || by_table) {
            break;
        }
        keep -= 1;
    }
    keep
}

/// The default argument `d` stands for, given the arguments before it.
fn default_of(d: DefaultArg, args: &[Arg]) -> Option<Ty> {
    let arg = |i: usize| args.get(i).map(|a| a.ty.clone());
    let one = |name: &str, i: usize| Some(Ty::template(name, vec![arg(i)?]));
    match d {
        D::None => None,
        D::Allocator(i) => one("std::allocator", i),
        D::PairAllocator(k, v) => Some(Ty::template(
            "std::allocator",
            vec![Ty::template(
                "std::pair",
                vec![Ty::Const(Box::new(arg(k)?)), arg(v)?],
            )],
        )),
        D::CharTraits(i) => one("std::char_traits", i),
        D::Less(i) => one("std::less", i),
        D::Hash(i) => one("std::hash", i),
        D::EqualTo(i) => one("std::equal_to", i),
        D::DefaultDelete(i) => one("std::default_delete", i),
        D::Deque(i) => one("std::deque", i),
        D::Vector(i) => one("std::vector", i),
    }
}

/// Where `text` stops being balanced at depth 0 (brackets `<>`, `()`, `[]`, `{}`): the byte
/// index of each depth-0 occurrence of a character `stop` accepts.
fn depth0(text: &str, mut stop: impl FnMut(usize, char) -> bool) -> Option<usize> {
    let mut depth = 0i32;
    for (i, c) in text.char_indices() {
        match c {
            '<' | '(' | '[' | '{' if depth > 0 || !stop(i, c) => depth += 1,
            '>' | ')' | ']' | '}' if depth > 0 => depth -= 1,
            _ if depth == 0 && stop(i, c) => return Some(i),
            _ => {}
        }
    }
    None
}

/// Parses a type name as g++ writes it in DWARF. Anything it does not understand is kept
/// verbatim: a name is never lost, at worst shown as the compiler wrote it.
pub fn parse(text: &str, depth: u32) -> Ty {
    let text = text.trim();
    if depth > MAX_DEPTH || text.is_empty() {
        return Ty::Verbatim(text.to_string());
    }
    // Template value arguments: numbers, casts `(E)1`, `true`, characters.
    if text.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '\'')
        || text == "true"
        || text == "false"
    {
        // clang writes an integer's suffix (`std::__1::array<int, 3UL>`); people do not.
        let bare = text.trim_end_matches(['u', 'U', 'l', 'L']);
        let digits = bare.strip_prefix('-').unwrap_or(bare);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return Ty::Verbatim(bare.to_string());
        }
        return Ty::Verbatim(text.to_string());
    }
    // A function type (`int(int)`, `void (*)(int)`): shown as written. `(anonymous
    // namespace)` is a name, not a parameter list.
    let anon = "(anonymous namespace)";
    let function = depth0(text, |i, c| c == '(' && !text[i..].starts_with(anon));
    if function.is_some() {
        return Ty::Verbatim(text.to_string());
    }
    // The declarator: `*`, `&`, `[N]` and the cv-qualifiers after them.
    let end = depth0(text, |_, c| matches!(c, '*' | '&' | '[')).unwrap_or(text.len());
    let (base, declarator) = text.split_at(end);
    let mut ty = parse_base(base, depth);
    let mut rest = declarator.trim();
    let mut dims = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("&&") {
            ty = Ty::RvalueReference(Box::new(ty));
            rest = r;
        } else if let Some(r) = rest.strip_prefix('&') {
            ty = Ty::Reference(Box::new(ty));
            rest = r;
        } else if let Some(r) = rest.strip_prefix('*') {
            ty = Ty::Pointer(Box::new(ty));
            rest = r;
        } else if let Some(r) = rest.strip_prefix("const") {
            ty = Ty::Const(Box::new(ty));
            rest = r;
        } else if let Some(r) = rest.strip_prefix("volatile") {
            ty = Ty::Volatile(Box::new(ty));
            rest = r;
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(close) = r.find(']') else {
                return Ty::Verbatim(text.to_string());
            };
            dims.push(r[..close].trim().parse::<u64>().ok());
            rest = &r[close + 1..];
        } else {
            return Ty::Verbatim(text.to_string());
        }
        rest = rest.trim_start();
    }
    // int[2][3] is an array of 2 arrays of 3.
    for n in dims.into_iter().rev() {
        ty = Ty::Array(Box::new(ty), n);
    }
    ty
}

/// A name without declarator: cv-qualifiers, then a fundamental type's words or a qualified
/// name with template arguments.
fn parse_base(base: &str, depth: u32) -> Ty {
    let base = base.trim();
    // cv-qualifiers may stand before or after (`int const`, `const std::string`).
    let mut is_const = false;
    let open = depth0(base, |_, c| c == '<');
    let (plain, templated) = match open {
        Some(i) => base.split_at(i),
        None => (base, ""),
    };
    if templated.is_empty() {
        let mut words: Vec<&str> = Vec::new();
        let mut is_volatile = false;
        for w in plain.split_whitespace() {
            match w {
                "const" => is_const = true,
                "volatile" => is_volatile = true,
                w => words.push(w),
            }
        }
        let joined = words.join(" ");
        let ty = Ty::name(base_type(&joined).to_string());
        return qualified(
            ty,
            Qualifiers {
                is_const,
                is_volatile,
            },
        );
    }
    let mut head = plain.trim();
    for q in ["const ", "volatile "] {
        if let Some(h) = head.strip_prefix(q) {
            is_const |= q == "const ";
            head = h.trim_start();
        }
    }
    let rest = &templated[1..];
    // The arguments: split at depth-0 commas up to the matching `>`.
    let mut args = Vec::new();
    let mut start = 0;
    let mut close = None;
    let mut d = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '<' | '(' | '[' | '{' => d += 1,
            ')' | ']' | '}' => d -= 1,
            '>' if d > 0 => d -= 1,
            '>' => {
                close = Some(i);
                break;
            }
            ',' if d == 0 => {
                args.push(&rest[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    let Some(close) = close else {
        return Ty::Verbatim(base.to_string());
    };
    let last = rest[start..close].trim();
    if !(last.is_empty() && args.is_empty()) {
        args.push(&rest[start..close]);
    }
    let mut after = rest[close + 1..].trim().to_string();
    for q in [" const", "const"] {
        if let Some(a) = after.strip_suffix(q)
            && (a.is_empty() || q.starts_with(' '))
        {
            is_const = true;
            after = a.trim_end().to_string();
        }
    }
    // `::iterator`, possibly with templates of its own.
    let rest = match after.strip_prefix("::") {
        Some(member) => format!("::{}", normalise(member)),
        None if after.is_empty() => String::new(),
        None => return Ty::Verbatim(base.to_string()),
    };
    let ty = Ty::Name {
        head: head.to_string(),
        args: Some(
            args.into_iter()
                .map(|a| Arg {
                    ty: parse(a, depth + 1),
                    is_default: false,
                })
                .collect(),
        ),
        rest,
    };
    if is_const {
        Ty::Const(Box::new(ty))
    } else {
        ty
    }
}

#[cfg(test)]
mod tests;
