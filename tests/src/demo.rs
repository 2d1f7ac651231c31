//! The demo behind `cargo xtask demo`: it starts the bundled example
//! (`tests/fixtures/demo_shop.cpp`) and shows each tool on it in turn (a footprint as a tree
//! and a picture, the allocation profiler, the call profiler beneath one entry), then runs a
//! small OIL program (`tests/fixtures/demo_oil.cpp`) that measures its own object. Each step
//! prints the command it runs, copyable from the repository root, then what the tool printed,
//! stdout and stderr interleaved as a terminal shows them. It lives in the journeys' crate so
//! that a journey runs exactly what people see and checks it.

use std::{
    io::{self, BufRead as _, BufReader, Write},
    path::Path,
    process::{Command, Stdio},
    sync::mpsc::{self, RecvTimeoutError},
    thread,
    time::Duration,
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::{Fixture, FixtureBuild, oi_trace_bin, shell_quoted, workspace_root};

/// The function whose `this`, the shop's ledger, the footprint measures.
pub const LEDGER_PROBE: &str = "shop::Ledger::inspect";
/// The entry point beneath which the call profiler times every call: one order.
pub const ENTRY: &str = "shop::serve";
/// Where the footprint's picture goes, under the repository root.
pub const PICTURE: &str = "target/demo/ledger.svg";
/// How long each profiler watches, in seconds: long enough for some three thousand orders.
const PROFILE_SECONDS: &str = "3";
/// A step still running after this long is killed and fails the demo, rather than hang it.
const STEP_LIMIT: Duration = Duration::from_secs(90);

/// Runs the demo, writing everything it shows to `out`; fails when a tool fails.
pub fn run(out: &mut dyn Write) -> io::Result<()> {
    let root = workspace_root();
    let bin = oi_trace_bin();
    let example = FixtureBuild::new("demo_shop").build();
    let oil_program = FixtureBuild::new("demo_oil").with_oil().build();
    std::fs::create_dir_all(root.join(PICTURE).parent().unwrap_or(&root))?;
    let fixture = Fixture::start(&example, &[]);
    let pid = fixture.pid.to_string();
    writeln!(
        out,
        "demo: the example, tests/fixtures/demo_shop.cpp, runs as pid {pid} ({}); it serves \
         an order about a thousand times a second. Commands run from {}.",
        shown(&example),
        root.display()
    )?;

    heading(
        out,
        "1/4 footprint",
        &format!("the shop's ledger, measured at the next call of {LEDGER_PROBE}"),
    )?;
    step(
        out,
        &bin,
        &[
            "--pid",
            &pid,
            "--uprobe",
            LEDGER_PROBE,
            "--arg",
            "this",
            "--count",
            "1",
            "--format",
            "tree",
            "--top",
            "3",
            "--svg",
            PICTURE,
        ],
    )?;
    writeln!(
        out,
        "demo: the same footprint as a picture, width = bytes (open it in a browser, hover \
         for exact sizes): {}",
        root.join(PICTURE).display()
    )?;

    heading(
        out,
        "2/4 allocations",
        &format!("{PROFILE_SECONDS} s of every allocation and free, by site, type and lifetime"),
    )?;
    step(
        out,
        &bin,
        &[
            "allocs",
            "--pid",
            &pid,
            "--duration",
            PROFILE_SECONDS,
            "--top",
            "3",
        ],
    )?;

    heading(
        out,
        "3/4 calls",
        &format!("{PROFILE_SECONDS} s of every call beneath {ENTRY}, timed as a tree"),
    )?;
    step(
        out,
        &bin,
        &[
            "calls",
            "--pid",
            &pid,
            "--entry",
            ENTRY,
            "--duration",
            PROFILE_SECONDS,
        ],
    )?;

    let liboil = bin.with_file_name("liboil.so");
    heading(
        out,
        "4/4 OIL",
        &format!(
            "tests/fixtures/demo_oil.cpp measures its own order with oil::size (built with \
             g++ -g, oil/include/oil.h and {})",
            shown(&liboil)
        ),
    )?;
    step(out, &oil_program, &[])?;

    // The tools must leave the example as they found it: running, and no longer traced.
    fixture.assert_running();
    writeln!(
        out,
        "\ndemo: the example ran on throughout, untouched (not stopped, not traced); stopping it"
    )?;
    if !fixture.finish().success() {
        return Err(io::Error::other("the example exited with an error"));
    }
    Ok(())
}

fn heading(out: &mut dyn Write, step: &str, what: &str) -> io::Result<()> {
    writeln!(out, "\n=== {step}: {what}")
}

/// Prints the command line, runs `program` with `args` from the repository root, and copies
/// what it prints to `out` line by line as it comes; fails unless it exits with status 0.
fn step(out: &mut dyn Write, program: &Path, args: &[&str]) -> io::Result<()> {
    let line: Vec<String> = std::iter::once(shown(program))
        .chain(args.iter().map(|a| a.to_string()))
        .map(|a| shell_quoted(&a))
        .collect();
    let line = line.join(" ");
    writeln!(out, "$ {line}")?;
    out.flush()?;
    // One pipe for both streams keeps their lines in the order the tool wrote them.
    let (reader, writer) = io::pipe()?;
    // The command holds the pipe's write ends until it is dropped, at the end of this block;
    // after that, the output ends when the child's copies close.
    let mut child = {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(workspace_root())
            .stdin(Stdio::null())
            .stdout(writer.try_clone()?)
            .stderr(writer);
        cmd.spawn()?
    };
    let (finished, watch) = mpsc::channel::<()>();
    let child_pid = Pid::from_raw(child.id() as i32);
    let watchdog = thread::spawn(move || {
        // The child is reaped only after this thread is joined, so its pid is still its own.
        if watch.recv_timeout(STEP_LIMIT) == Err(RecvTimeoutError::Timeout) {
            let _ = kill(child_pid, Signal::SIGKILL);
        }
    });
    let copied = copy_lines(reader, out);
    let _ = finished.send(());
    let _ = watchdog.join();
    let status = child.wait()?;
    copied?;
    if !status.success() {
        return Err(io::Error::other(format!("`{line}` failed: {status}")));
    }
    Ok(())
}

fn copy_lines(from: impl io::Read, out: &mut dyn Write) -> io::Result<()> {
    let mut from = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        if from.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line);
        writeln!(out, "{}", text.trim_end_matches('\n'))?;
        out.flush()?;
    }
}

/// A path as the printed commands give it: relative to the repository root they run from when
/// it is inside it, else absolute.
fn shown(path: &Path) -> String {
    let root = workspace_root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}
