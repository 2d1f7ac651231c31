//! Journeys of the outputs people read, on a live g++ fixture (`output_people.cpp`, at -O0
//! and -O2) that prints its own footprint: the tree's C++ spellings, order, `--top`, folds,
//! pointers, padding and `--values` (both walkers); `--svg` and `--folded` pictures; `--growth`
//! over many samples; `--format csv` against the JSON of the same object; and that none of
//! them changes the JSON.

use std::collections::HashMap;
use std::time::Duration;

use oi_e2e::{Fixture, FixtureBuild, OiTrace, SIGUSR1, TempDir, json, privileged, run_oi_trace};

const TIMEOUT: Duration = Duration::from_secs(60);

fn builds() -> [std::path::PathBuf; 2] {
    [
        FixtureBuild::new("output_people")
            .variant("output_people_O0", &["-O0"])
            .build(),
        FixtureBuild::new("output_people")
            .variant("output_people_O2", &["-O2"])
            .build(),
    ]
}

/// The fixture's `F key value` lines.
fn facts(f: &Fixture) -> HashMap<String, u64> {
    f.stdout
        .seen()
        .iter()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "F").then_some(())?;
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

/// The fixture's `P key text` lines (pointers, as `%p` prints them).
fn printed(f: &Fixture, key: &str) -> String {
    f.stdout
        .seen()
        .iter()
        .find_map(|l| l.strip_prefix(&format!("P {key} ")).map(str::to_string))
        .unwrap_or_else(|| panic!("fixture printed no {key}"))
}

/// `oi-trace --pid PID ARGS` to completion; its stdout, after checking it succeeded.
fn oi_trace(pid: i32, args: &[&str]) -> String {
    let pid = pid.to_string();
    // The fixture computes OI's rules (docs/semantics.md).
    let mut all = vec!["--pid", pid.as_str(), "--sizes", "oi"];
    all.extend_from_slice(args);
    let out = run_oi_trace(&all, TIMEOUT);
    assert!(out.status.success(), "oi-trace {all:?}: {out:#?}");
    out.stdout
}

/// One sample of `inspect(record)` as a tree, without its `# pid, hit` title.
fn tree(pid: i32, extra: &[&str]) -> String {
    let mut args = vec!["--uprobe", "inspect", "--count", "1", "--format", "tree"];
    args.extend_from_slice(extra);
    let text = oi_trace(pid, &args);
    let mut lines = text.lines();
    let title = lines.next().unwrap_or("");
    assert!(title.starts_with("# pid "), "{text}");
    lines.map(|l| format!("{l}\n")).collect()
}

/// The lines of a tree directly under its root (indented by exactly two spaces).
fn top_level(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(str::trim_start)
        .collect()
}

/// The tree's size notation (`512 B`, `1.4 KiB`).
fn human(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < 4 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", ["B", "KiB", "MiB", "GiB", "TiB"][unit])
}

fn pct(bytes: u64, total: u64) -> String {
    format!("{:.1}%", bytes as f64 * 100.0 / total as f64)
}

#[test]
fn tree_spells_types_as_cpp_is_written() {
    if !privileged() {
        return;
    }
    for bin in builds() {
        let f = Fixture::start(&bin, &["tree"]);
        let text = tree(f.pid, &["--top", "100"]);
        let has = |line: &str| {
            assert!(
                text.lines().any(|l| l.starts_with(line)),
                "{}: no line starting {line:?} in\n{text}",
                bin.display()
            )
        };
        has("arg0 r: app::Record  ");
        has("  name: std::string  ");
        has("  tags: std::vector<std::string>  ");
        has("  notes: std::map<int, std::string>  ");
        has("  index: std::unordered_map<std::string, std::vector<int>>  ");
        has("  owner: std::unique_ptr<Node>  ");
        has("    [] × 3: std::pair<const int, std::string>  ");
        has("  big: unsigned long  ");
        has("  cursor: Node*  ");
        has("  mode: app::Mode  ");
        // OI's spelling on request, as in the JSON.
        let oi = tree(f.pid, &["--top", "100", "--names", "oi"]);
        assert!(
            oi.contains(
                "  name: std::__cxx11::basic_string<int8_t, std::char_traits<int8_t>, \
                 std::allocator<int8_t>>  "
            ),
            "{oi}"
        );
        assert!(oi.contains("  cursor: uintptr_t (stubbed)  "), "{oi}");
        f.finish();
    }
}

