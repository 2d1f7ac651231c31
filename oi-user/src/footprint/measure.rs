//! The facade from a sampled hit to a footprint report. [`Measurer::new`] does all the static
//! work once per probe (DWARF function lookup, argument locations, type graph, plan);
//! [`Measurer::measure`] runs per sample while the thread is frozen: locate each argument
//! from the captured registers, walk it with the interpreter, decode and print.
//!
//! Never writes to the target; reads go through the given [`MemoryReader`].

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

/// A [`Measurer`] as the plan cache stores it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    plan: Plan,
    args: Vec<StoredArg>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StoredArg {
    name: String,
    param: Option<String>,
    root: NodeId,
    location: StoredLocation,
    deref: bool,
    size: u64,
}

/// The [`Location`]s a built measurer can hold (unavailable ones are refused when building).
#[derive(serde::Serialize, serde::Deserialize)]
enum StoredLocation {
    Regs(Vec<usize>),
    Stack(u64),
    Indirect(usize),
    At(usize, i64),
    Computed(usize, i64),
    Address(u64),
    Constant(u64),
}

/// One root's walk at a sample: its stream, or why it has none (the root is then printed as
/// failed in its place, and the sample's other roots as usual).
pub type RootStream = Result<Vec<u8>, String>;

/// Stack of the walking thread (virtual; only the depth actually used is touched).
pub const WALK_STACK: usize = 1 << 30;

/// Sends written bytes to the thread that owns the real output.
struct ChannelWriter(std::sync::mpsc::SyncSender<Vec<u8>>);

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .send(buf.to_vec())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "output closed"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Made-up address for objects that arrived in registers (kernel half: never a user address).
const REGISTER_OBJECT: u64 = 0xffff_ffff_ffff_0000;

impl Measurer {
    /// `binary`: the ELF that defines the probed function; `args`: `arg0`…, `this`, `retval`;
    /// `features`: OI feature names; `is_return`: for a uretprobe.
    pub fn new(
        binary: &Binary,
        function: &FunctionSymbol,
        args: &[String],
        features: &[String],
        is_return: bool,
    ) -> Result<Self, MeasureError> {
        Self::new_at(binary, function, None, args, features, is_return)
    }

    /// [`Self::new`] for a copy whose parameters DWARF places (`at`), or by the calling
    /// convention at the function's entry (`None`).
    pub fn new_at(
        binary: &Binary,
        function: &FunctionSymbol,
        at: Option<&CopyAt>,
        args: &[String],
        features: &[String],
        is_return: bool,
    ) -> Result<Self, MeasureError> {
        let opts = options_for(features)?;
        let vtables = if opts.polymorphic {
            vtables::vtable_ranges(binary)
        } else {
            HashMap::new()
        };
        let placed = at.map(|at| Placed {
            at: *at,
            cfa: cfi::cfa_at(binary, at.pc),
        });
        dwarf::with_debug_info(binary, |di| {
            Self::build(
                di,
                function,
                placed.as_ref(),
                args,
                opts,
                is_return,
                &vtables,
            )
        })?
    }

    /// A measurer of one object of the class `die` defines, given by its address rather than
    /// found at a probe: a program measuring its own objects (OIL). Its one root is named
    /// `arg0` and is walked as a probed function's `const T&` argument would be (the object
    /// itself is the root, the visited set is seeded with its address), so its report is the
    /// one `oi-trace --arg arg0` prints for that argument. Walk it with [`Self::walk_object`]
    /// or a walker compiled for [`Self::roots`]; it has no probe location to [`Self::measure`].
    pub fn for_type(
        binary: &Binary,
        di: &dwarf::DebugInfo<'_>,
        die: dwarf::DieRef,
        features: &[String],
    ) -> Result<Self, MeasureError> {
        let opts = options_for(features)?;
        let vtables = if opts.polymorphic {
            vtables::vtable_ranges(binary)
        } else {
            HashMap::new()
        };
        let name = format!("`{}`", di.qualified_name(die)?.unwrap_or_default());
        let types_err = |source| MeasureError::Types {
            function: name.clone(),
            source,
        };
        let mut b = Builder::new(di);
        let ty = b.type_of(Some(die)).map_err(types_err)?;
        let poly = if opts.polymorphic {
            Self::derived_candidates(di, &mut b, &vtables).map_err(types_err)?
        } else {
            HashMap::new()
        };
        let named = crate::describe::names::resolve(&opts.descriptions, di, &mut b);
        let tg = b.graph;
        let mut pb = PlanBuilder::new(&tg, opts)
            .with_polymorphism(poly)
            .with_named_types(named);
        let root = pb.root(ty).map_err(|source| MeasureError::Plan {
            arg: "the object".into(),
            function: name.clone(),
            source,
        })?;
        Ok(Self {
            plan: pb.finish(),
            args: vec![ArgPlan {
                name: "arg0".into(),
                param: None,
                root,
                location: Location::Unavailable("an object given by its address"),
                deref: true,
                size: tg.size(ty),
            }],
        })
    }

