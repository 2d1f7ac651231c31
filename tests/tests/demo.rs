//! The journey of `cargo xtask demo`: the demo, run into a buffer, shows each of the four tools
//! on the bundled example with the command it ran (copyable: the binary the journeys test, by
//! a path from the repository root) and a real result: the ledger's footprint as a tree whose
//! total is the JSON footprint's, and a picture of exactly those bytes; allocation sites of the
//! shop's own types with lifetimes; the call tree beneath the entry; an OIL program whose size
//! is what it works out by hand. And nothing raw: no register dump, no line of spaces.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use oi_e2e::{
    Fixture, FixtureBuild,
    demo::{ENTRY, LEDGER_PROBE, PICTURE},
    json, oi_trace_bin, privileged, run_oi_trace, workspace_root,
};

/// One step of the demo: the words of its command line and the lines printed after it.
struct Step<'a> {
    command: Vec<&'a str>,
    output: Vec<&'a str>,
}

impl Step<'_> {
    /// The program, as the command line names it from the repository root.
    fn program(&self) -> PathBuf {
        canonical(&workspace_root().join(self.command[0]))
    }

    /// The word after `flag`.
    fn value(&self, flag: &str) -> &str {
        let at = self.command.iter().position(|w| *w == flag);
        at.and_then(|i| self.command.get(i + 1))
            .unwrap_or_else(|| panic!("no {flag} in {:?}", self.command))
    }

    fn text(&self) -> String {
        self.output.join("\n")
    }
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The steps, each from its `$ ` line to the next step's heading.
fn steps(text: &str) -> Vec<Step<'_>> {
    let mut steps: Vec<Step<'_>> = Vec::new();
    for line in text.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command.split(' ').collect(),
                output: Vec::new(),
            });
        } else if line.starts_with("=== ") {
            continue;
        } else if let Some(step) = steps.last_mut() {
            step.output.push(line);
        }
    }
    steps
}

/// Bytes as the tree prints them: `512 B`, `25.3 KiB`.
fn human(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = "KiB";
    if v >= 1024.0 {
        v /= 1024.0;
        unit = "MiB";
    }
    format!("{v:.1} {unit}")
}

/// The number after `prefix` on the line that starts with it, up to ` bytes` at its end.
fn bytes_after(step: &Step<'_>, prefix: &str) -> u64 {
    let line = step
        .output
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{}", step.text()));
    let number = line
        .strip_suffix(" bytes")
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no `N bytes` at the end of {line:?}"));
    number
        .parse()
        .unwrap_or_else(|_| panic!("{number:?} in {line:?} is not a number"))
}

/// The ledger's footprint as JSON, from another run of the same example: it builds its
/// ledger the same way before `ready` and never resizes it, so the bytes are the same.
fn ledger_bytes_from_json() -> u64 {
    let example = FixtureBuild::new("demo_shop").build();
    let fixture = Fixture::start(&example, &[]);
    let pid = fixture.pid.to_string();
    let done = run_oi_trace(
        &[
            "--pid",
            &pid,
            "--uprobe",
            LEDGER_PROBE,
            "--arg",
            "this",
            "--count",
            "1",
        ],
        Duration::from_secs(60),
    );
    assert!(done.status.success(), "{done:#?}");
    let doc = json(&done.stdout);
    assert_eq!(doc[0]["typeNames"][0], "shop::Ledger", "{doc}");
    assert!(fixture.finish().success());
    doc[0]["size"].as_u64().expect("the root's size")
}

