//! What a run found: the table of statuses per suite with its totals and score, the list of
//! failing cases with a one-line reason each, `summary.json` (the same, and every case's
//! details), and for each failing case a folder under `results/` holding its command, the
//! expectation compared, oi-trace's output and every mismatch.

use std::{collections::BTreeMap, fs, path::Path};

use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use super::{
    Outcome, Status,
    cases::{Case, Repo, Suite},
    trace::Tool,
};

pub struct Row<'a> {
    pub suite: &'a Suite,
    pub case: &'a Case,
    pub outcome: Outcome,
}

/// Counts of cases, and per status (indexed by `Status as usize`, the order of
/// [`Status::ALL`]).
#[derive(Default, Clone, Copy)]
struct Counts {
    cases: usize,
    by_status: [usize; Status::ALL.len()],
}

impl Counts {
    fn add(&mut self, status: Status) {
        self.cases += 1;
        self.by_status[status as usize] += 1;
    }

    fn get(&self, status: Status) -> usize {
        self.by_status[status as usize]
    }

    fn json(&self) -> serde_json::Map<String, Value> {
        let mut map = serde_json::Map::new();
        map.insert("cases".into(), self.cases.into());
        for status in Status::ALL {
            map.insert(status.name().into(), self.get(status).into());
        }
        map
    }
}

fn per_suite<'a>(rows: &[Row<'a>]) -> BTreeMap<&'a str, Counts> {
    let mut suites = BTreeMap::new();
    for row in rows {
        suites
            .entry(row.suite.name.as_str())
            .or_insert_with(Counts::default)
            .add(row.outcome.status);
    }
    suites
}

const COLUMNS: [Status; 4] = [
    Status::Passed,
    Status::Failed,
    Status::Skipped,
    Status::Unsupported,
];

pub fn print_table(rows: &[Row], suites: &[Suite]) {
    print!("{}", table(rows, suites));
}

fn table(rows: &[Row], suites: &[Suite]) -> String {
    let counts = per_suite(rows);
    let excluded: BTreeMap<&str, &str> = suites
        .iter()
        .filter_map(|s| Some((s.name.as_str(), s.excluded.as_deref()?)))
        .collect();
    let width = counts.keys().map(|n| n.len()).max().unwrap_or(0).max(5);
    let line = |name: &str, c: &Counts| {
        let mut text = format!("{name:<width$}  {:>11}", c.cases);
        for status in COLUMNS {
            text.push_str(&format!("  {:>11}", c.get(status)));
        }
        text.push('\n');
        text
    };
    let mut head = format!("{:<width$}  {:>11}", "suite", "cases");
    for status in COLUMNS {
        head.push_str(&format!("  {:>11}", status.name()));
    }
    let rule = "-".repeat(head.len());
    let mut out = format!("{head}\n{rule}\n");
    let mut total = Counts::default();
    for (name, c) in counts.iter().filter(|(n, _)| !excluded.contains_key(*n)) {
        out.push_str(&line(name, c));
        total.cases += c.cases;
        for (t, n) in total.by_status.iter_mut().zip(c.by_status) {
            *t += n;
        }
    }
    out.push_str(&format!("{rule}\n"));
    out.push_str(&line("TOTAL", &total));
    let left_out: Vec<(&str, usize, &str)> = counts
        .iter()
        .filter_map(|(name, c)| Some((*name, c.cases, *excluded.get(name)?)))
        .collect();
    if !left_out.is_empty() {
        let cases: usize = left_out.iter().map(|(_, n, _)| n).sum();
        out.push_str(&format!("\nExcluded suites ({cases} cases, not built):\n"));
        for (name, n, why) in left_out {
            out.push_str(&format!("  {name} ({n}): {why}\n"));
        }
    }
    let (passed, failed) = (total.get(Status::Passed), total.get(Status::Failed));
    if passed + failed > 0 {
        out.push_str(&format!(
            "\nScore: {passed}/{} run cases passed ({:.1}%)\n",
            passed + failed,
            100.0 * passed as f64 / (passed + failed) as f64
        ));
    }
    out
}

