//! Types a description names by spelling rather than through the container (`elem =
//! "double"`, `elem = "google::protobuf::MapPair<{K}, {V}>"`): found in the program's DWARF
//! before the plan is built, because the type graph holds only what the probed arguments
//! reach. libprotobuf's `extern template`s are why this exists: g++ then emits
//! `RepeatedField<double>` without template-parameter DIEs, so its element type can only be
//! named, and the class itself reaches no `double`.
//!
//! A name is a C base type (`long unsigned int`, as g++ spells it), or a qualified class name
//! as it stands in DWARF, where `{X}` is replaced by the spelling of template argument `X` of
//! the instantiation (its qualified DWARF name). What cannot be found is simply absent here;
//! `compile` then reports the description's line.

use super::parse::Description;
pub use super::rule::NamedTypes;
use crate::debuginfo::dwarf::DebugInfo;
use crate::typegraph::{Builder, Kind, TemplateArg, Type, TypeGraph, TypeId};

/// C base types by g++'s DWARF spelling: (DW_ATE encoding, size).
const BASE_TYPES: &[(&str, u64, u64)] = &[
    ("bool", 0x02, 1),
    ("char", 0x06, 1),
    ("signed char", 0x06, 1),
    ("unsigned char", 0x08, 1),
    ("short int", 0x05, 2),
    ("short unsigned int", 0x07, 2),
    ("int", 0x05, 4),
    ("unsigned int", 0x07, 4),
    ("long int", 0x05, 8),
    ("long unsigned int", 0x07, 8),
    ("long long int", 0x05, 8),
    ("long long unsigned int", 0x07, 8),
    ("float", 0x04, 4),
    ("double", 0x04, 8),
];

/// Whether a type name in a description is a spelling to look up (not a template
/// argument's name, nor `member:`/`pointee:`).
pub fn is_spelled(d: &Description, name: &str) -> bool {
    !name.starts_with("member:")
        && !name.starts_with("pointee:")
        && !d.args.iter().any(|a| a == name)
}

/// `name` with every `{X}` replaced by the qualified DWARF spelling of `d`'s template
/// argument `X` of struct `id`; None when an `X` is not a type argument that has one.
pub fn substitute(d: &Description, tg: &TypeGraph, id: TypeId, name: &str) -> Option<String> {
    let targs = &tg.as_struct(id)?.template_args;
    let mut out = String::new();
    let mut rest = name;
    while let Some(open) = rest.find('{') {
        let close = open + rest[open..].find('}')?;
        out.push_str(&rest[..open]);
        let arg = &rest[open + 1..close];
        let i = d.args.iter().position(|a| a == arg)?;
        let TemplateArg::Type { ty, .. } = targs.get(i)? else {
            return None;
        };
        out.push_str(&dwarf_spelling(tg, *ty)?);
        rest = &rest[close + 1..];
        // g++ closes nested argument lists as `> >`.
        if out.ends_with('>') && rest.starts_with('>') {
            out.push(' ');
        }
    }
    out.push_str(rest);
    Some(out)
}

/// A type as g++ names it in DWARF: a class's qualified name, a base type's own name.
fn dwarf_spelling(tg: &TypeGraph, id: TypeId) -> Option<String> {
    match &tg.get(tg.resolve(id)).kind {
        Kind::Primitive { dwarf_name, .. } => Some(dwarf_name.clone()),
        Kind::Struct(st) => st.name.clone(),
        Kind::Enum { name, .. } => name.clone(),
        _ => None,
    }
}

/// Finds, for every struct of the graph a description matches (and those the found types
/// bring in), the types its spelled names name, adding them to the graph.
pub fn resolve(
    descs: &super::Descriptions,
    di: &DebugInfo<'_>,
    b: &mut Builder<'_, '_>,
) -> NamedTypes {
    let mut found = NamedTypes::new();
    if descs.list.is_empty() && descs.unions.is_empty() {
        return found;
    }
    let mut next = 0;
    while next < b.graph.types.len() {
        let id = next;
        next += 1;
        enums_of_unions(descs, di, b, id, &mut found);
        let Some(d) = b
            .graph
            .as_struct(id)
            .filter(|_| matches!(b.graph.get(id).kind, Kind::Struct(_)))
            .and_then(|st| st.name.as_deref())
            .and_then(|n| descs.find(n))
        else {
            continue;
        };
        for name in d.type_names() {
            if !is_spelled(d, &name) {
                continue;
            }
            let Some(spelled) = substitute(d, &b.graph, id, &name) else {
                continue;
            };
            if found.contains_key(&spelled) {
                continue;
            }
            if let Some(t) = lookup(di, b, &spelled) {
                found.insert(spelled, t);
            }
        }
    }
    found
}

/// The enums `[[union]]` rules with `cases_enum` name for struct `id` (protobuf's
/// `Msg::KindCase`, nested in the message class: found among that class's children).
fn enums_of_unions(
    descs: &super::Descriptions,
    di: &DebugInfo<'_>,
    b: &mut Builder<'_, '_>,
    id: TypeId,
    found: &mut NamedTypes,
) {
    let Some(holder) = b
        .graph
        .as_struct(id)
        .filter(|st| !st.is_union)
        .and_then(|st| st.name.clone())
    else {
        return;
    };
    for rule in descs.unions.iter().filter(|r| r.matches(&holder)) {
        for name in super::unions::enum_names(rule, &b.graph, id) {
            if found.contains_key(&name) {
                continue;
            }
            if let Some(t) = nested_enum(di, b, &name) {
                found.insert(name, t);
            }
        }
    }
}

/// An enum declared in a class (`a::Msg::KindCase`): the class's definition, then its child.
fn nested_enum(di: &DebugInfo<'_>, b: &mut Builder<'_, '_>, qualified: &str) -> Option<TypeId> {
    let (scope, name) = qualified.rsplit_once("::")?;
    let class = di.find_definition(scope).ok()??;
    let die = di.children(class).ok()?.into_iter().find(|&c| {
        di.tag(c).ok() == Some(gimli::constants::DW_TAG_enumeration_type)
            && di.name(c).ok().flatten().as_deref() == Some(name)
    })?;
    b.type_of(Some(die)).ok()
}

fn lookup(di: &DebugInfo<'_>, b: &mut Builder<'_, '_>, spelled: &str) -> Option<TypeId> {
    if let Some(&(_, enc, size)) = BASE_TYPES.iter().find(|t| t.0 == spelled) {
        let (name, prim) = crate::typegraph::names::primitive(enc, size);
        return Some(b.graph.add(Type {
            size,
            align: size,
            kind: Kind::Primitive {
                name,
                prim,
                dwarf_name: spelled.to_string(),
            },
        }));
    }
    let die = di.find_definition(spelled).ok()??;
    b.type_of(Some(die)).ok()
}
