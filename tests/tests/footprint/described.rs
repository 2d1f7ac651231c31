//! Containers described as data (docs/containers.md): a small-buffer vector that
//! exists only in a test fixture, described in a TOML file written here, measured exactly
//! (the fixture's own numbers) at -O0 and -O2, jit and remote byte-identical; descriptions
//! that do not fit the program are one-line errors naming the file and line, exit 2.

use oi_e2e::{OiTrace, TempDir, privileged, run_oi_trace};
use std::io::Write as _;
use std::time::Duration;

/// The fixture's `sbv::SmallVec<T, N>`: `T* data_; uint32_t size_, cap_; uint8_t flags_;
/// T buf_[N]`, on the heap when `flags_ & 1`.
const SMALLVEC: &str = r#"
[[container]]
name = "sbv::SmallVec"
args = ["T", "N"]
elem = "T"
layout = "array"

[container.fields]
data = "data_"
size = "size_"
cap = "cap_"
flags = "flags_"

[container.array]
data = "data"
len = "size"
cap = "cap"
heap = "cap * sizeof(T)"
inline = "(flags & 1) == 0"
"#;

/// A `node_chains` table for SMALLVEC whose nodes fit, and whose bucket pairs' trees have
/// nodes of 24 bytes: too small for the red-black links.
const NODE_CHAINS_SMALL_TREE_NODES: &str = r#"[container.node_chains]
buckets = "data"
bucket_count = "cap"
next_offset = "sizeof(T)"
value_offset = "0"
node_size = "sizeof(T) + 8"
len = "size"
heap = "0"
[container.node_chains.tree]
size = "56"
root = "24"
node_size = "24"
chain = "16"
"#;

/// A `node_chains` table for SMALLVEC whose 4-byte nodes hold neither an int and a pointer.
const NODE_CHAINS_TOO_SMALL: &str = r#"[container.node_chains]
buckets = "data"
bucket_count = "cap"
next_offset = "sizeof(T)"
value_offset = "0"
node_size = "sizeof(T)"
len = "size"
heap = "0"
"#;

fn description(dir: &TempDir, name: &str, text: &str) -> String {
    let path = dir.file(name);
    std::fs::write(&path, text).expect("write description");
    path.to_str().expect("utf8").to_string()
}

/// Each (description text, line, message) given with `--containers` to a trace of the
/// fixture `name`, built at -O0 and at -O2, exits 2 with one line of stderr naming the file,
/// the line and the message, and leaves the fixture running.
fn each_is_a_one_line_error(dir: &TempDir, name: &str, cases: &[(String, usize, &str)]) {
    for opt in ["-O0", "-O2"] {
        let exe = crate::common::build_fixture(name, opt);
        let (mut fixture, _out, _) = crate::common::start_fixture(&exe);
        let pid = fixture.0.id().to_string();
        each_fails_in_one_line(dir, &pid, cases);
        assert!(
            fixture.0.try_wait().expect("wait").is_none(),
            "{opt}: fixture still runs"
        );
    }
}

/// `each_is_a_one_line_error` on the process `pid`.
fn each_fails_in_one_line(dir: &TempDir, pid: &str, cases: &[(String, usize, &str)]) {
    for (i, (text, line, what)) in cases.iter().enumerate() {
        let file = description(dir, &format!("bad{i}.toml"), text);
        let out = run_oi_trace(
            &[
                "--pid",
                pid,
                "--uprobe",
                "inspect",
                "--count",
                "1",
                "--containers",
                &file,
            ],
            Duration::from_secs(60),
        );
        assert_eq!(out.status.code(), Some(2), "case {i}: {out:#?}");
        assert_eq!(out.stderr.len(), 1, "case {i}: {out:#?}");
        let want = format!("{file}:{line}: ");
        assert!(
            out.stderr[0].contains(&want) && out.stderr[0].contains(what),
            "case {i}: want `{want}…{what}` in {:?}",
            out.stderr[0]
        );
    }
}

