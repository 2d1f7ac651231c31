//! `--otlp-endpoint` and `OTEL_EXPORTER_OTLP_ENDPOINT` (experimental): OTLP profiles over
//! HTTP to a receiver that decodes them with the vendored opentelemetry-proto messages;
//! resource attributes, one OTLP profile per sample type over one dictionary, contiguous
//! intervals and exact totals.

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use oi_e2e::{OiTrace, SIGINT, privileged};
use oi_trace::export::otlp::proto::opentelemetry::proto::{
    collector::profiles::v1development::ExportProfilesServiceRequest, common::v1::any_value::Value,
};

use super::{
    receiver::{Receiver, Store},
    *,
};

/// One request as (time, duration, [alloc_objects, alloc_space, inuse_objects,
/// inuse_space]) after checking its shape and its resource.
fn interval_of(r: &ExportProfilesServiceRequest, pid: i32, comm: &str) -> Interval {
    let d = r.dictionary.as_ref().expect("a dictionary");
    assert_eq!(d.string_table[0], "");
    assert_eq!(d.mapping_table[0], Default::default());
    assert_eq!(d.location_table[0], Default::default());
    assert_eq!(d.function_table[0], Default::default());
    assert_eq!(d.stack_table[0], Default::default());
    assert_eq!(r.resource_profiles.len(), 1);
    let rp = &r.resource_profiles[0];
    let attributes: Vec<(String, Value)> = rp
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone().unwrap().value.unwrap()))
        .collect();
    assert!(attributes.contains(&("service.name".into(), Value::StringValue(comm.into()))));
    assert!(attributes.contains(&("process.pid".into(), Value::IntValue(pid.into()))));
    assert!(attributes.contains(&("env".into(), Value::StringValue("journey".into()))));
    if let Some((_, Value::StringValue(id))) = attributes.iter().find(|(k, _)| k == "container.id")
    {
        assert!(
            id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id}"
        );
    }
    let scope = &rp.scope_profiles[0];
    assert_eq!(scope.scope.as_ref().unwrap().name, "oi-trace");
    let s = |i: i32| d.string_table[i as usize].as_str();
    let types: Vec<String> = scope
        .profiles
        .iter()
        .map(|p| {
            let t = p.sample_type.as_ref().unwrap();
            format!("{}/{}", s(t.type_strindex), s(t.unit_strindex))
        })
        .collect();
    // The default (inuse_space) first, then the others in Go's order.
    assert_eq!(
        types,
        [
            "inuse_space/bytes",
            "alloc_objects/count",
            "alloc_space/bytes",
            "inuse_objects/count"
        ]
    );
    let sum = |i: usize| -> i64 {
        scope.profiles[i]
            .samples
            .iter()
            .map(|x| {
                assert!(x.stack_index > 0 && (x.stack_index as usize) < d.stack_table.len());
                x.values[0]
            })
            .sum()
    };
    let first = &scope.profiles[0];
    for p in &scope.profiles {
        assert_eq!(
            (p.time_unix_nano, p.duration_nano),
            (first.time_unix_nano, first.duration_nano)
        );
    }
    (
        first.time_unix_nano as i64,
        first.duration_nano as i64,
        vec![sum(1), sum(2), sum(3), sum(0)],
    )
}

fn to_otlp(binary: &Path, by_environment: bool) {
    let receiver = Receiver::start(0, Arc::new(Mutex::new(Store::default())));
    let url = format!("http://127.0.0.1:{}", receiver.port);
    let (mut fixture, pid) = start(binary);
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap()
        .trim()
        .to_string();
    let start_time = SystemTime::now();
    let mut args = vec![
        "agent",
        "--pid",
        &pid,
        "--every",
        "1",
        "--interval",
        "1s",
        "--label",
        "env=journey",
    ];
    if !by_environment {
        args.extend(["--otlp-endpoint", &url]);
    }
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", Path::new(&url))];
    let mut agent = OiTrace::start_with_env(&args, if by_environment { &env } else { &[] });
    agent.stderr.expect(
        "oi-trace: agent: OTLP profiles are experimental",
        Duration::from_secs(30),
    );
    agent
        .stderr
        .expect("oi-trace: attached", Duration::from_secs(60));
    let printed = run_phases(&mut fixture);
    std::thread::sleep(SECOND + SECOND / 2);
    agent.signal(SIGINT);
    let done = agent.finish(30 * SECOND);
    let end = SystemTime::now();
    assert!(done.status.success(), "{done:?}");
    let mut profiles: Vec<Interval> = receiver
        .otlp()
        .iter()
        .map(|r| interval_of(r, fixture.pid, &comm))
        .collect();
    profiles.sort_by_key(|p| p.0);
    assert!(profiles.len() >= 3, "{profiles:?}");
    // protoc reads the same bytes against the vendored .proto files.
    let decoded = protoc_decode(&receiver.otlp_bodies()[0]);
    for want in [
        "key: \"process.pid\"".to_string(),
        format!("int_value: {pid}"),
        "string_table: \"inuse_space\"".to_string(),
        "name: \"oi-trace\"".to_string(),
    ] {
        assert!(decoded.contains(&want), "{want} in {decoded}");
    }
    let (allocs, bytes) = check_intervals(&profiles, start_time, end);
    assert_eq!((allocs, bytes), (printed.allocs, printed.bytes));
    let last = &profiles.last().unwrap().2;
    assert_eq!(
        (last[2], last[3]),
        (printed.live_allocs, printed.live_bytes)
    );
    fixture_unharmed(fixture);
}

#[test]
fn otlp_profiles_with_resource_attributes_and_exact_totals_at_o2() {
    if !privileged() {
        return;
    }
    to_otlp(&o2(), false);
}

#[test]
fn otlp_endpoint_from_the_environment_at_o0() {
    if !privileged() {
        return;
    }
    to_otlp(&o0(), true);
}

/// `protoc --decode` of an export request against the vendored opentelemetry-proto files.
fn protoc_decode(body: &[u8]) -> String {
    use std::io::Write as _;
    let include = oi_e2e::workspace_root().join("oi-user/proto");
    let mut child = std::process::Command::new("protoc")
        .arg(format!("-I{}", include.display()))
        .arg("--decode=opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest")
        .arg("opentelemetry/proto/collector/profiles/v1development/profiles_service.proto")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run protoc (installed by cargo xtask setup)");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "protoc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
