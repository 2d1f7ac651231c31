//! The labels of a target's profiles, spelled as the backends want them: a `service_name`
//! and `key=value` pairs (`pid`, the user's `--label`s), and Pyroscope's `name` parameter
//! `SERVICE{k=v,…}`. Pure text: what a backend would refuse is refused here, at start, with
//! the user's words; what comes from a process (its command name) is made acceptable.
//!
//! Pyroscope's rules: a service name is letters, digits and `_ . - /`; a label name letters,
//! digits, `_` and `.`, not starting with `__` (reserved); a value ends at `,` or `}`, so those
//! (and `{`, `=`) are replaced by `_` in values.

/// A target's labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels {
    /// Pyroscope's application name, OpenTelemetry's `service.name`.
    pub service_name: String,
    /// `pid` or `cgroup` first, then `container_id`, `pod_uid` and `qos` where known, then
    /// the user's labels in their order.
    pub pairs: Vec<(String, String)>,
}

impl Labels {
    /// Pyroscope's `name` query parameter: `SERVICE{k=v,…}`.
    pub fn pyroscope_name(&self) -> String {
        let pairs: Vec<String> = self
            .pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", value(v)))
            .collect();
        format!("{}{{{}}}", self.service_name, pairs.join(","))
    }

    /// The value of label `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The labels the agent sets itself.
pub const RESERVED: [&str; 6] = [
    "service_name",
    "pid",
    "cgroup",
    "container_id",
    "pod_uid",
    "qos",
];

/// `K=V` as the user wrote it, checked.
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("--label {s:?}: write it as NAME=VALUE"))?;
    let k = k.trim();
    if !valid_label_name(k) {
        return Err(format!(
            "--label {s:?}: a label name is letters, digits, '_' and '.', not starting with \
             \"__\""
        ));
    }
    if RESERVED.contains(&k) {
        return Err(format!(
            "--label {s:?}: {k} is set by the agent (use --service-name for the service)"
        ));
    }
    Ok((k.to_string(), v.trim().to_string()))
}

/// Whether `k` is a label name Pyroscope takes from a client.
pub fn valid_label_name(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with("__")
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// Whether `name` is a service name Pyroscope takes.
pub fn valid_service_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(service_char)
}

/// A process's command name as a service name: refused characters become `_`.
pub fn service_name_from(comm: &str) -> String {
    let name: String = comm
        .trim()
        .chars()
        .map(|c| if service_char(c) { c } else { '_' })
        .collect();
    if name.is_empty() {
        "unknown".to_string()
    } else {
        name
    }
}

fn service_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/')
}

/// A label value with the characters that end or open one in `name` replaced.
fn value(v: &str) -> String {
    v.chars()
        .map(|c| {
            if matches!(c, ',' | '}' | '{' | '=') {
                '_'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_as_pyroscope_reads_them() {
        let labels = Labels {
            service_name: "shop".into(),
            pairs: vec![("pid".into(), "42".into()), ("env".into(), "a,b}c".into())],
        };
        assert_eq!(labels.pyroscope_name(), "shop{pid=42,env=a_b_c}");
        assert_eq!(labels.get("pid"), Some("42"));
        assert_eq!(
            parse_label("env = prod"),
            Ok(("env".to_string(), "prod".to_string()))
        );
        assert!(parse_label("env").is_err());
        assert!(parse_label("__name__=x").is_err());
        assert!(parse_label("a-b=x").is_err());
        assert!(parse_label("pid=1").is_err());
        assert_eq!(service_name_from("my app:1"), "my_app_1");
        assert_eq!(service_name_from(""), "unknown");
        assert!(valid_service_name("shop/api-1.2"));
        assert!(!valid_service_name("shop api"));
    }
}
