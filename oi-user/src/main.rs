//! The `oi-trace` binary: parse arguments, run a session, turn the outcome into an exit status.
use std::process::ExitCode;

use clap::Parser as _;
use oi_trace::{cli::Args, session};

fn main() -> ExitCode {
    let args = Args::parse();
    match session::run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oi-trace: error: {e}");
            e.exit_code()
        }
    }
}
