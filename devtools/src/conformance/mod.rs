//! `cargo xtask conformance`: Object Introspection's own integration suite, run against this
//! build of oi-trace, to say how much of OI's behaviour it reproduces.
//!
//! It reads OI's `test/integration/*.toml` from an OI repository given at run time
//! ([`cases`]), builds one small C++ target per case ([`target`]), runs oi-trace on it and
//! judges the run ([`trace`]) with OI's JSON comparison ([`compare`]), and prints a table per
//! suite, the totals and the failing cases ([`report`]). Builds, the cases' config files,
//! the files of each failing case and `summary.json` go under `target/oi-conformance`.
//!
//! Every case ends in one status. **passed** and **failed** were run and scored (a timeout,
//! output that is not JSON or a dead target fail too). **skipped**: OI itself skips it
//! (`skip`, `oid_skip`); `--force` runs it. **unsupported**: the harness cannot run it (it
//! does not compile, probes a hand-written `target_function`, or needs a library this
//! machine lacks). **excluded**: its whole suite needs folly or Thrift and is not built.
//! The run succeeds whatever the counts are; it fails only when it cannot run.

mod cases;
mod compare;
mod process;
mod report;
mod target;
mod trace;

use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, Result, bail, ensure};
use regex::Regex;
use serde_json::Value;

use cases::{Case, Suite};

#[derive(clap::Args)]
pub struct Args {
    /// The OI repository: a checkout, or a git directory.
    #[arg(long, value_name = "PATH")]
    oi_repo: PathBuf,
    /// Also run the cases OI itself skips.
    #[arg(long)]
    force: bool,
    /// Only the cases whose `suite.case` matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    filter: Option<String>,
    /// How many targets to build, and cases to run, at once.
    #[arg(short = 'j', long = "jobs", value_name = "N", default_value_t = 2)]
    jobs: usize,
    /// Seconds each oi-trace call may take before it is stopped.
    #[arg(long, value_name = "S", default_value_t = 20.0)]
    timeout: f64,
    /// The oi-trace to test [default: release/oi-trace under the target directory].
    #[arg(long, value_name = "PATH")]
    oi_trace: Option<PathBuf>,
    /// An argument appended to every oi-trace call (repeatable: `--oi-trace-arg=--flag`).
    #[arg(long = "oi-trace-arg", value_name = "ARG", allow_hyphen_values = true)]
    oi_trace_args: Vec<String>,
    /// The revision to read from a git directory.
    #[arg(long, value_name = "REV", default_value = "HEAD")]
    rev: String,
    /// Build every target again instead of reusing the cache.
    #[arg(long)]
    rebuild: bool,
    /// Let a missing `size` key pass, as OI's own comparison does.
    #[arg(long)]
    lenient_missing_size: bool,
    /// Print each case's result as it finishes, passed ones too.
    #[arg(short, long)]
    verbose: bool,
}

/// What became of a case; declared in the order of [`Status::ALL`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Status {
    Passed,
    Failed,
    Skipped,
    Unsupported,
    Excluded,
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::Passed,
        Status::Failed,
        Status::Skipped,
        Status::Unsupported,
        Status::Excluded,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
            Status::Unsupported => "unsupported",
            Status::Excluded => "excluded",
        }
    }
}

/// What became of one case.
pub struct Outcome {
    pub status: Status,
    /// One line: why it did not pass.
    pub reason: String,
    pub command: Option<Vec<String>>,
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub actual: Option<Value>,
    /// What failed the run besides the JSON.
    pub problems: Vec<String>,
    pub mismatches: Vec<String>,
    pub duration: Duration,
    pub build_log: Option<PathBuf>,
}

impl Outcome {
    pub fn decided(status: Status, reason: String) -> Outcome {
        Outcome {
            status,
            reason,
            command: None,
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            actual: None,
            problems: Vec::new(),
            mismatches: Vec::new(),
            duration: Duration::ZERO,
            build_log: None,
        }
    }

    /// Passed when nothing went wrong, else failed with the first thing that did.
    pub fn conclude(&mut self) {
        if let Some(problem) = self.problems.first() {
            self.status = Status::Failed;
            self.reason = problem.clone();
        } else if let Some(first) = self.mismatches.first() {
            self.status = Status::Failed;
            self.reason = format!(
                "{} JSON mismatch(es); first: {first}",
                self.mismatches.len()
            );
        } else {
            self.status = Status::Passed;
            self.reason.clear();
        }
    }
}

/// The status a case has without being built, if it has one.
fn decided_before_build(case: &Case, force: bool) -> Option<(Status, String)> {
    if let Some(why) = &case.excluded {
        return Some((Status::Excluded, why.clone()));
    }
    if let Some(why) = &case.skip
        && !force
    {
        return Some((Status::Skipped, why.clone()));
    }
    case.unsupported
        .as_ref()
        .map(|why| (Status::Unsupported, why.clone()))
}