#[test]
fn json_is_oi_spelled_and_unchanged_by_the_outputs_for_people() {
    if !privileged() {
        return;
    }
    let bin = &builds()[1];
    let f = Fixture::start(bin, &["tree"]);
    let facts = facts(&f);
    let dir = TempDir::new("output-json");
    let (svg, folded, growth) = (dir.file("a.svg"), dir.file("a.folded"), dir.file("g.json"));
    for mode in ["jit", "remote"] {
        let base = ["--uprobe", "inspect", "--count", "1", "--mode", mode];
        let plain = oi_trace(f.pid, &base);
        let mut args = base.to_vec();
        args.extend([
            "--svg",
            svg.to_str().unwrap_or_default(),
            "--folded",
            folded.to_str().unwrap_or_default(),
            "--growth",
            growth.to_str().unwrap_or_default(),
        ]);
        // The same unchanging object, sampled again with pictures and growth on.
        let with_pictures = oi_trace(f.pid, &args);
        assert_eq!(plain, with_pictures, "{mode}: JSON changed");
        let v = json(&plain);
        let root = &v[0];
        assert_eq!(root["size"], facts["record.size"], "{mode}");
        assert_eq!(root["exclusiveSize"], facts["record.padding"]);
        let member = |name: &str| {
            root["members"]
                .as_array()
                .and_then(|m| m.iter().find(|m| m["name"] == name))
                .cloned()
                .unwrap_or_else(|| panic!("no member {name}"))
        };
        assert_eq!(member("tags")["size"], facts["record.tags"]);
        assert_eq!(member("index")["size"], facts["record.index"]);
        assert_eq!(
            member("name")["typeNames"],
            serde_json::json!([
                "string",
                "std::__cxx11::basic_string<int8_t, std::char_traits<int8_t>, std::allocator<int8_t>>"
            ])
        );
        assert_eq!(
            member("cursor")["typeNames"],
            serde_json::json!(["uintptr_t (stubbed)"])
        );
    }
    f.finish();
}

#[test]
fn children_come_largest_first_and_top_sums_up_the_rest() {
    if !privileged() {
        return;
    }
    let bin = &builds()[0];
    let f = Fixture::start(bin, &["tree"]);
    let facts = facts(&f);
    let total = facts["record.size"];
    let text = tree(f.pid, &["--top", "3"]);
    let top = top_level(&text);
    let line = |name: &str, ty: &str, key: &str| {
        let b = facts[key];
        format!("{name}: {ty}  {}  {}", human(b), pct(b, total))
    };
    assert!(
        top[0].starts_with(&line("tags", "std::vector<std::string>", "record.tags")),
        "{text}"
    );
    assert!(
        top[1].starts_with(&line(
            "index",
            "std::unordered_map<std::string, std::vector<int>>",
            "record.index"
        )),
        "{text}"
    );
    assert!(
        top[2].starts_with(&line("same", "std::vector<int>", "record.same")),
        "{text}"
    );
    // Padding is shown whatever --top says, and adds up to the struct's own bytes.
    let padding: u64 = top
        .iter()
        .filter(|l| l.starts_with("(padding"))
        .map(|l| size_of_line(l))
        .sum();
    assert_eq!(padding, facts["record.padding"], "{text}");
    let rest = facts["record.rest"];
    assert_eq!(
        top.last().copied(),
        Some(
            format!(
                "… {} more members ({}, {})",
                facts["record.rest_members"],
                human(rest),
                pct(rest, total)
            )
            .as_str()
        ),
        "{text}"
    );
    // The twenty strings of the same length fold into one line.
    let each = facts["record.tags_each"];
    assert!(
        text.contains(&format!(
            "    [] × 20: std::string  {} each, {}  {}  len 40 / cap 40",
            human(each),
            human(20 * each),
            pct(20 * each, total)
        )),
        "{text}"
    );
    f.finish();
}

/// The exact byte count of a tree line that is below 1 KiB (`(padding at +10)  6 B  0.2%`).
fn size_of_line(line: &str) -> u64 {
    line.split("  ")
        .find_map(|part| part.strip_suffix(" B")?.parse().ok())
        .unwrap_or_else(|| panic!("no size in {line:?}"))
}

