//! The agent's targets: the processes of `--pid`, each with its labels. Reads
//! `/proc/PID/comm` and `/proc/PID/cgroup` once at start; never attaches anything (each
//! target's profiler does).

use super::labels::{Labels, service_name_from, valid_service_name};
use crate::{
    cli::agent::AgentArgs,
    error::{Error, Result},
    inferior::ProcessInfo,
};

/// One process the agent profiles.
#[derive(Debug, Clone)]
pub struct Target {
    pub pid: i32,
    /// Its command name, for messages.
    pub comm: String,
    pub labels: Labels,
}

/// The targets of `args`, with `--service-name` (or each command name) and `--label`s; an
/// unknown pid, a repeated one or a bad label is an input error.
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
        if targets.iter().any(|t| t.pid == pid) {
            return Err(Error::input(format!("--pid {pid} is given twice")));
        }
        let info = ProcessInfo::inspect(pid)?;
        let service_name = args
            .service_name
            .clone()
            .unwrap_or_else(|| service_name_from(&info.comm));
        let mut pairs = vec![("pid".to_string(), pid.to_string())];
        pairs.extend(extra.iter().cloned());
        targets.push(Target {
            pid,
            comm: info.comm,
            labels: Labels {
                service_name,
                pairs,
                container_id: std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                    .ok()
                    .and_then(|text| container_id(&text)),
            },
        });
    }
    Ok(targets)
}

/// The container id a process's cgroup path names, as container runtimes name their cgroups:
/// 64 hexadecimal digits as a path component of its own (`/docker/ID`, cgroupfs drivers) or
/// inside a systemd scope (`docker-ID.scope`, `cri-containerd-ID.scope`, `crio-ID.scope`,
/// `libpod-ID.scope`); the innermost one wins.
pub fn container_id(cgroup: &str) -> Option<String> {
    cgroup.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        path.rsplit('/').find_map(|component| {
            let name = component.strip_suffix(".scope").unwrap_or(component);
            let id = name.rsplit(['-', ':']).next()?;
            (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| id.to_ascii_lowercase())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_of_both_cgroup_drivers() {
        let id = "3f4e".repeat(16);
        for path in [
            format!("0::/system.slice/docker-{id}.scope"),
            format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice/cri-containerd-{id}.scope"
            ),
            format!("0::/kubepods/besteffort/pod1234-5678/{id}"),
            format!("0::/docker/{id}"),
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