#[test]
fn user_described_small_vector_is_measured_exactly() {
    if !privileged() {
        return;
    }
    let dir = TempDir::new("described");
    let file = description(&dir, "smallvec.toml", SMALLVEC);
    for opt in ["-O0", "-O2"] {
        let exe = crate::common::build_fixture("described_smallvec", opt);
        let count = crate::common::start_fixture(&exe).2.len();
        let failures: Vec<String> = (0..count)
            .flat_map(|i| {
                crate::common::check_probe_with(
                    "described_smallvec",
                    opt,
                    i,
                    &["--containers", &file],
                )
            })
            .collect();
        assert!(
            failures.is_empty(),
            "{opt}: mismatches:\n{}",
            failures.join("\n")
        );
    }
}

/// A description that does not fit the DWARF, or does not parse: one line, `file:line:`,
/// exit 2, before anything is measured; on the -O0 and the -O2 build of the fixture.
#[test]
fn descriptions_that_do_not_fit_are_one_line_errors() {
    if !privileged() {
        return;
    }
    let dir = TempDir::new("described-bad");
    let cases = [
        // A member the class does not have (line 11: `cap = "capacity_"`).
        (
            SMALLVEC.replace("\"cap_\"", "\"capacity_\""),
            11,
            "has no member capacity_",
        ),
        // A template argument the class does not have (line 3: the `name`).
        (
            SMALLVEC.replace("[\"T\", \"N\"]", "[\"T\", \"N\", \"A\"]"),
            3,
            "template argument",
        ),
        // A field that is no integer (`buf_` is an array of N * sizeof(T) bytes).
        (
            SMALLVEC.replace("\"flags_\"", "\"buf_\""),
            12,
            "not an integer",
        ),
        // An expression that does not parse (line 18).
        (
            SMALLVEC.replace("cap * sizeof(T)", "cap * sizeof(T"),
            18,
            "bad expression",
        ),
        // An unknown name in an expression.
        (
            SMALLVEC.replace("len = \"size\"", "len = \"count\""),
            16,
            "unknown name count",
        ),
        // A plain type name the program's DWARF does not have (line 5: `elem`).
        (
            SMALLVEC.replace("elem = \"T\"", "elem = \"no::Such\""),
            5,
            "no type `no::Such`",
        ),
        // Node chains whose nodes cannot hold their value and next pointer (line 19:
        // `node_size`).
        (
            SMALLVEC.replace("\"array\"", "\"node_chains\"").replace(
                &SMALLVEC[SMALLVEC.find("[container.array]").expect("table")..],
                NODE_CHAINS_TOO_SMALL,
            ),
            19,
            "cannot hold the value",
        ),
        // Node chains whose bucket pairs' tree nodes cannot hold the red-black links
        // (line 25: the tree's `node_size`).
        (
            SMALLVEC.replace("\"array\"", "\"node_chains\"").replace(
                &SMALLVEC[SMALLVEC.find("[container.array]").expect("table")..],
                NODE_CHAINS_SMALL_TREE_NODES,
            ),
            25,
            "cannot hold the red-black links",
        ),
    ];
    each_is_a_one_line_error(&dir, "described_smallvec", &cases);
}

/// Boost.Container through the shipped descriptions (containers/boost.toml): vector,
/// small_vector inline and spilled, static_vector, and flat_map / flat_set walking as the
/// structs they are around a described vector; the fixture's numbers, at -O0 and -O2, jit
/// and remote byte-identical.
#[test]
fn shipped_boost_containers_are_measured_exactly() {
    if !privileged() {
        return;
    }
    for opt in ["-O0", "-O2"] {
        let failures = crate::common::check_probe("footprint_boost", opt, 0);
        assert!(
            failures.is_empty(),
            "{opt}: mismatches:\n{}",
            failures.join("\n")
        );
    }
}