#[test]
fn pointers_padding_and_values() {
    if !privileged() {
        return;
    }
    for bin in builds() {
        let f = Fixture::start(&bin, &["tree"]);
        let facts = facts(&f);
        let jit = tree(f.pid, &["--top", "100", "--values"]);
        let remote = tree(f.pid, &["--top", "100", "--values", "--mode", "remote"]);
        assert_eq!(jit, remote, "the two walkers read different values");
        let has = |line: &str| {
            assert!(
                jit.lines().any(|l| l.starts_with(line)),
                "{}: no line starting {line:?} in\n{jit}",
                bin.display()
            )
        };
        has(&format!(
            "  cursor: Node* = {}  8 B",
            printed(&f, "value.cursor")
        ));
        has("  nothing: Node* = null  8 B");
        has("  spare: std::unique_ptr<Node> → null  8 B");
        has(&format!("  count: int = {}  4 B", facts["value.count"]));
        has("  mode: app::Mode = Busy  4 B");
        has("  enabled: bool = true  1 B");
        has("  letter: char = 'x' (120)  1 B");
        has("  ratio: double = 0.25  8 B");
        has(&format!(
            "  big: unsigned long = {}  8 B",
            facts["value.big"]
        ));
        has("    [] × 100: int = 5  4 B each, 400 B");
        // Padded16: a long, a short, then the padding to 16.
        has(&format!("    (padding at +10)  {} B", facts["pad.padding"]));
        let padding: u64 = top_level(&jit)
            .iter()
            .filter(|l| l.starts_with("(padding"))
            .map(|l| size_of_line(l))
            .sum();
        assert_eq!(padding, facts["record.padding"], "{jit}");
        // Without --values the walk reads no values, and the tree shows none.
        let plain = tree(f.pid, &["--top", "100"]);
        assert!(plain.contains("  count: int  4 B"), "{plain}");
        assert!(!plain.contains(" = "), "{plain}");

        // A value returned in a register.
        let ret = oi_trace(
            f.pid,
            &[
                "--uretprobe",
                "answer",
                "--arg",
                "retval",
                "--count",
                "1",
                "--format",
                "tree",
                "--values",
            ],
        );
        assert!(
            ret.contains(&format!(
                "retval: int = {}  4 B  100.0%",
                facts["answer.value"]
            )),
            "{ret}"
        );
        f.finish();
    }
}

/// `(title, fg:w, width %)` of every frame of an inferno SVG, and its `total_samples`.
fn frames(svg: &str) -> (Vec<(String, u64, f64)>, u64) {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut out = Vec::new();
    let mut total = 0;
    let mut title: Option<String> = None;
    let mut in_title = false;
    loop {
        let event = reader.read_event().expect("well-formed SVG");
        match event {
            Event::Eof => break,
            Event::Start(e) | Event::Empty(e) => {
                let attr = |name: &str| {
                    e.attributes()
                        .filter_map(Result::ok)
                        .find(|a| a.key.as_ref() == name.as_bytes())
                        .map(|a| String::from_utf8_lossy(&a.value).into_owned())
                };
                match e.name().as_ref() {
                    b"svg" => {
                        if let Some(t) = attr("total_samples") {
                            total = t.parse().expect("total_samples");
                        }
                    }
                    b"title" => in_title = true,
                    b"rect" => {
                        if let (Some(t), Some(w), Some(width)) =
                            (title.take(), attr("fg:w"), attr("width"))
                        {
                            let width = width.trim_end_matches('%').parse().expect("width");
                            out.push((t, w.parse().expect("fg:w"), width));
                        }
                    }
                    _ => {}
                }
            }
            Event::Text(t) if in_title => {
                // Entities arrive apart, as `GeneralRef`s.
                let text = String::from_utf8_lossy(&t).into_owned();
                title = Some(title.unwrap_or_default() + &text);
            }
            Event::GeneralRef(r) if in_title => {
                let name: &[u8] = r.as_ref();
                let ch = match name {
                    b"lt" => "<",
                    b"gt" => ">",
                    b"amp" => "&",
                    b"quot" => "\"",
                    b"apos" => "'",
                    _ => "?",
                };
                title = Some(title.unwrap_or_default() + ch);
            }
            Event::End(e) if e.name().as_ref() == b"title" => in_title = false,
            _ => {}
        }
    }
    (out, total)
}