    /// A measurer of the variable of type `die` at ELF address `address` (a global or a
    /// namespace-scope variable, `--global`): [`Self::for_type`], located at that address
    /// plus the load bias, as a probe's argument would be.
    pub fn for_global(
        binary: &Binary,
        di: &dwarf::DebugInfo<'_>,
        die: dwarf::DieRef,
        address: u64,
        features: &[String],
    ) -> Result<Self, MeasureError> {
        let mut m = Self::for_type(binary, di, die, features)?;
        for a in &mut m.args {
            a.location = Location::Address(address);
        }
        Ok(m)
    }

    /// The interpreter's stream of the first root for the object at `addr`, read through
    /// `mem` (for [`Self::for_type`] measurers). Recurses as deep as the object nests: call
    /// it on a thread with a stack of [`WALK_STACK`].
    pub fn walk_object(
        &self,
        addr: u64,
        load_bias: u64,
        mem: &dyn MemoryReader,
    ) -> Result<Vec<u8>, MeasureError> {
        let a = self
            .args
            .first()
            .ok_or_else(|| MeasureError::BadArgName { arg: "arg0".into() })?;
        crate::interp::run(&self.plan, a.root, addr, mem, true, load_bias).map_err(|source| {
            MeasureError::Walk {
                arg: a.name.clone(),
                source,
            }
        })
    }

