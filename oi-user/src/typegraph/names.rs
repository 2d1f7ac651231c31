//! Type names as SEMANTICS.md §2 spells them: primitives from encoding and size, containers
//! respelled from their template arguments, anonymous types numbered `__oi_anon_N` by a
//! pre-order walk from each root.

use std::collections::{HashMap, HashSet};

use super::{Kind, PrimKind, TemplateArg, TypeGraph, TypeId, layout};
use crate::containers::ContainerKind;

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

/// Numbers of the anonymous types reachable from one root (§2): every struct/class/union,
/// enum and typedef takes the next number when first reached in a pre-order walk.
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

/// The spelled name of a type (typedefs resolved), per §2.
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
                        TemplateArg::Type { ty, is_const, .. } => {
                            let full = measured.is_none_or(|n| type_index < n);
                            type_index += 1;
                            let mut s = if full {
                                spell_depth(tg, *ty, anon, depth + 1)
                            } else {
                                spell_unmeasured(tg, *ty, anon, depth + 1, || {
                                    value_type(tg, r, kind, anon, depth + 1)
                                })
                            };
                            if *is_const {
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
        Kind::Incomplete { name } => name.clone(),
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
                        TemplateArg::Type { ty, is_const, .. } => {
                            let s = spell_depth(tg, *ty, anon, depth + 1);
                            if *is_const { format!("{s} const") } else { s }
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
