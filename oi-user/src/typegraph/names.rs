//! Type names as docs/semantics.md, "Type names", spells them: primitives from encoding and
//! size, containers respelled from their template arguments, anonymous types numbered `__oi_anon_N`
//! by a pre-order walk from each root.

use std::collections::{HashMap, HashSet};

use super::kinds::ContainerKind;
use super::{Kind, PrimKind, TemplateArg, TypeGraph, TypeId, layout};

/// Spelling of a DWARF base type (`DW_AT_encoding`, byte size).
pub fn primitive(encoding: u64, size: u64) -> (String, PrimKind) {
    use gimli::constants as dw;
    let enc = gimli::DwAte(encoding as u8);
    let int = |signed: bool| {
        let p = if signed { "int" } else { "uint" };
        (
            format!("{p}{}_t", size * 8),
            if signed {
                PrimKind::Signed
            } else {
                PrimKind::Unsigned
            },
        )
    };
    match enc {
        dw::DW_ATE_boolean => ("bool".into(), PrimKind::Bool),
        dw::DW_ATE_float => (
            match size {
                4 => "float",
                8 => "double",
                _ => "long double",
            }
            .into(),
            PrimKind::Float,
        ),
        dw::DW_ATE_signed | dw::DW_ATE_signed_char => int(true),
        // unsigned, unsigned char, UTF (char8_t/char16_t/char32_t)
        _ => int(false),
    }
}

/// Numbers of the anonymous types reachable from one root (docs/semantics.md, "Type names"):
/// every struct/class/union, enum and typedef takes the next number when first reached in a
/// pre-order walk.
#[derive(Debug, Default, Clone)]
pub struct AnonNames {
    numbers: HashMap<TypeId, usize>,
}

impl AnonNames {
    pub fn for_root(tg: &TypeGraph, root: TypeId) -> Self {
        let mut s = Self::default();
        let mut seen = HashSet::new();
        let mut next = 0;
        s.walk(tg, root, &mut seen, &mut next);
        s
    }

    fn walk(&mut self, tg: &TypeGraph, id: TypeId, seen: &mut HashSet<TypeId>, next: &mut usize) {
        if !seen.insert(id) {
            return;
        }
        match &tg.get(id).kind {
            Kind::Typedef { target, .. } => {
                self.numbers.insert(id, *next);
                *next += 1;
                self.walk(tg, *target, seen, next);
            }
            Kind::Enum { .. } => {
                self.numbers.insert(id, *next);
                *next += 1;
            }
            Kind::Pointer { target: Some(t) } => self.walk(tg, *t, seen, next),
            Kind::Array { elem, .. } => self.walk(tg, *elem, seen, next),
            Kind::Struct(st) => {
                if st.container.is_some() {
                    for a in &st.template_args {
                        if let TemplateArg::Type { ty, .. } = a {
                            self.walk(tg, *ty, seen, next);
                        }
                    }
                    return;
                }
                self.numbers.insert(id, *next);
                *next += 1;
                for m in layout::flatten(tg, id) {
                    self.walk(tg, m.ty, seen, next);
                }
            }
            _ => {}
        }
    }

    fn anon(&self, id: TypeId) -> String {
        format!("__oi_anon_{}", self.numbers.get(&id).copied().unwrap_or(0))
    }
}

/// Qualified name of a struct/enum, or a placeholder for an anonymous one (for errors).
pub fn qualified_or_anon(tg: &TypeGraph, id: TypeId) -> String {
    spell(tg, id, &AnonNames::default())
}

/// The spelled name of a type (typedefs resolved), per docs/semantics.md, "Type names".
pub fn spell(tg: &TypeGraph, id: TypeId, anon: &AnonNames) -> String {
    spell_depth(tg, id, anon, 0)
}