#[test]
fn svg_and_folded_pictures_are_in_bytes() {
    if !privileged() {
        return;
    }
    let bin = &builds()[1];
    let f = Fixture::start(bin, &["tree"]);
    let facts = facts(&f);
    let total = facts["record.size"];
    let dir = TempDir::new("output-svg");
    let (svg, folded) = (dir.file("record.svg"), dir.file("record.folded"));
    let pid = f.pid.to_string();
    let out = run_oi_trace(
        &[
            "--pid",
            &pid,
            "--sizes",
            "oi",
            "--uprobe",
            "inspect",
            "--every",
            "3",
            "--count",
            "2",
            "--svg",
            svg.to_str().unwrap_or_default(),
            "--folded",
            folded.to_str().unwrap_or_default(),
        ],
        TIMEOUT,
    );
    assert!(out.status.success(), "{out:#?}");
    let said = format!("oi-trace: picture of the last sample: {}", svg.display());
    assert!(out.stderr.contains(&said), "{:#?}", out.stderr);

    let text = std::fs::read_to_string(&svg).expect("svg written");
    let (frames, svg_total) = frames(&text);
    assert_eq!(
        svg_total, total,
        "the picture's width is the sample's bytes"
    );
    let frame = |start: &str| {
        frames
            .iter()
            .find(|f| f.0.starts_with(start))
            .unwrap_or_else(|| panic!("no frame {start:?} in {frames:#?}"))
    };
    for (label, key) in [
        ("arg0 r: app::Record (", "record.size"),
        ("tags: std::vector<std::string> (", "record.tags"),
        (
            "index: std::unordered_map<std::string, std::vector<int>> (",
            "record.index",
        ),
        ("same: std::vector<int> (", "record.same"),
        ("name: std::string (", "record.name"),
    ] {
        let (title, w, width) = frame(label);
        assert_eq!(*w, facts[key], "{title}");
        let bytes = facts[key].to_string();
        let thousands = bytes
            .as_bytes()
            .rchunks(3)
            .rev()
            .map(|c| std::str::from_utf8(c).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(",");
        assert!(title.contains(&format!("({thousands} bytes")), "{title}");
        let expect = *w as f64 * 100.0 / total as f64;
        assert!(
            (width - expect).abs() < 0.001,
            "{title}: {width}% vs {expect}%"
        );
    }
    // Twenty strings of one path: one frame, and its count.
    frame("[] × 20: std::string (");

    // The folded text: the same bytes, one stack per line.
    let text = std::fs::read_to_string(&folded).expect("folded written");
    let mut sum = 0;
    for line in text.lines() {
        let (stack, weight) = line.rsplit_once(' ').expect("stack weight");
        assert!(stack.starts_with("arg0 r: app::Record"), "{line}");
        sum += weight.parse::<u64>().expect("weight");
    }
    assert_eq!(sum, total);
    f.finish();
}

#[test]
fn growth_follows_each_member_over_the_samples() {
    if !privileged() {
        return;
    }
    const STEPS: usize = 5;
    for bin in builds() {
        let mut f = Fixture::start(&bin, &["growth", "10", &STEPS.to_string()]);
        let dir = TempDir::new("output-growth");
        let file = dir.file("growth.json");
        let pid = f.pid.to_string();
        let t = OiTrace::attached(&[
            "--pid",
            &pid,
            "--sizes",
            "oi",
            "--uprobe",
            "grow",
            "--count",
            &STEPS.to_string(),
            "--growth",
            file.to_str().unwrap_or_default(),
            "--interval",
            "0.15",
        ]);
        f.signal(SIGUSR1);
        f.stdout.expect("done", TIMEOUT);
        let out = t.finish(TIMEOUT);
        assert!(out.status.success(), "{out:#?}");
        // What each call saw at its entry, by the fixture's own count.
        let steps: Vec<(u64, u64)> = f
            .stdout
            .seen()
            .iter()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w.first() == Some(&"G"))
                    .then(|| (w[2].parse().unwrap_or(0), w[3].parse().unwrap_or(0)))
            })
            .collect();
        assert_eq!(steps.len(), STEPS);
        let rows = json(&std::fs::read_to_string(&file).expect("growth written"));
        let rows = rows.as_array().expect("rows");
        let row = |path: &str| {
            rows.iter()
                .find(|r| r["path"] == path)
                .unwrap_or_else(|| panic!("no {path} in {rows:#?}"))
        };
        let items = row("arg0 c.items");
        assert_eq!(items["first"], steps[0].0);
        assert_eq!(items["last"], steps[STEPS - 1].0);
        assert_eq!(items["min"], steps[0].0);
        assert_eq!(items["max"], steps[STEPS - 1].0);
        assert_eq!(items["samples"], STEPS as u64);
        assert_eq!(items["type"], "std::vector<long>");
        let name = row("arg0 c.name");
        assert_eq!(name["first"], steps[0].1);
        assert_eq!(name["last"], name["first"]);
        assert_eq!(name["samples"], STEPS as u64);
        // Largest growth first: the root (which contains items), then items.
        assert_eq!(rows[0]["path"], "arg0 c");
        assert_eq!(rows[1]["path"], "arg0 c.items");
        // Printed on stderr too: every --interval, and at exit.
        let tables = out
            .stderr
            .iter()
            .filter(|l| l.starts_with("oi-trace: growth over "))
            .count();
        assert!(tables >= 2, "{:#?}", out.stderr);
        assert!(
            out.stderr
                .iter()
                .any(|l| l.starts_with("oi-trace: growth over 5 sample(s)")),
            "{:#?}",
            out.stderr
        );
        f.finish();
    }
}

