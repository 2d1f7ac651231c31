//! From a type's name to a compiled walker: the C++ name (`typeid(T).name()` demangled), the
//! module whose DWARF defines it (the modules holding the caller's code, the object's
//! vtable and the `type_info` object, then every other loaded module), its definition there
//! (`debuginfo::type_names`), the plan (`Measurer::for_type`, the same `typegraph` → `plan`
//! code as oi-trace), and the walkers (`jit::in_process`), each compiled at its first use:
//! one that writes the stream for the reports, and two that only add up the size
//! (`oil::size` needs no stream): the optimistic one of the steady state (no visited set; it
//! says when a pointee was shared, see `LocalWalker::compile_totals_optimistic`) and the
//! exact one for the objects it cannot do.
//!
//! Reads files (the modules and their separate debug files, as `debuginfo` finds them) and
//! compiles; never reads the program's memory.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use oi_trace::debuginfo::Binary;
use oi_trace::debuginfo::dwarf::{self, DwarfError};
use oi_trace::debuginfo::type_names::demangle_type;
use oi_trace::footprint::measure::Measurer;
use oi_trace::jit::in_process::LocalWalker;
use oi_trace::plan::NodeId;

use crate::Error;
use crate::abi::SteadyHead;
use crate::guard;
use crate::modules::{self, Module};

/// A compiled walker, and whether its code is registered for walks on the caller's stack
/// (`guard::register_code`; else it runs on a walk stack).
pub struct Walker {
    pub local: LocalWalker,
    pub direct: bool,
}

impl Walker {
    fn new(local: LocalWalker) -> Self {
        let direct = guard::register_code(local.code_range());
        Self { local, direct }
    }
}

/// Everything a measurement of one (type, features) needs, built once.
#[repr(C)]
pub struct Compiled {
    /// First: see [`SteadyHead`].
    pub head: SteadyHead,
    /// The C++ name, as the demangler spells it.
    pub name: String,
    pub measurer: Measurer,
    /// The walker that writes the stream (and adds up the total) for the reports, compiled
    /// at the first report.
    report_walker: OnceLock<Result<Walker, Error>>,
    /// The walker that adds up the total only (no stream: `oil::size`), compiled at the
    /// first size the optimistic walker cannot give.
    size_walker: OnceLock<Result<Walker, Error>>,
    /// The optimistic walker of sizes (`LocalWalker::compile_totals_optimistic`: no visited
    /// set), compiled at the first size; `oil::size`'s steady state.
    optimistic: OnceLock<Option<Walker>>,
    /// The optimistic walker's entry while the steady state may use it (0: not compiled,
    /// not possible for this plan, or given up: a walk met a shared pointee, or nested
    /// deeper than a caller's stack allows; then sizes take the exact walker).
    pub steady_entry: AtomicUsize,
    pub root: NodeId,
    /// Load bias of the module whose DWARF describes the type (vtable ranges are ELF
    /// addresses of that module).
    pub bias: u64,
    /// The plan charges heap blocks (chase-raw-pointers): each walk needs the heap ranges
    /// of `/proc/self/maps`. Known once, so that other walks never look.
    pub heap_blocks: bool,
    /// A walk on a caller's stack ran out of room once: this type nests deeper than a
    /// thread's stack allows, so its walks go to the walk stack from then on (`run`).
    pub deep: AtomicBool,
}

impl Compiled {
    /// Stops the steady state from using the optimistic walker (a walk met a shared pointee,
    /// or nested deeper than a caller's stack allows): sizes take the exact walker.
    pub fn give_up_optimistic(&self) {
        self.head.leaf_entry.store(
            crate::abi::oil_not_direct as *const () as usize,
            Ordering::Relaxed,
        );
        self.steady_entry.store(0, Ordering::Relaxed);
    }

    /// The walker for a report (`report`) or for the size alone, if compiled already.
    pub fn walker(&self, report: bool) -> Option<&Result<Walker, Error>> {
        self.slot(report).get()
    }

    /// Whether the optimistic walker was tried already (compiled, or found impossible).
    pub fn optimistic_tried(&self) -> bool {
        self.optimistic.get().is_some()
    }

    /// Compiles the optimistic walker if it is the first call for it, and publishes its
    /// entry for the steady state when it can run on a caller's stack. A plan that charges
    /// heap blocks, or a failed compilation, leaves the exact walker to do the work.
    /// Recurses as deep as the type nests: run it on a walk stack.
    pub fn compile_optimistic(&self) {
        self.optimistic.get_or_init(|| {
            if self.heap_blocks {
                return None;
            }
            let plan = self.measurer.plan();
            let w = LocalWalker::compile_totals_optimistic(plan, &self.measurer.roots()).ok()?;
            let w = Walker::new(w);
            if w.direct && !self.deep.load(Ordering::Relaxed) {
                let entry = w.local.entry_address();
                self.steady_entry.store(entry, Ordering::Release);
                if w.local.leaf_entry() && guard::register_leaf_entry(w.local.entry_range()) {
                    self.head.leaf_entry.store(entry, Ordering::Release);
                }
            }
            Some(w)
        });
    }

    /// The walker, compiled now if it is the first call for it (concurrent first calls
    /// compile once). Recurses as deep as the type nests: run it on a walk stack.
    pub fn compile_walker(&self, report: bool) -> &Result<Walker, Error> {
        self.slot(report).get_or_init(|| {
            let plan = self.measurer.plan();
            let roots = self.measurer.roots();
            // Sizes in both: a report's caller may also want the size (`run`).
            let walker = if report {
                LocalWalker::compile_sized(plan, &roots)
            } else {
                LocalWalker::compile_totals(plan, &roots)
            };
            walker.map(Walker::new).map_err(|e| {
                Error::Build(format!("cannot compile the walk of `{}`: {e}", self.name))
            })
        })
    }

