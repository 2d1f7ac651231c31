//! What oi-trace injects never comes from a place another user can write: cache directories
//! and entries owned by someone else or writable by others are not used (and left as they
//! are), an edited entry fails its MAC, and every mapping of our code into a process leaves an
//! audit line. A user with three file capabilities samples a process of its own; without them
//! it is told which are missing; once armed, oi-trace keeps only what sampling takes. A path
//! a traced process turns into a link out of its root is never followed, and debug information
//! over the limit is refused before it is read.
//!
//! A test binary of its own, apart from the other footprint journeys: the peak memory of an
//! oi-trace it starts is read with wait4, and a child is charged the memory of the process that
//! spawned it until it execs, so the test process must not hold other journeys' data then.

use std::{
    os::unix::{
        fs::{MetadataExt as _, PermissionsExt as _},
        process::CommandExt as _,
    },
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use oi_e2e::{Finished, Fixture, FixtureBuild, OiTrace, TempDir, json, privileged};

const SECOND: Duration = Duration::from_secs(1);
/// `nobody` on Debian: a user that is neither root nor us.
const NOBODY: u32 = 65534;

/// One sample of `shop::inspect` in the jit_target fixture with `cache` as `$XDG_CACHE_HOME`:
/// the run's output, and the summary's (plans_cached, walkers_cached).
fn sample(fixture: &Fixture, cache: &TempDir, extra: &[&str]) -> (Finished, (u64, u64)) {
    let pid = fixture.pid.to_string();
    let summary = cache.file("summary.json");
    let mut args = vec![
        "--pid",
        &pid,
        "--uprobe",
        "shop::inspect",
        "--count",
        "1",
        "--summary",
        summary.to_str().unwrap_or_default(),
    ];
    args.extend_from_slice(extra);
    let out =
        OiTrace::start_with_env(&args, &[("XDG_CACHE_HOME", cache.path())]).finish(60 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    let sum = json(&std::fs::read_to_string(&summary).expect("summary"));
    let cached = (
        sum[0]["plans_cached"].as_u64().expect("plans_cached"),
        sum[0]["walkers_cached"].as_u64().expect("walkers_cached"),
    );
    (out, cached)
}

/// Every file under `dir`, with its bytes, owner, mode and modification time.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, u32, u32, i64)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            if meta.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read");
                files.push((path, bytes, meta.uid(), meta.mode(), meta.mtime_nsec()));
            }
        }
    }
    files.sort();
    files
}

fn entries(dir: &Path, ext: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("cache dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect()
}

/// The lines of stderr that explain why a cache was not used.
fn cache_warnings(out: &Finished) -> usize {
    out.stderr
        .iter()
        .filter(|l| l.starts_with("oi-trace: warning:") && l.contains("cache"))
        .count()
}

/// The output without what changes from run to run.
fn shape(stdout: &str) -> serde_json::Value {
    fn keep(v: &serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(o) => o
                .iter()
                .filter(|(k, _)| {
                    matches!(
                        k.as_str(),
                        "name" | "typeNames" | "members" | "staticSize" | "exclusiveSize"
                    )
                })
                .map(|(k, v)| (k.clone(), keep(v)))
                .collect(),
            serde_json::Value::Array(a) => a.iter().map(keep).collect(),
            other => other.clone(),
        }
    }
    keep(&json(stdout))
}

#[test]
fn caches_another_user_could_write_are_not_used() {
    if !privileged() {
        return;
    }
    let mut fixture = Fixture::start(&FixtureBuild::new("jit_target").build(), &[]);
    fixture.stdout.expect("tick", 20 * SECOND);
    for loosen in ["owned by nobody", "world-writable"] {
        let cache = TempDir::new("trust");
        let (first, cached) = sample(&fixture, &cache, &[]);
        assert_eq!(cached, (0, 0), "{loosen}: an empty cache builds everything");
        let ours = cache.path().join("oi-trace");
        for (path, _, _, mode, _) in snapshot(&ours) {
            assert_eq!(mode & 0o777, 0o600, "{}", path.display());
        }
        assert_eq!(
            std::fs::metadata(ours.join("jit")).expect("dir").mode() & 0o777,
            0o700
        );
        // Someone else's now: every entry, and the directories holding them.
        for (path, ..) in snapshot(&ours) {
            match loosen {
                "owned by nobody" => std::os::unix::fs::chown(&path, Some(NOBODY), None),
                _ => std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)),
            }
            .expect("loosen an entry");
        }
        if loosen == "owned by nobody" {
            for dir in [ours.clone(), ours.join("jit"), ours.join("plans")] {
                std::os::unix::fs::chown(&dir, Some(NOBODY), None).expect("chown dir");
            }
        }
        let planted = snapshot(&ours);
        let (second, cached) = sample(&fixture, &cache, &[]);
        assert_eq!(cached, (0, 0), "{loosen}: nothing taken from the cache");
        assert_eq!(
            cache_warnings(&second),
            1,
            "{loosen}: said once: {second:#?}"
        );
        assert_eq!(shape(&first.stdout), shape(&second.stdout), "{loosen}");
        assert_eq!(
            snapshot(&ours),
            planted,
            "{loosen}: the planted files are unchanged"
        );
    }
    fixture.assert_running();
}

