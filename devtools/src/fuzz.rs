//! `cargo xtask fuzz --seconds N`: runs the cargo-fuzz targets of `fuzz/` for N seconds each
//! and says what they found. `elf_dwarf` reads corrupted binaries the way oi-trace opens a
//! program (symbols, DWARF, type graph, plan); `stream_decode` decodes arbitrary walker
//! output against plans of real fixtures. Either may only return errors: a panic, a hang
//! (`-timeout`) or a memory blow-up (`-rss_limit_mb`, or an allocation that fails) is a
//! finding. Each target's N seconds include loading its corpus.
//!
//! Seeds: corrupted copies of fixtures built with g++ (written here, see [`corruptions`]),
//! and well-formed streams that `stream_decode` writes itself from its plans. Corpora grow
//! in `fuzz/corpus/TARGET`, findings land in `fuzz/artifacts/TARGET`, full logs in
//! `fuzz/logs`. Needs nightly; installs cargo-fuzz if missing. Not part of `cargo xtask test`.
//!
//! Built with overflow checks and without AddressSanitizer: the parsers are safe Rust, so
//! ASan would mostly cost throughput (2-3x); a blow-up still shows as libFuzzer's RSS limit
//! or a failed allocation. The target binary is run directly rather than by `cargo fuzz
//! run`, which would dump every finding's bytes (whole binaries) as Rust debug output.

use std::{
    fs,
    io::{BufRead as _, BufReader, Read, Write as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::SystemTime,
};

use anyhow::{Context as _, Result, bail};

/// The fuzz targets and the libFuzzer options particular to each.
const TARGETS: [(&str, &[&str]); 2] = [
    // Inputs are whole binaries; libFuzzer caps their length at the largest seed's.
    ("elf_dwarf", &[]),
    // Walker outputs: room for deep nesting and many elements.
    ("stream_decode", &["-max_len=65536"]),
];

/// libFuzzer options of every target: a run slower than 10 s is a hang, more than 2 GiB of
/// memory a blow-up. Fork mode with `-ignore_*` goes on after a finding, so one run
/// reports every distinct bug it reaches, not just the first.
const LIBFUZZER_OPTIONS: [&str; 7] = [
    "-rss_limit_mb=2048",
    "-timeout=10",
    "-fork=1",
    "-ignore_crashes=1",
    "-ignore_timeouts=1",
    "-ignore_ooms=1",
    "-print_final_stats=1",
];

/// Small fixtures whose corrupted copies seed `elf_dwarf` (small: each run parses one).
const ELF_SEED_FIXTURES: [&str; 2] = ["footprint_deep", "footprint_poly"];
/// The fixtures `stream_decode` builds its plans from (`FIXTURES` in fuzz/src/fixtures.rs).
const STREAM_FIXTURES: [&str; 3] = ["footprint_containers", "footprint_types", "footprint_poly"];
/// Findings re-run to read their cause (each takes up to the timeout).
const MAX_EXPLAINED: usize = 20;
/// How `cargo fuzz build` builds the targets (see the module documentation).
const BUILD_OPTIONS: [&str; 2] = ["--sanitizer", "none"];

/// What one target's run did.
struct Outcome {
    target: &'static str,
    runs: Option<u64>,
    findings: Vec<PathBuf>,
    log: PathBuf,
}

pub fn run(root: &Path, seconds: u64) -> Result<()> {
    ensure_cargo_fuzz()?;
    let seeds = root.join("fuzz/seeds");
    // Seeds are regenerated every time (the corpora are what persists).
    if seeds.exists() {
        fs::remove_dir_all(&seeds).with_context(|| format!("removing {}", seeds.display()))?;
    }
    write_elf_seeds(&seeds.join("elf_dwarf"))?;
    for fixture in STREAM_FIXTURES {
        oi_e2e::FixtureBuild::new(fixture).build();
    }
    let mut outcomes = Vec::new();
    for (target, options) in TARGETS {
        outcomes.push(run_target(root, target, options, seconds)?);
    }
    summarize(root, &outcomes)
}

fn ensure_cargo_fuzz() -> Result<()> {
    if !crate::succeeds(Command::new("rustc").args(["+nightly", "-V"])) {
        bail!("cargo fuzz needs a nightly toolchain (rustup toolchain install nightly)");
    }
    if crate::succeeds(Command::new("cargo").args(["+nightly", "fuzz", "--version"])) {
        return Ok(());
    }
    eprintln!("fuzz: installing cargo-fuzz (a few minutes)");
    crate::run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
}

/// Builds and runs one target for `seconds`, its output shown and kept in
/// `fuzz/logs/TARGET.log`.
fn run_target(
    root: &Path,
    target: &'static str,
    options: &[&str],
    seconds: u64,
) -> Result<Outcome> {
    let fuzz = root.join("fuzz");
    let corpus = fuzz.join("corpus").join(target);
    let seeds = fuzz.join("seeds").join(target);
    let artifacts = fuzz.join("artifacts").join(target);
    for dir in [&corpus, &seeds, &artifacts, &fuzz.join("logs")] {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    crate::run(
        Command::new("cargo")
            .current_dir(root)
            .args(["+nightly", "fuzz", "build"])
            .args(BUILD_OPTIONS)
            .arg(target)
            // The fuzzed library needs no eBPF object.
            .env("OI_SKIP_EBPF", "1"),
    )?;
    let log = fuzz.join("logs").join(format!("{target}.log"));
    eprintln!("\nfuzz: {target} for {seconds} s (log: {})", log.display());
    let started = SystemTime::now();
    let mut prefix = artifacts.into_os_string();
    prefix.push("/");
    let mut cmd = Command::new(target_binary(root, target));
    cmd.current_dir(root)
        .arg(format!("-artifact_prefix={}", prefix.to_string_lossy()))
        .arg(format!("-max_total_time={seconds}"))
        .args(LIBFUZZER_OPTIONS)
        .args(options)
        .arg(&corpus)
        .arg(&seeds)
        .env("OI_FUZZ_STREAM_SEEDS", &seeds);
    let output = tee(&mut cmd, &log)?;
    Ok(Outcome {
        target,
        runs: executed_runs(&output),
        findings: new_files(Path::new(&prefix), started)?,
        log,
    })
}

/// Runs `cmd` with its stderr (where libFuzzer reports) shown and written to `log`; returns
/// it. No descriptor of the target is a regular file: an `elf_dwarf` input may name
/// `/proc/self/fd/N` as its debug link, and must not find our log there.
fn tee(cmd: &mut Command, log: &Path) -> Result<String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let mut file = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut all = String::new();
    let stderr = child.stderr.take().context("child stderr")?;
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap_or_default();
        eprintln!("{line}");
        writeln!(file, "{line}")?;
        all.push_str(&line);
        all.push('\n');
    }
    // A finding makes libFuzzer exit non-zero; the summary reports it.
    child.wait()?;
    Ok(all)
}

