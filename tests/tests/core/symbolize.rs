//! The profilers' symbolizer on a live process: a return address inside inlined code names the
//! inlined function first, then the function that holds the code, with their source lines, at
//! -O0 and at -O2 without frame pointers.

use std::time::Duration;

use oi_e2e::{Fixture, FixtureBuild};
use oi_trace::symbolize::Symbolizer;

fn frames_at_inlined_return(build: FixtureBuild) {
    let binary = build.build();
    let mut fixture = Fixture::start(&binary, &[]);
    let line = fixture.stdout.expect("ra ", Duration::from_secs(10));
    // A return address names the call before it.
    let calls: Vec<u64> = line["ra ".len()..]
        .split_whitespace()
        .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).expect("hex address") - 1)
        .collect();
    let mut symbolizer = Symbolizer::new();
    let frames = symbolizer.frames(fixture.pid as u32, &calls);
    let names: Vec<Vec<(&str, bool)>> = frames
        .iter()
        .map(|f| f.iter().map(|f| (&*f.function, f.inlined)).collect())
        .collect();
    assert_eq!(
        names,
        [
            [("shop::tax", true), ("shop::checkout", false)],
            [("shop::Cart<int>::add", true), ("shop::checkout", false)],
            // Internal linkage: DWARF has no qualified name for it.
            [("price", true), ("shop::checkout", false)],
        ],
        "{frames:?}"
    );
    // The inlined function stands at the call of leaf, the outer one at the inlined call;
    // the fixture's source has them on different lines.
    for f in &frames {
        let lines: Vec<&str> = f.iter().filter_map(|f| f.source.as_deref()).collect();
        assert_eq!(lines.len(), 2, "{f:?}");
        assert!(
            lines.iter().all(|l| l.starts_with("symbolize_inline.cpp:")),
            "{f:?}"
        );
        assert_ne!(lines[0], lines[1], "{f:?}");
    }
    // The process is gone: what was symbolized stays named, from the cache.
    let pid = fixture.pid as u32;
    assert!(fixture.finish().success());
    assert_eq!(symbolizer.frames(pid, &calls), frames);
}

#[test]
fn inlined_frames_at_o0() {
    frames_at_inlined_return(
        FixtureBuild::new("symbolize_inline").variant("symbolize_inline_O0", &["-O0"]),
    );
}

#[test]
fn inlined_frames_at_o2_without_frame_pointers() {
    frames_at_inlined_return(
        FixtureBuild::new("symbolize_inline")
            .variant("symbolize_inline_O2", &["-O2", "-fomit-frame-pointer"]),
    );
}
