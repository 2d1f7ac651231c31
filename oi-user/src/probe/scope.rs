//! What a profiler traces: the scope (one process, or a cgroup's processes now) and the set of
//! files those processes execute code from, each opened once. Reads `/proc` and the files;
//! never attaches anything.

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use crate::{
    cgroup::Cgroup,
    debuginfo::Binary,
    error::{Error, Result},
    inferior::{ProcessInfo, procfs},
};

/// The processes traced (shared by the profilers).
pub struct Scope {
    pub pid: Option<i32>,
    pub cgroup: Option<Cgroup>,
    /// The processes whose files are instrumented (the pid, or the cgroup's members now).
    pub processes: Vec<i32>,
    /// `pid 4242 (shopd)` or `cgroup /sys/fs/cgroup/shop.slice`, for messages.
    pub place: String,
}

impl Scope {
    /// `error` as the user should read it: when the traced process is gone (exited, or a
    /// zombie), the failure of a file read or an attach was only its consequence, and the
    /// run ends as any run whose target went away does (exit 1), saying nothing was counted.
    pub fn explain(&self, error: Error) -> Error {
        match self.pid {
            Some(pid) if is_gone(pid) => Error::sample(format!(
                "the target (pid {pid}) exited during start-up: nothing was counted"
            )),
            _ => error,
        }
    }

    pub fn resolve(args: &crate::cli::profiler::ScopeArgs) -> Result<Self> {
        match (args.pid, &args.cgroup) {
            (Some(pid), _) => {
                let info = ProcessInfo::inspect(pid)?;
                Ok(Self {
                    pid: Some(pid),
                    cgroup: None,
                    processes: vec![pid],
                    place: format!("pid {pid} ({})", info.comm),
                })
            }
            (None, Some(path)) => {
                let cgroup = Cgroup::resolve(path)?;
                let processes = cgroup.processes();
                if processes.is_empty() {
                    return Err(Error::input(format!(
                        "cgroup {} has no process: the functions to hook are found in the \
                         files its processes run",
                        cgroup.path.display()
                    )));
                }
                Ok(Self {
                    place: format!("cgroup {}", cgroup.path.display()),
                    pid: None,
                    cgroup: Some(cgroup),
                    processes,
                })
            }
            (None, None) => Err(Error::input("give --pid PID or --cgroup PATH")),
        }
    }
}

/// One file whose functions are candidates.
#[derive(Clone)]
pub struct File {
    /// The path as the target process names it.
    pub target_path: PathBuf,
    /// The same file reachable from our mount namespace (what a uprobe is attached to).
    pub host_path: PathBuf,
    pub binary: Arc<Binary>,
}

impl File {
    /// The load bias of this file in `pid` (from its lowest mapping), if it is mapped there.
    pub fn load_bias(&self, pid: i32) -> Option<u64> {
        let maps = crate::inferior::procfs::mappings(pid).ok()?;
        let m = maps
            .iter()
            .filter(|m| m.path == self.target_path)
            .min_by_key(|m| m.start)?;
        self.binary.load_bias(m.start, m.offset)
    }
}

/// The distinct files the processes execute code from (each opened once, by device and inode);
/// the allocation profiler hooks the same files.
pub fn files_of(processes: &[i32]) -> Result<Vec<File>> {
    let mut files = Vec::new();
    let mut seen: HashMap<(u64, u64), ()> = HashMap::new();
    for &pid in processes {
        let Ok(paths) = procfs::executable_files(pid) else {
            continue;
        };
        for procfs::MappedFile {
            target: target_path,
            host: host_path,
        } in paths
        {
            let Some(id) = procfs::file_id(&host_path) else {
                continue;
            };
            if seen.insert(id, ()).is_some() {
                continue;
            }
            let Ok(binary) = Binary::open(&host_path) else {
                continue;
            };
            files.push(File {
                target_path,
                host_path,
                binary: Arc::new(binary),
            });
        }
    }
    if files.is_empty() {
        return Err(Error::input(format!(
            "cannot read the files of {} (is it still running?)",
            processes
                .iter()
                .map(|p| format!("pid {p}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(files)
}

/// Whether process `pid` has exited or is exiting: gone, a zombie, or already without an
/// address space (between the start of its exit and its zombie state, `/proc/PID/maps` reads
/// empty, while a live process always maps at least its executable).
fn is_gone(pid: i32) -> bool {
    matches!(procfs::state(pid), None | Some('Z' | 'X'))
        || procfs::mappings(pid).map_or(true, |maps| maps.is_empty())
}
