//! `elf_dwarf`: fuzzer bytes → a [`Binary`] → symbols → for a few functions, the
//! [`Measurer`] of their arguments (DWARF function lookup, parameter locations, type graph,
//! plan), as `oi-trace --uprobe SYM --arg …` builds it; then a synthetic stream through each
//! plan built, since a hostile binary also shapes what the decoder is asked to do.
//!
//! The bytes reach [`Binary::open`] through a memfd (`/proc/self/fd/N`): the real entry
//! point, no file left behind, one per fuzzing process.

use std::{
    fs::File,
    os::{fd::AsRawFd, unix::fs::FileExt},
    path::PathBuf,
    sync::OnceLock,
};

use nix::sys::memfd::{MFdFlags, memfd_create};
use oi_trace::debuginfo::{Binary, FunctionSymbol, find_function, symbols};
use oi_trace::footprint::measure::Measurer;

use crate::{FORMATS, report, synth};

/// What users type after `--uprobe` for the seed fixtures' probed functions (demangled,
/// without parameters, so the demangler and the matching run on every symbol). Their first
/// argument is measured with every feature on.
const QUERIES: [&str; 3] = ["walk_chain", "by_base", "holder"];
const ALL_FEATURES: [&str; 3] = [
    "chase-raw-pointers",
    "capture-keys",
    "polymorphic-inheritance",
];
/// Most functions of [`QUERIES`] measured per input: each loads the DWARF and builds types
/// again (as each probe does), the bulk of a run's time.
const MAX_QUERIED: usize = 2;

struct Scratch {
    file: File,
    path: PathBuf,
}

fn scratch() -> &'static Scratch {
    static SCRATCH: OnceLock<Scratch> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let fd = memfd_create(c"oi-fuzz-elf", MFdFlags::MFD_CLOEXEC).expect("memfd_create");
        let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        Scratch {
            file: File::from(fd),
            path,
        }
    })
}

/// `bytes` as a mapped binary, or `None` if oi-trace would refuse to open it. The previous
/// one must be dropped first: the memfd is rewritten in place.
pub fn open(bytes: &[u8]) -> Option<Binary> {
    let s = scratch();
    s.file.set_len(0).ok()?;
    s.file.write_all_at(bytes, 0).ok()?;
    Binary::open(&s.path).ok()
}

/// Everything oi-trace does with a binary before the first sample.
pub fn exercise(binary: &Binary) {
    // As for the mappings /proc/PID/maps shows of a PIE (file offsets of its segments).
    for offset in [0, 0x1000, 0x2000, 0x4000] {
        let _ = binary.load_bias(0x5555_5555_4000 + offset, offset);
    }
    let _ = symbols::has_symbol_table(binary);
    let names = symbols::function_names(binary).unwrap_or_default();
    // The "did you mean" of a symbol that is not there.
    let _ = symbols::closest("walk_chian", &names, 3);
    let queried = QUERIES
        .iter()
        .flat_map(|q| find_function(binary, q).unwrap_or_default())
        .take(MAX_QUERIED);
    for function in queried {
        measure(binary, &function, "arg0", &ALL_FEATURES);
    }
    // `this` of one C++ method, a class with its bases and members (often a container).
    let method = names.iter().find(|n| n.contains("::"));
    let found = method.map(|m| find_function(binary, m).unwrap_or_default());
    if let Some(function) = found.as_deref().and_then(<[_]>::first) {
        measure(binary, function, "this", &[]);
    }
}

/// Builds the Measurer of one argument, as `--uprobe F --arg ARG --feature …` does, and
/// decodes a synthetic stream with its plan.
fn measure(binary: &Binary, function: &FunctionSymbol, arg: &str, features: &[&str]) {
    let features: Vec<String> = features.iter().map(|f| f.to_string()).collect();
    if let Ok(m) = Measurer::new(binary, function, &[arg.to_string()], &features, false) {
        decode_synthetic(&m);
    }
}

/// Decodes a well-formed stream for each root of `m`'s plan in every format.
fn decode_synthetic(m: &Measurer) {
    let streams: Option<Vec<Vec<u8>>> = m
        .roots()
        .into_iter()
        .map(|root| synth::stream(m.plan(), root, 1))
        .collect();
    if let Some(streams) = streams {
        for format in FORMATS {
            report(m, &streams, format);
        }
    }
}
