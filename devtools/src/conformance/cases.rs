//! OI's test definitions, `test/integration/*.toml`, read at run time from an OI repository
//! (a git directory, read at a revision, or a checkout) and never copied. Each suite file
//! becomes a [`Suite`] and each of its `[cases.NAME]` a [`Case`]: how to build and probe
//! it, what to expect of oi-trace, and whether it runs at all.
//!
//! OI has two JSON formats: `expect_json` is what oid's TreeBuilder v1 prints,
//! `expect_json_v2` what TreeBuilder v2 and OIL print. oi-trace prints the v2 shape, so a
//! case is scored on `expect_json_v2` when it has one. Otherwise its v1 expectation is used
//! without the keys whose v1 meaning differs from v2 ([`V1_IGNORED_KEYS`]): in the cases that
//! carry both formats, v1 `exclusiveSize` (static + dynamic minus the emitted children) and
//! v2's (bytes this node owns) disagree on about a quarter of the nodes, v1 `dynamicSize` has
//! no v2 counterpart (static + dynamic is not v2 `size` for node-based containers), v1
//! `typePath` is a string where v2 has a list, and the rest exist in v1 only.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::LazyLock,
};

use anyhow::{Context as _, Result, bail};
use regex::Regex;
use serde_json::Value;
use toml::Table;

pub const INTEGRATION_DIR: &str = "test/integration";

/// Keys dropped from v1 expectations (see the module documentation).
pub const V1_IGNORED_KEYS: [&str; 7] = [
    "dynamicSize",
    "exclusiveSize",
    "elementStaticSize",
    "isTypedef",
    "isset",
    "paddingSavingsSize",
    "typePath",
];

/// Libraries the build machine lacks: a suite or case that uses one cannot be built.
const LIBRARIES: [(&str, &str, &str); 3] = [
    ("folly", "folly/", r"\bfolly::"),
    (
        "thrift",
        "thrift/",
        r"\bapache::thrift\b|__fbthrift|\bthrift::",
    ),
    ("boost", "boost/", r"\bboost::"),
];

/// Where the suite files come from.
pub struct Repo {
    pub path: PathBuf,
    source: Source,
    /// The commit read (of the checkout's HEAD for a checkout), when known.
    pub commit: Option<String>,
}

enum Source {
    /// A git directory, read at this revision.
    Git { dir: PathBuf, rev: String },
    /// A checkout's work tree: what is on disk, local edits included.
    Tree(PathBuf),
}

impl Repo {
    pub fn open(path: &Path, rev: &str) -> Result<Repo> {
        if !path.is_dir() {
            bail!("OI repository {} is not a directory", path.display());
        }
        let tree = path.join(INTEGRATION_DIR);
        if tree.is_dir() {
            let commit = git(&["-C", &path.to_string_lossy(), "rev-parse", "HEAD"]).ok();
            return Ok(Repo {
                path: path.to_path_buf(),
                source: Source::Tree(tree),
                commit: commit.map(|c| c.trim().to_string()),
            });
        }
        let dir = path.to_string_lossy();
        let commit = git(&[
            "--git-dir",
            &dir,
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ])
        .with_context(|| {
            format!(
                "{} is neither a checkout holding {INTEGRATION_DIR}/ nor a git directory \
                 with revision {rev}",
                path.display()
            )
        })?;
        Ok(Repo {
            path: path.to_path_buf(),
            source: Source::Git {
                dir: path.to_path_buf(),
                rev: rev.to_string(),
            },
            commit: Some(commit.trim().to_string()),
        })
    }

    /// The suite files' names (`NAME.toml`), sorted.
    pub fn suite_files(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = match &self.source {
            Source::Git { dir, rev } => git(&[
                "--git-dir",
                &dir.to_string_lossy(),
                "ls-tree",
                "--name-only",
                &format!("{rev}:{INTEGRATION_DIR}"),
            ])?
            .lines()
            .map(str::to_string)
            .collect(),
            Source::Tree(tree) => std::fs::read_dir(tree)
                .with_context(|| format!("listing {}", tree.display()))?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
        };
        names.retain(|n| n.ends_with(".toml"));
        names.sort();
        Ok(names)
    }

