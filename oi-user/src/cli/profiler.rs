//! Options every profiler shares (`oi-trace calls` and `oi-trace allocs`): what to trace, for
//! how long, how often to report, how loudly; and the parsers of times and lists they use.

use std::{path::PathBuf, time::Duration};

use clap::{ArgGroup, Args};

/// The processes a profiler watches and for how long.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("scope").required(true).args(["pid", "cgroup"])))]
pub struct ScopeArgs {
    /// Profile this process (all of its threads).
    #[arg(long, value_name = "PID")]
    pub pid: Option<i32>,

    /// Profile every process in this cgroup v2 directory and below it, current and future.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    /// Stop after this long (`10`, `1.5s`, `500ms`); default: until Ctrl-C or the target exits.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub duration: Option<Duration>,

    /// Also print the report so far every TIME (`5`, `30s`, `1m`).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub interval: Option<Duration>,

    /// Print the eBPF programs' decisions (aya-log) on stderr.
    #[arg(short, long)]
    pub verbose: bool,
}

/// A time as people write it: a number of seconds (`1.5`) or a number with a unit (`250ms`,
/// `10us`, `2s`, `1m`, `1h`, `800ns`). Zero and negative times are refused.
pub fn parse_time(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a time (examples: 1.5, 250ms, 10us, 2s, 1m)"))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown time unit {other:?} in {s:?} (ns, us, ms, s, m, h)"
            ));
        }
    };
    let seconds = value * scale;
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(format!("{s:?}: the time must be positive"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_with_and_without_units() {
        assert_eq!(parse_time("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_time("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_time("10us"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_time("800ns"), Ok(Duration::from_nanos(800)));
        assert_eq!(parse_time("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_time("0").is_err());
        assert!(parse_time("-1").is_err());
        assert!(parse_time("5 parsecs").is_err());
        assert!(parse_time("ms").is_err());
    }
}
