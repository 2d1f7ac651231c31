//! The `oi-trace` binary: parse arguments, run the tool they name, turn the outcome into an exit
//! status.
use std::process::ExitCode;

use clap::{Parser as _, error::ErrorKind};
use oi_trace::{
    agent, allocs, calls,
    cli::{Cli, Tool},
    footprint::session,
};

fn main() -> ExitCode {
    oi_trace::uptime::mark();
    let cli = match Cli::try_parse() {
        Ok(args) => args,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            e.exit()
        }
        Err(e) => {
            // Usage errors follow the one-line rule of every other error.
            eprintln!("oi-trace: error: {}", usage_line(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    let outcome = match &cli.tool {
        None => session::run(&cli.footprint),
        Some(Tool::Calls(args)) => calls::run(args),
        Some(Tool::Allocs(args)) => allocs::run(args),
        Some(Tool::Agent(args)) => agent::run(args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oi-trace: error: {e}");
            e.exit_code()
        }
    }
}

/// clap's message on one line: without its `error: ` prefix, usage block and hint; a list it
/// continues on indented lines (missing arguments) is joined in.
fn usage_line(rendered: &str) -> String {
    let mut lines = rendered.lines().take_while(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or_default();
    let mut line = first
        .strip_prefix("error: ")
        .unwrap_or(first)
        .trim_end()
        .to_string();
    let more: Vec<&str> = lines.map(str::trim).collect();
    if !more.is_empty() {
        line = format!("{} {}", line, more.join(", "));
    }
    format!("{line} (see --help)")
}
