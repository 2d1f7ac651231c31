//! Reading a C++ name as the demangler or the compiler spells it at bracket depth 0: where a
//! separator (`::`, `,`, a space) stands outside every template argument list, parameter
//! list, ABI tag and lambda name (`<>`, `()`, `[]`, `{}`). The one bracket-depth scanner the
//! symbol, type-name, container-description and allocation readers share.
//!
//! Depth is counted, not checked: a close bracket with no open one (`operator>`) makes what
//! follows it read as nested, never as top level. Pure text; reads nothing else.

const OPEN: &[u8] = b"<([{";
const CLOSE: &[u8] = b">)]}";

/// The byte indices of the occurrences of `sep` in `name` at bracket depth 0, left to right,
/// without overlap. `sep` is ASCII and holds no bracket.
fn top_level(name: &str, sep: &str) -> impl Iterator<Item = usize> {
    debug_assert!(!sep.is_empty() && sep.is_ascii());
    let (bytes, sep) = (name.as_bytes(), sep.as_bytes());
    let (mut depth, mut i) = (0i32, 0);
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let b = bytes[i];
            if OPEN.contains(&b) {
                depth += 1;
            } else if CLOSE.contains(&b) {
                depth -= 1;
            } else if depth == 0 && bytes[i..].starts_with(sep) {
                let at = i;
                i += sep.len();
                return Some(at);
            }
            i += 1;
        }
        None
    })
}

/// `name` cut at each top-level `sep`: `split("std::map<a::b, c>::node", "::")` gives
/// `["std", "map<a::b, c>", "node"]`. Always at least one part.
pub fn split<'a>(name: &'a str, sep: &str) -> Vec<&'a str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for at in top_level(name, sep) {
        parts.push(&name[start..at]);
        start = at + sep.len();
    }
    parts.push(&name[start..]);
    parts
}

/// The byte index of the last top-level `sep` in `name`.
pub fn rfind(name: &str, sep: &str) -> Option<usize> {
    top_level(name, sep).last()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_inside_brackets_do_not_count() {
        assert_eq!(
            split("std::map<a::b, c>::node", "::"),
            ["std", "map<a::b, c>", "node"]
        );
        assert_eq!(
            split(
                "int, f(a, b), x<y, z>, {lambda(int, int)#1}, t[abi:c, d]",
                ","
            ),
            [
                "int",
                " f(a, b)",
                " x<y, z>",
                " {lambda(int, int)#1}",
                " t[abi:c, d]"
            ]
        );
        assert_eq!(split("main", "::"), ["main"]);
        assert_eq!(split("", ","), [""]);
        assert_eq!(rfind("a::B<c::d>::f", "::"), Some(10));
        assert_eq!(rfind("void f<int (*)(a, b)> g", " "), Some(21));
        assert_eq!(rfind("f<a::b>", "::"), None);
    }

    /// A stray close bracket makes the rest nested, not top level.
    #[test]
    fn depth_is_counted_not_checked() {
        assert_eq!(rfind("a::operator>::b", "::"), Some(1));
        // `::::` is two separators, never an overlapping third.
        assert_eq!(split("a::::b", "::"), ["a", "", "b"]);
    }
}