pub fn run(root: &Path, args: &Args) -> Result<()> {
    ensure!(args.jobs >= 1, "-j must be at least 1");
    ensure!(
        args.timeout.is_finite() && args.timeout > 0.0,
        "--timeout must be a positive number of seconds"
    );
    let filter = args
        .filter
        .as_deref()
        .map(Regex::new)
        .transpose()
        .context("--filter is not a regular expression")?;
    let work = root.join("target/oi-conformance");
    let repo = cases::Repo::open(&args.oi_repo, &args.rev)?;
    let (suites, warnings) = cases::load(&repo)?;
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    ensure!(
        !suites.is_empty(),
        "no suites in {}/{}",
        repo.describe(),
        cases::INTEGRATION_DIR
    );
    let oi_trace = args
        .oi_trace
        .clone()
        .unwrap_or_else(|| default_oi_trace(root));
    let mut tool = trace::Tool::new(
        &oi_trace,
        Duration::from_secs_f64(args.timeout),
        &work.join("configs"),
    )?;
    tool.extra_args = args.oi_trace_args.clone();
    tool.lenient_missing_size = args.lenient_missing_size;

    let selected: Vec<(&Suite, &Case)> = suites
        .iter()
        .flat_map(|s| s.cases.iter().map(move |c| (s, c)))
        .filter(|(_, c)| filter.as_ref().is_none_or(|f| f.is_match(&c.id())))
        .collect();
    ensure!(!selected.is_empty(), "no case matches the filter");
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    process::catch_interrupts();

    let outcomes = outcomes(&selected, &suites, &tool, &work, args)?;
    let rows: Vec<report::Row> = selected
        .iter()
        .zip(outcomes)
        .map(|(&(suite, case), outcome)| report::Row {
            suite,
            case,
            outcome,
        })
        .collect();
    let results = work.join("results");
    for row in &rows {
        report::write_case_files(&results, row.case, &row.outcome)?;
    }
    let summary_path = work.join("summary.json");
    let summary = report::summary(&repo, &tool, &work, &suites, &rows);
    fs::write(&summary_path, format!("{summary:#}\n"))
        .with_context(|| format!("writing {}", summary_path.display()))?;
    println!(
        "OI tests: {}\noi-trace: {}{}{}\nresults:  {}\n",
        repo.describe(),
        tool.path.display(),
        if tool.takes_sizes { " --sizes oi" } else { "" },
        if tool.takes_config {
            " (with --config)"
        } else {
            ""
        },
        summary_path.display()
    );
    report::print_table(&rows, &suites);
    report::print_failures(&rows, &results);
    Ok(())
}

/// Decides, builds and runs the `selected` cases: an outcome for each.
fn outcomes(
    selected: &[(&Suite, &Case)],
    suites: &[Suite],
    tool: &trace::Tool,
    work: &Path,
    args: &Args,
) -> Result<Vec<Outcome>> {
    let mut outcomes: Vec<Option<Outcome>> = selected
        .iter()
        .map(|(_, case)| {
            decided_before_build(case, args.force)
                .map(|(status, why)| Outcome::decided(status, why))
        })
        .collect();
    let to_build: Vec<usize> = (0..selected.len())
        .filter(|&i| outcomes[i].is_none())
        .collect();
    let mut runnable = Vec::new();
    for (i, build) in build_all(selected, &to_build, suites, work, args)? {
        match build.exe {
            Ok(exe) => runnable.push((i, exe, build.log)),
            Err(why) => {
                let mut outcome = Outcome::decided(Status::Unsupported, why);
                outcome.build_log = Some(build.log);
                outcomes[i] = Some(outcome);
            }
        }
    }
    let mut finished = 0;
    process::parallel(
        &runnable,
        args.jobs,
        |(i, exe, _)| trace::run(selected[*i].1, exe, tool),
        |(i, _, log), mut outcome| {
            outcome.build_log = Some(log.clone());
            finished += 1;
            if args.verbose || outcome.status != Status::Passed {
                let reason = if outcome.reason.is_empty() {
                    String::new()
                } else {
                    format!(": {}", outcome.reason)
                };
                eprintln!(
                    "[{finished:>3}/{}] {:<11} {}{reason}",
                    runnable.len(),
                    outcome.status.name().to_uppercase(),
                    selected[*i].1.id(),
                );
            }
            outcomes[*i] = Some(outcome);
        },
    );
    if process::interrupted() {
        bail!("interrupted");
    }
    Ok(outcomes
        .into_iter()
        .map(|o| o.expect("every case has an outcome"))
        .collect())
}

/// Where `cargo xtask build` puts oi-trace: `release/` under `$CARGO_TARGET_DIR` if set,
/// else under the workspace's `target/`.
fn default_oi_trace(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), |dir| root.join(dir))
        .join("release/oi-trace")
}

/// Builds the targets of the cases `indices` of `selected`, with their index.
fn build_all(
    selected: &[(&Suite, &Case)],
    indices: &[usize],
    suites: &[Suite],
    work: &Path,
    args: &Args,
) -> Result<Vec<(usize, target::Build)>> {
    let cache = work.join("build");
    eprintln!(
        "building {} targets (-j{}) under {} ...",
        indices.len(),
        args.jobs,
        cache.display()
    );
    let headers = target::headers(suites);
    let mut built = Vec::new();
    let mut errors = Vec::new();
    process::parallel(
        indices,
        args.jobs,
        |&i| {
            let (suite, case) = selected[i];
            let source = target::source(suite, case, &headers);
            target::build(case, &source, &cache, args.rebuild)
        },
        |&i, build| match build {
            Ok(build) => {
                let id = selected[i].1.id();
                match &build.exe {
                    Err(why) => eprintln!("[build] FAILED {id}: {why}"),
                    Ok(_) if args.verbose => eprintln!(
                        "[build] ok {id}{}",
                        if build.cached { " (cached)" } else { "" }
                    ),
                    Ok(_) => {}
                }
                built.push((i, build));
            }
            Err(e) => errors.push(e),
        },
    );
    if process::interrupted() {
        bail!("interrupted");
    }
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    let ok = built.iter().filter(|(_, b)| b.exe.is_ok()).count();
    let cached = built.iter().filter(|(_, b)| b.cached).count();
    eprintln!("built {ok} of {} ({cached} from the cache)", indices.len());
    Ok(built)
}