    fn build(
        di: &dwarf::DebugInfo<'_>,
        function: &FunctionSymbol,
        placed: Option<&Placed>,
        args: &[String],
        opts: Options,
        is_return: bool,
        vtables: &HashMap<String, (u64, u64)>,
    ) -> Result<Self, MeasureError> {
        let fname = function.demangled.clone();
        let types_err = |source| MeasureError::Types {
            function: fname.clone(),
            source,
        };
        let die = match placed.and_then(|p| p.at.die) {
            Some(die) => die,
            None => di.find_function(function)?,
        };
        // A copy placed by DWARF: its parameters in declaration order, where they are there.
        let copy_params = match placed {
            Some(p) => Some(di.copy_params(die, p.at.pc, p.at.at_entry)?),
            None => None,
        };
        let info = match &copy_params {
            Some(params) => dwarf::FunctionInfo {
                params: params
                    .iter()
                    .map(|p| dwarf::Param {
                        name: p.name.clone(),
                        ty: p.ty,
                        artificial: p.artificial,
                    })
                    .collect(),
                return_type: di.function_info(die)?.return_type,
            },
            None => di.function_info(die)?,
        };
        let mut b = Builder::new(di);
        let mut param_types = Vec::new();
        for p in &info.params {
            param_types.push(match p.ty {
                Some(t) => Some(b.type_of(Some(t)).map_err(types_err)?),
                None => None,
            });
        }
        let ret = match info.return_type {
            Some(t) => Some(b.type_of(Some(t)).map_err(types_err)?),
            None => None,
        };
        let poly = if opts.polymorphic {
            Self::derived_candidates(di, &mut b, vtables).map_err(types_err)?
        } else {
            HashMap::new()
        };
        let named = crate::describe::names::resolve(&opts.descriptions, di, &mut b);
        let tg = b.graph;
        let locations = abi::parameter_locations(&tg, &param_types, ret);
        let explicit: Vec<usize> = (0..info.params.len())
            .filter(|&i| !info.params[i].artificial)
            .collect();

        let mut pb = PlanBuilder::new(&tg, opts)
            .with_polymorphism(poly)
            .with_named_types(named);
        let mut plans = Vec::new();
        for arg in args {
            let mut param = None;
            let (ty, location) = if arg == "retval" {
                if !is_return {
                    return Err(MeasureError::RetvalOnEntry { function: fname });
                }
                let Some(r) = ret else {
                    return Err(MeasureError::VoidReturn { function: fname });
                };
                (r, abi::return_location(&tg, r))
            } else {
                let index = if arg == "this" {
                    info.params
                        .iter()
                        .position(|p| p.artificial && p.name.as_deref() == Some("this"))
                        .ok_or_else(|| MeasureError::NoThis {
                            function: fname.clone(),
                        })?
                } else {
                    let n: usize = arg
                        .strip_prefix("arg")
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| MeasureError::BadArgName { arg: arg.clone() })?;
                    *explicit.get(n).ok_or_else(|| MeasureError::NoSuchArg {
                        arg: arg.clone(),
                        function: fname.clone(),
                        count: explicit.len(),
                    })?
                };
                if arg != "this" {
                    param = info.params[index].name.clone();
                }
                if is_return {
                    return Err(MeasureError::ArgAtReturn {
                        arg: arg.clone(),
                        function: fname,
                    });
                }
                let ty = param_types[index].ok_or_else(|| MeasureError::Unavailable {
                    arg: arg.clone(),
                    function: fname.clone(),
                    reason: "its type is unknown".into(),
                })?;
                let location = match (&copy_params, placed) {
                    (Some(params), Some(placed)) => placed
                        .location(&params[index].location)
                        .map_err(|reason| MeasureError::Unavailable {
                            arg: arg.clone(),
                            function: fname.clone(),
                            reason,
                        })?,
                    _ => locations[index].clone(),
                };
                (ty, location)
            };
            if let Location::Unavailable(reason) = location {
                return Err(MeasureError::Unavailable {
                    arg: arg.clone(),
                    function: fname,
                    reason: reason.into(),
                });
            }
            // A top-level pointer or reference is dereferenced: the pointee is the root.
            let (root_ty, deref) = match &tg.get(tg.resolve(ty)).kind {
                Kind::Pointer { target: Some(t) } if tg.is_complete(*t) => (*t, true),
                Kind::Pointer { .. } => {
                    return Err(MeasureError::Unavailable {
                        arg: arg.clone(),
                        function: fname,
                        reason: "it points to void or to an incomplete type".into(),
                    });
                }
                _ => (ty, false),
            };
            let root = pb.root(root_ty).map_err(|source| MeasureError::Plan {
                arg: arg.clone(),
                function: fname.clone(),
                source,
            })?;
            plans.push(ArgPlan {
                name: arg.clone(),
                param,
                root,
                location,
                deref,
                size: tg.size(root_ty),
            });
        }
        Ok(Self {
            plan: pb.finish(),
            args: plans,
        })
    }

    /// For every dynamic class built so far: its own vtable range and those of every class
    /// deriving from it that has a vtable in this binary.
    fn derived_candidates(
        di: &dwarf::DebugInfo<'_>,
        b: &mut Builder<'_, '_>,
        vtables: &HashMap<String, (u64, u64)>,
    ) -> Result<DerivedClasses, BuildError> {
        let dynamic: Vec<(TypeId, String)> = (0..b.graph.types.len())
            .filter_map(|id| match &b.graph.types[id].kind {
                Kind::Struct(st) if st.dynamic && st.container.is_none() => {
                    st.name.clone().map(|n| (id, n))
                }
                _ => None,
            })
            .collect();
        let mut out = HashMap::new();
        if dynamic.is_empty() {
            return Ok(out);
        }
        let index = di.inheritance_index()?;
        for (id, name) in dynamic {
            let mut cands = Vec::new();
            if let Some(&(s, e)) = vtables.get(&name) {
                cands.push((s, e, id));
            }
            for die in vtables::derived_classes(&index, &name) {
                let Some(dname) = di.qualified_name(die)? else {
                    continue;
                };
                if let Some(&(s, e)) = vtables.get(&dname) {
                    let d = b.type_of(Some(die))?;
                    cands.push((s, e, d));
                }
            }
            if !cands.is_empty() {
                out.insert(id, cands);
            }
        }
        Ok(out)
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The bytes the plan cache stores; `None` for a measurer it cannot hold.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        let args = self
            .args
            .iter()
            .map(|a| {
                let location = match &a.location {
                    Location::Regs(r) => StoredLocation::Regs(r.clone()),
                    Location::Stack(o) => StoredLocation::Stack(*o),
                    Location::Indirect(r) => StoredLocation::Indirect(*r),
                    Location::At { reg, offset } => StoredLocation::At(*reg, *offset),
                    Location::Computed { reg, offset } => StoredLocation::Computed(*reg, *offset),
                    Location::Address(a) => StoredLocation::Address(*a),
                    Location::Constant(c) => StoredLocation::Constant(*c),
                    Location::Unavailable(_) => return None,
                };
                Some(StoredArg {
                    name: a.name.clone(),
                    param: a.param.clone(),
                    root: a.root,
                    location,
                    deref: a.deref,
                    size: a.size,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        serde_json::to_vec(&Stored {
            plan: self.plan.clone(),
            args,
        })
        .ok()
    }

    /// A measurer from [`Self::to_bytes`]; `None` for anything else. (The plan cache checks
    /// a checksum first: a damaged file is rebuilt, never trusted.)
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let stored: Stored = serde_json::from_slice(bytes).ok()?;
        let nodes = stored.plan.nodes.len();
        let args: Vec<ArgPlan> = stored
            .args
            .into_iter()
            .map(|a| ArgPlan {
                name: a.name,
                param: a.param,
                root: a.root,
                location: match a.location {
                    StoredLocation::Regs(r) => Location::Regs(r),
                    StoredLocation::Stack(o) => Location::Stack(o),
                    StoredLocation::Indirect(r) => Location::Indirect(r),
                    StoredLocation::At(reg, offset) => Location::At { reg, offset },
                    StoredLocation::Computed(reg, offset) => Location::Computed { reg, offset },
                    StoredLocation::Address(a) => Location::Address(a),
                    StoredLocation::Constant(c) => Location::Constant(c),
                },
                deref: a.deref,
                size: a.size,
            })
            .collect();
        args.iter().all(|a| a.root < nodes).then_some(Self {
            plan: stored.plan,
            args,
        })
    }

    /// Walks every requested argument of one sample and writes the result to `out`.
    ///
    /// The walk and the decoding recurse as deep as the object nests (a chased linked list
    /// of 100,000 nodes is 100,000 levels), so they run on a thread with a large stack; the
    /// output streams back to `out` in chunks.
    pub fn measure(
        &self,
        regs: &EntryRegs,
        load_bias: u64,
        mem: &dyn MemoryReader,
        format: OutputFormat,
        out: &mut dyn Write,
    ) -> Result<(), MeasureError> {
        let regs = *regs;
        on_walk_thread(out, move |w| {
            self.measure_here(&regs, load_bias, mem, format, w)
        })
    }

    /// [`Self::measure`] on the calling thread.
    pub fn measure_here(
        &self,
        regs: &EntryRegs,
        load_bias: u64,
        mem: &dyn MemoryReader,
        format: OutputFormat,
        out: &mut dyn Write,
    ) -> Result<(), MeasureError> {
        // Addresses in registers are runtime addresses already; the bias only matters for
        // ELF addresses (vtable symbols, polymorphic-inheritance).
        let mut streams = Vec::with_capacity(self.args.len());
        for a in &self.args {
            streams.push(self.walk_arg(a, regs, load_bias, mem)?);
        }
        self.write_report(&streams, format, out)
    }

    /// Walks every requested argument (the interpreter, through `mem`) and returns their
    /// streams, on a thread with a stack deep enough for the deepest walk. Of several
    /// arguments, each is walked on its own: one whose walk fails is that root's `Err` and
    /// the others are still measured; a single argument's failure is the error.
    pub fn walk_streams(
        &self,
        regs: &EntryRegs,
        load_bias: u64,
        mem: &dyn MemoryReader,
    ) -> Result<Vec<RootStream>, MeasureError> {
        let walked: Vec<Result<Vec<u8>, MeasureError>> = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("oi-walk".into())
                .stack_size(WALK_STACK)
                .spawn_scoped(scope, || {
                    self.args
                        .iter()
                        .map(|a| self.walk_arg(a, regs, load_bias, mem))
                        .collect()
                })
                // A panic in the walk is a bug: let it surface as one.
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .map_err(|e| MeasureError::Report(e.into()))
        })?;
        if walked.len() == 1 {
            return walked.into_iter().map(|w| w.map(Ok)).collect();
        }
        Ok(walked
            .into_iter()
            .map(|w| w.map_err(|e| e.to_string()))
            .collect())
    }

    /// Writes the result of one sample from its per-argument streams, however they were
    /// produced (interpreter or JIT walker). Recurses as deep as the object nests: call it
    /// on a thread with a stack of [`WALK_STACK`].
    pub fn write_report(
        &self,
        streams: &[Vec<u8>],
        format: OutputFormat,
        out: &mut dyn Write,
    ) -> Result<(), MeasureError> {
        let mut writer = SampleWriter::new(format.report_format());
        let streams: Vec<RootStream> = streams.iter().cloned().map(Ok).collect();
        self.report(&streams, &mut writer, out, None)?;
        Ok(())
    }

    /// [`Self::write_report`] through a writer that lasts over the samples of a run;
    /// `totals`, if given, is filled with the sample summed by member path in the same pass.
    /// Returns the roots printed as failed (`label: why`; see `SampleWriter::write`).
    pub fn report(
        &self,
        streams: &[RootStream],
        writer: &mut SampleWriter,
        out: &mut dyn Write,
        totals: Option<&mut Totals>,
    ) -> Result<Vec<String>, MeasureError> {
        let labels: Vec<String> = self.args.iter().map(ArgPlan::label).collect();
        let roots: Vec<Root<'_>> = self
            .args
            .iter()
            .zip(&labels)
            .zip(streams)
            .map(|((a, label), s)| Root {
                label,
                node: a.root,
                stream: s.as_deref().map_err(String::as_str),
            })
            .collect();
        Ok(writer.write(&self.plan, &roots, out, totals)?)
    }

    /// The plan node of each requested argument, in order: what a JIT walker is compiled for.
    pub fn roots(&self) -> Vec<NodeId> {
        self.args.iter().map(|a| a.root).collect()
    }

    /// Names of the requested arguments, in order.
    pub fn arg_names(&self) -> Vec<&str> {
        self.args.iter().map(|a| a.name.as_str()).collect()
    }

    /// Where each argument's object is at this sample, for a walker running in the target.
    /// `load_bias`: of the probed file (arguments that point at globals are ELF addresses).
    /// The first argument that lives in one of the xmm registers of `mask` (bit n: xmmN), and
    /// that register's number.
    pub fn arg_in_vector_registers(&self, mask: u16) -> Option<(&str, usize)> {
        self.args.iter().find_map(|a| {
            let regs: &[usize] = match &a.location {
                Location::Regs(r) => r,
                Location::Indirect(r)
                | Location::At { reg: r, .. }
                | Location::Computed { reg: r, .. } => std::slice::from_ref(r),
                _ => &[],
            };
            regs.iter()
                .filter_map(|r| r.checked_sub(abi::XMM0))
                .find(|n| *n < 16 && mask & (1 << n) != 0)
                .map(|n| (a.name.as_str(), n))
        })
    }

    /// Whether an argument lives in an xmm register: the caller then fills
    /// [`EntryRegs::xmm`] from the stopped thread before [`Self::locate`].
    pub fn needs_vector_registers(&self) -> bool {
        let vector = |r: &usize| *r >= abi::XMM0;
        self.args.iter().any(|a| match &a.location {
            Location::Regs(r) => r.iter().any(vector),
            Location::Indirect(r)
            | Location::At { reg: r, .. }
            | Location::Computed { reg: r, .. } => vector(r),
            _ => false,
        })
    }

    pub fn locate(
        &self,
        regs: &EntryRegs,
        load_bias: u64,
        mem: &dyn MemoryReader,
    ) -> Result<Vec<Located>, MeasureError> {
        self.args
            .iter()
            .map(|a| self.locate_arg(a, regs, load_bias, mem))
            .collect()
    }

    /// Per-argument streams (for tests comparing backends, and for benchmarks).
    pub fn walk_arg_streams(
        &self,
        regs: &EntryRegs,
        load_bias: u64,
        mem: &dyn MemoryReader,
    ) -> Result<Vec<(NodeId, Vec<u8>)>, MeasureError> {
        self.args
            .iter()
            .map(|a| Ok((a.root, self.walk_arg(a, regs, load_bias, mem)?)))
            .collect()
    }

    fn walk_arg(
        &self,
        a: &ArgPlan,
        regs: &EntryRegs,
        bias: u64,
        mem: &dyn MemoryReader,
    ) -> Result<Vec<u8>, MeasureError> {
        let walk_err = |source| MeasureError::Walk {
            arg: a.name.clone(),
            source,
        };
        let stream = match self.locate_arg(a, regs, bias, mem)? {
            Located::Memory(addr) => crate::interp::run(&self.plan, a.root, addr, mem, true, bias),
            Located::Registers(bytes) => {
                let overlay = Overlay {
                    local: LocalReader::new(REGISTER_OBJECT, bytes),
                    inner: mem,
                };
                crate::interp::run(&self.plan, a.root, REGISTER_OBJECT, &overlay, false, bias)
            }
            Located::Unavailable => return Ok(Vec::new()),
        };
        stream.map_err(walk_err)
    }

    fn locate_arg(
        &self,
        a: &ArgPlan,
        regs: &EntryRegs,
        bias: u64,
        mem: &dyn MemoryReader,
    ) -> Result<Located, MeasureError> {
        let reg = |n: usize| match n {
            abi::RAX => regs.rax,
            abi::RBX => regs.rbx,
            abi::RBP => regs.rbp,
            abi::RSP => regs.rsp,
            n if (abi::R10..abi::R10 + 6).contains(&n) => {
                [regs.r10, regs.r11, regs.r12, regs.r13, regs.r14, regs.r15][n - abi::R10]
            }
            n if (abi::XMM0..abi::XMM0 + 16).contains(&n) => regs.xmm[n - abi::XMM0],
            n => regs.int_args().get(n).copied().unwrap_or(0),
        };
        let value_bytes = |v: u64| {
            let mut b = v.to_le_bytes().to_vec();
            b.resize(a.size as usize, 0);
            Located::Registers(b)
        };
        let read_word = |addr: u64| -> Result<u64, MeasureError> {
            let mut b = [0u8; 8];
            mem.read(addr, &mut b).map_err(|e| MeasureError::Walk {
                arg: a.name.clone(),
                source: e.into(),
            })?;
            Ok(u64::from_le_bytes(b))
        };
        Ok(match (&a.location, a.deref) {
            (Location::Regs(r), true) => Located::Memory(reg(r[0])),
            (Location::Stack(off), true) => Located::Memory(read_word(regs.rsp + off)?),
            (Location::Stack(off), false) => Located::Memory(regs.rsp + off),
            (Location::Indirect(r), false) => Located::Memory(reg(*r)),
            (Location::Indirect(r), true) => Located::Memory(read_word(reg(*r))?),
            (Location::Regs(r), false) => {
                let mut b: Vec<u8> = r.iter().flat_map(|&n| reg(n).to_le_bytes()).collect();
                b.resize(a.size as usize, 0);
                Located::Registers(b)
            }
            (Location::At { reg: r, offset }, true) => {
                Located::Memory(read_word(reg(*r).wrapping_add(*offset as u64))?)
            }
            (Location::At { reg: r, offset }, false) => {
                Located::Memory(reg(*r).wrapping_add(*offset as u64))
            }
            (Location::Computed { reg: r, offset }, true) => {
                Located::Memory(reg(*r).wrapping_add(*offset as u64))
            }
            (Location::Computed { reg: r, offset }, false) => {
                value_bytes(reg(*r).wrapping_add(*offset as u64))
            }
            (Location::Address(addr), true) => Located::Memory(addr.wrapping_add(bias)),
            (Location::Address(addr), false) => value_bytes(addr.wrapping_add(bias)),
            (Location::Constant(c), true) => Located::Memory(*c),
            (Location::Constant(c), false) => value_bytes(*c),
            (Location::Unavailable(_), _) => Located::Unavailable,
        })
    }
}