/// Inputs executed, from libFuzzer's status lines (`#N ...`, `#N: ...` in fork mode) and
/// final statistics.
fn executed_runs(output: &str) -> Option<u64> {
    output
        .lines()
        .filter_map(|l| {
            let n = l
                .strip_prefix('#')
                .or_else(|| l.strip_prefix("stat::number_of_executed_units: "))?;
            let digits: String = n.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .max()
}

/// Files of `dir` modified since `since`, sorted.
fn new_files(dir: &Path, since: SystemTime) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if entry.metadata()?.modified()? >= since {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

fn summarize(root: &Path, outcomes: &[Outcome]) -> Result<()> {
    println!("\nfuzz summary");
    for o in outcomes {
        let runs = o.runs.map_or("unknown".into(), |r| r.to_string());
        println!(
            "  {:<14} {runs:>10} runs, {} finding(s)  (log: {})",
            o.target,
            o.findings.len(),
            o.log.display()
        );
        for (cause, artifacts) in by_cause(root, o) {
            println!("    {cause}");
            println!(
                "      reproduce: {} {}",
                target_binary(root, o.target).display(),
                artifacts[0].display()
            );
            if artifacts.len() > 1 {
                println!("      and {} more input(s) like it", artifacts.len() - 1);
            }
        }
        if let Some(rest) = o.findings.get(MAX_EXPLAINED..).filter(|r| !r.is_empty()) {
            println!(
                "    {} more input(s) not re-run, from {}",
                rest.len(),
                rest[0].display()
            );
        }
    }
    let total: usize = outcomes.iter().map(|o| o.findings.len()).sum();
    if total > 0 {
        bail!("the fuzzers found {total} failing input(s), listed above (kept in fuzz/artifacts)");
    }
    println!("no crash, hang or memory blow-up found");
    Ok(())
}

/// The first [`MAX_EXPLAINED`] findings of a target grouped by what fails (one bug often
/// has many inputs), in order of first appearance.
fn by_cause(root: &Path, o: &Outcome) -> Vec<(String, Vec<PathBuf>)> {
    let mut groups: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for artifact in o.findings.iter().take(MAX_EXPLAINED) {
        let cause = explain(root, o.target, artifact);
        match groups.iter_mut().find(|g| g.0 == cause) {
            Some(g) => g.1.push(artifact.clone()),
            None => groups.push((cause, vec![artifact.clone()])),
        }
    }
    groups
}

/// The fuzz target's binary as `cargo fuzz build` leaves it: in `$CARGO_TARGET_DIR`, else
/// in `fuzz/target`.
fn target_binary(root: &Path, target: &str) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("fuzz/target"), PathBuf::from)
        .join("x86_64-unknown-linux-gnu/release")
        .join(target)
}

/// The first lines that say why `artifact` fails, from running the target binary on it.
fn explain(root: &Path, target: &str, artifact: &Path) -> String {
    let bin = target_binary(root, target);
    let out = Command::new(&bin)
        .args(["-timeout=10", "-rss_limit_mb=2048"])
        .arg(artifact)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            let mut text = String::new();
            if let Some(mut e) = child.stderr.take() {
                e.read_to_string(&mut text)?;
            }
            child.wait()?;
            Ok(text)
        });
    match out {
        Ok(text) => cause(&text),
        Err(e) => format!("(cannot re-run {}: {e})", bin.display()),
    }
}

