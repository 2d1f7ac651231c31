//! The call tree as people read it: a top-down text view (calls, total, self, average, share of
//! the entry's time), the JSON report, latency histograms, and the Chrome trace event
//! format (which Perfetto and `chrome://tracing` open) of single calls. Folded stacks and flame
//! graphs go through `report::flame`, the core's one writer of pictures.
//!
//! Pure: takes trees and records, writes text. Never reads a map or a process.

use std::{collections::HashMap, fmt::Write as _, io};

use oi_common::calls::{HISTOGRAM_BUCKETS, Record};
use serde::Serialize;

use super::tree::CallNode;
use crate::report::tree::thousands;

/// `512 ns`, `3.2 µs`, `14.8 ms`, `2.05 s`.
pub fn human_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", v / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

/// What the header of a report says.
pub struct Heading<'a> {
    pub entry: &'a str,
    /// `pid 4242` or `cgroup /sys/fs/cgroup/shop.slice`.
    pub place: &'a str,
    pub elapsed_s: f64,
    pub probe_hits: u64,
}

/// The top-down view: one line per node, indented by depth, heaviest children first.
pub fn tree_text(heading: &Heading<'_>, roots: &[CallNode]) -> String {
    let mut out = String::new();
    let entries: u64 = roots.iter().map(|r| r.calls).sum();
    let _ = writeln!(
        out,
        "calls beneath {} in {}, {:.2} s: {} entry call(s), {} probe hits",
        heading.entry,
        heading.place,
        heading.elapsed_s,
        thousands(entries),
        thousands(heading.probe_hits)
    );
    if roots.is_empty() {
        let _ = writeln!(out, "(no call of {} completed)", heading.entry);
        return out;
    }
    let _ = writeln!(
        out,
        "{:>12} {:>10} {:>10} {:>10} {:>7}  function",
        "calls", "total", "self", "average", "share"
    );
    for root in roots {
        line(&mut out, root, root.total_ns, "", "");
    }
    out
}

fn line(out: &mut String, node: &CallNode, entry_ns: u64, lead: &str, branch: &str) {
    let share = if entry_ns == 0 {
        100.0
    } else {
        node.total_ns as f64 * 100.0 / entry_ns as f64
    };
    let mut notes = Vec::new();
    if node.abandoned > 0 {
        notes.push(format!(
            "{} left by an exception",
            thousands(node.abandoned)
        ));
    }
    if node.deeper > 0 {
        notes.push(format!(
            "{} deeper call(s) not timed (--depth)",
            thousands(node.deeper)
        ));
    }
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!("  ({})", notes.join("; "))
    };
    let _ = writeln!(
        out,
        "{:>12} {:>10} {:>10} {:>10} {:>6.1}%  {lead}{branch}{}{notes}",
        thousands(node.calls),
        human_ns(node.total_ns),
        human_ns(node.self_ns),
        human_ns(node.average_ns()),
        share,
        node.name
    );
    let child_lead = format!(
        "{lead}{}",
        match branch {
            "" => "",
            "├─ " => "│  ",
            _ => "   ",
        }
    );
    for (i, child) in node.children.iter().enumerate() {
        let last = i + 1 == node.children.len();
        line(
            out,
            child,
            entry_ns,
            &child_lead,
            if last { "└─ " } else { "├─ " },
        );
    }
}

/// The `--format json` report, keys in the order of these fields.
#[derive(Serialize)]
pub struct JsonReport<'a> {
    pub entry: &'a str,
    pub pid: Option<i32>,
    pub elapsed_s: f64,
    pub probe_hits: u64,
    pub tree: JsonNode<'a>,
    /// Only with `--histograms`: per function, calls per log2 bucket of ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histograms: Option<Vec<JsonHistogram<'a>>>,
    /// In the final report only: what the run could not count or time, by cause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<JsonCounters>,
    /// In the final report of `--mechanism inject` only: what was patched, what was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inject: Option<JsonInject>,
}

