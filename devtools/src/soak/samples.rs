//! What the soak reads of oi-trace's output: the top-level size of each printed sample, the
//! sample log's entries (with the footprint the fixture passed), new lines of a growing file,
//! and the pairing of printed and logged samples that checks every size.

use super::*;

/// The top-level `size` of a JSON sample line (one array, one root `a0`).
pub(super) fn top_size(line: &str) -> Result<u64, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("bad JSON ({e})"))?;
    let roots = v.as_array().ok_or("not an array")?;
    if roots.len() != 1 || roots[0]["name"] != "a0" {
        return Err(format!("expected one root a0, got {} roots", roots.len()));
    }
    roots[0]["size"]
        .as_u64()
        .ok_or_else(|| "no size".to_string())
}

/// One line of the sample log.
pub(super) struct Logged {
    pub(super) hit: u64,
    /// arg1, the footprint the fixture computed just before the call.
    pub(super) expected: u64,
    pub(super) pause_us: u64,
    pub(super) walk_us: u64,
}

pub(super) fn parse_logged(line: &str) -> Result<Logged, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("bad sample-log line ({e})"))?;
    let field = |x: &Value, name: &str| x.as_u64().ok_or(format!("no {name} in {line}"));
    Ok(Logged {
        hit: field(&v["hit"], "hit")?,
        expected: field(&v["regs"]["rsi"], "regs.rsi")?,
        pause_us: field(&v["pause_us"], "pause_us")?,
        walk_us: field(&v["walk_us"], "walk_us")?,
    })
}

/// Reads the lines a file has gained since the last call (oi-trace appends and flushes).
pub(super) struct Tail {
    pub(super) path: PathBuf,
    pub(super) file: Option<File>,
    pub(super) partial: String,
}

impl Tail {
    pub(super) fn new(path: PathBuf) -> Self {
        Self {
            path,
            file: None,
            partial: String::new(),
        }
    }

    pub(super) fn new_lines(&mut self) -> Vec<String> {
        if self.file.is_none() {
            self.file = File::open(&self.path).ok();
        }
        let Some(file) = &mut self.file else {
            return Vec::new();
        };
        let _ = file.read_to_string(&mut self.partial);
        let Some(end) = self.partial.rfind('\n') else {
            return Vec::new();
        };
        let rest = self.partial.split_off(end + 1);
        let complete = std::mem::replace(&mut self.partial, rest);
        complete.lines().map(String::from).collect()
    }
}

/// Pairs the i-th printed sample with the i-th logged one (the reporter prints in sampling
/// order) and compares the sizes; samples that failed print nothing and are skipped.
#[derive(Default)]
pub(super) struct Samples {
    pub(super) printed: VecDeque<Result<u64, String>>,
    pub(super) logged: VecDeque<Logged>,
    pub(super) failed_hits: HashSet<u64>,
    pub(super) printed_total: u64,
    pub(super) logged_total: u64,
    pub(super) checked: u64,
    pub(super) mismatches: u64,
    pub(super) examples: Vec<String>,
    pub(super) pauses_us: Vec<u64>,
    pub(super) walks_us: Vec<u64>,
    pub(super) errors: Vec<String>,
}

impl Samples {
    pub(super) fn on_stderr(&mut self, line: &str) {
        if !line.contains("error") {
            return;
        }
        self.errors.push(line.to_string());
        // "oi-trace: error: sample HIT of pid ...": that hit printed nothing.
        if let Some(hit) = line
            .split_once("sample ")
            .and_then(|(_, r)| r.split_whitespace().next()?.parse().ok())
        {
            self.failed_hits.insert(hit);
        }
    }

    pub(super) fn on_logged(&mut self, line: &str) {
        self.logged_total += 1;
        match parse_logged(line) {
            Ok(l) => {
                self.pauses_us.push(l.pause_us);
                self.walks_us.push(l.walk_us);
                self.logged.push_back(l);
            }
            Err(e) => self.mismatch(e),
        }
    }

    pub(super) fn on_printed(&mut self, size: Result<u64, String>) {
        self.printed_total += 1;
        self.printed.push_back(size);
    }

    pub(super) fn mismatch(&mut self, what: String) {
        self.mismatches += 1;
        if self.examples.len() < 5 {
            self.examples.push(what);
        }
    }

    pub(super) fn check(&mut self) {
        loop {
            while self
                .logged
                .front()
                .is_some_and(|l| self.failed_hits.contains(&l.hit))
            {
                self.logged.pop_front();
            }
            if self.logged.is_empty() || self.printed.is_empty() {
                return; // the other half of the pair has not arrived yet
            }
            let (Some(logged), Some(printed)) = (self.logged.pop_front(), self.printed.pop_front())
            else {
                return;
            };
            self.checked += 1;
            match printed {
                Ok(size) if size == logged.expected => {}
                Ok(size) => self.mismatch(format!(
                    "hit {}: size {size}, the fixture expected {}",
                    logged.hit, logged.expected
                )),
                Err(e) => self.mismatch(format!("hit {}: {e}", logged.hit)),
            }
        }
    }
}
