//! Reading the pprof profiles oi-trace writes with the readers people use: `go tool pprof`
//! (Debian's golang-go) and `protoc --decode` against the vendored `profile.proto` (Debian's
//! protobuf-compiler), both installed by `cargo xtask setup`.

use std::{
    io::Write as _,
    path::Path,
    process::{Command, Stdio},
};

use crate::workspace_root;

/// `go tool pprof ARGS PROFILE`'s stdout; fails the test when it fails. Binaries are never
/// looked up: the profile must name its frames itself.
pub fn go_pprof(args: &[&str], profile: &Path) -> String {
    let scratch = std::env::temp_dir().join("oi-e2e-pprof-home");
    let _ = std::fs::create_dir_all(&scratch);
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(profile)
        .env("PPROF_BINARY_PATH", "/nonexistent")
        .env("PPROF_TMPDIR", &scratch)
        .env("HOME", &scratch)
        .env("GOCACHE", scratch.join("gocache"))
        .output()
        .expect("run go tool pprof (installed by cargo xtask setup)");
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("pprof prints UTF-8")
}

/// The sample types `-raw` lists, in order (`alloc_objects/count`, …).
pub fn raw_sample_types(raw: &str) -> Vec<String> {
    let mut lines = raw.lines().skip_while(|l| !l.starts_with("Samples:"));
    lines.next();
    lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(|t| t.trim_end_matches("[dflt]").to_string())
        .collect()
}

/// The samples `-raw` lists: each one's values.
pub fn raw_samples(raw: &str) -> Vec<Vec<i64>> {
    raw.lines()
        .skip_while(|l| !l.starts_with("Samples:"))
        .skip(2)
        .take_while(|l| !l.starts_with("Locations"))
        .filter_map(|l| {
            let (values, _) = l.split_once(':')?;
            values
                .split_whitespace()
                .map(|v| v.parse().ok())
                .collect::<Option<Vec<i64>>>()
                .filter(|v| !v.is_empty())
        })
        .collect()
}

/// The sum of each sample type's values over every sample `-raw` lists.
pub fn raw_totals(raw: &str) -> Vec<i64> {
    let samples = raw_samples(raw);
    let width = samples.first().map_or(0, Vec::len);
    (0..width)
        .map(|i| samples.iter().map(|s| s[i]).sum())
        .collect()
}

/// `-top`'s total, as it prints it (`1234B` with `-unit=B`): from "… of X total".
pub fn top_total(top: &str) -> String {
    top.lines()
        .find_map(|l| {
            let (_, rest) = l.split_once(" of ")?;
            rest.strip_suffix(" total").map(str::to_string)
        })
        .unwrap_or_else(|| panic!("no total in pprof -top:\n{top}"))
}

/// `-top`'s rows: (flat, cum, name), flat and cum as printed.
pub fn top_rows(top: &str) -> Vec<(String, String, String)> {
    top.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() >= 6).then(|| (w[0].to_string(), w[3].to_string(), w[5..].join(" ")))
        })
        .collect()
}

/// The gunzipped profile decoded by `protoc --decode perftools.profiles.Profile` against the
/// vendored `oi-user/proto/profile.proto`: protobuf's text format.
pub fn protoc_decode(profile: &Path) -> String {
    let gz = std::fs::read(profile).expect("read the profile");
    let gunzip = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run gzip");
    let bytes = feed(gunzip, &gz);
    let proto = workspace_root().join("oi-user/proto");
    let protoc = Command::new("protoc")
        .arg("--decode")
        .arg("perftools.profiles.Profile")
        .arg("--proto_path")
        .arg(&proto)
        .arg("profile.proto")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run protoc (installed by cargo xtask setup)");
    String::from_utf8(feed(protoc, &bytes)).expect("protoc prints UTF-8")
}

/// Writes `input` to `child`'s stdin from a thread, and returns its stdout once it succeeded.
fn feed(mut child: std::process::Child, input: &[u8]) -> Vec<u8> {
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("wait for the decoder");
    writer
        .join()
        .expect("writer")
        .expect("write the decoder's input");
    assert!(out.status.success(), "decoding failed: {:?}", out.status);
    out.stdout
}

