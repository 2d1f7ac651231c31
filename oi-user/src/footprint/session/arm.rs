//! Before serving: every probe's sites resolved (one process or a cgroup's), its arguments
//! located and planned (bad input is found here, before the target is touched), then the
//! trigger armed on every site and the targets seized. Never samples.

use super::*;

/// Reads the DWARF and plans the walk of every probe's arguments, before anything is armed:
/// a missing argument or missing debug info is bad input, found before the target is touched.
/// A copy of the function where a requested argument has no location is left out, with a
/// note (and a hint, should the probe get no hits); if that leaves none, it is the error.
pub(super) fn prepare_measurers(args: &Args, probes: &mut [Probe]) -> Result<()> {
    let features = args.plan_features().map_err(Error::input)?;
    let cache = PlanCache::new(PlanCache::default_disk());
    // Shipped descriptions that did not fit: each said once, however many plans met it.
    let mut warned = std::collections::BTreeSet::new();
    for probe in probes {
        let mut kept = Vec::new();
        let mut first_error = None;
        for site in probe.sites.drain(..) {
            let at = site.copy_at();
            let built = cache.get_or_build(
                &site.binary,
                &site.symbol,
                at.as_ref(),
                &args.arg,
                &features,
                probe.is_return,
            );
            let built = built.and_then(|(measurer, source)| {
                match overwritten_vector_argument(&site, &measurer) {
                    Some(reason) => Err(MeasureError::Unavailable {
                        arg: reason.0,
                        function: site.symbol.demangled.clone(),
                        reason: reason.1,
                    }),
                    None => Ok((measurer, source)),
                }
            });
            match built {
                Ok((measurer, source)) => {
                    for w in &measurer.plan().warnings {
                        if warned.insert(w.clone()) {
                            eprintln!("oi-trace: warning: {w}");
                        }
                    }
                    probe.plans_cached += usize::from(source == Source::Cache);
                    probe.measurers.push(Arc::new(measurer));
                    kept.push(site);
                }
                Err(e @ MeasureError::Unavailable { .. }) if site.copy_at().is_some() => {
                    let MeasureError::Unavailable { arg, reason, .. } = &e else {
                        unreachable!("matched above")
                    };
                    let note = format!(
                        "{} is not probed: `{arg}` cannot be measured there: {reason}",
                        site.symbol.demangled
                    );
                    probe.notes.push(note.clone());
                    probe.hints.push(note);
                    first_error.get_or_insert(Error::input(e.to_string()));
                }
                Err(e) => {
                    let msg = format!("{}: {e}", site.symbol.demangled);
                    return Err(if e.is_bad_input() {
                        Error::input(msg)
                    } else {
                        Error::internal(msg)
                    });
                }
            }
        }
        if kept.is_empty()
            && let Some(e) = first_error
        {
            return Err(e);
        }
        probe.sites = kept;
    }
    Ok(())
}

/// An argument in an xmm register that the probed instruction itself overwrites (it runs
/// before the thread stops, see `code::xmm_written`): the argument and why it cannot be read.
pub(super) fn overwritten_vector_argument(
    site: &Resolved,
    measurer: &Measurer,
) -> Option<(String, String)> {
    site.points
        .iter()
        .filter(|p| p.kind == PointKind::Entry)
        .find_map(|p| {
            let start = usize::try_from(p.file_offset).ok()?;
            let bytes = site.binary.bytes().get(start..)?;
            let bytes = &bytes[..bytes.len().min(15)];
            let (mask, insn) = code::xmm_written(bytes, p.address)?;
            let (arg, n) = measurer.arg_in_vector_registers(mask)?;
            Some((
                arg.to_string(),
                format!(
                    "it is in xmm{n}, which the probed instruction `{insn}` overwrites before \
                     the thread can be stopped (the eBPF side cannot read vector registers)"
                ),
            ))
        })
}

/// `shop::tally_a, shop::tally_b`: where the inlined copies among `sites` are.
pub(super) fn inlined_places(sites: &[&Resolved]) -> String {
    let mut places: Vec<String> = sites
        .iter()
        .filter_map(|s| match &s.copy {
            resolve::Copy::Inlined { into: Some(f), .. } => Some(format!("in {f}")),
            _ => None,
        })
        .collect();
    places.dedup();
    places.join(", ")
}

pub(super) fn resolve_probes(args: &Args, scope: &Scope) -> Result<Vec<Probe>> {
    let mut cache = BinaryCache::default();
    let specs = args
        .uprobe
        .iter()
        .map(|s| (s, false))
        .chain(args.uretprobe.iter().map(|s| (s, true)));
    let mut probes = Vec::new();
    for (symbol, is_return) in specs {
        let sites = match scope {
            Scope::Pid(info) => {
                let place = format!("pid {} ({})", info.pid, info.comm);
                let found = resolve::in_process(&mut cache, info.pid, symbol)?;
                if found.is_empty() {
                    return Err(resolve::not_found(&mut cache, info.pid, symbol, &place));
                }
                resolve::one_function(symbol, &place, found)?
            }
            Scope::Cgroup(cgroup) => resolve_in_cgroup(&mut cache, args, cgroup, symbol)?,
        };
        let mut sites = sites;
        let copies = sites.len();
        let mut notes = resolve::place_all(&mut sites, is_return)
            .map_err(|e| Error::input(format!("{symbol}: {e}")))?;
        // Why this probe might never fire: said once now, and again if it does not.
        let mut hints = resolve::unreachable_notes(&sites);
        let inlined: Vec<&Resolved> = sites
            .iter()
            .filter(|s| matches!(s.copy, resolve::Copy::Inlined { .. }))
            .collect();
        if !inlined.is_empty() && inlined.len() == sites.len() && !is_return {
            hints.push(format!(
                "{symbol} has no out-of-line copy: it is only inlined, at {} place(s) ({})",
                inlined.len(),
                inlined_places(&inlined)
            ));
        }
        notes.extend(hints.iter().cloned());
        let _ = copies;
        probes.push(Probe {
            symbol: symbol.clone(),
            is_return,
            sites,
            notes,
            hints,
            measurers: Vec::new(),
            plans_cached: 0,
            walkers_cached: 0,
        });
    }
    if probes.len() > oi_common::MAX_PROBES as usize {
        return Err(Error::input(format!(
            "at most {} probes at once",
            oi_common::MAX_PROBES
        )));
    }
    Ok(probes)
}

