//! Facts about a process from `/proc`: is it there, what is it, what does it map.

use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::error::{Error, Result};

/// A file-backed mapping from `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub executable: bool,
    /// The path as the target sees it (inside its mount namespace).
    pub path: PathBuf,
}

/// What we need to know about a process before touching it.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    pub pid: i32,
    pub comm: String,
}

impl ProcessInfo {
    /// Checks that `pid` is a live user-space process we could trace.
    pub fn inspect(pid: i32) -> Result<Self> {
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|_| Error::input(format!("no such process: pid {pid}")))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
                .unwrap_or_default()
        };
        let comm = field("Name:");
        if field("Tgid:") != pid.to_string() {
            return Err(Error::input(format!(
                "pid {pid} is a thread of process {}; give the process id",
                field("Tgid:")
            )));
        }
        if field("State:").starts_with('Z') {
            return Err(Error::input(format!(
                "pid {pid} ({comm}) is a zombie: it has exited"
            )));
        }
        // Kernel threads have no address space and so no executable.
        if fs::read_link(format!("/proc/{pid}/exe")).is_err() && field("Kthread:") != "0" {
            return Err(Error::input(format!(
                "pid {pid} ({comm}) is a kernel thread"
            )));
        }
        Ok(Self { pid, comm })
    }

    /// Pid and name of the process tracing `pid`, if any.
    pub fn tracer_of(pid: i32) -> Option<(i32, String)> {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let tracer: i32 = status
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))?
            .trim()
            .parse()
            .ok()?;
        (tracer != 0).then(|| (tracer, comm_of(tracer).unwrap_or_else(|| "?".into())))
    }
}

pub fn comm_of(pid: i32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

pub fn is_alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !matches!(stat_state(&s), Some('Z' | 'X')))
}

/// The one-letter state from `/proc/PID/stat` (`R`, `S`, `T`, `t`, `Z`...).
pub fn state(pid: i32) -> Option<char> {
    stat_state(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn stat_state(stat: &str) -> Option<char> {
    // "pid (comm) S ..." — comm may contain spaces and parentheses, so split at the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Thread ids of `pid`, right now.
pub fn threads(pid: i32) -> Vec<i32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut tids: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    tids
}

/// File-backed mappings of `pid`.
pub fn mappings(pid: i32) -> Result<Vec<Mapping>> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| Error::input(format!("cannot read /proc/{pid}/maps: {e}")))?;
    Ok(maps.lines().filter_map(parse_mapping).collect())
}

fn parse_mapping(line: &str) -> Option<Mapping> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let _dev = fields.next()?;
    let inode = fields.next()?;
    let path = fields.next()?.trim_start();
    if inode == "0" || !path.starts_with('/') {
        return None;
    }
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        executable: perms.as_bytes().get(2) == Some(&b'x'),
        path: PathBuf::from(path.strip_suffix(" (deleted)").unwrap_or(path)),
    })
}

/// Any line of `/proc/PID/maps`: its range, permissions, and whether it is anonymous (no
/// file and no name such as `[heap]` or `[stack]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub anonymous: bool,
}

/// Every mapping of `pid`, in address order; empty once the process is gone.
pub fn regions(pid: i32) -> Vec<Region> {
    let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    maps.lines().filter_map(parse_region).collect()
}

/// The end of `pid`'s main thread stack (its `[stack]` mapping), if it has one.
pub fn main_stack_end(pid: i32) -> Option<u64> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let line = maps.lines().find(|l| l.ends_with(" [stack]"))?;
    parse_region(line).map(|r| r.end)
}

fn parse_region(line: &str) -> Option<Region> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let (start, end) = f.first()?.split_once('-')?;
    Some(Region {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms: f.get(1)?.to_string(),
        anonymous: f.len() == 5 && f[4] == "0",
    })
}

/// A file a process executes code from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedFile {
    /// The path `/proc/PID/maps` gives it.
    pub target: PathBuf,
    /// A path from our mount namespace that opens that very file (see [`reachable_path`]).
    pub host: PathBuf,
}

/// The files `pid` executes code from (its executable first), each with a path we can open
/// it by (see [`reachable_path`]).
pub fn executable_files(pid: i32) -> Result<Vec<MappedFile>> {
    let maps = mappings(pid)?;
    let mut targets: Vec<(PathBuf, Option<(u64, u64)>)> = Vec::new();
    if let Ok(exe) = fs::read_link(format!("/proc/{pid}/exe")) {
        let exe = strip_deleted(exe);
        let range = maps
            .iter()
            .find(|m| m.path == exe)
            .map(|m| (m.start, m.end));
        targets.push((exe, range));
    }
    for m in maps.iter().filter(|m| m.executable) {
        if !targets.iter().any(|(t, _)| *t == m.path) {
            targets.push((m.path.clone(), Some((m.start, m.end))));
        }
    }
    targets
        .into_iter()
        .map(|(target, range)| {
            let host = reachable_path(pid, &target, range)?;
            Ok(MappedFile { target, host })
        })
        .collect()
}

fn strip_deleted(path: PathBuf) -> PathBuf {
    match path.to_str().and_then(|p| p.strip_suffix(" (deleted)")) {
        Some(p) => PathBuf::from(p),
        None => path,
    }
}

