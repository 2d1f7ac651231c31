//! The shipped deployments run as written: the options of `deploy/daemonset.yaml` (its
//! container's `args`, `$(NODE_NAME)` expanded as the kubelet does) and the default options of
//! `deploy/oi-trace-agent.service` (its `OI_TRACE_AGENT_ARGS`, split into words as systemd
//! does) are given to the agent as they stand, but for what only a real node has: the host's
//! cgroup root becomes a test root holding one kubepods container, Pyroscope's URL a receiver
//! on 127.0.0.1, the profile directory a temporary one, and the interval 1 s. Both agents
//! profile the same container at once; each one's profiles add up to the fixture's own totals
//! (`--every 1` added, so that they are exact).

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use oi_e2e::{SIGINT, TempDir, privileged};

use super::{
    containers::{Tree, move_into},
    receiver::{Receiver, Store},
    *,
};

/// The manifest's `args:` items, unquoted, in order.
fn daemonset_args(yaml: &str) -> Vec<String> {
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "args:").skip(1);
    let mut args = Vec::new();
    for line in lines.by_ref() {
        let Some(item) = line.trim().strip_prefix("- ") else {
            break;
        };
        args.push(item.trim_matches('"').to_string());
    }
    assert!(!args.is_empty(), "deploy/daemonset.yaml has no args");
    args
}

/// The unit's default `OI_TRACE_AGENT_ARGS`, split into words, after checking that
/// `ExecStart` runs `oi-trace agent` with them.
fn unit_args(unit: &str) -> Vec<String> {
    assert!(
        unit.lines()
            .any(|l| l == "ExecStart=/usr/local/bin/oi-trace agent $OI_TRACE_AGENT_ARGS"),
        "{unit}"
    );
    let value = unit
        .lines()
        .find_map(|l| l.strip_prefix("Environment=\"OI_TRACE_AGENT_ARGS="))
        .and_then(|v| v.strip_suffix('"'))
        .expect("a default OI_TRACE_AGENT_ARGS");
    let mut args = vec!["agent".to_string()];
    args.extend(value.split_whitespace().map(str::to_string));
    args
}

/// `args` with the value after each option in `values` replaced, and every option there
/// present; `$(NODE_NAME)` expanded.
fn with_values(args: &[String], values: &[(&str, &str)]) -> Vec<String> {
    let mut out: Vec<String> = args
        .iter()
        .map(|a| a.replace("$(NODE_NAME)", "test-node"))
        .collect();
    for (option, value) in values {
        match out.iter().position(|a| a == option) {
            Some(i) => out[i + 1] = value.to_string(),
            None => out.extend([option.to_string(), value.to_string()]),
        }
    }
    out
}

fn read(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_shipped_daemonset_and_systemd_unit_profile_a_container_exactly() {
    if !privileged() {
        return;
    }
    let id = "c3".repeat(32);
    let mut tree = Tree::new();
    let cgroup = tree.make(&format!(
        "kubepods.slice/kubepods-pod11223344_5566_7788_99aa_bbccddeeff00.slice/\
         cri-containerd-{id}.scope"
    ));
    let root = tree.root.display().to_string();
    let receiver = Receiver::start(0, Arc::new(Mutex::new(Store::default())));
    let url = format!("http://127.0.0.1:{}", receiver.port);
    let dir = TempDir::new("agent-deploy");
    let dir_text = dir.path().display().to_string();

    let daemonset = with_values(
        &daemonset_args(&read("deploy/daemonset.yaml")),
        &[
            ("--cgroup-root", &root),
            ("--pyroscope-url", &url),
            ("--interval", "1s"),
            ("--every", "1"),
        ],
    );
    assert_eq!(daemonset[..3], ["agent", "--target", "all-containers"]);
    let unit = with_values(
        &unit_args(&read("deploy/oi-trace-agent.service")),
        &[
            ("--cgroup-root", &root),
            ("--pprof-dir", &dir_text),
            ("--interval", "1s"),
            ("--every", "1"),
        ],
    );

    let (mut fixture, _) = start(&o2());
    move_into(&cgroup, fixture.pid);
    let start_time = SystemTime::now();
    let mut agents: Vec<OiTrace> = [&daemonset, &unit]
        .iter()
        .map(|args| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut agent = OiTrace::start(&args);
            agent.stderr.expect("oi-trace: attached", 60 * SECOND);
            agent
        })
        .collect();
    let printed = run_phases(&mut fixture);
    std::thread::sleep(2 * SECOND);
    for agent in &agents {
        agent.signal(SIGINT);
    }
    let done: Vec<_> = agents.drain(..).map(|a| a.finish(30 * SECOND)).collect();
    let end = SystemTime::now();
    for d in &done {
        assert!(d.status.success(), "{d:?}");
    }

    // The DaemonSet's profiles, with the node label it sets.
    let mut received: Vec<Interval> = receiver
        .received()
        .into_iter()
        .map(|r| {
            assert_eq!(r.labels.get("container_id"), Some(&id), "{r:?}");
            assert_eq!(r.labels.get("node").map(String::as_str), Some("test-node"));
            let (_, sums) = totals(&r.profile);
            (r.profile.time_nanos, r.profile.duration_nanos, sums)
        })
        .collect();
    received.sort_by_key(|p| p.0);
    assert_eq!(
        check_intervals(&received, start_time, end),
        (printed.allocs, printed.bytes),
        "the DaemonSet's profiles"
    );

    // The unit's files, named by the container id's first 12 digits.
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let files: Vec<Interval> = names
        .iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            assert!(name.contains(&format!("-{}-", &id[..12])), "{name}");
            let profile = decode(&std::fs::read(path).unwrap());
            let (_, sums) = totals(&profile);
            (profile.time_nanos, profile.duration_nanos, sums)
        })
        .collect();
    assert_eq!(
        check_intervals(&files, start_time, end),
        (printed.allocs, printed.bytes),
        "the systemd unit's files"
    );
    fixture_unharmed(fixture);
}