/// One site per distinct file that defines `symbol`, among the cgroup's processes and the
/// `--binary` files; each must define it exactly once.
pub(super) fn resolve_in_cgroup(
    cache: &mut BinaryCache,
    args: &Args,
    cgroup: &Cgroup,
    symbol: &str,
) -> Result<Vec<Resolved>> {
    let mut sites: Vec<Resolved> = Vec::new();
    let mut add = |found: Vec<Resolved>, place: String| -> Result<()> {
        if found.is_empty() {
            return Ok(());
        }
        let copies = resolve::one_function(symbol, &place, found)?;
        if let Some(file) = copies.first().map(|c| c.file_id)
            && !sites.iter().any(|s| s.file_id == file)
        {
            sites.extend(copies);
        }
        Ok(())
    };
    let query = crate::debuginfo::symbols::Query::parse(symbol);
    for path in &args.binary {
        let found = resolve::in_file(cache, path, path, &query)?;
        if found.is_empty() {
            return Err(Error::input(format!(
                "symbol {symbol:?} not found in {}",
                path.display()
            )));
        }
        add(found, path.display().to_string())?;
    }
    for pid in cgroup.processes() {
        // Processes that exit or that we cannot read are not ours to trace.
        let Ok(found) = resolve::in_process(cache, pid, symbol) else {
            continue;
        };
        add(found, format!("pid {pid}"))?;
    }
    if sites.is_empty() {
        return Err(Error::input(format!(
            "symbol {symbol:?} not found in any process of cgroup {} (use --binary PATH to arm \
             it for processes that start later)",
            cgroup.path.display()
        )));
    }
    Ok(sites)
}

impl Session {
    /// Seizes the targets (when sampling), then configures and attaches every probe.
    pub(super) fn arm(&mut self) -> Result<()> {
        let (filter, tgid, cgroup_id, cgroup_level) = match &self.scope {
            Scope::Pid(info) => (filter::PID, info.pid as u32, 0, 0),
            Scope::Cgroup(c) => (filter::CGROUP, 0, c.id, c.level),
        };
        if self.sampling {
            let initial: Vec<i32> = match &self.scope {
                Scope::Pid(info) => vec![info.pid],
                Scope::Cgroup(c) => c
                    .processes()
                    .into_iter()
                    .filter(|&pid| self.maps_a_site(pid))
                    .collect(),
            };
            for tgid in initial {
                self.seize(tgid)?;
            }
        }
        let config = ProbeConfig {
            every: self.every,
            cgroup_id,
            cgroup_level,
            tgid,
            filter,
            flags: if self.sampling { 0 } else { flags::COUNT_ONLY },
        };
        let pid = match &self.scope {
            Scope::Pid(info) => Some(info.pid as u32),
            Scope::Cgroup(_) => None,
        };
        for (index, probe) in self.probes.iter().enumerate() {
            for site in &probe.sites {
                for p in &site.points {
                    let point = AttachPoint {
                        path: site.host_path.clone(),
                        file_offset: p.file_offset,
                        flags: if p.kind.can_sample() {
                            0
                        } else {
                            point::NO_SAMPLE
                        },
                        pid,
                    };
                    self.trigger.attach(index as u32, config, &point)?;
                }
            }
        }
        let what = match &self.scope {
            Scope::Pid(info) => format!("pid {} ({})", info.pid, info.comm),
            Scope::Cgroup(c) => format!("cgroup {} (id {})", c.path.display(), c.id),
        };
        for note in self.probes.iter().flat_map(|p| &p.notes) {
            eprintln!("oi-trace: note: {note}");
        }
        let names: Vec<String> = self.probes.iter().map(describe_points).collect();
        eprintln!(
            "oi-trace: attached {} probe(s) to {what}: {}",
            self.probes.len(),
            names.join(", ")
        );
        Ok(())
    }

    pub(super) fn maps_a_site(&self, pid: i32) -> bool {
        let Ok(files) = procfs::executable_files(pid) else {
            return false;
        };
        files
            .iter()
            .filter_map(|f| procfs::file_id(&f.host))
            .any(|id| {
                self.probes
                    .iter()
                    .flat_map(|p| &p.sites)
                    .any(|s| s.file_id == id)
            })
    }

    pub(super) fn seize(&mut self, tgid: i32) -> Result<()> {
        if let Some(guardian) = &mut self.guardian {
            guardian.watch(tgid);
        }
        self.tracer.seize(tgid)?;
        self.trigger.mark_seized(tgid)
    }
}
