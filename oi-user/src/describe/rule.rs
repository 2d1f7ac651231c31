//! The words every description is made of, as written: a value and the line it stands on
//! (`At`), the one-line error (`DescribeError`), the qualified-name pattern (`name_matches`),
//! a `[[union]]` rule and its case keys (`UnionRule`, `Cases`), and the types a description
//! names by spelling (`NamedTypes`). Plain data shared by the parser, the name lookup and the
//! union compiler; never reads DWARF or the type graph.

use std::collections::HashMap;

use crate::typegraph::TypeId;

/// A described-container error: `file:line: what`, one line (exit 2).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{file}:{line}: {what}")]
pub struct DescribeError {
    pub file: String,
    pub line: usize,
    pub what: String,
}

/// A value and the line it was written on.
#[derive(Debug, Clone)]
pub struct At<T> {
    pub line: usize,
    pub v: T,
}

/// A qualified-name pattern: the name itself or it followed by `<`; a leading `*::` stands
/// for any enclosing scopes (`*::Impl_` is every class named `Impl_` inside another).
pub fn name_matches(pattern: &str, qualified: &str) -> bool {
    let ends = |rest: &str| rest.is_empty() || rest.starts_with('<');
    match pattern.strip_prefix('*') {
        // `*::Impl_`: `::Impl_` outside every template argument list, then the end or `<`.
        Some(tail) if tail.starts_with("::") => qualified.match_indices(tail).any(|(i, _)| {
            let before = &qualified[..i];
            before.matches('<').count() == before.matches('>').count()
                && ends(&qualified[i + tail.len()..])
        }),
        _ => qualified.strip_prefix(pattern).is_some_and(ends),
    }
}

/// One `[[union]]` rule as written.
#[derive(Debug, Clone)]
pub struct UnionRule {
    pub file: String,
    /// Line of `in` (errors about the whole rule point here).
    pub line: usize,
    pub holder: String,
    pub member: At<String>,
    pub discriminator: At<String>,
    pub cases: Cases,
    /// Shipped (embedded): a rule that does not fit is a warning, the union stays opaque.
    pub shipped: bool,
}

#[derive(Debug, Clone)]
pub enum Cases {
    /// `value = "member"` (a member of the union, or "none": walks nothing).
    Listed(Vec<At<(u64, Option<String>)>>),
    /// The enumerators of enum `name` are the cases: the one spelled as `enumerator` with
    /// `{Case}` the protoc CamelCase of a union member's name is that member's value; any
    /// other enumerator (`KIND_NOT_SET`) walks nothing. Patterns: `{scope}` (the holder's
    /// enclosing scope), `{Union}` (the union member's name in CamelCase).
    Enum {
        line: usize,
        name: String,
        enumerator: String,
    },
}

impl UnionRule {
    pub fn error(&self, line: usize, what: impl Into<String>) -> DescribeError {
        DescribeError {
            file: self.file.clone(),
            line,
            what: what.into(),
        }
    }

    pub fn matches(&self, qualified: &str) -> bool {
        name_matches(&self.holder, qualified)
    }
}

/// A case key: decimal, `0x` hex, or negative decimal (two's complement, cut to the
/// discriminator's width when compiled).
pub fn parse_case_value(key: &str) -> Option<u64> {
    let k = key.trim();
    if let Some(h) = k.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok();
    }
    if let Some(n) = k.strip_prefix('-') {
        return n.parse::<u64>().ok().map(|v| v.wrapping_neg());
    }
    k.parse().ok()
}

/// Spelled type name (patterns already substituted) → its type in the graph.
pub type NamedTypes = HashMap<String, TypeId>;
