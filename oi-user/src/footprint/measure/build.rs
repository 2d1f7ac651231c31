//! Building a measurer, once per probe: the function's DWARF entry and parameters, the type
//! graph of what they reach, the plan, and the derived classes a polymorphic root may be.
//! Static work only: never reads the target.

use super::*;

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

    pub(super) fn build(
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
    pub(super) fn derived_candidates(
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
            SIZES_REAL => opts.sizing = crate::plan::Sizing::Real,
            SIZES_OI => opts.sizing = crate::plan::Sizing::Oi,
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