/// What `--mechanism inject` did (docs/calls.md, "In the target"): how many functions are
/// timed by patched entries, which were left untimed and why, and the calls the stubs
/// counted without recording them.
#[derive(Serialize, Debug, Default, Clone, PartialEq, Eq)]
pub struct JsonInject {
    /// Functions whose entry was patched.
    pub patched: u64,
    /// Functions left untimed (`relocate::Refusal` or a failed patch), with the reason.
    pub untimed: Vec<JsonUntimed>,
    /// Calls not timed: the thread's ring was full.
    pub dropped: u64,
    /// Calls not timed: the thread's shadow stack was full.
    pub shadow_full: u64,
    /// A signal handler's calls not timed: the handler interrupted a stub.
    pub interrupted: u64,
    /// Open calls dropped with their return still hooked, the real address put back: frames
    /// on another stack (`swapcontext`, fibers) or left by a `longjmp`.
    pub resynced: u64,
    /// Returns of such frames through a copy of the exit stub's address (a context that
    /// `swapcontext` saved in a hooked function's tail call), sent on by the orphans.
    pub orphan_returns: u64,
    /// Calls not timed: no free thread slot.
    pub no_slot: u64,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct JsonUntimed {
    pub name: String,
    pub reason: String,
}

/// Calls the tree does not hold, or holds untimed, by cause (docs/calls.md, "Counters").
#[derive(Serialize, Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct JsonCounters {
    /// Calls closed by the stack pointer rather than their `ret` (an exception or a longjmp
    /// left them); in the tree, timed until the stack showed it.
    pub abandoned: u64,
    /// Returns that met another function's frame (a missed probe; never expected).
    pub unmatched: u64,
    /// Calls below `--depth`, counted on their deepest node, not timed.
    pub deeper: u64,
    /// Calls not timed because the node table was full (`--max-nodes`).
    pub nodes_full: u64,
    /// Calls of the entry not timed because too many threads were inside it at once.
    pub threads_full: u64,
    /// Calls of the entry not counted because `--count` was reached.
    pub windows_skipped: u64,
    /// Calls of the entry already running when the probes were armed: not counted, nor the
    /// calls beneath them.
    pub entered_before_attaching: u64,
    /// Calls of the entry still running when the probes were removed: not counted.
    pub still_inside: u64,
    /// Threads that exited inside the entry; their open calls were dropped.
    pub exited_inside: u64,
    /// `--chrome` records lost to a full ring buffer.
    pub trace_lost: u64,
}

#[derive(Serialize)]
pub struct JsonNode<'a> {
    pub name: &'a str,
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    pub children: Vec<JsonNode<'a>>,
}

#[derive(Serialize)]
pub struct JsonHistogram<'a> {
    pub name: &'a str,
    /// `[low_ns, high_ns, calls]` for every non-empty bucket: `low ≤ duration < high`.
    pub buckets: Vec<[u64; 3]>,
}

impl<'a> JsonNode<'a> {
    pub fn of(node: &'a CallNode) -> Self {
        Self {
            name: &node.name,
            calls: node.calls,
            total_ns: node.total_ns,
            self_ns: node.self_ns,
            children: node.children.iter().map(Self::of).collect(),
        }
    }

    /// The tree of an entry that was never called.
    pub fn empty(name: &'a str) -> Self {
        Self {
            name,
            calls: 0,
            total_ns: 0,
            self_ns: 0,
            children: Vec::new(),
        }
    }
}

/// The range of durations histogram bucket `b` counts: `[low, high)` ns.
pub fn bucket_range(b: usize) -> (u64, u64) {
    match b {
        0 => (0, 1),
        63.. => (1 << 62, u64::MAX),
        _ => (1 << (b - 1), 1 << b),
    }
}

