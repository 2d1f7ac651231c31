//! Unit tests of `report`.

//! Plan → interpreter (over a local buffer) → report, without DWARF or a process.
use super::*;
use crate::containers::string::StringLayout;
use crate::containers::vector::VectorLayout;
use crate::interp::{LocalReader, run};
use crate::plan::Node;

fn node(name: &str, ty: &str, size: u64, op: Op) -> Node {
    Node {
        name: name.into(),
        type_names: vec![ty.into()],
        static_size: size,
        is_primitive: false,
        op,
        dynamic: false,
        readable: String::new(),
        value: None,
        opaque_union: false,
        foreign: false,
    }
}

/// struct { vector<int> v; string s; } at 0x1000 with v = 3 ints of capacity 10 at 0x2000
/// and s a 35-char heap string at 0x3000.
fn fixture() -> (Plan, LocalReader) {
    let mut plan = Plan::default();
    plan.nodes.push(node("a0", "S", 56, Op::Leaf));
    plan.nodes.push(node("[]", "int32_t", 4, Op::Leaf));
    plan.nodes.push(node(
        "v",
        "std::vector<int32_t>",
        24,
        Op::Vector {
            layout: VectorLayout {
                start_off: 0,
                finish_off: 8,
                eos_off: 16,
                elem_size: 4,
                size: 24,
            },
            elem: 1,
        },
    ));
    plan.nodes.push(node(
        "s",
        "string",
        32,
        Op::String(StringLayout {
            ptr_off: 0,
            len_off: 8,
            cap_off: 16,
            char_size: 1,
            size: 32,
        }),
    ));
    plan.nodes[0].op = Op::Struct {
        adapter: false,
        members: vec![(0, 2), (24, 3)],
        padding: 0,
    };
    plan.compute_dynamic();
    let mut mem = vec![0u8; 0x3000];
    let mut put = |at: usize, w: u64| mem[at..at + 8].copy_from_slice(&w.to_le_bytes());
    put(0, 0x2000);
    put(8, 0x200c);
    put(16, 0x2028);
    put(24, 0x3000);
    put(32, 35);
    put(40, 35);
    (plan, LocalReader::new(0x1000, mem))
}

