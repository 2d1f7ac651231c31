//! What `calls` instruments, and attaching it: the files the processes run, the entry
//! function and the functions selected beneath it, and each file's probes (`Target`), all
//! attached or none (`attach`). Reads the files; loads nothing itself.

use std::time::{Duration, Instant};

use oi_common::calls::cookie;

use super::{
    program::{Attachment, Program},
    select::{self, File, Function, Patterns},
    sites::{self, Site, Skipped},
};
use crate::{
    cli::calls::CallsArgs,
    debuginfo::find_function,
    error::{Error, Result},
    probe::{
        profiler::attach_every_file,
        scope::{Scope, files_of},
    },
    report::tree::thousands,
    resolve::{self, BinaryCache},
};

/// What is instrumented: files, functions, their probes.
pub(super) struct Target {
    pub files: Vec<File>,
    /// The tree name of the entry function.
    pub entry_name: String,
    pub functions: Vec<Function>,
    /// Probes per file (same index as `files`).
    pub sites: Vec<Vec<Site>>,
}

impl Target {
    pub fn resolve(args: &CallsArgs, scope: &Scope) -> Result<Self> {
        let files = files_of(&scope.processes)?;
        let mut entries = Vec::new();
        for (index, file) in files.iter().enumerate() {
            let found = find_function(&file.binary, &args.entry)
                .map_err(|e| Error::input(e.to_string()))?;
            entries.extend(found.into_iter().map(|s| (index, s.address)));
        }
        if entries.is_empty() {
            let pid = scope.processes[0];
            return Err(resolve::not_found(
                &mut BinaryCache::default(),
                pid,
                &args.entry,
                &scope.place,
            ));
        }
        let patterns = Patterns::new(&args.filter, &args.exclude);
        let selection =
            select::select(&files, &entries, &patterns).map_err(|e| Error::input(e.to_string()))?;
        // `__cxa_begin_catch` is where the catch blocks start: a probe of its own kind, never
        // an instrumented function.
        let catch = files.iter().enumerate().find_map(|(index, file)| {
            find_function(&file.binary, "__cxa_begin_catch")
                .ok()?
                .into_iter()
                .next()
                .map(|s| (index, s))
        });
        let mut functions: Vec<Function> = selection
            .functions
            .into_iter()
            .filter(|f| {
                catch
                    .as_ref()
                    .is_none_or(|(i, s)| !(f.file == *i && f.symbol.address == s.address))
            })
            .collect();
        if functions.len() >= cookie::MAX_FUNCTIONS as usize - 4 {
            return Err(Error::input(format!(
                "{} functions selected; at most {} can be instrumented (narrow with --filter)",
                functions.len(),
                cookie::MAX_FUNCTIONS - 4
            )));
        }
        let ids: Vec<u32> = (0..functions.len() as u32).collect();
        let bytes: Vec<&[u8]> = files.iter().map(|f| f.binary.bytes()).collect();
        let found = sites::sites_of(&functions, &ids, &bytes, &selection.cold);
        let mut sites: Vec<Vec<Site>> = vec![Vec::new(); files.len()];
        let mut keep = Vec::with_capacity(functions.len());
        let mut skipped: Vec<(String, Skipped)> = Vec::new();
        let mut moved: Vec<String> = Vec::new();
        for (f, result) in functions.iter().zip(found) {
            match result {
                Ok(s) => {
                    keep.push(true);
                    sites[f.file].extend(s.sites);
                    if !s.entry_moved_past.is_empty() {
                        moved.push(format!(
                            "{} (after `{}`)",
                            f.name,
                            s.entry_moved_past.join("; ")
                        ));
                    }
                }
                Err(why) => {
                    keep.push(false);
                    skipped.push((f.symbol.demangled.clone(), why));
                }
            }
        }
        // Ids are indices into `functions`; skipped ones keep their index, unused.
        let entry_name = functions
            .iter()
            .find(|f| f.is_entry)
            .map(|f| f.name.clone())
            .unwrap_or_else(|| args.entry.clone());
        if let Some((name, why)) = functions
            .iter()
            .zip(&keep)
            .find(|(f, kept)| f.is_entry && !**kept)
            .map(|(f, _)| {
                let why = skipped
                    .iter()
                    .find(|(n, _)| *n == f.symbol.demangled)
                    .map(|(_, w)| w.clone());
                (f.symbol.demangled.clone(), why)
            })
        {
            return Err(Error::input(format!(
                "the entry function {name} cannot be probed: {}",
                why.map_or_else(|| "no code".to_string(), |w| w.to_string())
            )));
        }
        if let Some((index, symbol)) = &catch {
            sites[*index].push(Site {
                file_offset: symbol.file_offset,
                cookie: cookie::encode(cookie::CATCH, 0, cookie::NO_FUNCTION),
            });
        }
        for s in &mut sites {
            s.sort_by_key(|site| site.file_offset);
        }
        if !moved.is_empty() {
            eprintln!(
                "oi-trace: {} function(s) timed from just after an instruction no uprobe can \
                 sit on: {}{}",
                moved.len(),
                moved.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
                if moved.len() > 3 { ", …" } else { "" }
            );
        }
        if args.scope.verbose {
            for (index, file) in files.iter().enumerate() {
                let n = functions.iter().filter(|f| f.file == index).count();
                if n > 0 {
                    eprintln!(
                        "oi-trace: {} function(s) selected in {}",
                        thousands(n as u64),
                        file.target_path.display()
                    );
                }
            }
        }
        if !skipped.is_empty() {
            let shown_count = if args.scope.verbose { skipped.len() } else { 3 };
            let shown: Vec<String> = skipped
                .iter()
                .take(shown_count)
                .map(|(name, why)| format!("{name} ({why})"))
                .collect();
            eprintln!(
                "oi-trace: {} function(s) not instrumented: {}{}",
                skipped.len(),
                shown.join(", "),
                if skipped.len() > shown_count {
                    ", … (-v lists them all)"
                } else {
                    ""
                }
            );
        }
        // Functions that are not instrumented keep their slot (ids are positions) but are
        // named so that nothing in the tree can be mistaken for them.
        for (f, kept) in functions.iter_mut().zip(&keep) {
            if !kept {
                f.name = format!("{} [not instrumented]", f.name);
            }
        }
        Ok(Self {
            files,
            entry_name,
            functions,
            sites,
        })
    }

    pub fn name_of(&self, id: u32) -> &str {
        self.functions
            .get(id as usize)
            .map_or("[unknown]", |f| f.name.as_str())
    }
}

/// Attaches every file's probes (`total` of them), or none, saying on stderr how far it got
/// when it takes a while.
pub(super) fn attach(
    program: &mut Program,
    target: &Target,
    scope: &Scope,
    total: usize,
) -> Result<Vec<Attachment>> {
    let start = Instant::now();
    let mut last = Instant::now();
    let mut done_before = 0;
    attach_every_file(
        program,
        &target.files,
        target.sites.iter().map(Vec::as_slice),
        |program, file, sites| {
            let mut progress = |n: usize| {
                if last.elapsed() >= Duration::from_millis(500) {
                    eprintln!(
                        "oi-trace: attaching: {} of {} probes ({:.1} s)",
                        thousands((done_before + n) as u64),
                        thousands(total as u64),
                        start.elapsed().as_secs_f64()
                    );
                    last = Instant::now();
                }
            };
            let a = program.attach(
                &file.host_path,
                sites,
                scope.pid.map(|p| p as u32),
                &mut progress,
            )?;
            done_before += a.probes;
            Ok(a)
        },
        Program::detach,
    )
}