#[test]
fn csv_is_the_json_tree_one_row_per_node() {
    if !privileged() {
        return;
    }
    let bin = &builds()[0];
    let f = Fixture::start(bin, &["tree"]);
    let base = ["--uprobe", "inspect", "--count", "1", "--mode", "remote"];
    let mut csv_args = base.to_vec();
    csv_args.extend(["--format", "csv"]);
    let csv_text = oi_trace(f.pid, &csv_args);
    let json_text = oi_trace(f.pid, &base);
    assert!(csv_text.ends_with("\r\n"), "CRLF line ends");

    let mut reader = csv::ReaderBuilder::new()
        .escape(Some(b'\\'))
        .double_quote(false)
        .from_reader(csv_text.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .expect("header")
        .iter()
        .map(str::to_string)
        .collect();
    assert_eq!(
        header,
        [
            "id",
            "name",
            "typePath",
            "typeNames",
            "staticSize",
            "exclusiveSize",
            "pointer",
            "length",
            "capacity",
            "is_set",
            "parent_id"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("row")).collect();

    // The JSON of the same object, in pre-order.
    let mut nodes = Vec::new();
    fn walk<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
        out.push(v);
        for m in v["members"].as_array().into_iter().flatten() {
            walk(m, out);
        }
    }
    let doc = json(&json_text);
    for root in doc.as_array().expect("roots") {
        walk(root, &mut nodes);
    }
    assert_eq!(rows.len(), nodes.len(), "one row per node");

    let mut by_id: HashMap<u64, &csv::StringRecord> = HashMap::new();
    for (i, (row, node)) in rows.iter().zip(&nodes).enumerate() {
        let id: u64 = row[0].parse().expect("id");
        assert_eq!(id, i as u64 + 1);
        let list = |v: &serde_json::Value| {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(";")
                })
                .unwrap_or_default()
        };
        assert_eq!(row[1], *node["name"].as_str().unwrap_or_default());
        assert_eq!(row[2], list(&node["typePath"]));
        assert_eq!(row[3], list(&node["typeNames"]));
        assert_eq!(row[4], node["staticSize"].to_string());
        assert_eq!(row[5], node["exclusiveSize"].to_string());
        let opt = |k: &str| {
            if node[k].is_null() {
                String::new()
            } else {
                node[k].to_string()
            }
        };
        if node["pointer"].is_null() {
            assert_eq!(&row[6], "");
        }
        assert_eq!(row[7], opt("length"));
        assert_eq!(row[8], opt("capacity"));
        assert_eq!(&row[9], "");
        // Parent ids form the tree: a parent comes first, and its path is one name shorter.
        let parent: u64 = row[10].parse().expect("parent_id");
        let path: Vec<&str> = row[2].split(';').collect();
        if parent == 0 {
            assert_eq!(path.len(), 1, "{row:?}");
        } else {
            assert!(parent < id);
            let p = by_id[&parent];
            assert_eq!(p[2], path[..path.len() - 1].join(";"), "{row:?}");
        }
        by_id.insert(id, row);
    }
    f.finish();
}