/// A [`CopyAt`] with the call frame rule at its `pc`.
struct Placed {
    at: CopyAt,
    cfa: Option<cfi::Cfa>,
}

impl Placed {
    /// The [`Location`] of a parameter DWARF places at `location`; else why it has none.
    fn location(&self, location: &ParamLocation) -> Result<Location, String> {
        let register = |dwarf: u16| {
            abi::register_of_dwarf(dwarf).ok_or_else(|| {
                format!(
                    "it is in DWARF register {dwarf} (an x87, MMX or upper vector register), \
                     which is not captured"
                )
            })
        };
        Ok(match location {
            ParamLocation::Registers(regs) => Location::Regs(
                regs.iter()
                    .map(|&r| register(r))
                    .collect::<Result<_, _>>()?,
            ),
            ParamLocation::Memory {
                register: r,
                offset,
            } => Location::At {
                reg: register(*r)?,
                offset: *offset,
            },
            ParamLocation::FrameBase { offset } => {
                let cfa = self.cfa.ok_or_else(|| {
                    format!(
                        "it lives in the stack frame, and no call frame information covers {:#x}",
                        self.at.pc
                    )
                })?;
                Location::At {
                    reg: register(cfa.register)?,
                    offset: cfa.offset + offset,
                }
            }
            ParamLocation::Computed {
                register: r,
                offset,
            } => Location::Computed {
                reg: register(*r)?,
                offset: *offset,
            },
            ParamLocation::Address(a) => Location::Address(*a),
            ParamLocation::Constant(c) => Location::Constant(*c),
            ParamLocation::Unavailable(why) => return Err(why.clone()),
        })
    }
}