/// A panic's location and message, else the sanitizer's or libFuzzer's verdict.
fn cause(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        // `thread 'x' (TID) panicked at FILE:LINE:COL:`, the message on the next line; the
        // thread's id differs from run to run, so it is left out.
        if let Some(at) = line.find("panicked at") {
            let message = lines.get(i + 1).copied().unwrap_or("");
            return format!("{} {message}", &line[at..]);
        }
    }
    // `==PID== ERROR: libFuzzer: timeout after 10 seconds`, without the varying pid.
    lines
        .iter()
        .find_map(|l| l.find("ERROR: ").map(|at| l[at..].trim().to_string()))
        .unwrap_or_else(|| "(no cause found in its output)".into())
}

/// Builds the seed fixtures and writes each one's corrupted copies into `dir`.
fn write_elf_seeds(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir)?;
    let mut count = 0;
    for fixture in ELF_SEED_FIXTURES {
        let path = oi_e2e::FixtureBuild::new(fixture).build();
        let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        for (name, seed) in corruptions(&bytes)? {
            fs::write(dir.join(format!("{fixture}-{name}")), seed)?;
            count += 1;
        }
    }
    eprintln!("fuzz: {count} ELF seeds in {}", dir.display());
    Ok(())
}

/// Sections whose bytes are flipped: DWARF the type builder follows, symbol tables.
const FLIPPED: [&str; 12] = [
    ".debug_info",
    ".debug_abbrev",
    ".debug_str",
    ".debug_line",
    ".debug_line_str",
    ".debug_aranges",
    ".debug_rnglists",
    ".debug_loclists",
    ".symtab",
    ".strtab",
    ".dynsym",
    ".dynstr",
];

/// Named corrupted copies of an ELF file, each still valid enough for the parsers to get
/// deep: flipped bytes inside one section, truncations, broken headers, absurd sizes.
fn corruptions(elf: &[u8]) -> Result<Vec<(String, Vec<u8>)>> {
    let sections = Sections::parse(elf)?;
    let mut rng = Rng(0x5eed);
    let mut out = vec![("intact".to_string(), elf.to_vec())];
    for name in FLIPPED {
        let Some(s) = sections.get(name) else {
            continue;
        };
        // Headers at the section's start, then anywhere in it.
        let head = s.offset..s.offset + s.size.min(32);
        out.push((format!("{name}-head"), rng.flip(elf, head, 2)));
        out.push((
            format!("{name}-body"),
            rng.flip(elf, s.offset..s.offset + s.size, 16),
        ));
    }
    out.extend(structural(elf, &sections));
    Ok(out)
}

/// Copies with a structure broken on purpose rather than at random.
fn structural(elf: &[u8], sections: &Sections) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, keep) in [("truncated-header", 60), ("truncated-half", elf.len() / 2)] {
        out.push((name.to_string(), elf[..keep].to_vec()));
    }
    if let Some(info) = sections.get(".debug_info") {
        let cut = (info.offset + info.size / 2).min(elf.len());
        out.push(("truncated-debug-info".into(), elf[..cut].to_vec()));
        // The first unit's length: the 64-bit DWARF escape, then past the section's end.
        out.push(("unit-length-64".into(), patch(elf, info.offset, &[0xff; 4])));
        let past = u32::try_from(info.size * 2).unwrap_or(u32::MAX);
        out.push((
            "unit-length-long".into(),
            patch(elf, info.offset, &past.to_le_bytes()),
        ));
        // The section header's size: beyond the end of the file.
        let size = u64::MAX / 2;
        out.push((
            "section-size".into(),
            patch(elf, info.header + 32, &size.to_le_bytes()),
        ));
    }
    out.push((
        "no-section-headers".into(),
        zero_section_headers(elf, sections),
    ));
    out.push((
        "bad-shstrndx".into(),
        patch(elf, 0x3e, &0xfff0u16.to_le_bytes()),
    ));
    out.push(("huge-segments".into(), huge_segments(elf)));
    if let Some(symtab) = sections.get(".symtab") {
        out.push(("huge-symbols".into(), huge_symbols(elf, symtab)));
        out.push((
            "misplaced-functions".into(),
            misplaced_functions(elf, symtab),
        ));
    }
    out
}

