//! `[[union]]`: a union whose active member a discriminator names (a tagged union, protobuf's
//! oneof), walked as that member (docs/containers.md, "Unions"). The rule names
//! the class holding the union (`in`), the union member (`member`, or `"*"`: each union of
//! several members, numbered `{i}` in order), the discriminator (a member path of the holder,
//! an integer or enum; a step may index an array: `_oneof_case_[{i}]`), and the cases: listed
//! (`value = member`, or `"none"`), or taken from an enum whose enumerators name the members
//! (`cases_enum`, protoc's convention: `KindCase { kText = 3, ... }` for member `text_`).
//!
//! [`compile`] checks a rule against one holder of the type graph: every name it gives must be
//! there (the union, its case members, an integer discriminator, the enum), else an error at
//! the rule's line, never a guess. The plan turns what it returns into `Op::Union`.

use std::collections::BTreeMap;

pub use super::rule::{Cases, UnionRule, parse_case_value};
use super::rule::{DescribeError, NamedTypes};
use crate::typegraph::{Kind, TypeGraph, TypeId, layout, names};

/// A field name in CamelCase as protoc forms it (`UnderscoresToCamelCase`): the first letter
/// and every letter after `_` or a digit upper-cased, `_` dropped; the trailing `_` of a
/// member name first removed (`sub_msg2x_` → `SubMsg2X`).
pub fn protoc_camel(member: &str) -> String {
    let mut out = String::new();
    let mut cap = true;
    for c in member.trim_end_matches('_').chars() {
        if c.is_ascii_lowercase() {
            out.push(if cap { c.to_ascii_uppercase() } else { c });
            cap = false;
        } else if c.is_ascii_uppercase() {
            out.push(c);
            cap = false;
        } else if c.is_ascii_digit() {
            out.push(c);
            cap = true;
        } else {
            cap = true;
        }
    }
    out
}

/// The scope a qualified name is declared in (`a::B::Impl_` → `a::B`), outside template
/// argument lists; empty at the top level.
fn scope_of(qualified: &str) -> &str {
    crate::cpp_name::rfind(qualified, "::").map_or("", |i| &qualified[..i])
}

/// The union members of `holder` the rule names: (name, byte offset, type), with `{i}`.
fn unions_named(
    rule: &UnionRule,
    tg: &TypeGraph,
    holder: TypeId,
) -> Result<Vec<(String, u64, TypeId)>, DescribeError> {
    let members = layout::flatten(tg, holder);
    let several = |t: TypeId| {
        tg.as_struct(tg.resolve(t))
            .is_some_and(|st| st.is_union && st.members.len() > 1)
    };
    if rule.member.v == "*" {
        return Ok(members
            .iter()
            .filter(|m| m.bit_size.is_none() && several(m.ty))
            .filter_map(|m| Some((m.name.clone()?, m.bit_offset / 8, m.ty)))
            .collect());
    }
    let qualified = names::qualified_or_anon(tg, holder);
    let m = members
        .iter()
        .find(|m| m.name.as_deref() == Some(rule.member.v.as_str()))
        .ok_or_else(|| {
            rule.error(
                rule.member.line,
                format!("{qualified} has no member {}", rule.member.v),
            )
        })?;
    if !tg.as_struct(tg.resolve(m.ty)).is_some_and(|st| st.is_union) {
        return Err(rule.error(
            rule.member.line,
            format!("{qualified}'s member {} is not a union", rule.member.v),
        ));
    }
    Ok(vec![(rule.member.v.clone(), m.bit_offset / 8, m.ty)])
}