/// One histogram per function name, buckets summed over the function ids of that name.
pub fn merge_histograms<'a>(
    per_function: impl Iterator<Item = (&'a str, [u64; HISTOGRAM_BUCKETS as usize])>,
) -> Vec<(&'a str, [u64; HISTOGRAM_BUCKETS as usize])> {
    let mut merged: Vec<(&str, [u64; HISTOGRAM_BUCKETS as usize])> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (name, buckets) in per_function {
        if buckets.iter().all(|&c| c == 0) {
            continue;
        }
        let i = *index.entry(name).or_insert_with(|| {
            merged.push((name, [0; HISTOGRAM_BUCKETS as usize]));
            merged.len() - 1
        });
        for (sum, c) in merged[i].1.iter_mut().zip(buckets) {
            *sum += c;
        }
    }
    merged.sort_by(|a, b| a.0.cmp(b.0));
    merged
}

/// A latency histogram as text, one line per bucket from the first to the last non-empty one.
pub fn histogram_text(name: &str, buckets: &[u64; HISTOGRAM_BUCKETS as usize]) -> String {
    const WIDTH: u64 = 40;
    let mut out = String::new();
    let calls: u64 = buckets.iter().sum();
    let _ = writeln!(out, "latency of {name} ({} calls)", thousands(calls));
    let (Some(first), Some(last)) = (
        buckets.iter().position(|&c| c > 0),
        buckets.iter().rposition(|&c| c > 0),
    ) else {
        return out;
    };
    let peak = buckets.iter().copied().max().unwrap_or(1).max(1);
    for (b, &count) in buckets.iter().enumerate().take(last + 1).skip(first) {
        let (low, high) = bucket_range(b);
        let bar = "█".repeat((count * WIDTH).div_ceil(peak) as usize);
        let _ = writeln!(
            out,
            "  [{:>9}, {:>9}) {:>12} |{bar:<40}|",
            human_ns(low),
            human_ns(high),
            thousands(count)
        );
    }
    out
}

/// One completed call of a traced window, named.
pub struct TracedCall<'a> {
    pub name: &'a str,
    pub record: Record,
}