fn footprint(step: &Step<'_>, pid: &str) {
    let text = step.text();
    assert_eq!(step.value("--uprobe"), LEDGER_PROBE);
    assert_eq!(step.value("--arg"), "this");
    assert_eq!(step.value("--format"), "tree");
    assert_eq!(step.value("--pid"), pid);
    let root = step
        .output
        .iter()
        .find(|l| l.starts_with("this"))
        .unwrap_or_else(|| panic!("no root `this` in the tree:\n{text}"));
    assert!(root.contains("shop::Ledger"), "{root}");

    let total = ledger_bytes_from_json();
    assert!(
        root.contains(&format!("  {}  ", human(total))),
        "the tree's total is not the JSON's {total} bytes: {root}"
    );
    // The picture is where the demo says, and it is exactly the sample's bytes wide.
    let svg_arg = step.value("--svg");
    assert_eq!(svg_arg, PICTURE);
    let svg = workspace_root().join(svg_arg);
    assert!(
        step.output
            .iter()
            .any(|l| l.starts_with("demo: ") && l.ends_with(&svg.display().to_string())),
        "the demo does not say where the picture is:\n{text}"
    );
    let picture = std::fs::read_to_string(&svg).expect("the picture is written");
    let width = picture
        .split("total_samples=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse::<u64>().ok())
        .expect("total_samples in the SVG");
    assert_eq!(width, total, "the picture's bytes against the JSON's");
}

fn allocs(step: &Step<'_>, pid: &str) {
    let text = step.text();
    assert_eq!(step.command[1], "allocs");
    assert_eq!(step.value("--pid"), pid);
    assert_eq!(step.value("--duration"), "3");
    let section = |title: &str| -> Vec<&str> {
        let lines = step.output.iter().skip_while(|l| **l != title).skip(1);
        lines.take_while(|l| !l.is_empty()).copied().collect()
    };
    let sites = section("top sites by bytes:");
    assert!(
        sites
            .iter()
            .any(|l| l.contains(" allocs ") && l.contains("type shop::Line")),
        "no site of shop::Line among the top sites:\n{text}"
    );
    assert!(
        sites
            .iter()
            .any(|l| l.trim_start().starts_with("lifetimes ")),
        "no lifetimes:\n{text}"
    );
    let types = section("top types by bytes:");
    assert!(
        types.iter().any(|l| l.ends_with("shop::Line")),
        "shop::Line not among the top types:\n{text}"
    );
}

fn calls(step: &Step<'_>, pid: &str) {
    let text = step.text();
    assert_eq!(step.command[1], "calls");
    assert_eq!(step.value("--pid"), pid);
    assert_eq!(step.value("--entry"), ENTRY);
    let heading = format!("calls beneath {ENTRY} in pid {pid}");
    assert!(
        step.output.iter().any(|l| l.starts_with(&heading)),
        "no {heading:?}:\n{text}"
    );
    // The entry's own line: its calls first, its name last.
    let entry = step
        .output
        .iter()
        .find(|l| l.ends_with(&format!("%  {ENTRY}")))
        .unwrap_or_else(|| panic!("no line of {ENTRY} in the tree:\n{text}"));
    let calls: u64 = entry
        .split_whitespace()
        .next()
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no call count in {entry:?}"));
    // About a thousand orders a second, for 3 s; a slow machine serves fewer.
    assert!(calls >= 300, "{calls} calls of {ENTRY} in 3 s:\n{text}");
    for callee in [
        "shop::take_order",
        "shop::price_line",
        "shop::Ledger::inspect",
    ] {
        assert!(
            step.output.iter().any(|l| l.ends_with(callee)),
            "{callee} not beneath {ENTRY}:\n{text}"
        );
    }
}

fn oil(step: &Step<'_>) {
    let text = step.text();
    assert_eq!(
        step.program(),
        canonical(&workspace_root().join("target/fixtures/demo_oil"))
    );
    let size = bytes_after(step, "oil::size(order) = ");
    let by_hand = bytes_after(step, "by hand: ");
    assert_eq!(size, by_hand, "{text}");
    assert!(
        size > 100,
        "an order with seven lines and a long name: {text}"
    );
}

#[test]
fn demo_shows_each_tool_with_its_command_and_a_real_result() {
    if !privileged() {
        return;
    }
    let mut out = Vec::new();
    if let Err(e) = oi_e2e::demo::run(&mut out) {
        panic!(
            "the demo failed: {e}; it printed:\n{}",
            String::from_utf8_lossy(&out)
        );
    }
    let text = String::from_utf8(out).expect("the demo prints UTF-8");
    println!("{text}");

    for raw in ["\"regs\"", "\"r10\"", "\"rip\""] {
        assert!(!text.contains(raw), "a register dump ({raw}) in:\n{text}");
    }
    for line in text.lines() {
        assert!(
            line.is_empty() || !line.chars().all(char::is_whitespace),
            "a line of nothing but spaces in:\n{text}"
        );
    }

    let steps = steps(&text);
    assert_eq!(steps.len(), 4, "four commands, one per tool:\n{text}");
    let oi_trace = canonical(&oi_trace_bin());
    for step in &steps[..3] {
        assert_eq!(step.program(), oi_trace, "{:?}", step.command);
    }
    let pid = steps[0].value("--pid").to_string();
    footprint(&steps[0], &pid);
    allocs(&steps[1], &pid);
    calls(&steps[2], &pid);
    oil(&steps[3]);
}