/// A path from our mount namespace that opens the file `pid` maps at `range` under the name
/// `target`, checked to be that very file (same device and inode):
/// - `/proc/PID/root/TARGET`, the usual case (a container's own mount namespace);
/// - `TARGET` itself: a process in a chroot of our namespace, whose maps name its files from
///   our root;
/// - the kernel's own link to the mapped file (`/proc/PID/map_files/START-END`, or
///   `/proc/PID/exe`): a binary deleted or replaced on disk since it started (every rolling
///   deployment), or a path the process turned into a symbolic link out of its root.
///
/// The kernel follows those links to the file itself, so uprobes attach to the mapped inode
/// through them. Where the mapped file cannot be identified (`map_files` needs
/// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE, which a user with three file capabilities lacks),
/// `/proc/PID/root/TARGET` is used unless it leads out of the process's root.
pub fn reachable_path(pid: i32, target: &Path, range: Option<(u64, u64)>) -> Result<PathBuf> {
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    let is_exe = fs::read_link(&exe).is_ok_and(|p| strip_deleted(p) == target);
    let link = match range {
        Some((start, end)) => {
            let map_file = PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}"));
            match file_id(&map_file) {
                Some(id) => Some((map_file, id)),
                None if is_exe => file_id(&exe).map(|id| (exe.clone(), id)),
                None => None,
            }
        }
        None if is_exe => file_id(&exe).map(|id| (exe.clone(), id)),
        None => None,
    };
    let in_root = host_path(pid, target);
    let Some((link, mapped)) = link else {
        if escapes_root(pid, target) {
            return Err(Error::input(format!(
                "pid {pid} maps {}, which leads out of the process's root (a symbolic link to a \
                 file outside it): refusing to read it",
                target.display()
            )));
        }
        return Ok(in_root);
    };
    Ok([in_root, target.to_path_buf()]
        .into_iter()
        .find(|p| file_id(p) == Some(mapped))
        .unwrap_or(link))
}

/// Whether `path` of process `pid`, opened as `/proc/PID/root/PATH`, is another file than the
/// one it names inside that root. The kernel resolves an absolute symbolic link met on the way
/// from *our* root, so a process (in a container, say) that turns a path of its own into a
/// link to `/etc/…` would have us read a file of the host. `openat2` with `RESOLVE_IN_ROOT`
/// resolves the same path as the process sees it; the two must be the same file.
pub fn escapes_root(pid: i32, path: &Path) -> bool {
    use std::os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _};
    let Ok(plain) = fs::metadata(host_path(pid, path)) else {
        return false; // Nothing there to be misled into reading.
    };
    let root = format!("/proc/{pid}/root\0");
    let relative = path.strip_prefix("/").unwrap_or(path);
    let Ok(relative) = std::ffi::CString::new(relative.as_os_str().as_bytes()) else {
        return true;
    };
    // SAFETY: plain system calls on NUL-terminated strings and a struct we own; every fd we
    // get is closed below.
    unsafe {
        let dir = libc::open(
            root.as_ptr().cast(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return false; // The process is gone: nothing will be read through it either.
        }
        let mut how: libc::open_how = std::mem::zeroed();
        how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
        how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
        let fd = libc::syscall(
            libc::SYS_openat2,
            dir,
            relative.as_ptr(),
            &mut how as *mut libc::open_how,
            size_of::<libc::open_how>(),
        ) as i32;
        libc::close(dir);
        if fd < 0 {
            // ENOSYS: a kernel before 5.6 cannot tell; anything else: the path does not
            // resolve inside the root although it does from outside it.
            return std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS);
        }
        let mut st: libc::stat = std::mem::zeroed();
        let ok = libc::fstat(fd, &mut st) == 0;
        libc::close(fd);
        !(ok && st.st_dev == plain.dev() && st.st_ino == plain.ino())
    }
}

/// (device, inode) of a file: what identifies it across mount namespaces and hard links,
/// and what the kernel attaches a uprobe to.
pub fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino()))
}

/// A target-side path, reachable from our mount namespace.
pub fn host_path(pid: i32, path: &Path) -> PathBuf {
    Path::new(&format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let m = parse_mapping(
            "7f00a000-7f00b000 r-xp 00002000 08:01 1234    /usr/lib/lib foo.so (deleted)",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.offset, m.executable),
            (0x7f00a000, 0x7f00b000, 0x2000, true)
        );
        assert_eq!(m.path, PathBuf::from("/usr/lib/lib foo.so"));
        assert!(parse_mapping("7ffd-7ffe rw-p 00000000 00:00 0  [stack]").is_none());
    }

    #[test]
    fn tells_anonymous_regions_from_named_ones() {
        let r = parse_region("7f00a000-7f00b000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(
            (r.start, r.end, r.perms.as_str()),
            (0x7f00a000, 0x7f00b000, "rw-p")
        );
        assert!(r.anonymous);
        let stack = parse_region("7ffd-7ffe rw-p 00000000 00:00 0  [stack]").unwrap();
        assert!(!stack.anonymous);
        let file = parse_region("1000-2000 r-xp 00000000 08:01 1234 /bin/x").unwrap();
        assert!(!file.anonymous);
    }

    #[test]
    fn reads_state_past_odd_names() {
        assert_eq!(stat_state("12 (a) b) S 1 2"), Some('S'));
    }
}