#[test]
fn an_edited_walker_fails_its_mac() {
    if !privileged() {
        return;
    }
    let mut fixture = Fixture::start(&FixtureBuild::new("jit_target").build(), &[]);
    fixture.stdout.expect("tick", 20 * SECOND);
    let cache = TempDir::new("mac");
    let (first, _) = sample(&fixture, &cache, &[]);
    let (_, cached) = sample(&fixture, &cache, &[]);
    assert_eq!(
        cached,
        (1, 1),
        "a clean second run takes both from the cache"
    );
    let walkers = entries(&cache.path().join("oi-trace/jit"), "walker");
    assert_eq!(walkers.len(), 1);
    // One code byte changed: the entry is still well formed, owned and private.
    let mut bytes = std::fs::read(&walkers[0]).expect("walker");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&walkers[0], &bytes).expect("edit");
    let (third, cached) = sample(&fixture, &cache, &[]);
    assert_eq!(cached, (1, 0), "the edited walker is compiled again");
    assert_eq!(shape(&first.stdout), shape(&third.stdout));
    assert_ne!(
        std::fs::read(&walkers[0]).expect("walker"),
        bytes,
        "and replaced"
    );
    fixture.assert_running();
}

/// A copy of oi-trace that `nobody` can run, with file capabilities `caps` (none if empty).
fn capable_copy(dir: &TempDir, caps: &str) -> PathBuf {
    let copy = dir.file("oi-trace");
    oi_e2e::copy_executable(&oi_e2e::oi_trace_bin(), &copy);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    if !caps.is_empty() {
        let status = Command::new("setcap")
            .arg(caps)
            .arg(&copy)
            .status()
            .expect("setcap runs (cargo xtask setup installs libcap2-bin)");
        assert!(status.success(), "setcap {caps}");
    }
    copy
}

/// Runs `binary ARGS` as `nobody`, with no inherited capabilities, for at most a minute.
fn run_as_nobody(binary: &Path, args: &[&str], home: &Path) -> Finished {
    let out = Command::new("timeout")
        .arg("60")
        .arg(binary)
        .args(args)
        .env_clear()
        .env("HOME", home)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::null())
        .output()
        .expect("run oi-trace as nobody");
    Finished::from(out)
}

#[test]
fn a_user_with_three_file_capabilities_samples_its_own_process() {
    if !privileged() {
        return;
    }
    let fixture_binary = FixtureBuild::new("jit_target").build();
    // The fixture runs as nobody too: a user tracing a process of its own.
    let mut fixture = Fixture::start_with(Command::new(&fixture_binary).uid(NOBODY).gid(NOBODY));
    fixture.stdout.expect("tick", 20 * SECOND);
    let pid = fixture.pid.to_string();
    let args = ["--pid", &pid, "--uprobe", "shop::inspect", "--count", "1"];
    let dir = TempDir::new("caps");
    let home = TempDir::new("nobody-home");
    std::os::unix::fs::chown(home.path(), Some(NOBODY), Some(NOBODY)).expect("chown home");

    let copy = capable_copy(&dir, "cap_bpf,cap_perfmon,cap_sys_ptrace+ep");
    let user = run_as_nobody(&copy, &args, home.path());
    assert!(user.status.success(), "{user:#?}");
    let root = oi_e2e::run_oi_trace(&args, 60 * SECOND);
    assert!(root.status.success(), "{root:#?}");
    // The same object measured the same way (its contents do not change between samples).
    assert_eq!(shape(&user.stdout), shape(&root.stdout));
    // The cache it made is its own, private.
    let key = home.path().join(".cache/oi-trace/key");
    let meta = std::fs::metadata(&key).expect("nobody's cache key");
    assert_eq!((meta.uid(), meta.mode() & 0o777), (NOBODY, 0o600));

    // Without capabilities: one line naming what is missing, exit 2, the target untouched.
    let bare_dir = TempDir::new("nocaps");
    let bare = capable_copy(&bare_dir, "");
    let refused = run_as_nobody(&bare, &args, home.path());
    assert_eq!(refused.status.code(), Some(2), "{refused:#?}");
    assert_eq!(refused.stderr.len(), 1, "{refused:#?}");
    assert!(
        refused.stderr[0].starts_with(
            "oi-trace: error: missing capabilities CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE"
        ),
        "{refused:#?}"
    );
    fixture.assert_running();
    let tick = fixture.stdout.expect("tick", 20 * SECOND);
    assert!(!tick.contains("CORRUPT"), "{tick}");
}