/// The string table of `protoc --decode`'s text, in order.
pub fn decoded_strings(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("string_table: "))
        .map(|s| {
            s.trim_matches('"')
                .replace("\\\"", "\"")
                .replace("\\\\", "\\")
        })
        .collect()
}

/// A profile as `protoc --decode` printed it, the parts the journeys check.
#[derive(Debug, Default)]
pub struct Decoded {
    pub strings: Vec<String>,
    /// (location ids leaf first, values).
    pub samples: Vec<(Vec<u64>, Vec<i64>)>,
    /// id → (mapping id, address, function ids innermost first).
    pub locations: std::collections::HashMap<u64, (u64, u64, Vec<u64>)>,
    /// id → (name, system name).
    pub functions: std::collections::HashMap<u64, (String, String)>,
    /// (id, filename, build id).
    pub mappings: Vec<(u64, String, String)>,
    /// (type, unit) per value.
    pub sample_types: Vec<(String, String)>,
    pub default_sample_type: String,
    pub comments: Vec<String>,
}

impl Decoded {
    /// Parses protobuf's text format as protoc prints a `Profile`.
    pub fn parse(text: &str) -> Self {
        let strings = decoded_strings(text);
        let s = |i: i64| strings[i as usize].clone();
        let mut d = Decoded::default();
        let mut stack: Vec<(String, Vec<(String, String)>)> = Vec::new();
        let mut top: Vec<(String, String)> = Vec::new();
        for line in text.lines().map(str::trim) {
            if let Some(block) = line.strip_suffix(" {") {
                stack.push((block.to_string(), Vec::new()));
            } else if line == "}" {
                let (block, fields) = stack.pop().expect("balanced braces");
                let int = |k: &str| -> Vec<i64> {
                    fields
                        .iter()
                        .filter(|(f, _)| f == k)
                        .map(|(_, v)| v.parse().expect("an integer"))
                        .collect()
                };
                let one = |k: &str| int(k).first().copied().unwrap_or(0);
                match (block.as_str(), stack.last_mut()) {
                    ("line", Some((_, parent))) => {
                        parent.push(("function_id".into(), one("function_id").to_string()))
                    }
                    ("sample", _) => d.samples.push((
                        int("location_id").iter().map(|&v| v as u64).collect(),
                        int("value"),
                    )),
                    ("location", _) => {
                        d.locations.insert(
                            one("id") as u64,
                            (
                                one("mapping_id") as u64,
                                one("address") as u64,
                                int("function_id").iter().map(|&v| v as u64).collect(),
                            ),
                        );
                    }
                    ("function", _) => {
                        d.functions
                            .insert(one("id") as u64, (s(one("name")), s(one("system_name"))));
                    }
                    ("mapping", _) => {
                        d.mappings
                            .push((one("id") as u64, s(one("filename")), s(one("build_id"))))
                    }
                    ("sample_type", _) => d.sample_types.push((s(one("type")), s(one("unit")))),
                    _ => {}
                }
            } else if let Some((k, v)) = line.split_once(": ") {
                let field = (k.to_string(), v.to_string());
                match stack.last_mut() {
                    Some((_, fields)) => fields.push(field),
                    None => top.push(field),
                }
            }
        }
        for (k, v) in top {
            match k.as_str() {
                "default_sample_type" => d.default_sample_type = s(v.parse().unwrap()),
                "comment" => d.comments.push(s(v.parse().unwrap())),
                _ => {}
            }
        }
        d.strings = strings;
        d
    }

    /// The names of a sample's frames, leaf first, every location's lines innermost first.
    pub fn frame_names(&self, locations: &[u64]) -> Vec<&str> {
        locations
            .iter()
            .flat_map(|id| &self.locations[id].2)
            .map(|f| self.functions[f].0.as_str())
            .collect()
    }
}