/// A class named as a shipped description names (abseil.toml's `InlinedVector`) but laid
/// out otherwise: oi-trace says so once on stderr (`shipped description … does not fit
/// this program: …; measured as a plain class`), measures it as the plain class (the
/// fixture's numbers, jit = remote, -O0 and -O2) and exits 0. A `--containers` file that
/// does not fit stays an error (above).
#[test]
fn shipped_description_that_does_not_fit_is_a_warning() {
    if !privileged() {
        return;
    }
    for opt in ["-O0", "-O2"] {
        let failures = crate::common::check_probe("shipped_misfit", opt, 0);
        assert!(
            failures.is_empty(),
            "{opt}: mismatches:\n{}",
            failures.join("\n")
        );
        let exe = crate::common::build_fixture("shipped_misfit", opt);
        let (mut fixture, _out, _) = crate::common::start_fixture(&exe);
        let pid = fixture.0.id().to_string();
        let args = ["--pid", &pid, "--uprobe", "inspect", "--count", "1"];
        let tracer = OiTrace::attached(&args);
        // Kept open until oi-trace is done: the fixture waits for its end.
        let mut stdin = fixture.0.stdin.take().expect("stdin");
        stdin.write_all(b"go\n").expect("go");
        let out = tracer.finish(Duration::from_secs(60));
        drop(stdin);
        assert_eq!(out.status.code(), Some(0), "{opt}: {out:#?}");
        let warnings: Vec<&String> = out
            .stderr
            .iter()
            .filter(|l| l.contains("shipped description"))
            .collect();
        let want = "oi-trace: warning: shipped description absl::debian3::InlinedVector \
                    (containers/abseil.toml:";
        assert_eq!(warnings.len(), 1, "{opt}: {out:#?}");
        assert!(
            warnings[0].starts_with(want)
                && warnings[0].contains("does not fit this program: ")
                && warnings[0].ends_with("; measured as a plain class"),
            "{opt}: want `{want}…` in {:?}",
            warnings[0]
        );
    }
}

/// The fixture's tagged unions (described_tagged.cpp): `tu::Value` with its enum tag before
/// the union, `tu::Tail` with an int16_t tag after it (a negative case).
const TAGGED: &str = r#"
[[union]]
in = "tu::Value"
member = "u"
discriminator = "kind"
cases = { "0" = "none", "1" = "i", "2" = "s", "3" = "v" }

[[union]]
in = "tu::Tail"
member = "u"
discriminator = "tag"
cases = { "-1" = "s", "5" = "v" }
"#;

/// A user's `[[union]]`: each active member walked as itself (a long, a long string, a
/// vector), "none" and a tag no case names walking nothing (the latter reported as not
/// walked), exactly the fixture's numbers at -O0 and -O2, jit = remote.
#[test]
fn user_described_tagged_unions_are_measured_exactly() {
    if !privileged() {
        return;
    }
    let dir = TempDir::new("tagged");
    let file = description(&dir, "tagged.toml", TAGGED);
    for opt in ["-O0", "-O2"] {
        let failures =
            crate::common::check_probe_with("described_tagged", opt, 0, &["--containers", &file]);
        assert!(
            failures.is_empty(),
            "{opt}: mismatches:\n{}",
            failures.join("\n")
        );
    }
}

/// `[[union]]` rules that do not fit the DWARF: one line, `file:line:`, exit 2.
#[test]
fn union_rules_that_do_not_fit_are_one_line_errors() {
    if !privileged() {
        return;
    }
    let dir = TempDir::new("tagged-bad");
    let cases = [
        // No such union member (line 4).
        (
            TAGGED.replace("member = \"u\"", "member = \"w\""),
            4,
            "has no member w",
        ),
        // A member that is not a union (line 4: `kind`).
        (
            TAGGED.replacen("member = \"u\"", "member = \"kind\"", 1),
            4,
            "is not a union",
        ),
        // No such discriminator (line 5).
        (
            TAGGED.replace("\"kind\"", "\"sort\""),
            5,
            "has no member sort",
        ),
        // A discriminator that is no integer (line 5: the union itself).
        (
            TAGGED.replace("discriminator = \"kind\"", "discriminator = \"u\""),
            5,
            "is not an integer",
        ),
        // A case naming a member the union lacks (line 6).
        (
            TAGGED.replace("\"3\" = \"v\"", "\"3\" = \"d\""),
            6,
            "has no member d",
        ),
        // A case that is no number (line 6).
        (
            TAGGED.replace("\"3\" =", "\"three\" ="),
            6,
            "not an integer",
        ),
    ];
    each_is_a_one_line_error(&dir, "described_tagged", &cases);
}