/// The failing cases, one line each: `suite.case: reason`.
pub fn print_failures(rows: &[Row], results: &Path) {
    let failed: Vec<&Row> = rows
        .iter()
        .filter(|r| r.outcome.status == Status::Failed)
        .collect();
    if failed.is_empty() {
        return;
    }
    println!("\nFailing cases ({}):", failed.len());
    for row in &failed {
        println!("  {}: {}", row.case.id(), one_line(&row.outcome.reason));
    }
    println!(
        "\nEach one's command, expected.json, actual.json, stderr.txt and result.json: {}/",
        results.display()
    );
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn summary(repo: &Repo, tool: &Tool, work: &Path, suites: &[Suite], rows: &[Row]) -> Value {
    let mut totals = Counts::default();
    for row in rows {
        totals.add(row.outcome.status);
    }
    let scored_on: serde_json::Map<String, Value> = ["v2", "v1", "none"]
        .into_iter()
        .map(|source| {
            let n = rows
                .iter()
                .filter(|r| {
                    matches!(r.outcome.status, Status::Passed | Status::Failed)
                        && r.case.expect.name() == source
                })
                .count();
            (source.to_string(), n.into())
        })
        .collect();
    let suite_rows: Vec<Value> = per_suite(rows)
        .into_iter()
        .map(|(name, counts)| {
            let mut row = counts.json();
            row.insert("suite".into(), name.into());
            let excluded = suites
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.excluded.clone());
            row.insert("excluded_reason".into(), excluded.into());
            Value::Object(row)
        })
        .collect();
    json!({
        "oi_repo": repo.path.display().to_string(),
        "oi_commit": repo.commit,
        "oi_trace": tool.path.display().to_string(),
        "oi_trace_takes_config": tool.takes_config,
        "oi_trace_takes_sizes": tool.takes_sizes,
        "work_dir": work.display().to_string(),
        "totals": Value::Object(totals.json()),
        "scored_on": scored_on,
        "suites": suite_rows,
        "cases": rows.iter().map(|r| case_json(r.case, &r.outcome)).collect::<Vec<_>>(),
    })
}

fn case_json(case: &Case, outcome: &Outcome) -> Value {
    json!({
        "id": case.id(),
        "suite": case.suite,
        "case": case.name,
        "status": outcome.status.name(),
        "reason": outcome.reason,
        "symbol": case.symbol,
        "args": case.args,
        "probe": if case.on_return { "return" } else { "entry" },
        "features": case.features,
        "expect_source": case.expect.name(),
        "expected_exit_code": case.exit_code,
        "skip_reason": case.skip,
        "notes": case.notes,
        "command": outcome.command,
        "exit_code": outcome.exit_code,
        "problems": outcome.problems,
        "mismatches": outcome.mismatches,
        "duration_s": (outcome.duration.as_secs_f64() * 1000.0).round() / 1000.0,
        "build_log": outcome.build_log.as_ref().map(|p| p.display().to_string()),
    })
}

/// Writes a failing case's files under `results/<suite.case>/`; removes those of a case
/// that no longer fails.
pub fn write_case_files(results: &Path, case: &Case, outcome: &Outcome) -> Result<()> {
    let dir = results.join(case.id());
    if outcome.status != Status::Failed {
        if dir.is_dir() {
            fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        return Ok(());
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let command = match &outcome.command {
        Some(command) => command
            .iter()
            .map(|a| oi_e2e::shell_quoted(a))
            .collect::<Vec<_>>()
            .join(" "),
        None => "(oi-trace did not run)".to_string(),
    };
    let expected = json!({
        "source": case.expect.name(),
        "exit_code": case.exit_code,
        "json": case.expected,
    });
    let actual = match &outcome.actual {
        Some(actual) => actual.clone(),
        None => json!({"not_json": true, "stdout": outcome.stdout}),
    };
    let result = case_json(case, outcome);
    for (name, text) in [
        ("command.txt", format!("{command}\n")),
        ("expected.json", format!("{expected:#}\n")),
        ("actual.json", format!("{actual:#}\n")),
        ("stderr.txt", outcome.stderr.clone()),
        ("result.json", format!("{result:#}\n")),
    ] {
        let path = dir.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{super::cases::parse_suite, *};

    #[test]
    fn table_counts_suites_totals_and_score() {
        let a = parse_suite("alpha", "[cases.x]\n[cases.y]\n[cases.z]\n").unwrap();
        let b = parse_suite("beta", "includes = [\"folly/X.h\"]\n[cases.w]\n").unwrap();
        let suites = [a, b];
        let statuses = [Status::Passed, Status::Failed, Status::Skipped];
        let mut rows: Vec<Row> = suites[0]
            .cases
            .iter()
            .zip(statuses)
            .map(|(case, status)| Row {
                suite: &suites[0],
                case,
                outcome: Outcome::decided(status, String::new()),
            })
            .collect();
        rows.push(Row {
            suite: &suites[1],
            case: &suites[1].cases[0],
            outcome: Outcome::decided(Status::Excluded, String::new()),
        });
        let text = table(&rows, &suites);
        assert!(text.contains("alpha            3            1            1            1"));
        assert!(text.contains("TOTAL            3            1            1            1"));
        assert!(text.contains("beta (1): needs folly"));
        assert!(text.contains("Score: 1/2 run cases passed (50.0%)"));
    }
}