fn patch(elf: &[u8], at: usize, bytes: &[u8]) -> Vec<u8> {
    let mut out = elf.to_vec();
    if let Some(dst) = out.get_mut(at..at + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
    out
}

fn zero_section_headers(elf: &[u8], sections: &Sections) -> Vec<u8> {
    let mut out = elf.to_vec();
    let end = (sections.table + sections.table_len).min(out.len());
    out[sections.table.min(end)..end].fill(0);
    out
}

/// Every loadable segment but the first with a file size as large as it goes (load-bias
/// arithmetic, for a mapping of the code segment).
fn huge_segments(elf: &[u8]) -> Vec<u8> {
    let mut out = elf.to_vec();
    let phoff = read_u64(elf, 0x20) as usize;
    let phnum = read_u16(elf, 0x38) as usize;
    let loads = (0..phnum)
        .map(|i| phoff + i * 56)
        .filter(|&at| read_u32(elf, at) == 1) // PT_LOAD
        .skip(1);
    for at in loads {
        if let Some(dst) = out.get_mut(at + 32..at + 40) {
            dst.copy_from_slice(&u64::MAX.to_le_bytes());
        }
    }
    out
}

/// Every 5th symbol with a size that overflows its address (vtable ranges, symbol lookup).
fn huge_symbols(elf: &[u8], symtab: &Section) -> Vec<u8> {
    let mut out = elf.to_vec();
    for at in (symtab.offset..symtab.offset + symtab.size).step_by(24 * 5) {
        if let Some(dst) = out.get_mut(at + 16..at + 24) {
            dst.copy_from_slice(&(u64::MAX - 8).to_le_bytes());
        }
    }
    out
}

/// Every function symbol at address 1, before the start of its section (file offsets).
fn misplaced_functions(elf: &[u8], symtab: &Section) -> Vec<u8> {
    let mut out = elf.to_vec();
    for at in (symtab.offset..symtab.offset + symtab.size).step_by(24) {
        // st_info's low nibble: STT_FUNC.
        if elf.get(at + 4).is_some_and(|info| info & 0xf == 2)
            && let Some(dst) = out.get_mut(at + 8..at + 16)
        {
            dst.copy_from_slice(&1u64.to_le_bytes());
        }
    }
    out
}

/// One section of an ELF64 little-endian file: where its header and its bytes are.
struct Section {
    name: String,
    header: usize,
    offset: usize,
    size: usize,
}

/// Just enough ELF64 parsing to find sections by name (xtask keeps its dependencies few).
struct Sections {
    list: Vec<Section>,
    /// Offset and length of the section header table.
    table: usize,
    table_len: usize,
}

impl Sections {
    fn parse(elf: &[u8]) -> Result<Self> {
        if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
            bail!("not a little-endian ELF64 file");
        }
        let table = read_u64(elf, 0x28) as usize;
        let (entsize, count) = (read_u16(elf, 0x3a) as usize, read_u16(elf, 0x3c) as usize);
        let strndx = read_u16(elf, 0x3e) as usize;
        let header = |i: usize| table + i * entsize;
        let names_at = read_u64(elf, header(strndx) + 24) as usize;
        let mut list = Vec::new();
        for i in 0..count {
            let h = header(i);
            let name_at = names_at + read_u32(elf, h) as usize;
            let name = elf.get(name_at..).unwrap_or_default();
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            list.push(Section {
                name: String::from_utf8_lossy(name).into_owned(),
                header: h,
                offset: read_u64(elf, h + 24) as usize,
                size: read_u64(elf, h + 32) as usize,
            });
        }
        Ok(Self {
            list,
            table,
            table_len: entsize * count,
        })
    }

    /// A section with its bytes inside the file.
    fn get(&self, name: &str) -> Option<&Section> {
        self.list.iter().find(|s| s.name == name && s.size > 0)
    }
}

fn read_u16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn read_u64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// A fixed-seed generator: the same seeds every run, so a finding's seed can be found again.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n.max(1) as u64) as usize
    }

    /// A copy of `elf` with `count` random bytes of `range` replaced by random values.
    fn flip(&mut self, elf: &[u8], range: std::ops::Range<usize>, count: usize) -> Vec<u8> {
        let mut out = elf.to_vec();
        let range = range.start.min(out.len())..range.end.min(out.len());
        if range.is_empty() {
            return out;
        }
        for _ in 0..count {
            let at = range.start + self.below(range.len());
            out[at] = self.below(256) as u8;
        }
        out
    }
}
