//! cgroup v2 targeting: find the cgroup2 mount, turn a user's path into the (id, level) pair
//! the eBPF filter compares with `bpf_get_current_ancestor_cgroup_id`, list member processes.

use std::{
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use crate::error::{Error, Result};

/// A cgroup v2 directory.
#[derive(Debug, Clone)]
pub struct Cgroup {
    pub path: PathBuf,
    /// The directory's inode number: the kernel's cgroup id.
    pub id: u64,
    /// Depth below the cgroup2 root (the root itself is level 0).
    pub level: u32,
}

/// Where cgroup2 is mounted: `/sys/fs/cgroup` on unified systems, `/sys/fs/cgroup/unified`
/// on hybrid ones. Taken from our own mountinfo.
pub fn cgroup2_mounts() -> Vec<PathBuf> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|line| {
            // Fields: id parent maj:min root mountpoint opts... - fstype source superopts
            let (left, right) = line.split_once(" - ")?;
            let mountpoint = left.split_whitespace().nth(4)?;
            (right.split_whitespace().next()? == "cgroup2")
                .then(|| PathBuf::from(unescape(mountpoint)))
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

impl Cgroup {
    /// Accepts an absolute path inside a cgroup2 mount, or a path relative to the cgroup2 root
    /// (`shop.slice/worker`).
    pub fn resolve(user_path: &Path) -> Result<Self> {
        let mounts = cgroup2_mounts();
        if mounts.is_empty() {
            return Err(Error::input(
                "no cgroup2 filesystem is mounted on this machine",
            ));
        }
        let candidates: Vec<PathBuf> = if user_path.is_absolute() {
            vec![user_path.to_path_buf()]
        } else {
            mounts.iter().map(|m| m.join(user_path)).collect()
        };
        for path in &candidates {
            let Ok(path) = path.canonicalize() else {
                continue;
            };
            let Some(mount) = mounts
                .iter()
                .filter(|m| path.starts_with(m))
                .max_by_key(|m| m.as_os_str().len())
            else {
                continue;
            };
            if !path.join("cgroup.procs").is_file() {
                continue;
            }
            let meta = fs::metadata(&path)
                .map_err(|e| Error::input(format!("{}: {e}", path.display())))?;
            let level = path
                .strip_prefix(mount)
                .map(|rel| rel.components().count())
                .unwrap_or(0) as u32;
            return Ok(Self {
                id: meta.ino(),
                level,
                path,
            });
        }
        Err(Error::input(format!(
            "{} is not a cgroup v2 directory (cgroup2 is mounted at {})",
            user_path.display(),
            mounts
                .iter()
                .map(|m| m.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }

    /// Every process in this cgroup and its descendants, right now.
    pub fn processes(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        let mut dirs = vec![self.path.clone()];
        while let Some(dir) = dirs.pop() {
            if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
                pids.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
            if let Ok(entries) = fs::read_dir(&dir) {
                dirs.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}