    fn slot(&self, report: bool) -> &OnceLock<Result<Walker, Error>> {
        if report {
            &self.report_walker
        } else {
            &self.size_walker
        }
    }
}

/// The C++ name of `type_name`: a mangled type (`typeid(T).name()`), else taken as a C++ name
/// already (`app::State`, from the Rust API).
pub fn cxx_name(type_name: &str) -> Result<String, Error> {
    if let Some(n) = demangle_type(type_name) {
        return Ok(n);
    }
    let plausible = !type_name.is_empty()
        && type_name
            .chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_' || c == '(')
        && !type_name.starts_with("_Z");
    if plausible {
        Ok(type_name.trim().to_string())
    } else {
        Err(Error::BadTypeName(type_name.to_string()))
    }
}

/// Finds, plans and compiles the walker of `name` (a C++ name) of `size` bytes (if known),
/// looking in the modules that hold `hints` first, then in every other loaded module.
pub fn compile(
    name: &str,
    size: Option<u64>,
    hints: &[usize],
    features: &[String],
) -> Result<Compiled, Error> {
    let mut why_not: Vec<String> = Vec::new();
    let mut mismatch = None;
    let candidates = modules::by_addresses(hints, true);
    for module in &candidates {
        match plan_in(module, name, size, features) {
            Ok(Found::Yes(measurer)) => {
                warn_once(&measurer.plan().warnings);
                let roots = measurer.roots();
                let root = *roots
                    .first()
                    .ok_or_else(|| Error::Internal("no root".into()))?;
                // Sized: `oil::size` takes the total the walker adds up, with no decoding.
                return Ok(Compiled {
                    head: SteadyHead {
                        leaf_entry: AtomicUsize::new(
                            crate::abi::oil_not_direct as *const () as usize,
                        ),
                        bias: module.bias,
                        handlers_changed: guard::handlers_changed(),
                    },
                    name: name.to_string(),
                    heap_blocks: measurer.plan().charges_heap_blocks(),
                    deep: false.into(),
                    measurer,
                    report_walker: OnceLock::new(),
                    size_walker: OnceLock::new(),
                    optimistic: OnceLock::new(),
                    steady_entry: AtomicUsize::new(0),
                    root,
                    bias: module.bias,
                });
            }
            Ok(Found::OtherSizes(sizes)) => {
                mismatch.get_or_insert((module.path.clone(), sizes));
            }
            Ok(Found::No) => why_not.push(format!(
                "`{name}` is not defined in the debug information of {}",
                module.path.display()
            )),
            Err(PlanIn::NoDebugInfo(e)) => why_not.push(e.to_string()),
            // A module whose DWARF defines the type but that cannot be planned is an error
            // about that type, not a reason to look further.
            Err(PlanIn::Fatal(e)) => return Err(e),
        }
    }
    if let (Some((path, sizes)), Some(size)) = (mismatch, size) {
        return Err(Error::SizeMismatch {
            ty: name.to_string(),
            module: path.display().to_string(),
            dwarf: sizes
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" or "),
            size,
        });
    }
    // The reason that concerns the module the caller named first (its own code) is the one
    // to give; the others are counted.
    let first = why_not
        .first()
        .cloned()
        .unwrap_or_else(|| "no module of this process has a file to read".into());
    Err(Error::NotFound {
        ty: name.to_string(),
        reason: first,
        others: why_not.len().saturating_sub(1),
    })
}

/// Prints each of a plan's warnings (a shipped container description that does not fit
/// this program, so its type is measured as a plain class) on stderr once per process, as
/// `oil: warning: …`, the way oi-trace prints them (`oi-trace: warning: …`). A plan is
/// built once per (type, features), at the first call; other types that meet the same
/// description do not repeat it.
fn warn_once(warnings: &[String]) {
    static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
    if warnings.is_empty() {
        return;
    }
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    for w in warnings {
        if !said.contains(w) {
            eprintln!("oil: warning: {w}");
            said.push(w.clone());
        }
    }
}

enum Found {
    Yes(Measurer),
    No,
    /// Defined, but with other sizes than the program's `sizeof`.
    OtherSizes(Vec<u64>),
}

enum PlanIn {
    /// This module cannot say (no debug information, unreadable): look further.
    NoDebugInfo(String),
    Fatal(Error),
}

fn plan_in(
    module: &Module,
    name: &str,
    size: Option<u64>,
    features: &[String],
) -> Result<Found, PlanIn> {
    let binary = Binary::open(&module.path).map_err(|e| PlanIn::NoDebugInfo(e.to_string()))?;
    let found = dwarf::with_debug_info(&binary, |di| -> Result<Found, PlanIn> {
        let fatal = |e: DwarfError| PlanIn::Fatal(Error::Build(e.to_string()));
        match di.find_type(name, size).map_err(fatal)? {
            Some(die) => Measurer::for_type(&binary, di, die, features)
                .map(Found::Yes)
                .map_err(|e| PlanIn::Fatal(Error::Build(e.to_string()))),
            None if size.is_some() => {
                let sizes = di.type_sizes(name).map_err(fatal)?;
                Ok(if sizes.is_empty() {
                    Found::No
                } else {
                    Found::OtherSizes(sizes)
                })
            }
            None => Ok(Found::No),
        }
    });
    // No debug information, or none we can read: the next module may have it.
    found.unwrap_or_else(|e| Err(PlanIn::NoDebugInfo(e.to_string())))
}