    pub fn read(&self, name: &str) -> Result<String> {
        match &self.source {
            Source::Git { dir, rev } => git(&[
                "--git-dir",
                &dir.to_string_lossy(),
                "show",
                &format!("{rev}:{INTEGRATION_DIR}/{name}"),
            ]),
            Source::Tree(tree) => std::fs::read_to_string(tree.join(name))
                .with_context(|| format!("reading {}", tree.join(name).display())),
        }
    }

    pub fn describe(&self) -> String {
        match &self.commit {
            Some(c) => format!("{} @ {}", self.path.display(), &c[..c.len().min(12)]),
            None => self.path.display().to_string(),
        }
    }
}

fn git(args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .args(args)
        .output()
        .context("running git")?;
    if !out.status.success() {
        bail!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).context("git printed non-UTF-8")
}

/// One suite file.
pub struct Suite {
    pub name: String,
    pub includes: Vec<String>,
    pub raw_definitions: String,
    pub definitions: String,
    /// Why none of its cases can be built (the whole suite needs folly or Thrift).
    pub excluded: Option<String>,
    pub cases: Vec<Case>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Expect {
    /// `expect_json_v2`, compared as it is.
    V2,
    /// `expect_json` without [`V1_IGNORED_KEYS`].
    V1,
    /// No JSON expectation: the exit code and output regexes only.
    None,
}

impl Expect {
    pub fn name(self) -> &'static str {
        match self {
            Expect::V2 => "v2",
            Expect::V1 => "v1",
            Expect::None => "none",
        }
    }
}

/// One of OI's `expect_stdout`-like regexes, matched against the whole stream.
pub struct OutputCheck {
    pub key: &'static str,
    pub stderr: bool,
    /// False for `expect_not_*`: the regex must not match.
    pub must_match: bool,
    pub pattern: String,
    pub regex: Regex,
}

pub struct Case {
    pub suite: String,
    pub name: String,
    pub param_types: Vec<String>,
    /// The tuple `get_<case>()` returns, when it is not the parameters without cv-ref.
    pub arg_types: Option<Vec<String>>,
    pub setup: String,
    pub symbol: String,
    /// `type = "return"`: probe the function's return.
    pub on_return: bool,
    /// oi-trace's `--arg`.
    pub args: String,
    pub exit_code: i64,
    pub features: Vec<String>,
    /// `config_prefix` and `config_suffix`: the OI config file this case runs with.
    pub config: String,
    pub expect: Expect,
    pub expected: Option<Value>,
    pub output_checks: Vec<OutputCheck>,
    /// OI's own `skip` or `oid_skip` reason.
    pub skip: Option<String>,
    pub excluded: Option<String>,
    /// Why the harness cannot build or run it.
    pub unsupported: Option<String>,
    /// What of the case's definition the run cannot honour, and similar remarks.
    pub notes: Vec<String>,
}

impl Case {
    pub fn id(&self) -> String {
        format!("{}.{}", self.suite, self.name)
    }
}

/// Every suite of the repository, with a warning for each file that cannot be read.
pub fn load(repo: &Repo) -> Result<(Vec<Suite>, Vec<String>)> {
    let mut suites = Vec::new();
    let mut warnings = Vec::new();
    for file in repo.suite_files()? {
        let name = file.trim_end_matches(".toml");
        match repo.read(&file).and_then(|text| parse_suite(name, &text)) {
            Ok(suite) => suites.push(suite),
            Err(e) => warnings.push(format!("suite {name}: {e:#}")),
        }
    }
    Ok((suites, warnings))
}