/// The effective capability mask of process `pid`.
fn effective_caps(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .expect("CapEff");
    u64::from_str_radix(hex.trim(), 16).expect("hex")
}

#[test]
fn capabilities_are_dropped_once_armed_and_every_injection_is_audited() {
    if !privileged() {
        return;
    }
    let fixture_binary = FixtureBuild::new("jit_target").build();
    let mut fixture = Fixture::start(&fixture_binary, &[]);
    fixture.stdout.expect("tick", 20 * SECOND);
    let pid = fixture.pid.to_string();
    let dir = TempDir::new("audit");
    let audit = dir.file("audit.log");
    let tracer = OiTrace::start(&[
        "--pid",
        &pid,
        "--uprobe",
        "shop::inspect",
        "--every",
        "10",
        "--duration",
        "30",
        "--audit-log",
        audit.to_str().unwrap_or_default(),
    ]);
    let mut tracer = tracer;
    tracer.stderr.expect("oi-trace: attached", 30 * SECOND);
    // Armed: only ptrace, kill and file access remain (bits 1, 2, 5, 19); the guardian keeps
    // CAP_KILL alone.
    let kept = (1 << 1) | (1 << 2) | (1 << 5) | (1 << 19);
    let deadline = std::time::Instant::now() + 10 * SECOND;
    while effective_caps(tracer.pid()) & !kept != 0 {
        assert!(std::time::Instant::now() < deadline, "capabilities kept");
        std::thread::sleep(Duration::from_millis(10));
    }
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", tracer.pid()))
        .expect("children");
    let guardian: i32 = children
        .split_whitespace()
        .next()
        .expect("a guardian")
        .parse()
        .expect("pid");
    assert_eq!(
        effective_caps(guardian),
        1 << 5,
        "the guardian holds CAP_KILL only"
    );
    // Samples keep coming with the smaller set.
    while std::fs::read_to_string(&audit)
        .unwrap_or_default()
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no injection within 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let tracer_pid = tracer.pid().to_string();
    tracer.signal(oi_e2e::SIGINT);
    let out = tracer.finish(30 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    assert!(
        out.stdout.contains("shop::Ledger"),
        "samples were printed: {out:#?}"
    );
    // One mapping into one process: one line, naming everything.
    let log = std::fs::read_to_string(&audit).expect("audit log");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 1, "{log}");
    let fields: std::collections::HashMap<&str, &str> = lines[0]
        .split_whitespace()
        .filter_map(|f| f.split_once('='))
        .collect();
    let exe = std::fs::canonicalize(&fixture_binary).expect("exe");
    assert_eq!(fields["target_pid"], pid, "{log}");
    assert_eq!(fields["tracer_pid"], tracer_pid, "{log}");
    assert_eq!(fields["exe"], exe.to_str().unwrap_or_default(), "{log}");
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    assert_eq!(
        Some(fields["cgroup"]),
        cgroup.lines().find_map(|l| l.strip_prefix("0::")),
        "{log}"
    );
    assert_eq!(fields["uid"], "0", "{log}");
    assert!(fields["probes"].starts_with("shop::inspect"), "{log}");
    let digest = fields["code"].strip_prefix("blake3:").expect("a digest");
    assert!(
        digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()),
        "{log}"
    );
    let (start, end) = fields["region"].split_once('-').expect("a region");
    let parse = |h: &str| u64::from_str_radix(h.trim_start_matches("0x"), 16).expect("hex");
    let bytes: u64 = fields["region_bytes"].parse().expect("bytes");
    assert_eq!(parse(end) - parse(start), bytes, "{log}");
    assert_eq!(
        fields["code_bytes"].parse::<u64>().expect("code") % 4096,
        0,
        "{log}"
    );
    let mode = std::fs::metadata(&audit).expect("audit").mode() & 0o777;
    assert_eq!(mode, 0o600);
    fixture.assert_running();
}

