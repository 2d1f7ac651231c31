//! OI's configuration file (`--config FILE`), the TOML that oid reads: the parts that change
//! what is measured.
//! - `features = [...]`: OI feature names, added to `--feature`;
//! - `[[codegen.ignore]]` with `type` (a qualified name) and optionally `members`: without
//!   members the type is measured as opaque (its static size, all exclusive, no members, as a
//!   union); with members, those members are dropped before padding is computed, so their
//!   bytes count as the struct's padding (SEMANTICS §5, "members excluded by configuration");
//! - `[[codegen.capture_keys]]` (`top_level = true`, or `type` and `members`): turns on
//!   capture-keys. The selection itself is not applied yet: every std::map and
//!   std::unordered_map then captures its keys.
//!
//! Everything else oid's file may hold (paths, headers, container definitions) is about how
//! oid compiles its code and is ignored; an unknown key is no error, as in oid.
//!
//! The rules travel to the plan as pseudo-features (`ignore=TYPE`, `ignore=TYPE/MEMBER`), so
//! they are part of the plan cache's key like any other feature.

use std::path::Path;

use serde::Deserialize;

/// Prefix of the pseudo-features that carry `[[codegen.ignore]]` rules to the plan.
pub const IGNORE_PREFIX: &str = "ignore=";

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
    capture_keys: Vec<toml::Value>,
}

#[derive(Debug, Deserialize)]
struct Ignore {
    #[serde(rename = "type")]
    type_name: String,
    #[serde(default)]
    members: Vec<String>,
}

/// The features a config file adds: its `features`, `capture-keys` if it selects any keys,
/// and one `ignore=` pseudo-feature per ignored type or member.
pub fn features(path: &Path) -> Result<Vec<String>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--config {}: {e}", path.display()))?;
    let file: File = toml::from_str(&text)
        .map_err(|e| format!("--config {}: {}", path.display(), one_line(&e.to_string())))?;
    let mut out = file.features;
    if !file.codegen.capture_keys.is_empty() {
        out.push("capture-keys".into());
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

/// An `ignore=` pseudo-feature as (type, member): `None` ignores the whole type.
pub fn parse_ignore(feature: &str) -> Option<(String, Option<String>)> {
    let rule = feature.strip_prefix(IGNORE_PREFIX)?;
    Some(match rule.rsplit_once('/') {
        Some((ty, member)) => (ty.to_string(), Some(member.to_string())),
        None => (rule.to_string(), None),
    })
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
"#,
        )
        .expect("write");
        assert_eq!(
            features(&path).expect("parse"),
            [
                "chase-raw-pointers",
                "capture-keys",
                "ignore=ns::Bar",
                "ignore=ns::Foo/a",
                "ignore=ns::Foo/b"
            ]
        );
        assert_eq!(
            parse_ignore("ignore=ns::Foo/a"),
            Some(("ns::Foo".into(), Some("a".into())))
        );
        std::fs::write(&path, "features = [").expect("write");
        let e = features(&path).unwrap_err();
        assert!(e.starts_with("--config ") && !e.contains('\n'), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
