//! One case's run: start its target, run oi-trace on the probed function, and judge the run
//! as OI's runner judges oid's: the exit code (`expect_oid_exit_code`, 0 by default), the
//! target still running afterwards, OI's `expect_stdout`-like regexes, and the JSON on
//! stdout against the expectation.
//!
//! oi-trace is called once per case:
//! `oi-trace --pid PID --uprobe SYMBOL --arg arg0[,arg1...] --count 1 --format json`, with
//! `--uretprobe` for `type = "return"` cases, a `--feature` for each of the case's features,
//! `--sizes oi` when this oi-trace offers it (OI's expectations follow OI's sizing rules),
//! and `--config FILE` with the case's OI configuration when it takes one.

use std::{
    fs,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc::channel,
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use regex::Regex;
use serde_json::Value;

use super::{
    Outcome, Status,
    cases::{Case, Expect},
    compare::{self, Rules},
    process::{self, Stopped},
};

/// Time a target has to print its pid and `ready`.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The oi-trace under test and how each case calls it.
pub struct Tool {
    pub path: PathBuf,
    /// It reads OI's config file (`--config FILE`).
    pub takes_config: bool,
    /// It can size as OI does (`--sizes oi`).
    pub takes_sizes: bool,
    /// Appended to every call.
    pub extra_args: Vec<String>,
    pub timeout: Duration,
    /// Where the cases' config files are written.
    pub configs: PathBuf,
    pub lenient_missing_size: bool,
}

impl Tool {
    /// Asks `path --help` which of the options it has.
    pub fn new(path: &Path, timeout: Duration, configs: &Path) -> Result<Tool> {
        if !path.is_file() {
            bail!(
                "oi-trace not found at {} (build it, or pass --oi-trace PATH)",
                path.display()
            );
        }
        let help = process::run(Command::new(path).arg("--help"), Duration::from_secs(30))
            .with_context(|| format!("running {} --help", path.display()))?;
        let help = String::from_utf8_lossy(&help.stdout);
        let lists = |option: &str| {
            Regex::new(&format!(r"(?m)^\s*(-\w, )?{option}\b"))
                .expect("option regex")
                .is_match(&help)
        };
        Ok(Tool {
            path: path.to_path_buf(),
            takes_config: lists("--config"),
            takes_sizes: lists("--sizes"),
            extra_args: Vec::new(),
            timeout,
            configs: configs.to_path_buf(),
            lenient_missing_size: false,
        })
    }

    /// The command line for `case` on process `pid`; writes the case's config file if it
    /// is passed.
    pub fn command(&self, case: &Case, pid: u32) -> Result<Vec<String>> {
        let probe = if case.on_return {
            "--uretprobe"
        } else {
            "--uprobe"
        };
        let mut cmd: Vec<String> = [
            &self.path.to_string_lossy(),
            "--pid",
            &pid.to_string(),
            probe,
            &case.symbol,
            "--arg",
            &case.args,
            "--count",
            "1",
            "--format",
            "json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for feature in &case.features {
            cmd.extend(["--feature".to_string(), feature.clone()]);
        }
        if self.takes_sizes {
            cmd.extend(["--sizes".to_string(), "oi".to_string()]);
        }
        if self.takes_config && !case.config.is_empty() {
            // The features stay as --feature too: the same set.
            fs::create_dir_all(&self.configs)
                .with_context(|| format!("creating {}", self.configs.display()))?;
            let file = self.configs.join(format!("{}.toml", case.id()));
            fs::write(&file, format!("{}\n", case.config))
                .with_context(|| format!("writing {}", file.display()))?;
            cmd.extend(["--config".to_string(), file.to_string_lossy().into_owned()]);
        }
        cmd.extend(self.extra_args.iter().cloned());
        Ok(cmd)
    }
}

/// Runs `case` on its built program `exe`.
pub fn run(case: &Case, exe: &Path, tool: &Tool) -> Outcome {
    let started = Instant::now();
    let mut outcome = match Target::start(exe) {
        Ok(mut target) => {
            let outcome = trace(case, &mut target, tool);
            drop(target);
            outcome
        }
        Err(why) => Outcome::decided(Status::Unsupported, why),
    };
    outcome.duration = started.elapsed();
    outcome
}

fn trace(case: &Case, target: &mut Target, tool: &Tool) -> Outcome {
    let mut outcome = Outcome::decided(Status::Failed, String::new());
    let command = match tool.command(case, target.child.id()) {
        Ok(command) => command,
        Err(e) => {
            outcome.problems.push(format!("{e:#}"));
            outcome.conclude();
            return outcome;
        }
    };
    outcome.command = Some(command.clone());
    match process::run(Command::new(&command[0]).args(&command[1..]), tool.timeout) {
        Err(e) => outcome
            .problems
            .push(format!("cannot run {}: {e}", tool.path.display())),
        Ok(finished) => {
            outcome.exit_code = Some(finished.code());
            outcome.stdout = String::from_utf8_lossy(&finished.stdout).into_owned();
            outcome.stderr = String::from_utf8_lossy(&finished.stderr).into_owned();
            match finished.stopped {
                Some(Stopped::TimedOut) => outcome.problems.push(format!(
                    "oi-trace timed out after {}s",
                    tool.timeout.as_secs_f64()
                )),
                Some(Stopped::Interrupted) => outcome.problems.push("interrupted".to_string()),
                None => {}
            }
            // OI checks that the target is still running afterwards.
            if let Some(status) = target.exited() {
                outcome
                    .problems
                    .push(format!("the target died while traced ({status})"));
            }
            if outcome.problems.is_empty() {
                evaluate(case, tool, &mut outcome);
            }
        }
    }
    outcome.conclude();
    outcome
}

/// Scores a finished oi-trace run: exit code, output regexes, JSON.
fn evaluate(case: &Case, tool: &Tool, outcome: &mut Outcome) {
    let code = outcome.exit_code.unwrap_or(-1);
    if i64::from(code) != case.exit_code {
        let last = outcome.stderr.trim().lines().last().unwrap_or_default();
        let mut problem = format!("oi-trace exited with {code}, expected {}", case.exit_code);
        if !last.is_empty() {
            let last: String = last.chars().take(200).collect();
            problem.push_str(&format!(" (stderr: {last})"));
        }
        outcome.problems.push(problem);
    }
    for check in &case.output_checks {
        let stream = if check.stderr {
            &outcome.stderr
        } else {
            &outcome.stdout
        };
        if check.regex.is_match(stream) != check.must_match {
            outcome.problems.push(format!(
                "{} regex {:?} {}",
                check.key,
                check.pattern,
                if check.must_match {
                    "did not match"
                } else {
                    "matched"
                }
            ));
        }
    }
    let Some(expected) = &case.expected else {
        return;
    };
    let actual: Value = match serde_json::from_str(&outcome.stdout) {
        Ok(actual) => actual,
        Err(e) => {
            let first = outcome.stdout.trim().lines().next().unwrap_or("<empty>");
            let first: String = first.chars().take(120).collect();
            outcome.problems.push(format!(
                "stdout is not one JSON document ({e}); it starts with: {first}"
            ));
            return;
        }
    };
    let rules = Rules {
        v1: case.expect == Expect::V1,
        lenient_missing_size: tool.lenient_missing_size,
    };
    outcome.mismatches = compare::compare(expected, &actual, rules);
    outcome.actual = Some(actual);
}

/// A running target program, killed (by its pid) when dropped.
struct Target {
    child: Child,
    reader: Option<JoinHandle<()>>,
}

impl Target {
    /// Starts `exe` and waits for its pid and `ready`: its function has then run once.
    fn start(exe: &Path) -> Result<Target, String> {
        let mut child = Command::new(exe)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("the target did not start: {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = channel();
        // Reads to the end, so that the target never writes to a closed pipe.
        let reader = thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let mut target = Target {
            child,
            reader: Some(reader),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        let mut lines = Vec::new();
        while lines.len() < 2 {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => lines.push(line),
                Err(_) => break,
            }
        }
        let pid = target.child.id().to_string();
        if lines.len() == 2 && lines[0] == pid && lines[1] == "ready" {
            return Ok(target);
        }
        let why = match target.exited() {
            Some(status) => format!("it exited ({status})"),
            None => format!("no 'ready' within {}s", START_TIMEOUT.as_secs()),
        };
        Err(format!("the target did not start: {why}"))
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        // A reaped child is not signalled again: std keeps its status.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use oi_e2e::TempDir;

    use super::{
        super::{cases::parse_suite, target},
        *,
    };

    const SUITE: &str = r#"
definitions = "struct Foo { int a; };"
[cases.one]
  param_types = ["const Foo&"]
  setup = "return {Foo{4}};"
  expect_json_v2 = '[{"staticSize": 4}]'
  expect_stderr = ".*attached.*"
"#;

    /// A stand-in for oi-trace: checks its probe arguments, then runs `body` (`$2` is the
    /// target's pid). The case expects `attached` on stderr.
    fn fake_tool(dir: &TempDir, name: &str, body: &str) -> PathBuf {
        let written = dir.file(&format!("{name}.txt"));
        let script = format!(
            "#!/bin/sh\n[ \"$1 $3 $4 $5 $6\" = \"--pid --uprobe oid_test_case_demo_one --arg \
             arg0\" ] || {{ echo bad call: \"$@\" >&2; exit 9; }}\n{body}\n"
        );
        fs::write(&written, script).unwrap();
        // Copied by a child process: a descriptor open for writing in this multi-threaded
        // process would make running the script fail with ETXTBSY.
        let exe = dir.file(name);
        oi_e2e::copy_executable(&written, &exe);
        Command::new("chmod").arg("+x").arg(&exe).status().unwrap();
        exe
    }

    #[test]
    fn judges_runs_of_a_fake_oi_trace() {
        let dir = TempDir::new("conformance-trace");
        let suite = parse_suite("demo", SUITE).unwrap();
        let case = &suite.cases[0];
        let source = target::source(&suite, case, &target::headers(&[]));
        let build = target::build(case, &source, &dir.file("build"), false).unwrap();
        let exe = build.exe.unwrap();
        let good = r#"echo attached >&2; echo '[{"staticSize": 4, "size": 4}]'"#;
        let scenarios = [
            ("conforms", good.to_string(), Status::Passed, ""),
            (
                "wrong",
                r#"echo attached >&2; echo '[{"staticSize": 5}]'"#.to_string(),
                Status::Failed,
                "Incorrect value for key: [0].staticSize",
            ),
            (
                "not_json",
                "echo attached >&2; echo hello".to_string(),
                Status::Failed,
                "not one JSON document",
            ),
            (
                "exit_code",
                format!("{good}; exit 3"),
                Status::Failed,
                "exited with 3, expected 0",
            ),
            (
                "slow",
                format!("sleep 30; {good}"),
                Status::Failed,
                "timed out",
            ),
            (
                "kills_target",
                format!("kill -9 $2; sleep 0.2; {good}"),
                Status::Failed,
                "the target died",
            ),
            (
                "silent",
                r#"echo '[{"staticSize": 4}]'"#.to_string(),
                Status::Failed,
                "expect_stderr regex",
            ),
        ];
        for (name, body, status, reason) in scenarios {
            let tool = Tool {
                path: fake_tool(&dir, name, &body),
                takes_config: false,
                takes_sizes: false,
                extra_args: Vec::new(),
                timeout: Duration::from_millis(1500),
                configs: dir.file("configs"),
                lenient_missing_size: false,
            };
            let outcome = run(case, &exe, &tool);
            assert_eq!(outcome.status, status, "{name}: {}", outcome.reason);
            assert!(
                outcome.reason.contains(reason),
                "{name}: {:?} lacks {reason:?}",
                outcome.reason
            );
        }
        // The cache answers the second time.
        let again = target::build(case, &source, &dir.file("build"), false).unwrap();
        assert!(again.cached && again.exe.is_ok());
    }

    #[test]
    fn command_line_and_config_file() {
        let dir = TempDir::new("conformance-command");
        let suite = parse_suite(
            "s",
            r#"
[cases.r]
  type = "return"
  param_types = ["int"]
  setup = "return 1;"
  features = ["chase-raw-pointers"]
  config_suffix = "[[codegen.ignore]]\ntype = 'Foo'\n"
"#,
        )
        .unwrap();
        let tool = Tool {
            path: PathBuf::from("/bin/oi-trace"),
            takes_config: true,
            takes_sizes: true,
            extra_args: vec!["--x".to_string()],
            timeout: Duration::from_secs(1),
            configs: dir.file("configs"),
            lenient_missing_size: false,
        };
        let command = tool.command(&suite.cases[0], 42).unwrap();
        let config = dir.file("configs/s.r.toml");
        assert_eq!(
            command.join(" "),
            format!(
                "/bin/oi-trace --pid 42 --uretprobe oid_test_case_s_r --arg retval --count 1 \
                 --format json --feature chase-raw-pointers --sizes oi --config {} --x",
                config.display()
            )
        );
        assert_eq!(
            fs::read_to_string(config).unwrap(),
            "[[codegen.ignore]]\ntype = 'Foo'\n"
        );
    }
}