/// Offset and type of a member path of `id`: `.`-separated names (members after base
/// flattening, or a union's members), each optionally followed by `[n]` (an array element).
pub fn path_in(tg: &TypeGraph, id: TypeId, path: &str) -> Option<(u64, TypeId)> {
    let (mut off, mut cur) = (0u64, id);
    for step in path.split('.') {
        let (name, index) = match step.split_once('[') {
            Some((n, rest)) => (n, Some(rest.strip_suffix(']')?.trim().parse::<u64>().ok()?)),
            None => (step, None),
        };
        let r = tg.resolve(cur);
        let (o, t) = match tg.as_struct(r) {
            Some(st) if st.is_union => st
                .members
                .iter()
                .find(|m| m.name.as_deref() == Some(name))
                .map(|m| (m.bit_offset / 8, m.ty))?,
            _ => crate::containers::field(tg, r, &[name]).ok()?,
        };
        off = off.checked_add(o)?;
        cur = t;
        if let Some(n) = index {
            let Kind::Array { elem, count } = &tg.get(tg.resolve(cur)).kind else {
                return None;
            };
            if n >= *count {
                return None;
            }
            off = off.checked_add(n.checked_mul(tg.size(*elem))?)?;
            cur = *elem;
        }
    }
    Some((off, cur))
}

/// The enum names a `cases_enum` rule looks up for `holder` (one per union it names), so
/// that `names::resolve` finds them in DWARF before the plan is built.
pub fn enum_names(rule: &UnionRule, tg: &TypeGraph, holder: TypeId) -> Vec<String> {
    let Cases::Enum { name, .. } = &rule.cases else {
        return Vec::new();
    };
    let qualified = names::qualified_or_anon(tg, holder);
    unions_named(rule, tg, holder)
        .unwrap_or_default()
        .iter()
        .map(|(m, _, _)| enum_name(name, &qualified, m))
        .collect()
}

fn enum_name(pattern: &str, holder: &str, member: &str) -> String {
    pattern
        .replace("{scope}", scope_of(holder))
        .replace("{Union}", &protoc_camel(member))
}

/// A case's member: its name, byte offset in the union and type.
pub type CaseMember = (String, u64, TypeId);

/// One discriminated union of a holder, ready for the plan.
#[derive(Debug, Clone)]
pub struct CompiledUnion {
    /// The union's member name in the holder, and its byte offset there.
    pub name: String,
    pub offset: u64,
    /// The discriminator's byte offset in the holder and width (1, 2, 4 or 8).
    pub disc_offset: u64,
    pub width: u8,
    /// (value, the union member walked: its name, offset in the union and type).
    pub cases: Vec<(u64, Option<CaseMember>)>,
}

