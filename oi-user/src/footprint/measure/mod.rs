//! The facade from a sampled hit to a footprint report. [`Measurer::new`] does all the static
//! work once per probe (DWARF function lookup, argument locations, type graph, plan);
//! [`Measurer::measure`] runs per sample while the thread is frozen: locate each argument
//! from the captured registers, walk it with the interpreter, decode and print.
//!
//! Never writes to the target; reads go through the given [`MemoryReader`].

mod build;
mod locate;
mod stored;
mod walk;

use std::collections::HashMap;
use std::io::Write;

use oi_common::EntryRegs;

use crate::debuginfo::dwarf::{self, DwarfError, ParamLocation};
use crate::debuginfo::{Binary, FunctionSymbol};
use crate::debuginfo::{cfi, vtables};
use crate::interp::memory::{LocalReader, Overlay};
use crate::interp::{MemoryReader, WalkError};
use crate::plan::build::{DerivedClasses, Options};
use crate::plan::{NodeId, Plan, PlanBuilder, PlanError};
use crate::report::ReportError;
use crate::report::output::{self, Root, SampleWriter};
use crate::report::totals::Totals;
use crate::report::tree;
pub use crate::resolve::CopyAt;
use crate::typegraph::abi::{self, Location};
use crate::typegraph::{BuildError, Builder, Kind, TypeId};
pub use build::options_for;
use locate::Placed;

/// The readers callers pass to [`Measurer::measure`].
pub use crate::interp::RemoteReader;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Json,
    JsonPretty,
    Tree,
    Csv,
}

impl OutputFormat {
    /// The report format, with default tree options.
    pub fn report_format(self) -> output::Format {
        match self {
            OutputFormat::Json => output::Format::Json { pretty: false },
            OutputFormat::JsonPretty => output::Format::Json { pretty: true },
            OutputFormat::Tree => output::Format::Tree(tree::Options::default()),
            OutputFormat::Csv => output::Format::Csv,
        }
    }
}

/// The feature name of `--values` (defined with the plan's options, which it sets).
pub use crate::plan::build::VALUES;
/// The feature names of `--sizes real` and `--sizes oi`.
pub use crate::plan::build::{SIZES_OI, SIZES_REAL};

#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error(transparent)]
    Dwarf(#[from] DwarfError),
    #[error("cannot reconstruct the types of {function}: {source}")]
    Types {
        function: String,
        source: BuildError,
    },
    #[error("cannot plan the walk of `{arg}` of {function}: {source}")]
    Plan {
        arg: String,
        function: String,
        source: PlanError,
    },
    #[error("no such argument `{arg}`: {function} has {count} parameter(s) (arg0..arg{last})", last = count.saturating_sub(1))]
    NoSuchArg {
        arg: String,
        function: String,
        count: usize,
    },
    #[error("no such argument `{arg}`: use arg0..argN, this or retval")]
    BadArgName { arg: String },
    #[error("`this` requested, but {function} is not a non-static member function")]
    NoThis { function: String },
    #[error("`retval` is only available with --uretprobe ({function})")]
    RetvalOnEntry { function: String },
    #[error(
        "`{arg}` is not available at a return probe of {function}: registers no longer hold arguments there"
    )]
    ArgAtReturn { arg: String, function: String },
    #[error("{function} returns void: there is no `retval` to measure")]
    VoidReturn { function: String },
    #[error("`{arg}` of {function} cannot be measured: {reason}")]
    Unavailable {
        arg: String,
        function: String,
        reason: String,
    },
    #[error(
        "unknown feature `{0}` (known: chase-raw-pointers, capture-keys, polymorphic-inheritance)"
    )]
    UnknownFeature(String),
    #[error(transparent)]
    Describe(#[from] crate::describe::DescribeError),
    #[error("walking `{arg}` failed: {source}")]
    Walk { arg: String, source: WalkError },
    #[error(transparent)]
    Report(#[from] ReportError),
}

impl MeasureError {
    /// Bad usage or input (exit 2), as opposed to a failed sample (exit 1).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, MeasureError::Walk { .. } | MeasureError::Report(_))
    }
}

/// How to find one argument's object at a sample.
#[derive(Debug, Clone)]
struct ArgPlan {
    name: String,
    /// The parameter's name in the function's DWARF (of the probed copy: a clone or an
    /// inlined instance names its parameters through its abstract origin); `None` for
    /// `this`, `retval`, unnamed parameters and objects not found at a probe.
    param: Option<String>,
    root: NodeId,
    location: Location,
    /// The declared type is a pointer/reference: the location holds the object's address.
    deref: bool,
    /// Size of the measured object (for values that arrive in registers).
    size: u64,
}

impl ArgPlan {
    /// How outputs for people (tree, growth, folded, SVG) name this root: the argument as
    /// the user asked for it, then its parameter name from DWARF when it has one
    /// (`arg1 count`, `this`, `retval`). The JSON root stays `a0`, as OI names every root.
    fn label(&self) -> String {
        match &self.param {
            Some(p) if !p.is_empty() && p != &self.name => format!("{} {p}", self.name),
            _ => self.name.clone(),
        }
    }
}

pub struct Measurer {
    plan: Plan,
    args: Vec<ArgPlan>,
}

/// One root's walk at a sample: its stream, or why it has none (the root is then printed as
/// failed in its place, and the sample's other roots as usual).
pub type RootStream = Result<Vec<u8>, String>;

/// Stack of the walking thread (virtual; only the depth actually used is touched).
pub const WALK_STACK: usize = 1 << 30;

/// Made-up address for objects that arrived in registers (kernel half: never a user address).
const REGISTER_OBJECT: u64 = 0xffff_ffff_ffff_0000;

impl Measurer {
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The plan node of each requested argument, in order: what a JIT walker is compiled for.
    pub fn roots(&self) -> Vec<NodeId> {
        self.args.iter().map(|a| a.root).collect()
    }

    /// Names of the requested arguments, in order.
    pub fn arg_names(&self) -> Vec<&str> {
        self.args.iter().map(|a| a.name.as_str()).collect()
    }
}

/// Where an argument's object is at a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// At this address in the target.
    Memory(u64),
    /// It came in registers: these are its bytes (a walker needs them copied into memory).
    Registers(Vec<u8>),
    /// Not recoverable at this probe (refused at start-up; kept for completeness).
    Unavailable,
}