pub fn parse_suite(name: &str, text: &str) -> Result<Suite> {
    let table: Table = text.parse().context("not valid TOML")?;
    let string = |key| -> Result<String> {
        Ok(get_string(&table, key)
            .map_err(anyhow::Error::msg)?
            .unwrap_or_default())
    };
    let includes = get_strings(&table, "includes")
        .map_err(anyhow::Error::msg)?
        .unwrap_or_default();
    let raw_definitions = string("raw_definitions")?;
    let definitions = string("definitions")?;
    let excluded = if table.contains_key("thrift_definitions") {
        Some("needs the Thrift compiler (thrift_definitions)".to_string())
    } else {
        needs_library(&[&definitions, &raw_definitions], &includes)
    };
    let mut suite = Suite {
        name: name.to_string(),
        includes,
        raw_definitions,
        definitions,
        excluded,
        cases: Vec::new(),
    };
    if let Some(cases) = table.get("cases") {
        let Some(cases) = cases.as_table() else {
            bail!("`cases` is not a table");
        };
        for (case, spec) in cases {
            let Some(spec) = spec.as_table() else {
                bail!("cases.{case} is not a table");
            };
            suite.cases.push(parse_case(&suite, case, spec));
        }
    }
    Ok(suite)
}

fn parse_case(suite: &Suite, name: &str, spec: &Table) -> Case {
    let (features, mut notes) = features_and_notes(spec);
    let mut case = Case {
        suite: suite.name.clone(),
        name: name.to_string(),
        param_types: Vec::new(),
        arg_types: None,
        setup: String::new(),
        symbol: format!("oid_test_case_{}_{name}", suite.name),
        on_return: false,
        args: String::new(),
        exit_code: 0,
        features,
        config: config_text(spec),
        expect: Expect::None,
        expected: None,
        output_checks: Vec::new(),
        skip: skip_reason(spec),
        excluded: suite.excluded.clone(),
        unsupported: None,
        notes: Vec::new(),
    };
    if let Err(why) = fill_case(&mut case, spec, &mut notes) {
        case.unsupported = Some(why);
    }
    case.notes = notes;
    case
}

/// The parts of a case that can be malformed; an error makes the case unsupported.
fn fill_case(case: &mut Case, spec: &Table, notes: &mut Vec<String>) -> Result<(), String> {
    let target_function = get_string(spec, "target_function")?;
    let param_types = get_strings(spec, "param_types")?;
    let setup = get_string(spec, "setup")?;
    case.arg_types = get_strings(spec, "arg_types")?;
    case.on_return = get_string(spec, "type")?.as_deref() == Some("return");
    case.args = get_string(spec, "args")?
        .unwrap_or_else(|| if case.on_return { "retval" } else { "arg0" }.to_string());
    if let Some(code) = spec.get("expect_oid_exit_code") {
        case.exit_code = code
            .as_integer()
            .ok_or("`expect_oid_exit_code` is not an integer")?;
    }
    for (key, stderr, must_match) in [
        ("expect_stdout", false, true),
        ("expect_stderr", true, true),
        ("expect_not_stdout", false, false),
        ("expect_not_stderr", true, false),
    ] {
        if let Some(pattern) = get_string(spec, key)? {
            let regex = Regex::new(&format!(r"(?s)\A(?:{pattern})\z"))
                .map_err(|e| format!("{key} is not a regular expression we read: {e}"))?;
            case.output_checks.push(OutputCheck {
                key,
                stderr,
                must_match,
                pattern,
                regex,
            });
        }
    }
    let key = ["expect_json_v2", "expect_json"]
        .into_iter()
        .find(|k| spec.contains_key(*k));
    if let Some(key) = key {
        let text = get_string(spec, key)?.unwrap_or_default();
        let expected: Value =
            serde_json::from_str(&text).map_err(|e| format!("{key} is not valid JSON: {e}"))?;
        if key == "expect_json" {
            if contains_typedef_node(&expected) {
                notes.push(
                    "the v1 expectation has typedef wrapper nodes (isTypedef), a tree shape \
                     only v1 has"
                        .to_string(),
                );
            }
            case.expect = Expect::V1;
            case.expected = Some(strip_v1_keys(&expected));
        } else {
            case.expect = Expect::V2;
            case.expected = Some(expected);
        }
    }
    if let Some(function) = target_function {
        case.symbol = function;
        return Err(
            "it probes a hand-written target_function; no target is generated for it".to_string(),
        );
    }
    let (Some(param_types), Some(setup)) = (param_types, setup) else {
        return Err("it lacks param_types or setup".to_string());
    };
    let mut texts: Vec<&str> = param_types.iter().map(String::as_str).collect();
    texts.extend(case.arg_types.iter().flatten().map(String::as_str));
    texts.push(&setup);
    if let Some(why) = needs_library(&texts, &[]) {
        return Err(why);
    }
    case.param_types = param_types;
    case.setup = setup;
    Ok(())
}