#[test]
fn a_path_that_leads_out_of_the_targets_root_is_never_read() {
    if !privileged() {
        return;
    }
    // A process chrooted into its own root, with a static binary (nothing to share with the
    // host's libraries).
    let binary = FixtureBuild::new("races")
        .variant("races_static", &["-static"])
        .build();
    let root = TempDir::new("chroot");
    std::fs::create_dir_all(root.file("app")).expect("app dir");
    oi_e2e::copy_executable(&binary, &root.file("app/target"));
    let mut fixture = Fixture::start_with(
        Command::new("chroot")
            .arg(root.path())
            .args(["/app/target", "100"]),
    );
    fixture.stdout.expect("tick", 20 * SECOND);
    let pid = fixture.pid.to_string();
    // The path oi-trace could read it by (as /proc/PID/maps names it), turned inside the
    // root into a link to a file of the host: a copy of the same program. Were it read, the
    // probe would go on the copy, which nothing runs, and `--count 1` would never end.
    let mapped = std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe");
    let host = TempDir::new("host");
    let decoy = host.file("target");
    std::fs::copy(&binary, &decoy).expect("a copy on the host");
    let inside = root
        .path()
        .join(mapped.strip_prefix("/").expect("absolute"));
    std::fs::create_dir_all(inside.parent().expect("parent")).expect("dirs inside the root");
    std::os::unix::fs::symlink(&decoy, &inside).expect("the link");
    let out = oi_e2e::run_oi_trace(
        &["--pid", &pid, "--uprobe", "shop::inspect", "--count", "1"],
        60 * SECOND,
    );
    assert!(out.status.success(), "{out:#?}");
    assert!(shape(&out.stdout).is_array(), "{out:#?}");
    assert!(
        !out.stderr
            .iter()
            .any(|l| l.contains(host.path().to_str().unwrap_or("?"))),
        "{out:#?}"
    );
    fixture.assert_running();
    fixture.stdout.expect("tick", 20 * SECOND);
}

#[test]
fn debug_information_over_the_limit_is_a_clear_error() {
    if !privileged() {
        return;
    }
    // A program whose .debug_str claims 256 MiB once decompressed, in a file of a few hundred
    // KiB: reading it would take the memory, not the disk.
    let binary = FixtureBuild::new("races").build();
    let dir = TempDir::new("bigdwarf");
    let zeros = dir.file("zeros");
    std::fs::write(&zeros, vec![0u8; 256 << 20]).expect("zeros");
    let big = dir.file("races_big");
    let crafted = dir.file("races_crafted");
    let objcopy = |args: &[&std::ffi::OsStr]| {
        let status = Command::new("objcopy")
            .args(args)
            .status()
            .expect("objcopy");
        assert!(status.success(), "objcopy {args:?}");
    };
    let mut update = std::ffi::OsString::from(".debug_str=");
    update.push(&zeros);
    objcopy(&[
        "--update-section".as_ref(),
        &update,
        binary.as_os_str(),
        big.as_os_str(),
    ]);
    objcopy(&[
        "--compress-debug-sections=zlib".as_ref(),
        big.as_os_str(),
        crafted.as_os_str(),
    ]);
    std::fs::remove_file(&zeros).expect("rm");
    std::fs::remove_file(&big).expect("rm");
    assert!(std::fs::metadata(&crafted).expect("crafted").len() < 16 << 20);

    let mut fixture = Fixture::start(&crafted, &["100"]);
    fixture.stdout.expect("tick", 20 * SECOND);
    let pid = fixture.pid.to_string();
    #[expect(
        clippy::zombie_processes,
        reason = "reaped below by wait4, for its peak RSS"
    )]
    let mut child = Command::new(oi_e2e::oi_trace_bin())
        .args([
            "--pid",
            &pid,
            "--uprobe",
            "shop::inspect",
            "--count",
            "1",
            "--max-debuginfo-mb",
            "64",
        ])
        // An empty cache: a plan cached for the original build-id would spare the DWARF.
        .env("XDG_CACHE_HOME", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start oi-trace");
    let stderr = {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut text)
            .expect("stderr");
        text
    };
    // Waited for with wait4, for the peak memory it used.
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid, and wait4 writes only into what we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into locals.
    let waited = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(waited, child.id() as i32);
    assert_eq!(libc::WEXITSTATUS(status), 2, "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("is 256 MB (uncompressed), over the limit of 64 MB (--max-debuginfo-mb)"),
        "{stderr}"
    );
    let peak_mb = usage.ru_maxrss / 1024;
    assert!(peak_mb < 64 + 100, "peak RSS {peak_mb} MB");
    fixture.assert_running();
}