/// Chrome trace event format: a complete event (`ph: X`) per call, times in µs from the first
/// call, one track per thread, with the window's number and whether an exception left the call.
pub fn chrome_trace(calls: &[TracedCall<'_>], out: &mut dyn io::Write) -> io::Result<()> {
    #[derive(Serialize)]
    struct Event<'a> {
        name: &'a str,
        cat: &'static str,
        ph: &'static str,
        ts: f64,
        dur: f64,
        pid: u32,
        tid: u32,
        args: Args,
    }
    #[derive(Serialize)]
    struct Args {
        entry_call: u64,
        depth: u32,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        left_by_exception: bool,
    }
    #[derive(Serialize)]
    struct Trace<'a> {
        #[serde(rename = "traceEvents")]
        trace_events: Vec<Event<'a>>,
        #[serde(rename = "displayTimeUnit")]
        display_time_unit: &'static str,
    }
    let origin = calls.iter().map(|c| c.record.start_ns).min().unwrap_or(0);
    let mut events: Vec<Event<'_>> = calls
        .iter()
        .map(|c| Event {
            name: c.name,
            cat: "call",
            ph: "X",
            ts: (c.record.start_ns - origin) as f64 / 1e3,
            dur: c.record.duration_ns as f64 / 1e3,
            pid: c.record.tgid,
            tid: c.record.tid,
            args: Args {
                entry_call: c.record.window,
                depth: c.record.depth,
                left_by_exception: c.record.abandoned != 0,
            },
        })
        .collect();
    // Parents before children at the same start: viewers nest by order.
    events.sort_by(|a, b| {
        a.tid
            .cmp(&b.tid)
            .then(a.ts.total_cmp(&b.ts))
            .then(a.args.depth.cmp(&b.args.depth))
    });
    serde_json::to_writer(
        &mut *out,
        &Trace {
            trace_events: events,
            display_time_unit: "ns",
        },
    )?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, calls: u64, total: u64, self_ns: u64, children: Vec<CallNode>) -> CallNode {
        CallNode {
            name: name.into(),
            calls,
            total_ns: total,
            self_ns,
            children,
            ..CallNode::default()
        }
    }

    #[test]
    fn text_tree_lines() {
        let tree = node(
            "shop::handle",
            10,
            2_000_000,
            500_000,
            vec![
                node(
                    "shop::parse",
                    10,
                    1_000_000,
                    900_000,
                    vec![node("shop::leaf", 70, 100_000, 100_000, vec![])],
                ),
                node("shop::nap", 10, 500_000, 500_000, vec![]),
            ],
        );
        let text = tree_text(
            &Heading {
                entry: "shop::handle",
                place: "pid 7",
                elapsed_s: 1.0,
                probe_hits: 1234,
            },
            &[tree],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "calls beneath shop::handle in pid 7, 1.00 s: 10 entry call(s), 1,234 probe hits"
        );
        assert!(lines[2].ends_with("100.0%  shop::handle"), "{}", lines[2]);
        assert!(lines[3].ends_with(" 50.0%  ├─ shop::parse"), "{}", lines[3]);
        assert!(
            lines[4].ends_with("  5.0%  │  └─ shop::leaf"),
            "{}",
            lines[4]
        );
        assert!(lines[5].ends_with(" 25.0%  └─ shop::nap"), "{}", lines[5]);
        assert!(
            lines[3].contains("100.0 µs"),
            "average of parse: {}",
            lines[3]
        );
    }

    #[test]
    fn json_keys_in_the_issues_order() {
        let tree = node("f", 1, 10, 4, vec![node("g", 2, 6, 6, vec![])]);
        let report = JsonReport {
            entry: "f",
            pid: Some(3),
            elapsed_s: 5.0,
            probe_hits: 6,
            tree: JsonNode::of(&tree),
            histograms: None,
            counters: None,
            inject: None,
        };
        assert_eq!(
            serde_json::to_string(&report).unwrap(),
            r#"{"entry":"f","pid":3,"elapsed_s":5.0,"probe_hits":6,"tree":{"name":"f","calls":1,"total_ns":10,"self_ns":4,"children":[{"name":"g","calls":2,"total_ns":6,"self_ns":6,"children":[]}]}}"#
        );
    }

    #[test]
    fn histogram_buckets() {
        assert_eq!(bucket_range(0), (0, 1));
        assert_eq!(bucket_range(1), (1, 2));
        assert_eq!(bucket_range(11), (1024, 2048));
        let mut b = [0u64; HISTOGRAM_BUCKETS as usize];
        b[21] = 3; // [1 ms, 2 ms)
        b[22] = 1;
        let text = histogram_text("shop::nap", &b);
        assert!(
            text.starts_with("latency of shop::nap (4 calls)\n"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 3);
        let merged = merge_histograms([("a", b), ("a", b), ("b", [0; 64])].into_iter());
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].1[21], 6);
    }

    #[test]
    fn chrome_events() {
        let record = |start_ns, duration_ns, depth| Record {
            kind: oi_common::calls::record::CALL,
            tgid: 1,
            tid: 2,
            window: 1,
            start_ns,
            duration_ns,
            depth,
            ..Record::default()
        };
        let calls = [
            TracedCall {
                name: "g",
                record: record(2_000, 500, 1),
            },
            TracedCall {
                name: "f",
                record: record(1_000, 3_000, 0),
            },
        ];
        let mut out = Vec::new();
        chrome_trace(&calls, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        assert_eq!(events[0]["name"], "f");
        assert_eq!(events[0]["ts"], 0.0);
        assert_eq!(events[0]["dur"], 3.0);
        assert_eq!(events[1]["ts"], 1.0);
        assert_eq!(events[1]["ph"], "X");
    }
}
