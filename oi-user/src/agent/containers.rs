//! Containers as the cgroup hierarchy shows them, the way the eBPF profiling agents find
//! them: a container is a cgroup directory whose name holds a 64-hex-digit container id
//! (`docker-ID.scope`, `cri-containerd-ID.scope`, `crio-ID.scope`, `libpod-ID.scope` under
//! systemd; the bare `ID` under cgroupfs), and a Kubernetes pod's UID and QoS class come from
//! the kubepods path around it, for both cgroup drivers:
//!
//! - systemd: `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID with _>.slice/cri-containerd-ID.scope`
//!   (`kubepods-pod<UID>.slice` directly under `kubepods.slice` for Guaranteed pods);
//! - cgroupfs: `kubepods/burstable/pod<UID>/ID` (`kubepods/pod<UID>/ID` for Guaranteed).
//!
//! The pod's namespace and name are not in the cgroup path: they are Kubernetes API objects,
//! and the agent does not ask the API server. `parse` is pure; `discover` reads directories
//! only.

use std::path::{Path, PathBuf};

/// What a cgroup path says about the container in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// The container id (64 hex digits, lowercase).
    pub container_id: Option<String>,
    /// The pod's UID, with dashes.
    pub pod_uid: Option<String>,
    /// `guaranteed`, `burstable` or `besteffort`, under kubepods.
    pub qos: Option<String>,
}

/// The container id a cgroup directory's own name holds.
pub fn container_id_of_component(component: &str) -> Option<String> {
    let name = component.strip_suffix(".scope").unwrap_or(component);
    let id = name.rsplit(['-', ':']).next()?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_ascii_lowercase())
}

/// What `path` (a cgroup directory, absolute or relative) says: the innermost container id, and
/// the pod and QoS class when it lies under `kubepods`.
pub fn parse(path: &Path) -> Placement {
    let components: Vec<&str> = path.iter().filter_map(|c| c.to_str()).collect();
    let container_id = components
        .iter()
        .rev()
        .find_map(|c| container_id_of_component(c));
    let Some(kube) = components
        .iter()
        .position(|c| *c == "kubepods" || *c == "kubepods.slice")
    else {
        return Placement {
            container_id,
            ..Default::default()
        };
    };
    let mut pod_uid = None;
    let mut qos = None;
    for c in &components[kube + 1..] {
        let name = c.strip_suffix(".slice").unwrap_or(c);
        // systemd: kubepods-burstable, kubepods-burstable-pod<uid>, kubepods-pod<uid>.
        let name = name.strip_prefix("kubepods-").unwrap_or(name);
        for class in ["burstable", "besteffort"] {
            if name == class || name.starts_with(&format!("{class}-")) {
                qos = Some(class.to_string());
            }
        }
        let pod_part = name
            .strip_prefix("burstable-")
            .or_else(|| name.strip_prefix("besteffort-"))
            .unwrap_or(name);
        if let Some(uid) = pod_part.strip_prefix("pod") {
            // The systemd driver writes the UID's dashes as underscores.
            pod_uid = Some(uid.replace('_', "-"));
        }
    }
    if pod_uid.is_some() && qos.is_none() {
        qos = Some("guaranteed".to_string());
    }
    Placement {
        container_id,
        pod_uid,
        qos,
    }
}

/// Every container cgroup under `root` that holds a process now (in it or below), at most
/// `MAX_DEPTH` levels down, in a stable order.
pub fn discover(root: &Path) -> Vec<PathBuf> {
    const MAX_DEPTH: usize = 12;
    let mut found = Vec::new();
    let mut dirs = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let is_container = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(container_id_of_component)
            .is_some();
        if is_container {
            if has_processes(&dir) {
                found.push(dir);
            }
            // A container's own sub-cgroups belong to it.
            continue;
        }
        if depth >= MAX_DEPTH {
            continue;
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| (e.path(), depth + 1)),
            );
        }
    }
    found.sort();
    found
}

/// Whether a process is in cgroup `dir` or below it.
pub fn has_processes(dir: &Path) -> bool {
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        if std::fs::read_to_string(d.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty()) {
            return true;
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubepods_paths_of_both_drivers() {
        let id = "ab12".repeat(16);
        let systemd = format!(
            "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/cri-containerd-{id}.scope"
        );
        assert_eq!(
            parse(Path::new(&systemd)),
            Placement {
                container_id: Some(id.clone()),
                pod_uid: Some("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into()),
                qos: Some("burstable".into()),
            }
        );
        let guaranteed =
            format!("/sys/fs/cgroup/kubepods.slice/kubepods-pod1234_5678.slice/crio-{id}.scope");
        let p = parse(Path::new(&guaranteed));
        assert_eq!(
            (p.pod_uid.as_deref(), p.qos.as_deref()),
            (Some("1234-5678"), Some("guaranteed"))
        );
        let cgroupfs = format!("/sys/fs/cgroup/kubepods/besteffort/pod0f1e-2d3c/{id}");
        assert_eq!(
            parse(Path::new(&cgroupfs)),
            Placement {
                container_id: Some(id.clone()),
                pod_uid: Some("0f1e-2d3c".into()),
                qos: Some("besteffort".into()),
            }
        );
        let docker = format!("/sys/fs/cgroup/system.slice/docker-{id}.scope");
        assert_eq!(
            parse(Path::new(&docker)),
            Placement {
                container_id: Some(id.clone()),
                ..Default::default()
            }
        );
        assert_eq!(
            parse(Path::new("/sys/fs/cgroup/user.slice")),
            Placement::default()
        );
        assert_eq!(container_id_of_component(&format!("{id}x")), None);
    }
}