fn spell_depth(tg: &TypeGraph, id: TypeId, anon: &AnonNames, depth: u32) -> String {
    if depth > 32 {
        return "...".into();
    }
    let r = tg.resolve(id);
    match &tg.get(r).kind {
        Kind::Primitive { name, .. } => name.clone(),
        Kind::Enum { name, .. } => name.clone().unwrap_or_else(|| anon.anon(r)),
        Kind::Pointer { target: None } => "void*".into(),
        Kind::Pointer { target: Some(t) } => format!("{}*", spell_depth(tg, *t, anon, depth + 1)),
        Kind::Array { elem, count } => {
            format!("{}[{count}]", spell_depth(tg, *elem, anon, depth + 1))
        }
        Kind::Struct(st) => match (st.container, &st.name) {
            (Some(kind), Some(name)) => {
                let base = name.split('<').next().unwrap_or(name);
                let measured = kind.measured_args();
                let mut args = Vec::new();
                let mut type_index = 0;
                for a in &st.template_args {
                    match a {
                        TemplateArg::Value(v) => args.push(v.to_string()),
                        TemplateArg::Type { ty, qualifiers, .. } => {
                            let full = measured.is_none_or(|n| type_index < n);
                            type_index += 1;
                            let mut s = if full {
                                spell_depth(tg, *ty, anon, depth + 1)
                            } else {
                                spell_unmeasured(tg, *ty, anon, depth + 1, || {
                                    value_type(tg, r, kind, anon, depth + 1)
                                })
                            };
                            if qualifiers.is_const {
                                s.push_str(" const");
                            }
                            args.push(s);
                        }
                    }
                }
                format!("{base}<{}>", args.join(", "))
            }
            (_, Some(name)) => name.clone(),
            (_, None) => anon.anon(r),
        },
        Kind::Typedef { name, .. } => name.clone(),
        Kind::Function => "void ()".into(),
        Kind::Void => "void".into(),
        Kind::Incomplete { name } => declared_only(name, 0),
    }
}

/// Non-measured template arguments: `std::allocator` / `std::char_traits` respelled, any
/// other class by its bare DWARF name (`less<int>`), anything else by the normal rules.
/// The value type a container's allocator allocates, spelled (g++ omits the template
/// parameters of `std::allocator<T>` / `std::char_traits<T>` from DWARF).
fn value_type(
    tg: &TypeGraph,
    id: TypeId,
    kind: ContainerKind,
    anon: &AnonNames,
    depth: u32,
) -> String {
    let arg = |i| {
        tg.type_arg(id, i)
            .map(|t| spell_depth(tg, t, anon, depth))
            .unwrap_or_default()
    };
    if kind.is_map() {
        format!("std::pair<{} const, {}>", arg(0), arg(1))
    } else {
        arg(0)
    }
}

fn spell_unmeasured(
    tg: &TypeGraph,
    id: TypeId,
    anon: &AnonNames,
    depth: u32,
    value_type: impl Fn() -> String,
) -> String {
    let r = tg.resolve(id);
    if let Kind::Struct(st) = &tg.get(r).kind
        && st.container.is_none()
    {
        let q = st.name.as_deref().unwrap_or("");
        for std_name in ["std::allocator", "std::char_traits"] {
            if q.strip_prefix(std_name)
                .is_some_and(|rest| rest.starts_with('<'))
            {
                if st.template_args.is_empty() {
                    return format!("{std_name}<{}>", value_type());
                }
                let args: Vec<String> = st
                    .template_args
                    .iter()
                    .map(|a| match a {
                        TemplateArg::Value(v) => v.to_string(),
                        TemplateArg::Type { ty, qualifiers, .. } => {
                            let s = spell_depth(tg, *ty, anon, depth + 1);
                            if qualifiers.is_const {
                                format!("{s} const")
                            } else {
                                s
                            }
                        }
                    })
                    .collect();
                return format!("{std_name}<{}>", args.join(", "));
            }
        }
        return st.bare_name.clone().unwrap_or_else(|| anon.anon(r));
    }
    spell_depth(tg, id, anon, depth)
}

/// `typeNames` of a root or struct member: the typedef chain, then the spelled final type.
pub fn type_names_with_typedefs(tg: &TypeGraph, id: TypeId, anon: &AnonNames) -> Vec<String> {
    let mut names = Vec::new();
    let mut cur = id;
    for _ in 0..64 {
        match &tg.get(cur).kind {
            Kind::Typedef { name, target } => {
                names.push(if name.is_empty() {
                    anon.anon(cur)
                } else {
                    name.clone()
                });
                cur = *target;
            }
            _ => break,
        }
    }
    names.push(spell(tg, cur, anon));
    names
}

