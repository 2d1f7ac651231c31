//! A target that exits while `allocs` or `calls` is still starting (reading its files,
//! loading, attaching) ends the run as any run whose target went away does: exit 1 and one
//! line saying the target exited during start-up, or, once armed, the report of what was
//! counted and exit 0. Never a file-read error, never the usage status 2. The target exits on
//! its own after a time spread over the start-up, so every stage is hit across the runs; built
//! at -O0 and at -O2 without frame pointers.

use std::{process::Command, time::Duration};

use oi_e2e::{FixtureBuild, OiTrace, privileged};

const SECOND: Duration = Duration::from_secs(1);

fn exits_while_starting(tool: &[&str]) {
    if !privileged() {
        return;
    }
    let builds = [
        FixtureBuild::new("exits_after").build(),
        FixtureBuild::new("exits_after")
            .variant("exits_after_o2", &["-O2", "-fomit-frame-pointer"])
            .build(),
    ];
    for (binary, delay_ms) in builds
        .iter()
        .flat_map(|b| [20, 150, 400, 800, 1500, 2500].map(|d| (b, d)))
    {
        let mut target = Command::new(binary)
            .arg(delay_ms.to_string())
            .spawn()
            .expect("start the target");
        let pid = target.id().to_string();
        let mut args = tool.to_vec();
        args.extend(["--pid", &pid]);
        let out = OiTrace::start(&args).finish(60 * SECOND);
        let _ = target.wait();
        let context = format!(
            "{tool:?} with a {delay_ms} ms target ({}): {out:#?}",
            binary.display()
        );
        match out.status.code() {
            Some(0) => assert!(
                out.stderr
                    .iter()
                    .any(|l| l.starts_with("oi-trace: the target exited;")),
                "{context}"
            ),
            Some(1) => assert_eq!(
                out.stderr.last().map(String::as_str),
                Some(
                    format!(
                        "oi-trace: error: the target (pid {pid}) exited during start-up: nothing \
                         was counted"
                    )
                    .as_str()
                ),
                "{context}"
            ),
            _ => panic!("{context}"),
        }
        assert!(
            !out.stderr.iter().any(|l| l.contains("panicked")),
            "{context}"
        );
    }
}

#[test]
fn allocs_target_exits_during_start_up() {
    exits_while_starting(&["allocs"]);
}

#[test]
fn calls_target_exits_during_start_up() {
    exits_while_starting(&["calls", "--entry", "shop::tick"]);
}
