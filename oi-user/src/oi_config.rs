//! OI's configuration file (`--config FILE`), the TOML that oid reads: the parts that change
//! what is measured.
//! - `features = [...]`: OI feature names, added to `--feature`;
//! - `[[codegen.ignore]]` with `type` (a qualified name) and optionally `members`: without
//!   members the type is measured as opaque (its static size, all exclusive, no members, as a
//!   union); with members, those members are dropped before padding is computed, so their
//!   bytes count as the struct's padding (docs/semantics.md,
//!   "Structs, bases, padding, unions");
//! - `[[codegen.capture_keys]]` (`top_level = true`, or `type` and `members`): turns on
//!   capture-keys for the root's map, or for those members of the struct of that unqualified
//!   name (docs/semantics.md, "Captured keys"); other maps keep no keys. (`--feature capture-keys`
//!   alone, with no such entry, captures the keys of every map.)
//!
//! Everything else oid's file may hold (paths, headers, container definitions) is about how
//! oid compiles its code and is ignored; an unknown key is no error, as in oid.
//!
//! The rules travel to the plan as pseudo-features (`ignore=TYPE`, `ignore=TYPE/MEMBER`,
//! `capture-keys=top`, `capture-keys=TYPE/MEMBER`), so they are part of the plan cache's key
//! like any other feature.

use std::path::Path;

use serde::Deserialize;

/// Prefixes of the pseudo-features that carry the file's rules to the plan.
const IGNORE_PREFIX: &str = "ignore=";
const CAPTURE_PREFIX: &str = "capture-keys=";

/// One rule of the file, as the plan applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// A type (qualified name) measured as opaque.
    IgnoreType(String),
    /// A member (type's qualified name, member) dropped before padding.
    IgnoreMember(String, String),
    /// The root's map captures its keys.
    CaptureTop,
    /// This member (struct's unqualified name, member) captures its keys.
    CaptureMember(String, String),
}

#[derive(Debug, Default, Deserialize)]
struct File {
    #[serde(default)]
    features: Vec<String>,
    #[serde(default)]
    codegen: Codegen,
}

#[derive(Debug, Default, Deserialize)]
struct Codegen {
    #[serde(default)]
    ignore: Vec<Ignore>,
    #[serde(default)]
    capture_keys: Vec<Capture>,
}

#[derive(Debug, Deserialize)]
struct Capture {
    #[serde(default)]
    top_level: bool,
    #[serde(rename = "type", default)]
    type_name: String,
    #[serde(default)]
    members: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Ignore {
    #[serde(rename = "type")]
    type_name: String,
    #[serde(default)]
    members: Vec<String>,
}

/// The features a config file adds: its `features`, `capture-keys` if it selects any keys,
/// and one pseudo-feature per rule (see [`Rule`]).
pub fn features(path: &Path) -> Result<Vec<String>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--config {}: {e}", path.display()))?;
    let file: File = toml::from_str(&text)
        .map_err(|e| format!("--config {}: {}", path.display(), one_line(&e.to_string())))?;
    let mut out = file.features;
    if !file.codegen.capture_keys.is_empty() {
        out.push("capture-keys".into());
    }
    for rule in file.codegen.capture_keys {
        if rule.top_level {
            out.push(format!("{CAPTURE_PREFIX}top"));
        }
        if !rule.top_level && (rule.type_name.is_empty() || rule.members.is_empty()) {
            return Err(format!(
                "--config {}: [[codegen.capture_keys]] needs `top_level = true`, or a `type` \
                 and its `members`",
                path.display()
            ));
        }
        for m in rule.members {
            out.push(format!("{CAPTURE_PREFIX}{}/{m}", rule.type_name));
        }
    }
    for rule in file.codegen.ignore {
        if rule.type_name.is_empty() {
            return Err(format!(
                "--config {}: [[codegen.ignore]] needs a `type`",
                path.display()
            ));
        }
        if rule.members.is_empty() {
            out.push(format!("{IGNORE_PREFIX}{}", rule.type_name));
        }
        for m in rule.members {
            out.push(format!("{IGNORE_PREFIX}{}/{m}", rule.type_name));
        }
    }
    Ok(out)
}

/// toml's messages span lines (a caret under the text): keep the first.
fn one_line(message: &str) -> String {
    message.lines().next().unwrap_or_default().to_string()
}

/// The rule a pseudo-feature carries; `None` for anything else.
pub fn parse_rule(feature: &str) -> Option<Rule> {
    let split = |rule: &str| {
        rule.rsplit_once('/')
            .map(|(ty, member)| (ty.to_string(), member.to_string()))
    };
    if let Some(rule) = feature.strip_prefix(IGNORE_PREFIX) {
        return Some(match split(rule) {
            Some((ty, member)) => Rule::IgnoreMember(ty, member),
            None => Rule::IgnoreType(rule.to_string()),
        });
    }
    let rule = feature.strip_prefix(CAPTURE_PREFIX)?;
    if rule == "top" {
        return Some(Rule::CaptureTop);
    }
    let (ty, member) = split(rule)?;
    Some(Rule::CaptureMember(ty, member))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_oids_file() {
        let dir = std::env::temp_dir().join(format!("oi-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("oid.toml");
        std::fs::write(
            &path,
            r#"
features = ["chase-raw-pointers"]
[types]
containers = ["/usr/share/oi/containers"]
[[codegen.ignore]]
type = "ns::Bar"
[[codegen.ignore]]
type = "ns::Foo"
members = ["a", "b"]
[[codegen.capture_keys]]
top_level = true
[[codegen.capture_keys]]
type = "Holder"
members = ["keys"]
"#,
        )
        .expect("write");
        assert_eq!(
            features(&path).expect("parse"),
            [
                "chase-raw-pointers",
                "capture-keys",
                "capture-keys=top",
                "capture-keys=Holder/keys",
                "ignore=ns::Bar",
                "ignore=ns::Foo/a",
                "ignore=ns::Foo/b"
            ]
        );
        assert_eq!(
            parse_rule("ignore=ns::Foo/a"),
            Some(Rule::IgnoreMember("ns::Foo".into(), "a".into()))
        );
        assert_eq!(parse_rule("capture-keys=top"), Some(Rule::CaptureTop));
        assert_eq!(parse_rule("capture-keys"), None);
        std::fs::write(&path, "features = [").expect("write");
        let e = features(&path).unwrap_err();
        assert!(e.starts_with("--config ") && !e.contains('\n'), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