fn get_string(table: &Table, key: &str) -> Result<Option<String>, String> {
    match table.get(key) {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("`{key}` is a {}, not a string", other.type_str())),
    }
}

fn get_strings(table: &Table, key: &str) -> Result<Option<Vec<String>>, String> {
    let Some(value) = table.get(key) else {
        return Ok(None);
    };
    let bad = || format!("`{key}` is not a list of strings");
    value
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// OI's `oid_skip` (or else `skip`): a reason, or `true`.
fn skip_reason(spec: &Table) -> Option<String> {
    ["oid_skip", "skip"]
        .into_iter()
        .find_map(|key| match spec.get(key) {
            Some(toml::Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(toml::Value::Boolean(true)) => Some("marked skip".to_string()),
            _ => None,
        })
}

/// The case's OI config file: `config_prefix` then `config_suffix`, as OI's runner passes them.
fn config_text(spec: &Table) -> String {
    let parts: Vec<&str> = ["config_prefix", "config_suffix"]
        .into_iter()
        .filter_map(|k| spec.get(k).and_then(toml::Value::as_str))
        .filter(|s| !s.is_empty())
        .collect();
    parts.join("\n").trim().to_string()
}

/// The features to pass as `--feature`: the case's `features`, those its config sets, and
/// `capture-keys` for `[[codegen.capture_keys]]`; with notes on the configuration that only
/// `--config` carries and the options nothing carries.
pub fn features_and_notes(spec: &Table) -> (Vec<String>, Vec<String>) {
    let mut features: Vec<String> = get_strings(spec, "features")
        .ok()
        .flatten()
        .unwrap_or_default();
    let mut notes = Vec::new();
    for key in ["config_prefix", "config_suffix"] {
        let Some(text) = spec.get(key).and_then(toml::Value::as_str) else {
            continue;
        };
        let mut config: Table = match text.parse() {
            Ok(config) => config,
            Err(e) => {
                notes.push(format!("{key} is not valid TOML ({e})"));
                continue;
            }
        };
        if let Some(toml::Value::Array(list)) = config.remove("features") {
            features.extend(list.iter().filter_map(|f| f.as_str().map(str::to_string)));
        }
        if let Some(toml::Value::Table(codegen)) = config.get_mut("codegen") {
            if let Some(toml::Value::Array(capture)) = codegen.remove("capture_keys")
                && !capture.is_empty()
            {
                features.push("capture-keys".to_string());
                let top_level_only = capture.iter().all(|entry| {
                    entry.as_table().is_some_and(|t| {
                        t.len() == 1 && t.get("top_level") == Some(&toml::Value::Boolean(true))
                    })
                });
                if !top_level_only {
                    notes.push(format!(
                        "capture_keys of chosen types or members ({}): only --config says which",
                        to_json(&toml::Value::Array(capture))
                    ));
                }
            }
            if codegen.is_empty() {
                config.remove("codegen");
            }
        }
        if !config.is_empty() {
            notes.push(format!(
                "{key} sets {} (passed on by --config only)",
                to_json(&toml::Value::Table(config))
            ));
        }
    }
    if let Ok(Some(options)) = get_strings(spec, "cli_options") {
        notes.push(format!("cli_options ignored: {}", options.join(" ")));
    }
    for key in ["min_llvm_version", "max_llvm_version", "skip_llvm_version"] {
        if spec.contains_key(key) {
            notes.push(format!("{key} ignored (oi-trace has no LLVM)"));
        }
    }
    let mut unique = Vec::new();
    for f in features {
        if !unique.contains(&f) {
            unique.push(f);
        }
    }
    (unique, notes)
}

fn to_json(value: &toml::Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// Why code needs a library the build machine lacks, if it does.
pub fn needs_library(texts: &[&str], includes: &[String]) -> Option<String> {
    for (library, prefix, _) in LIBRARIES {
        if let Some(include) = includes.iter().find(|i| i.starts_with(prefix)) {
            return Some(format!("needs {library} (#include <{include}>)"));
        }
    }
    static PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        LIBRARIES
            .iter()
            .map(|(_, _, pattern)| Regex::new(pattern).expect("library pattern"))
            .collect()
    });
    for ((library, _, _), regex) in LIBRARIES.iter().zip(PATTERNS.iter()) {
        if let Some(m) = texts.iter().find_map(|t| regex.find(t)) {
            return Some(format!("needs {library} (uses {})", m.as_str()));
        }
    }
    None
}

fn contains_typedef_node(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().any(contains_typedef_node),
        Value::Object(map) => {
            map.get("isTypedef") == Some(&Value::Bool(true))
                || map.values().any(contains_typedef_node)
        }
        _ => false,
    }
}