/// The plan options the OI feature names ask for (`--feature`).
pub fn options_for(features: &[String]) -> Result<Options, MeasureError> {
    let mut opts = Options::default();
    let mut described = Vec::new();
    for f in features {
        if let Some(file) = crate::describe::parse::from_feature(f) {
            described.push(file);
            continue;
        }
        match f.as_str() {
            "chase-raw-pointers" => opts.chase_raw_pointers = true,
            "capture-keys" => opts.capture_keys = true,
            "polymorphic-inheritance" => opts.polymorphic = true,
            VALUES => opts.values = true,
            other => {
                use crate::oi_config::{Rule, parse_rule};
                match parse_rule(other) {
                    Some(Rule::IgnoreType(ty)) => opts.ignored_types.push(ty),
                    Some(Rule::IgnoreMember(ty, member)) => {
                        opts.ignored_members.push((ty, member));
                    }
                    Some(Rule::CaptureTop) => opts.capture_top = true,
                    Some(Rule::CaptureMember(ty, member)) => {
                        opts.capture_members.push((ty, member));
                    }
                    None => return Err(MeasureError::UnknownFeature(other.to_string())),
                }
            }
        }
    }
    opts.descriptions = crate::describe::Descriptions::load(&described)?;
    Ok(opts)
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

/// Runs `work` on a thread with a stack deep enough for the deepest walk, streaming what it
/// writes to `out` in chunks.
fn on_walk_thread<'a>(
    out: &mut dyn Write,
    work: impl FnOnce(&mut dyn Write) -> Result<(), MeasureError> + Send + 'a,
) -> Result<(), MeasureError> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(16);
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("oi-walk".into())
            .stack_size(WALK_STACK)
            .spawn_scoped(scope, move || {
                let mut w = std::io::BufWriter::with_capacity(1 << 16, ChannelWriter(tx));
                work(&mut w)?;
                w.flush().map_err(|e| MeasureError::Report(e.into()))
            })
            .map_err(|e| MeasureError::Report(e.into()))?;
        let mut write_error = None;
        for chunk in rx {
            if let Err(e) = out.write_all(&chunk) {
                // Dropping the receiver makes the worker's next write fail and stop.
                write_error = Some(e);
                break;
            }
        }
        let result = worker
            .join()
            // A panic in the walk is a bug: let it surface as one.
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        match write_error {
            Some(e) => Err(MeasureError::Report(e.into())),
            None => result,
        }
    })
}