#[test]
fn bad_output_options_are_one_line_errors() {
    for (args, says) in [
        (
            &["--pid", "1", "--uprobe", "f", "--values"][..],
            "--values applies to --format tree only",
        ),
        (
            &[
                "--pid", "1", "--uprobe", "f", "--format", "tree", "--top", "0",
            ][..],
            "--top must be at least 1",
        ),
        (
            &[
                "--pid", "1", "--uprobe", "f", "--format", "csv", "--names", "oi",
            ][..],
            "--names applies to --format tree only",
        ),
        (
            &[
                "--pid",
                "1",
                "--uprobe",
                "f",
                "--count-only",
                "--growth",
                "g.json",
            ][..],
            "--growth needs samples",
        ),
        (
            &[
                "--pid",
                "1",
                "--uprobe",
                "f",
                "--growth",
                "g.json",
                "--interval",
                "0",
            ][..],
            "--interval must be a positive number",
        ),
        (
            &["--pid", "1", "--uprobe", "f", "--interval", "1"][..],
            "--growth",
        ),
    ] {
        let out = run_oi_trace(args, TIMEOUT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:#?}");
        assert_eq!(out.stderr.len(), 1, "{args:?}: {out:#?}");
        assert!(
            out.stderr[0].starts_with("oi-trace: error: ") && out.stderr[0].contains(says),
            "{args:?}: {out:#?}"
        );
    }
    if !privileged() {
        return;
    }
    // A file that cannot be written is found before anything is armed.
    let bin = &builds()[0];
    let f = Fixture::start(bin, &["tree"]);
    let pid = f.pid.to_string();
    let out = run_oi_trace(
        &[
            "--pid",
            &pid,
            "--uprobe",
            "inspect",
            "--svg",
            "/nonexistent-dir/x.svg",
        ],
        TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(2), "{out:#?}");
    assert_eq!(
        out.stderr,
        [
            "oi-trace: error: cannot write --svg /nonexistent-dir/x.svg: No such file or directory (os error 2)"
        ]
    );
    f.assert_running();
    f.finish();
}

#[test]
fn framed_json_says_whose_sample_it_is() {
    if !privileged() {
        return;
    }
    let mut f = Fixture::start(&FixtureBuild::new("races").build(), &["10"]);
    f.stdout.expect("tick", TIMEOUT);
    let pid = f.pid.to_string();
    let base = [
        "--pid",
        &pid,
        "--uprobe",
        "shop::Ledger::audit",
        "--arg",
        "this,arg0",
    ];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--count", "1"]);
        let out = run_oi_trace(&args, TIMEOUT);
        assert!(out.status.success(), "{out:#?}");
        json(&out.stdout)
    };
    let framed = run(&["--framed"]);
    let bare = run(&[]);
    assert_eq!(framed["probe"], "shop::Ledger::audit");
    assert_eq!(framed["pid"], f.pid);
    // The fixture calls audit on its main thread.
    assert_eq!(framed["tid"], f.pid);
    assert_eq!(framed["hit"], 1, "--count 1 samples the first hit");
    assert_eq!(framed["args"], serde_json::json!(["this", "arg0"]));
    // The roots are the bare array, unchanged (the ledger's contents do not change).
    let without_pointers = |v: &serde_json::Value| {
        let mut v = v.clone();
        strip_pointers(&mut v);
        v
    };
    assert_eq!(without_pointers(&framed["roots"]), without_pointers(&bare));
    assert_eq!(framed["roots"].as_array().map(Vec::len), Some(2));
    // Other formats refuse it in one line.
    let out = run_oi_trace(
        &[&base[..], &["--framed", "--format", "tree", "--count", "1"]].concat(),
        TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(2), "{out:#?}");
    assert_eq!(
        out.stderr,
        ["oi-trace: error: --framed applies to --format json only"]
    );
    f.assert_running();
}

fn strip_pointers(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(o) => {
            o.remove("pointer");
            o.values_mut().for_each(strip_pointers);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip_pointers),
        _ => {}
    }
}