/// Compiles `rule` for struct `holder`: each union it names, with its discriminator and
/// cases; an error at the rule's line for every name that is not in the DWARF.
pub fn compile(
    rule: &UnionRule,
    tg: &TypeGraph,
    holder: TypeId,
    named: &NamedTypes,
) -> Result<Vec<CompiledUnion>, DescribeError> {
    let qualified = names::qualified_or_anon(tg, holder);
    let mut out = Vec::new();
    for (i, (uname, uoff, uty)) in unions_named(rule, tg, holder)?.into_iter().enumerate() {
        let dline = rule.discriminator.line;
        let dpath = rule.discriminator.v.replace("{i}", &i.to_string());
        let (disc_offset, dty) = path_in(tg, holder, &dpath)
            .ok_or_else(|| rule.error(dline, format!("{qualified} has no member {dpath}")))?;
        let dr = tg.resolve(dty);
        let integer = match &tg.get(dr).kind {
            Kind::Primitive { prim, .. } => !matches!(prim, crate::typegraph::PrimKind::Float),
            Kind::Enum { .. } => true,
            _ => false,
        };
        let width = tg.size(dr);
        if !integer || !matches!(width, 1 | 2 | 4 | 8) {
            return Err(rule.error(
                dline,
                format!(
                    "discriminator {dpath} of {qualified} is not an integer of 1, 2, 4 or 8 bytes (it is {})",
                    names::qualified_or_anon(tg, dty)
                ),
            ));
        }
        let mask = u64::MAX >> (64 - 8 * width);
        let union_members: BTreeMap<String, (u64, TypeId)> = tg
            .as_struct(tg.resolve(uty))
            .map(|st| {
                st.members
                    .iter()
                    .filter_map(|m| Some((m.name.clone()?, (m.bit_offset / 8, m.ty))))
                    .collect()
            })
            .unwrap_or_default();
        let member = |name: &str, line: usize| -> Result<CaseMember, DescribeError> {
            let &(off, ty) = union_members.get(name).ok_or_else(|| {
                rule.error(
                    line,
                    format!("the union {qualified}::{uname} has no member {name}"),
                )
            })?;
            if !tg.is_complete(ty) {
                return Err(rule.error(
                    line,
                    format!("the member {name} of {qualified}::{uname} is incomplete"),
                ));
            }
            Ok((name.to_string(), off, ty))
        };
        let mut cases = Vec::new();
        match &rule.cases {
            Cases::Listed(list) => {
                for c in list {
                    let (value, m) = &c.v;
                    let m = match m {
                        None => None,
                        Some(n) => Some(member(n, c.line)?),
                    };
                    cases.push((value & mask, m));
                }
            }
            Cases::Enum {
                line,
                name,
                enumerator,
            } => {
                let ename = enum_name(name, &qualified, &uname);
                let Some(Kind::Enum { enumerators, .. }) =
                    named.get(&ename).map(|&t| &tg.get(tg.resolve(t)).kind)
                else {
                    return Err(rule.error(*line, format!("no enum {ename} in the DWARF")));
                };
                for (value, e) in enumerators {
                    let m = union_members
                        .keys()
                        .find(|m| enumerator.replace("{Case}", &protoc_camel(m)) == *e);
                    let m = match m {
                        Some(n) => Some(member(n, *line)?),
                        None => None,
                    };
                    cases.push(((*value as u64) & mask, m));
                }
                if !cases.iter().any(|c| c.1.is_some()) {
                    return Err(rule.error(
                        *line,
                        format!("no enumerator of {ename} names a member of {qualified}::{uname}"),
                    ));
                }
            }
        }
        out.push(CompiledUnion {
            name: uname,
            offset: uoff,
            disc_offset,
            width: width as u8,
            cases,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case_as_protoc_forms_it() {
        assert_eq!(protoc_camel("text_"), "Text");
        assert_eq!(protoc_camel("sub_msg2x_"), "SubMsg2X");
        assert_eq!(protoc_camel("kind_"), "Kind");
        assert_eq!(
            scope_of("oi::fixture::Choice::Impl_"),
            "oi::fixture::Choice"
        );
        assert_eq!(scope_of("a<b::c>::D"), "a<b::c>");
        assert_eq!(scope_of("D"), "");
    }

    #[test]
    fn rules_parse_with_their_lines() {
        let text = "[[union]]\nin = \"a::H\"\nmember = \"u\"\ndiscriminator = \"t\"\ncases = { \"-1\" = \"s\", \"0\" = \"none\" }\n";
        let f = crate::describe::parse::parse("u.toml", text).expect("parses");
        let [r] = f.unions.as_slice() else {
            panic!("one rule: {:?}", f.unions)
        };
        assert_eq!((r.line, r.member.line, r.discriminator.line), (2, 3, 4));
        let Cases::Listed(c) = &r.cases else {
            panic!("listed")
        };
        let got: Vec<_> = c.iter().map(|c| (c.line, c.v.clone())).collect();
        assert_eq!(
            got,
            [(5, (u64::MAX, Some("s".to_string()))), (5, (0, None))]
        );
        // Neither `cases` nor `cases_enum`; a case that is no number; both.
        let bad = [
            (
                "[[union]]\nin = \"H\"\nmember = \"u\"\ndiscriminator = \"t\"\n",
                2,
            ),
            (
                "[[union]]\nin = \"H\"\nmember = \"u\"\ndiscriminator = \"t\"\ncases = { \"x\" = \"s\" }\n",
                5,
            ),
            (
                "[[union]]\nin = \"H\"\nmember = \"u\"\ndiscriminator = \"t\"\ncases = { \"1\" = \"s\" }\ncases_enum = { enum = \"E\", enumerator = \"k{Case}\" }\n",
                2,
            ),
        ];
        for (text, line) in bad {
            let e = crate::describe::parse::parse("u.toml", text).expect_err(text);
            assert_eq!(e.line, line, "{e}");
        }
    }

    #[test]
    fn case_values() {
        assert_eq!(parse_case_value("3"), Some(3));
        assert_eq!(parse_case_value("0x10"), Some(16));
        assert_eq!(parse_case_value("-1"), Some(u64::MAX));
        assert_eq!(parse_case_value("x"), None);
    }
}