#[test]
fn json_sizes_and_keys() {
    let (plan, mem) = fixture();
    let stream = run(&plan, 0, 0x1000, &mem, true, 0).expect("walk");
    assert_eq!(stream, words::encode(&[0x1000, 3, 10, 35, 35]));
    assert_eq!(total_size(&plan, 0, &stream).expect("size"), 64 + 67);
    let mut out = Vec::new();
    {
        let mut sink = json::JsonSink::new(&mut out, false);
        sink.start_sample().expect("start");
        decode(&plan, 0, &stream, &mut sink).expect("decode");
        sink.end_sample().expect("end");
    }
    let text = String::from_utf8(out).expect("utf8");
    assert!(text.starts_with(r#"[{"size":131,"name":"a0","typePath":["a0"],"typeNames":["S"],"staticSize":56,"exclusiveSize":0,"is_primitive":false,"members":[{"size":64,"name":"v","typePath":["a0","v"],"typeNames":["std::vector<int32_t>"],"staticSize":24,"exclusiveSize":52,"pointer":4096,"length":3,"capacity":10,"#), "{text}");
    assert!(text.contains(r#"{"size":67,"name":"s","typePath":["a0","s"],"typeNames":["string"],"staticSize":32,"exclusiveSize":67,"length":35,"capacity":35,"is_primitive":false,"members":[]}"#), "{text}");
    assert!(text.ends_with("]}]}]\n"));
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        v[0]["members"][0]["members"].as_array().map(Vec::len),
        Some(3)
    );
}

/// A root that failed (its walk, or its stream's decoding) is `{}` in its place, a line
/// in the tree, a row in the CSV, and listed; the others print as alone. With none left,
/// nothing is printed: one root's own error, or `NothingMeasured` naming every root.
#[test]
fn failed_roots_keep_their_place() {
    use output::{Format, Root, SampleWriter};
    let (plan, mem) = fixture();
    let good = run(&plan, 0, 0x1000, &mem, true, 0).expect("walk");
    // A string capacity beyond any address space: the decoder refuses it.
    let forged = words::encode(&[0x1000, 3, 10, 35, u64::MAX]);
    let root = |label, stream| Root {
        label,
        node: 0,
        stream,
    };
    let write = |format, roots: &[Root<'_>]| {
        let mut out = Vec::new();
        let failed = SampleWriter::new(format).write(&plan, roots, &mut out, None);
        (failed, String::from_utf8(out).expect("utf8"))
    };
    let json = Format::Json { pretty: false };
    let (alone, alone_text) = write(json, &[root("arg1", Ok(&good))]);
    assert!(alone.expect("alone").is_empty());
    let alone_text = alone_text
        .trim_end()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let roots = [
        root("arg0", Err("walk of arg0 faulted")),
        root("arg1", Ok(&good)),
        root("arg2", Ok(&forged)),
    ];
    let (failed, text) = write(json, &roots);
    assert_eq!(
        failed.expect("written"),
        [
            "arg0: walk of arg0 faulted".to_string(),
            format!(
                "arg2: data stream is corrupt: implausible string capacity {}",
                u64::MAX
            )
        ]
    );
    assert_eq!(text, format!("[{{}},{alone_text},{{}}]\n"));
    let (_, tree) = write(Format::Tree(tree::Options::default()), &roots);
    let lines: Vec<&str> = tree.lines().collect();
    assert_eq!(lines[0], "arg0: S  not measured: walk of arg0 faulted");
    assert!(lines[1].starts_with("arg1: S  131 B  100.0%"), "{tree}");
    assert!(
        lines[lines.len() - 1].starts_with("arg2: S  not measured: data stream is corrupt"),
        "{tree}"
    );
    let (_, csv) = write(Format::Csv, &roots);
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(
        rows[1],
        r#"1,"arg0 not measured: walk of arg0 faulted","arg0","S",56,,,,,,0"#
    );
    assert!(
        rows[2].starts_with(r#"2,"a0","a0","S",56,0,,,,,0"#),
        "{csv}"
    );
    assert!(
        rows[rows.len() - 1].ends_with(r#","arg2","S",56,,,,,,0"#),
        "{csv}"
    );

    let (none, text) = write(json, &[roots[0], roots[2]]);
    let e = none.expect_err("nothing measured");
    assert!(matches!(e, ReportError::NothingMeasured(_)), "{e}");
    assert!(
        e.to_string()
            .contains("arg0: walk of arg0 faulted; arg2: data stream"),
        "{e}"
    );
    assert!(text.is_empty(), "{text}");
    let (one, _) = write(json, &[root("arg2", Ok(&forged))]);
    assert!(matches!(one, Err(ReportError::Corrupt(_))));
}

/// Elements that are strings are sized in one loop: the same sizes as the printing
/// pass, and the same errors for short or forged streams.
#[test]
fn vector_of_strings_sizes_like_printing() {
    let mut plan = Plan::default();
    plan.nodes.push(node(
        "[]",
        "string",
        32,
        Op::String(StringLayout {
            ptr_off: 0,
            len_off: 8,
            cap_off: 16,
            char_size: 1,
            size: 32,
        }),
    ));
    plan.nodes.push(node(
        "a0",
        "std::vector<string>",
        24,
        Op::Vector {
            layout: VectorLayout {
                start_off: 0,
                finish_off: 8,
                eos_off: 16,
                elem_size: 32,
                size: 24,
            },
            elem: 0,
        },
    ));
    plan.compute_dynamic();
    // 3 strings, capacity 4: inline, 40 on the heap, inline.
    let stream = words::encode(&[0x1000, 3, 4, 5, 0, 40, 40, 1, 0]);
    let total = total_size(&plan, 1, &stream).expect("size");
    assert_eq!(total, 24 + 32 + 32 + (32 + 40) + 32);
    let mut out = Vec::new();
    let mut sink = json::JsonSink::new(&mut out, false);
    sink.start_sample().expect("start");
    decode(&plan, 1, &stream, &mut sink).expect("decode");
    drop(sink);
    let text = String::from_utf8(out).expect("utf8");
    assert!(text.starts_with(&format!("[{{\"size\":{total},")), "{text}");
    assert!(matches!(
        total_size(&plan, 1, &stream[..stream.len() - 1]),
        Err(ReportError::Truncated)
    ));
    let forged = words::encode(&[0x1000, 1, 1, 5, u64::MAX]);
    assert!(matches!(
        total_size(&plan, 1, &forged),
        Err(ReportError::Corrupt(_))
    ));
}

#[test]
fn truncated_stream_is_an_error() {
    let (plan, _) = fixture();
    assert!(matches!(
        total_size(&plan, 0, &words::encode(&[0x1000, 3])),
        Err(ReportError::Truncated)
    ));
}

/// A vector (corrupt, or just huge) of 2^28 ints: the tree and the path totals see one
/// and count the rest without visiting them (visiting each would make the decode take
/// minutes).
#[test]
fn tree_counts_identical_elements_without_visiting_them() {
    let (plan, _) = fixture();
    let mut sink = tree::TreeSink::new(&plan, tree::Options::default());
    let mut totals = totals::Totals::new();
    let stream = words::encode(&[0x1000, MAX_ELEMENTS, MAX_ELEMENTS, 35, 35]);
    let mut tee = output::Tee {
        sinks: vec![&mut sink, &mut totals],
    };
    decode(&plan, 0, &stream, &mut tee).expect("decode");
    let mut out = Vec::new();
    sink.write(&mut out).expect("write");
    let text = String::from_utf8(out).expect("utf8");
    assert!(
        text.contains("    [] × 268,435,456: int32_t  4 B each, 1.0 GiB  100.0%"),
        "{text}"
    );
    let elements = totals
        .nodes
        .iter()
        .find(|n| n.name == "[]")
        .expect("element path");
    assert_eq!((elements.count, elements.inclusive), (1 << 28, 4 << 28));
}

/// Streams no walker writes (as `cargo xtask fuzz` forges them): errors, not a loop over
/// 2^64 elements, an overflow or a stack overflow.
#[test]
fn forged_streams_are_errors() {
    let (plan, _) = fixture();
    let corrupt = |stream: &[u64]| {
        let mut sink = tree::TreeSink::new(&plan, tree::Options::default());
        matches!(
            decode(&plan, 0, &words::encode(stream), &mut sink),
            Err(ReportError::Corrupt(_))
        )
    };
    assert!(corrupt(&[0x1000, u64::MAX, u64::MAX, 35, 35]));
    assert!(corrupt(&[0x1000, 3, 1 << 40, 35, 35]));
    assert!(corrupt(&[0x1000, 3, 10, 35, u64::MAX]));

    // A pointer to its own type, chased deeper than any walker goes.
    let mut deep = Plan::default();
    deep.nodes
        .push(node("a0", "Link*", 8, Op::RawPointer { target: Some(0) }));
    deep.compute_dynamic();
    let stream: Vec<u64> = (0..=MAX_DEPTH).flat_map(|_| [0x1000, 1]).collect();
    let stream = words::encode(&stream);
    let result = std::thread::Builder::new()
        .stack_size(crate::footprint::measure::WALK_STACK)
        .spawn(move || total_size(&deep, 0, &stream))
        .expect("spawn")
        .join()
        .expect("no panic");
    assert!(matches!(result, Err(ReportError::Corrupt(_))), "{result:?}");
}

/// The tree of the fixture with 100 ints of capacity 110: largest first, sizes, shares,
/// len/cap and unused capacity, identical elements folded, `--top` summarising the rest.
#[test]
fn tree_shows_largest_first_and_summarises() {
    let (mut plan, mut mem) = fixture();
    mem.bytes[8..16].copy_from_slice(&(0x2000u64 + 400).to_le_bytes());
    mem.bytes[16..24].copy_from_slice(&(0x2000u64 + 440).to_le_bytes());
    plan.nodes[1].is_primitive = true;
    let stream = run(&plan, 0, 0x1000, &mem, true, 0).expect("walk");
    let tree = |top: usize| {
        let opts = tree::Options {
            top,
            ..tree::Options::default()
        };
        let mut sink = tree::TreeSink::new(&plan, opts);
        sink.root("this");
        decode(&plan, 0, &stream, &mut sink).expect("decode");
        let mut out = Vec::new();
        sink.write(&mut out).expect("write");
        String::from_utf8(out).expect("utf8")
    };
    let text = tree(10);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "this: S  531 B  100.0%",
            "  v: std::vector<int32_t>  464 B  87.4%  len 100 / cap 110, 40 B unused",
            "    [] × 100: int32_t  4 B each, 400 B  75.3%",
            "  s: string  67 B  12.6%  len 35 / cap 35",
        ],
        "{text}"
    );
    let text = tree(1);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[3], "  … 1 more member (67 B, 12.6%)");
}
