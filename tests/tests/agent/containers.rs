//! `--target all-containers`: two container cgroups laid out as Kubernetes lays them out, one
//! with the systemd cgroup driver (`kubepods.slice/…/cri-containerd-ID.scope`, a Burstable
//! pod) and one with cgroupfs (`kubepods/besteffort/podUID/ID`), under a root of the test's own
//! (`--cgroup-root`). One container's process runs before the agent starts, the other's starts
//! after it (found at a later scan); the first one's process ends during the run (its
//! container is dropped with one line). Each container's profiles reach the receiver with its
//! labels, and add up to its own fixture's totals exactly.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use oi_e2e::{SIGINT, cgroup2_root, privileged};

use super::{
    receiver::{Received, Receiver, Store},
    *,
};

/// Nested cgroup directories under a root of the test's own, removed innermost first.
pub(super) struct Tree {
    pub(super) root: PathBuf,
    dirs: Vec<PathBuf>,
}

impl Tree {
    pub(super) fn new() -> Self {
        // One root per test: the journeys of this binary run at once, in one process.
        static TREES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = TREES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = cgroup2_root().expect("cgroup2 is mounted").join(format!(
            "oi-e2e-agent-containers-{}-{n}",
            std::process::id()
        ));
        std::fs::create_dir(&root).expect("create the test's cgroup root");
        Self {
            root,
            dirs: Vec::new(),
        }
    }

    /// Creates `relative` and its parents under the root; returns its path.
    pub(super) fn make(&mut self, relative: &str) -> PathBuf {
        let mut path = self.root.clone();
        for part in relative.split('/') {
            path.push(part);
            if !path.exists() {
                std::fs::create_dir(&path).expect("create cgroup");
                self.dirs.push(path.clone());
            }
        }
        path
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        for dir in self.dirs.iter().rev().chain(std::iter::once(&self.root)) {
            // Processes leave a cgroup only once reaped; give them a moment.
            for _ in 0..200 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

pub(super) fn move_into(cgroup: &Path, pid: i32) {
    std::fs::write(cgroup.join("cgroup.procs"), pid.to_string()).expect("move into cgroup");
}

#[test]
fn all_containers_of_both_cgroup_drivers_with_their_labels_and_exact_counts() {
    if !privileged() {
        return;
    }
    let id_a = "a1".repeat(32);
    let id_b = "b2".repeat(32);
    let mut tree = Tree::new();
    let cgroup_a = tree.make(&format!(
        "kubepods.slice/kubepods-burstable.slice/\
         kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/cri-containerd-{id_a}.scope"
    ));
    let cgroup_b = tree.make(&format!(
        "kubepods/besteffort/pod99887766-5544-3322-1100-ffeeddccbbaa/{id_b}"
    ));
    let receiver = Receiver::start(0, Arc::new(Mutex::new(Store::default())));
    let url = format!("http://127.0.0.1:{}", receiver.port);

    let binary = o2();
    let (mut fixture_a, _) = start(&binary);
    move_into(&cgroup_a, fixture_a.pid);
    let start_time = SystemTime::now();
    let root = tree.root.display().to_string();
    let mut agent = agent(
        &[
            "--target",
            "all-containers",
            "--cgroup-root",
            &root,
            "--every",
            "1",
            "--interval",
            "1s",
            "--pyroscope-url",
            &url,
            "--label",
            "node=test",
        ],
        1,
    );
    // A container that starts later.
    let (mut fixture_b, _) = start(&binary);
    move_into(&cgroup_b, fixture_b.pid);
    agent.stderr.expect(
        &format!("oi-trace: agent: found cgroup {}", cgroup_b.display()),
        20 * SECOND,
    );
    agent.stderr.expect("oi-trace: attached", 60 * SECOND);
    let printed_a = run_phases(&mut fixture_a);
    let printed_b = run_phases(&mut fixture_b);
    // Every allocation of A in some interval, then A's process ends.
    std::thread::sleep(2 * SECOND);
    assert!(fixture_a.finish().success());
    agent.stderr.expect(
        &format!(
            "oi-trace: agent: cgroup {} has no process left",
            cgroup_a.display()
        ),
        20 * SECOND,
    );
    std::thread::sleep(SECOND);
    agent.signal(SIGINT);
    let done = agent.finish(30 * SECOND);
    let end = SystemTime::now();
    assert!(done.status.success(), "{done:?}");

    let mut by_container: BTreeMap<String, Vec<Received>> = BTreeMap::new();
    for r in receiver.received() {
        let id = r.labels.get("container_id").cloned().unwrap_or_default();
        by_container.entry(id).or_default().push(r);
    }
    assert_eq!(
        by_container.keys().cloned().collect::<Vec<_>>(),
        [id_a.clone(), id_b.clone()],
        "one series per container"
    );
    let want = |cgroup: &Path, id: &str, pod: &str, qos: &str| -> BTreeMap<String, String> {
        [
            ("cgroup", cgroup.display().to_string()),
            ("container_id", id.to_string()),
            ("pod_uid", pod.to_string()),
            ("qos", qos.to_string()),
            ("node", "test".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    };
    for (id, cgroup, pod, qos, printed) in [
        (
            &id_a,
            &cgroup_a,
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
            "burstable",
            printed_a,
        ),
        (
            &id_b,
            &cgroup_b,
            "99887766-5544-3322-1100-ffeeddccbbaa",
            "besteffort",
            printed_b,
        ),
    ] {
        let received = &by_container[id];
        for r in received {
            assert_eq!(r.service, id[..12], "{r:?}");
            assert_eq!(r.labels, want(cgroup, id, pod, qos));
        }
        let mut profiles: Vec<Interval> = received
            .iter()
            .map(|r| {
                let (types, sums) = totals(&r.profile);
                assert_eq!(types, HEAP_TYPES);
                (r.profile.time_nanos, r.profile.duration_nanos, sums)
            })
            .collect();
        profiles.sort_by_key(|p| p.0);
        let (allocs, bytes) = check_intervals(&profiles, start_time, end);
        assert_eq!(
            (allocs, bytes),
            (printed.allocs, printed.bytes),
            "container {id}"
        );
        let last = &profiles.last().unwrap().2;
        assert_eq!(
            (last[2], last[3]),
            (printed.live_allocs, printed.live_bytes)
        );
    }
    fixture_unharmed(fixture_b);
}
