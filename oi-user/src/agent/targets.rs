//! The agent's targets: the processes of `--pid` and the cgroups of `--cgroup` and
//! `--target all-containers`, each with its labels (`service_name`, `pid` or `cgroup`,
//! `container_id`, `pod_uid` and `qos` where the cgroup path names them, the user's).
//! Reads `/proc/PID/comm`, `/proc/PID/cgroup` and cgroup directories; never attaches anything
//! (each target's profiler does).

use std::path::{Path, PathBuf};

use super::{
    containers,
    labels::{Labels, service_name_from, valid_service_name},
};
use crate::{
    cgroup::Cgroup,
    cli::agent::AgentArgs,
    error::{Error, Result},
    inferior::ProcessInfo,
};

/// What one target is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// One process.
    Pid(i32),
    /// Every process of a cgroup v2 directory and below it, now and later.
    Cgroup(PathBuf),
}

/// One process or cgroup the agent profiles.
#[derive(Debug, Clone)]
pub struct Target {
    pub kind: Kind,
    /// `pid 4242 (shopd)` or `cgroup /sys/fs/cgroup/…`, for messages.
    pub place: String,
    /// For file names: the pid, or the container id's first 12 digits, or the cgroup's name.
    pub short: String,
    /// Dropped when its cgroup has no process left (`--target all-containers`).
    pub drop_when_empty: bool,
    pub labels: Labels,
}

/// The targets of `--pid` and `--cgroup`, with `--service-name` (or each command or cgroup
/// name) and `--label`s; an unknown pid or cgroup, a repeated one or a bad name is an input
/// error.
pub fn resolve(args: &AgentArgs, extra: &[(String, String)]) -> Result<Vec<Target>> {
    if let Some(name) = &args.service_name
        && !valid_service_name(name)
    {
        return Err(Error::input(format!(
            "--service-name {name:?}: a service name is letters, digits, '_', '.', '-' and '/'"
        )));
    }
    let mut targets: Vec<Target> = Vec::new();
    for &pid in &args.pids {
        if targets.iter().any(|t| t.kind == Kind::Pid(pid)) {
            return Err(Error::input(format!("--pid {pid} is given twice")));
        }
        let info = ProcessInfo::inspect(pid)?;
        let service_name = args
            .service_name
            .clone()
            .unwrap_or_else(|| service_name_from(&info.comm));
        let mut pairs = vec![("pid".to_string(), pid.to_string())];
        if let Some(id) = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|text| container_id(&text))
        {
            pairs.push(("container_id".to_string(), id));
        }
        pairs.extend(extra.iter().cloned());
        targets.push(Target {
            kind: Kind::Pid(pid),
            place: format!("pid {pid} ({})", info.comm),
            short: pid.to_string(),
            drop_when_empty: false,
            labels: Labels {
                service_name,
                pairs,
            },
        });
    }
    for path in &args.cgroups {
        let cgroup = Cgroup::resolve(path)?;
        if targets
            .iter()
            .any(|t| t.kind == Kind::Cgroup(cgroup.path.clone()))
        {
            return Err(Error::input(format!(
                "--cgroup {} is given twice",
                path.display()
            )));
        }
        targets.push(cgroup_target(
            &cgroup.path,
            args.service_name.as_deref(),
            extra,
            false,
        ));
    }
    Ok(targets)
}

/// The target of cgroup directory `path`: its service name is `service_name`, else the
/// container id's first 12 digits, else the directory's name.
pub fn cgroup_target(
    path: &Path,
    service_name: Option<&str>,
    extra: &[(String, String)],
    drop_when_empty: bool,
) -> Target {
    let placement = containers::parse(path);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("cgroup")
        .to_string();
    let short = placement
        .container_id
        .as_ref()
        .map_or(name.clone(), |id| id[..12].to_string());
    let mut pairs = vec![("cgroup".to_string(), path.display().to_string())];
    for (key, value) in [
        ("container_id", &placement.container_id),
        ("pod_uid", &placement.pod_uid),
        ("qos", &placement.qos),
    ] {
        if let Some(v) = value {
            pairs.push((key.to_string(), v.clone()));
        }
    }
    pairs.extend(extra.iter().cloned());
    Target {
        kind: Kind::Cgroup(path.to_path_buf()),
        place: format!("cgroup {}", path.display()),
        short: short.clone(),
        drop_when_empty,
        labels: Labels {
            service_name: service_name.map_or_else(|| service_name_from(&short), str::to_string),
            pairs,
        },
    }
}

/// The container id a process's cgroup path names (`/proc/PID/cgroup`'s cgroup2 line).
pub fn container_id(cgroup: &str) -> Option<String> {
    cgroup.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        containers::parse(std::path::Path::new(path)).container_id
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_of_processes() {
        let id = "3f4e".repeat(16);
        for path in [
            format!("0::/system.slice/docker-{id}.scope"),
            format!("0::/kubepods/besteffort/pod1234-5678/{id}"),
            format!("0::/machine.slice/libpod-{id}.scope/container"),
        ] {
            assert_eq!(container_id(&path), Some(id.clone()), "{path}");
        }
        assert_eq!(
            container_id("0::/user.slice/user-0.slice/session-1.scope"),
            None
        );
        assert_eq!(container_id("0::/"), None);
    }
}
