//! `stream_decode`: the plans the decoder is fuzzed against, built once from the fixture
//! binaries in `target/fixtures` (`cargo xtask fuzz` builds them; `$OI_FUZZ_FIXTURES`
//! overrides the directory). Together they hold every kind of plan `Op`: all containers,
//! captured keys, chased pointers, polymorphic classes, two roots in one sample.
//!
//! An input is `[plan, format, walker output…]`; the walker output is split into per-root
//! streams as the JIT path does (`jit::split_streams`), else every root gets all its bytes.
//! Decoding runs on one long-lived thread with the report thread's stack, as in oi-trace.

use std::{
    path::{Path, PathBuf},
    sync::{
        LazyLock, Mutex,
        mpsc::{Receiver, SyncSender, sync_channel},
    },
};

use oi_trace::debuginfo::{Binary, find_function};
use oi_trace::footprint::measure::{Measurer, OutputFormat, WALK_STACK};

use crate::{FORMATS, report, synth};

/// One `oi-trace --uprobe SYMBOL --arg ARGS --feature FEATURES` on a fixture.
struct Probe {
    fixture: &'static str,
    symbol: &'static str,
    args: &'static [&'static str],
    features: &'static [&'static str],
}

/// The fixtures to build, for `cargo xtask fuzz`.
pub const FIXTURES: [&str; 3] = ["footprint_containers", "footprint_types", "footprint_poly"];

const PROBES: [Probe; 7] = [
    Probe {
        fixture: "footprint_containers",
        symbol: "_Z7inspectRK3All",
        args: &["arg0"],
        features: &[],
    },
    Probe {
        fixture: "footprint_containers",
        symbol: "_Z7inspectRK3All",
        args: &["arg0"],
        features: &["capture-keys", "chase-raw-pointers"],
    },
    Probe {
        fixture: "footprint_types",
        symbol: "_Z5kindsRK5Kinds",
        args: &["arg0"],
        features: &[],
    },
    Probe {
        fixture: "footprint_types",
        symbol: "_Z5chaseRK6Chased",
        args: &["arg0"],
        features: &["chase-raw-pointers"],
    },
    Probe {
        fixture: "footprint_types",
        symbol: "_Z7captureRK4Maps",
        args: &["arg0"],
        features: &["capture-keys"],
    },
    Probe {
        fixture: "footprint_types",
        symbol: "_Z4anonRK8WithAnonRK7HoldsTd",
        args: &["arg0", "arg1"],
        features: &[],
    },
    Probe {
        fixture: "footprint_poly",
        symbol: "_Z7by_baseRK5Shape",
        args: &["arg0"],
        features: &["polymorphic-inheritance"],
    },
];

fn fixture_dir() -> PathBuf {
    std::env::var_os("OI_FUZZ_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures"),
        PathBuf::from,
    )
}

fn build(p: &Probe) -> Measurer {
    let path = fixture_dir().join(p.fixture);
    let fail = |what: String| -> ! {
        panic!(
            "{}: {what} (build the fixtures with `cargo xtask fuzz`)",
            path.display()
        )
    };
    let binary = Binary::open(&path).unwrap_or_else(|e| fail(e.to_string()));
    let found = find_function(&binary, p.symbol).unwrap_or_else(|e| fail(e.to_string()));
    let Some(function) = found.first() else {
        fail(format!("no function {}", p.symbol))
    };
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Measurer::new(
        &binary,
        function,
        &strings(p.args),
        &strings(p.features),
        false,
    )
    .unwrap_or_else(|e| fail(e.to_string()))
}

static MEASURERS: LazyLock<Vec<Measurer>> = LazyLock::new(|| PROBES.iter().map(build).collect());

/// A decoding to do on the report thread.
struct Job {
    measurer: usize,
    format: OutputFormat,
    streams: Vec<Vec<u8>>,
}

/// The report thread: jobs in, a unit back when each is done.
struct ReportThread {
    jobs: SyncSender<Job>,
    done: Receiver<()>,
}

static REPORT_THREAD: LazyLock<Mutex<ReportThread>> = LazyLock::new(|| {
    let (jobs, queue) = sync_channel::<Job>(0);
    let (done_tx, done) = sync_channel(0);
    std::thread::Builder::new()
        .name("oi-report".into())
        .stack_size(WALK_STACK)
        .spawn(move || {
            for job in queue {
                report(&MEASURERS[job.measurer], &job.streams, job.format);
                let _ = done_tx.send(());
            }
        })
        .expect("spawning the report thread");
    Mutex::new(ReportThread { jobs, done })
});

/// Builds the plans (once), and writes seeds when `$OI_FUZZ_STREAM_SEEDS` names a directory.
pub fn init() {
    LazyLock::force(&MEASURERS);
    if let Some(dir) = std::env::var_os("OI_FUZZ_STREAM_SEEDS") {
        write_seeds(Path::new(&dir)).expect("writing stream seeds");
    }
}

/// Decodes one fuzzer input (see the module documentation).
pub fn decode(data: &[u8]) {
    let [which, format, rest @ ..] = data else {
        return;
    };
    let measurer = usize::from(*which) % MEASURERS.len();
    let roots = MEASURERS[measurer].roots().len();
    let streams =
        oi_trace::jit::split_streams(rest, roots).unwrap_or_else(|_| vec![rest.to_vec(); roots]);
    let job = Job {
        measurer,
        format: FORMATS[usize::from(*format) % FORMATS.len()],
        streams,
    };
    let thread = REPORT_THREAD.lock().unwrap_or_else(|e| e.into_inner());
    thread.jobs.send(job).expect("report thread alive");
    thread.done.recv().expect("report thread alive");
}

/// Well-formed inputs: synthetic streams for every plan and format, in the input layout.
/// Says on stderr how many the decoder accepts (all of them, unless `synth` and the
/// decoder disagree about the stream).
fn write_seeds(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let (mut written, mut accepted) = (0, 0);
    for (i, m) in MEASURERS.iter().enumerate() {
        for seed in 0..4u64 {
            let Some(streams) = m
                .roots()
                .into_iter()
                .map(|root| synth::stream(m.plan(), root, seed))
                .collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            written += 1;
            let mut json = Vec::new();
            if m.write_report(&streams, OutputFormat::Json, &mut json)
                .is_ok()
            {
                accepted += 1;
            }
            let mut walker_output = Vec::new();
            for s in &streams {
                walker_output.extend((s.len() as u64).to_le_bytes());
                walker_output.extend(s);
            }
            for format in 0..FORMATS.len() {
                let mut bytes = vec![i as u8, format as u8];
                bytes.extend(&walker_output);
                std::fs::write(dir.join(format!("synth-{i}-{seed}-{format}")), bytes)?;
            }
        }
    }
    eprintln!(
        "stream seeds: {written} samples x {} formats in {}, {accepted} decode cleanly",
        FORMATS.len(),
        dir.display()
    );
    Ok(())
}