/// g++'s DWARF names of fundamental types → their spelling (docs/semantics.md, "Type names"; x86-64
/// sizes), for names known only as text.
const FUNDAMENTAL: &[(&str, &str)] = &[
    ("char", "int8_t"),
    ("signed char", "int8_t"),
    ("unsigned char", "uint8_t"),
    ("char8_t", "uint8_t"),
    ("short int", "int16_t"),
    ("short unsigned int", "uint16_t"),
    ("int", "int32_t"),
    ("unsigned int", "uint32_t"),
    ("long int", "int64_t"),
    ("long unsigned int", "uint64_t"),
    ("long long int", "int64_t"),
    ("long long unsigned int", "uint64_t"),
    ("wchar_t", "int32_t"),
    ("char16_t", "uint16_t"),
    ("char32_t", "uint32_t"),
];

/// A type known only by its name: a class the DWARF declares and defines nowhere (a
/// `std::vector<int>*` member of a program that never makes one), as g++ wrote it. A
/// recognised container is respelled by the rules of docs/semantics.md, "Type names", from the
/// text, which is all there is: measured arguments by the same rules (fundamental types by
/// [`FUNDAMENTAL`]), allocators and char traits respelled, other arguments by their bare name.
/// Anything else stays as written, as any class name does.
fn declared_only(text: &str, depth: u32) -> String {
    let text = text.trim();
    if depth > 32 {
        return text.to_string();
    }
    if let Some(base) = text.strip_suffix('*').or_else(|| text.strip_suffix('&')) {
        return format!("{}*", declared_only(base, depth + 1));
    }
    if let Some(base) = text.strip_prefix("const ") {
        return format!("{} const", declared_only(base, depth + 1));
    }
    if let Some(&(_, spelled)) = FUNDAMENTAL.iter().find(|(g, _)| *g == text) {
        return spelled.to_string();
    }
    let Some((head, args)) = template_args(text) else {
        return text.to_string();
    };
    let Some(kind) = super::kinds::recognise(text) else {
        return text.to_string();
    };
    let measured = kind.measured_args();
    let spelled: Vec<String> = args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            if measured.is_none_or(|n| i < n) {
                return declared_only(a, depth + 1);
            }
            match template_args(a) {
                Some((h, inner)) if h == "std::allocator" || h == "std::char_traits" => {
                    let inner: Vec<String> =
                        inner.iter().map(|t| declared_only(t, depth + 1)).collect();
                    format!("{h}<{}>", inner.join(", "))
                }
                // The bare name: the text after the last `::` outside template arguments.
                _ => {
                    let end = a.find('<').unwrap_or(a.len());
                    let start = a[..end].rfind("::").map_or(0, |i| i + 2);
                    a[start..].to_string()
                }
            }
        })
        .collect();
    format!("{head}<{}>", spelled.join(", "))
}

/// `head<a, b<c, d> >` → (`head`, [`a`, `b<c, d>`]); None without template arguments.
fn template_args(text: &str) -> Option<(&str, Vec<&str>)> {
    let open = text.find('<')?;
    let inner = text[open + 1..].trim_end().strip_suffix('>')?;
    let args = crate::cpp_name::split(inner, ",")
        .into_iter()
        .map(str::trim)
        .collect();
    Some((text[..open].trim(), args))
}

#[cfg(test)]
mod tests {
    use super::declared_only;

    #[test]
    fn declared_only_containers_are_respelled_from_their_text() {
        assert_eq!(
            declared_only("std::vector<int, std::allocator<int> >", 0),
            "std::vector<int32_t, std::allocator<int32_t>>"
        );
        assert_eq!(
            declared_only(
                "std::map<long unsigned int, std::vector<char, std::allocator<char> >, std::less<long unsigned int>, std::allocator<std::pair<const long unsigned int, std::vector<char, std::allocator<char> > > > >",
                0
            ),
            "std::map<uint64_t, std::vector<int8_t, std::allocator<int8_t>>, less<long unsigned int>, std::allocator<std::pair<uint64_t const, std::vector<int8_t, std::allocator<int8_t>>>>>"
        );
        assert_eq!(
            declared_only("std::array<int, 3>", 0),
            "std::array<int32_t, 3>"
        );
        // Not a container: as written, as any class name is.
        assert_eq!(declared_only("ns::Opaque<int>", 0), "ns::Opaque<int>");
        assert_eq!(declared_only("Incomplete", 0), "Incomplete");
    }
}