/// A v1 expectation without [`V1_IGNORED_KEYS`], inside NOT clauses too; a NOT left empty
/// goes. A list-valued `typePath` is already v2's and stays.
pub fn strip_v1_keys(value: &Value) -> Value {
    let ignored = |key: &str, v: &Value| {
        V1_IGNORED_KEYS.contains(&key) && (key != "typePath" || v.is_string())
    };
    match value {
        Value::Array(items) => Value::Array(items.iter().map(strip_v1_keys).collect()),
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (key, v) in map {
                if key == "NOT" {
                    match v {
                        Value::Object(not) => {
                            let kept: serde_json::Map<_, _> = not
                                .iter()
                                .filter(|(k, v)| !ignored(k, v))
                                .map(|(k, v)| (k.clone(), strip_v1_keys(v)))
                                .collect();
                            if !kept.is_empty() {
                                out.insert(key.clone(), Value::Object(kept));
                            }
                        }
                        Value::String(name) if V1_IGNORED_KEYS.contains(&name.as_str()) => {}
                        other => {
                            out.insert(key.clone(), other.clone());
                        }
                    }
                } else if !ignored(key, v) {
                    out.insert(key.clone(), strip_v1_keys(v));
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SUITE: &str = r#"
includes = ["vector", "folly/FBString.h"]
definitions = "struct Foo { int a; };"

[cases.plain]
  param_types = ["const Foo&", "int"]
  args = "arg0,arg1"
  setup = "return {Foo{1}, 7};"
  expect_json_v2 = '[{"staticSize": 4}, {"staticSize": 4}]'
  expect_json = '[{"staticSize": 4, "dynamicSize": 0}]'
[cases.ret]
  type = "return"
  param_types = ["int"]
  setup = "return 1;"
  expect_oid_exit_code = 3
  expect_stderr = ".*Nothing to output.*"
[cases.skipped]
  oid_skip = "Requires TreeBuilderV2"
  param_types = ["int"]
  setup = "return 1;"
  expect_json = '[{"staticSize": 4, "dynamicSize": 0, "NOT": "isset", "typePath": "a0"}]'
[cases.custom]
  target_function = "my_function"
[cases.bad_json]
  param_types = ["int"]
  setup = "return 1;"
  expect_json = '[{'
"#;

    fn suite() -> Suite {
        parse_suite("demo", SUITE).unwrap()
    }

    fn case<'a>(suite: &'a Suite, name: &str) -> &'a Case {
        suite.cases.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn reads_suite_and_cases() {
        let suite = suite();
        assert_eq!(suite.includes, ["vector", "folly/FBString.h"]);
        assert_eq!(
            suite.excluded.as_deref(),
            Some("needs folly (#include <folly/FBString.h>)")
        );
        assert_eq!(suite.cases.len(), 5);
        let plain = case(&suite, "plain");
        assert_eq!(plain.id(), "demo.plain");
        assert_eq!(plain.symbol, "oid_test_case_demo_plain");
        assert_eq!(plain.param_types, ["const Foo&", "int"]);
        assert_eq!(plain.args, "arg0,arg1");
        assert!(!plain.on_return);
        assert_eq!(plain.expect, Expect::V2);
        assert_eq!(
            plain.expected,
            Some(json!([{"staticSize": 4}, {"staticSize": 4}]))
        );
        assert_eq!(plain.skip, None);
        assert_eq!(plain.unsupported, None);
    }

    #[test]
    fn return_probe_exit_code_and_regex() {
        let suite = suite();
        let ret = case(&suite, "ret");
        assert!(ret.on_return);
        assert_eq!(ret.args, "retval");
        assert_eq!(ret.exit_code, 3);
        assert_eq!(ret.expect, Expect::None);
        let check = &ret.output_checks[0];
        assert!(check.stderr && check.must_match);
        assert!(check.regex.is_match("x\nNothing to output: no\n"));
        assert!(!check.regex.is_match("Something else"));
    }

    #[test]
    fn skips_and_unsupported_cases() {
        let suite = suite();
        let skipped = case(&suite, "skipped");
        assert_eq!(skipped.skip.as_deref(), Some("Requires TreeBuilderV2"));
        assert_eq!(skipped.expect, Expect::V1);
        assert_eq!(skipped.expected, Some(json!([{"staticSize": 4}])));
        let custom = case(&suite, "custom");
        assert_eq!(custom.symbol, "my_function");
        assert!(
            custom
                .unsupported
                .as_deref()
                .unwrap()
                .contains("target_function")
        );
        let bad = case(&suite, "bad_json");
        assert!(
            bad.unsupported
                .as_deref()
                .unwrap()
                .contains("not valid JSON")
        );
    }

    #[test]
    fn skip_true_and_false() {
        let spec: Table = "skip = true".parse().unwrap();
        assert_eq!(skip_reason(&spec).as_deref(), Some("marked skip"));
        let spec: Table = "skip = false".parse().unwrap();
        assert_eq!(skip_reason(&spec), None);
    }

    #[test]
    fn features_from_list_and_config() {
        let spec: Table = r#"
features = ["chase-raw-pointers"]
config_prefix = 'features = ["chase-raw-pointers", "x"]'
config_suffix = """
[[codegen.capture_keys]]
top_level = true
[[codegen.ignore]]
type = "Foo"
"""
cli_options = ["-Ftype-graph"]
"#
        .parse()
        .unwrap();
        let (features, notes) = features_and_notes(&spec);
        assert_eq!(features, ["chase-raw-pointers", "x", "capture-keys"]);
        assert!(notes.iter().any(|n| n.contains("cli_options ignored")));
        assert!(notes.iter().any(|n| n.contains("codegen")));
        assert_eq!(
            config_text(&spec),
            "features = [\"chase-raw-pointers\", \"x\"]\n[[codegen.capture_keys]]\n\
             top_level = true\n[[codegen.ignore]]\ntype = \"Foo\""
        );
    }

    #[test]
    fn libraries_in_case_code() {
        let suite = parse_suite(
            "s",
            r#"
[cases.f]
  param_types = ["const folly::fbstring&"]
  setup = "return {};"
"#,
        )
        .unwrap();
        assert_eq!(suite.excluded, None);
        assert_eq!(
            suite.cases[0].unsupported.as_deref(),
            Some("needs folly (uses folly::)")
        );
    }

    #[test]
    fn v1_keys_go_also_inside_not() {
        let v1 = json!([{
            "staticSize": 24, "dynamicSize": 12, "exclusiveSize": 36,
            "elementStaticSize": 4, "isTypedef": false, "typePath": "a",
            "members": [
                {"NOT": {"dynamicSize": 0}},
                {"NOT": "isset"},
                {"NOT": {"pointer": 0, "exclusiveSize": 1}},
                {"NOT": "members"}
            ]
        }]);
        assert_eq!(
            strip_v1_keys(&v1),
            json!([{"staticSize": 24, "members": [
                {}, {}, {"NOT": {"pointer": 0}}, {"NOT": "members"}
            ]}])
        );
        assert_eq!(
            strip_v1_keys(&json!({"typePath": ["a"]})),
            json!({"typePath": ["a"]})
        );
    }
}
