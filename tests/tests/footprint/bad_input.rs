//! The bad-input matrix: every row is one mistake a user can make, and each must end the same
//! way — one line on stderr starting `oi-trace: error: `, exit status 2, no panic, no
//! backtrace, nothing on stdout — with the target untouched: alive, not stopped, not traced,
//! its maps as they were, its own work still advancing.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use oi_e2e::{Finished, Fixture, FixtureBuild, TempDir, privileged, run_oi_trace};

const SECOND: Duration = Duration::from_secs(1);

fn races() -> PathBuf {
    FixtureBuild::new("races").build()
}

/// Runs oi-trace to its end and checks the shape every row shares; returns the error line.
fn bad_input(args: &[&str]) -> String {
    let out = run_oi_trace(args, 30 * SECOND);
    assert_one_error_line(&out);
    out.stderr[0].clone()
}

fn assert_one_error_line(out: &Finished) {
    assert_eq!(out.status.code(), Some(2), "{out:#?}");
    assert_eq!(out.stderr.len(), 1, "exactly one line on stderr: {out:#?}");
    assert!(
        out.stderr[0].starts_with("oi-trace: error: "),
        "{:?}",
        out.stderr[0]
    );
    assert!(
        !out.stderr[0].contains("panicked") && !out.stderr[0].contains("RUST_BACKTRACE"),
        "{out:#?}"
    );
    assert!(out.stdout.is_empty(), "{out:#?}");
}

/// `/proc/PID/maps` without the kernel's uprobe trampoline page.
fn maps_of(pid: i32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .expect("maps")
        .lines()
        .filter(|l| !l.ends_with("[uprobes]"))
        .map(String::from)
        .collect()
}

/// A running races fixture and its maps before oi-trace saw it.
struct Target {
    fixture: Fixture,
    maps: Vec<String>,
}

impl Target {
    fn start(binary: &Path) -> Self {
        let mut fixture = Fixture::start(binary, &[]);
        fixture.stdout.expect("tick", 20 * SECOND);
        let maps = maps_of(fixture.pid);
        Self { fixture, maps }
    }

    fn pid(&self) -> String {
        self.fixture.pid.to_string()
    }

    /// Alive, not stopped, not traced, maps unchanged, still ticking; then a clean exit.
    fn assert_untouched(mut self) {
        self.fixture.assert_running();
        assert_eq!(maps_of(self.fixture.pid), self.maps, "maps changed");
        self.fixture.stdout.expect("tick", 20 * SECOND);
        assert!(self.fixture.finish().success());
    }
}

#[test]
fn no_such_pid() {
    if !privileged() {
        return;
    }
    let pid = (1..)
        .map(|k| 4_000_000 - k)
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .unwrap();
    let line = bad_input(&["--pid", &pid.to_string(), "--uprobe", "shop::inspect"]);
    assert_eq!(line, format!("oi-trace: error: no such process: pid {pid}"));
}

/// A child of kthreadd: a kernel thread, which has no user space to probe.
fn a_kernel_thread() -> (i32, String) {
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((left, right)) = stat.rsplit_once(')') else {
            continue;
        };
        let ppid = right.split_whitespace().nth(1);
        if ppid == Some("2") {
            let comm = left.split_once('(').unwrap().1.to_string();
            return (pid, comm);
        }
    }
    (2, "kthreadd".into())
}

#[test]
fn kernel_thread() {
    if !privileged() {
        return;
    }
    let (pid, comm) = a_kernel_thread();
    let line = bad_input(&["--pid", &pid.to_string(), "--uprobe", "shop::inspect"]);
    assert_eq!(
        line,
        format!("oi-trace: error: pid {pid} ({comm}) is a kernel thread")
    );
}

#[test]
fn zombie() {
    if !privileged() {
        return;
    }
    let mut parent = Fixture::start(&races(), &["100", "zombie"]);
    let zombie: i32 = parent
        .stdout
        .expect("zombie", 20 * SECOND)
        .strip_prefix("zombie ")
        .unwrap()
        .parse()
        .unwrap();
    let line = bad_input(&["--pid", &zombie.to_string(), "--uprobe", "shop::inspect"]);
    assert_eq!(
        line,
        format!("oi-trace: error: pid {zombie} (races) is a zombie: it has exited")
    );
    let state = std::fs::read_to_string(format!("/proc/{zombie}/stat")).unwrap();
    assert!(
        state.contains(") Z "),
        "still a zombie, not reaped by us: {state}"
    );
    parent.assert_running();
    assert!(parent.finish().success());
}

#[test]
fn already_traced_by_another_tracer() {
    if !privileged() {
        return;
    }
    let target = Target::start(&races());
    let tracer_bin = FixtureBuild::new("badinput_tracer").build();
    let other = Fixture::start(&tracer_bin, &[&target.pid()]);
    let line = bad_input(&["--pid", &target.pid(), "--uprobe", "shop::inspect"]);
    assert_eq!(
        line,
        format!(
            "oi-trace: error: pid {} is already traced by pid {} (badinput_tracer)",
            target.pid(),
            other.pid
        )
    );
    // Still traced by the other tracer, which we must not have disturbed.
    let status = std::fs::read_to_string(format!("/proc/{}/status", target.pid())).unwrap();
    assert!(
        status.contains(&format!("TracerPid:\t{}", other.pid)),
        "{status}"
    );
    drop(other);
    std::thread::sleep(Duration::from_millis(50));
    target.assert_untouched();
}

#[test]
fn symbol_not_found_suggests_the_closest_names() {
    if !privileged() {
        return;
    }
    let target = Target::start(&races());
    let pid = target.pid();
    let place = format!("pid {pid} (races)");
    let line = bad_input(&["--pid", &pid, "--uprobe", "shop::inspectt"]);
    assert_eq!(
        line,
        format!(
            "oi-trace: error: symbol \"shop::inspectt\" not found in {place}; did you mean \
             shop::inspect(shop::Ledger const&, long)?"
        )
    );
    // Both overloads are as close: both offered.
    let line = bad_input(&["--pid", &pid, "--uprobe", "shop::prise"]);
    assert_eq!(
        line,
        format!(
            "oi-trace: error: symbol \"shop::prise\" not found in {place}; did you mean \
             shop::price(double), shop::price(int)?"
        )
    );
    // Wrong parameter list: the right one is offered.
    let line = bad_input(&["--pid", &pid, "--uprobe", "shop::Ledger::audit(int)"]);
    assert_eq!(
        line,
        format!(
            "oi-trace: error: symbol \"shop::Ledger::audit(int)\" not found in {place}; did \
             you mean shop::Ledger::audit(long) const?"
        )
    );
    // Nothing close: no guess, a hint on how to name a function.
    let line = bad_input(&["--pid", &pid, "--uprobe", "zzzz::qqqq::xxxx_yyyy"]);
    assert!(
        line.starts_with(&format!(
            "oi-trace: error: symbol \"zzzz::qqqq::xxxx_yyyy\" not found in {place} (give a \
             function name"
        )),
        "{line}"
    );
    target.assert_untouched();
}

#[test]
fn ambiguous_symbol_lists_the_candidates() {
    if !privileged() {
        return;
    }
    let target = Target::start(&races());
    let pid = target.pid();
    let line = bad_input(&["--pid", &pid, "--uprobe", "shop::price"]);
    let exe = races();
    assert_eq!(
        line,
        format!(
            "oi-trace: error: symbol \"shop::price\" is ambiguous in pid {pid} (races), 2 \
             candidates: shop::price(double) [_ZN4shop5priceEd] in {exe}; shop::price(int) \
             [_ZN4shop5priceEi] in {exe} (add the parameter list or use the mangled name)",
            exe = exe.display()
        )
    );
    target.assert_untouched();
}

/// Where a debug file for `binary` would be looked up by its build-id.
fn build_id_path(binary: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(binary)
        .output()
        .expect("readelf");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build-id")
        .trim()
        .to_string();
    format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..])
}

const GET_DEBUG_INFO: &str = "rebuild it with -g, or install its debug info (the -dbg, -dbgsym \
                              or -debuginfo package of its distribution puts it under \
                              /usr/lib/debug)";

#[test]
fn stripped_binary_says_how_to_get_debug_info() {
    if !privileged() {
        return;
    }
    let dir = TempDir::new("stripped");
    let stripped = dir.file("races-stripped");
    oi_e2e::copy_executable(&races(), &stripped);
    assert!(
        Command::new("strip")
            .arg(&stripped)
            .status()
            .unwrap()
            .success()
    );
    let target = Target::start(&stripped);
    let pid = target.pid();
    let line = bad_input(&["--pid", &pid, "--uprobe", "shop::inspect"]);
    assert_eq!(
        line,
        format!(
            "oi-trace: error: symbol \"shop::inspect\" not found in pid {pid} (races-stripped); \
             {} is stripped (no symbol table, no debug information): no separate debug file at \
             {} (by its build-id {}); {GET_DEBUG_INFO}",
            stripped.display(),
            build_id_path(&stripped),
            build_id_path(&stripped)
                .trim_start_matches("/usr/lib/debug/.build-id/")
                .trim_end_matches(".debug")
                .replace('/', ""),
        )
    );
    target.assert_untouched();
}

#[test]
fn binary_without_dwarf_says_how_to_get_debug_info() {
    if !privileged() {
        return;
    }
    // -g0 after the harness's -g: symbols, but no DWARF.
    let binary = FixtureBuild::new("races")
        .variant("races-nodwarf", &["-g0"])
        .build();
    let target = Target::start(&binary);
    let pid = target.pid();
    let line = bad_input(&["--pid", &pid, "--uprobe", "shop::inspect"]);
    let build_id = build_id_path(&binary);
    let prefix = "oi-trace: error: shop::inspect(shop::Ledger const&, long): ";
    assert!(line.starts_with(prefix), "{line}");
    let expected_end = format!(
        "{} has no debug information (no .debug_info); no separate debug file at {build_id} \
         (by its build-id {}); {GET_DEBUG_INFO}",
        binary.display(),
        build_id
            .trim_start_matches("/usr/lib/debug/.build-id/")
            .trim_end_matches(".debug")
            .replace('/', ""),
    );
    assert!(line.ends_with(&expected_end), "{line}\n{expected_end}");
    target.assert_untouched();
}

/// The error line of `--arg ARG` on `shop::inspect` of a live target, which must be left
/// untouched.
fn bad_arg_of_inspect(arg: &str) -> String {
    let target = Target::start(&races());
    let line = bad_input(&[
        "--pid",
        &target.pid(),
        "--uprobe",
        "shop::inspect",
        "--arg",
        arg,
    ]);
    target.assert_untouched();
    line
}

#[test]
fn arg7_of_a_two_parameter_function() {
    if !privileged() {
        return;
    }
    let line = bad_arg_of_inspect("arg0,arg7");
    let f = "shop::inspect(shop::Ledger const&, long)";
    assert_eq!(
        line,
        format!(
            "oi-trace: error: {f}: no such argument `arg7`: {f} has 2 parameter(s) (arg0..arg1)"
        )
    );
}

#[test]
fn this_of_a_free_function() {
    if !privileged() {
        return;
    }
    let line = bad_arg_of_inspect("this");
    let f = "shop::inspect(shop::Ledger const&, long)";
    assert_eq!(
        line,
        format!(
            "oi-trace: error: {f}: `this` requested, but {f} is not a non-static member function"
        )
    );
}

#[test]
fn retval_with_an_entry_probe() {
    if !privileged() {
        return;
    }
    let line = bad_arg_of_inspect("retval");
    assert_eq!(
        line,
        "oi-trace: error: --arg retval needs a return probe (--uretprobe), not --uprobe"
    );
}

#[test]
fn cgroup_path_that_is_not_a_cgroup_v2_directory() {
    if !privileged() {
        return;
    }
    let mount = oi_e2e::cgroup2_root().expect("cgroup2 mounted");
    let dir = TempDir::new("not-a-cgroup");
    let missing = mount.join("oi-e2e-no-such-cgroup");
    let mut paths = vec![dir.path().to_path_buf(), missing];
    // A cgroup v1 hierarchy, where the machine has one (hybrid layout).
    paths.extend(
        ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu"]
            .map(PathBuf::from)
            .into_iter()
            .filter(|p| p.join("cgroup.procs").exists() && !p.starts_with(&mount)),
    );
    for path in paths {
        let line = bad_input(&[
            "--cgroup",
            path.to_str().unwrap(),
            "--uprobe",
            "shop::inspect",
        ]);
        assert_eq!(
            line,
            format!(
                "oi-trace: error: {} is not a cgroup v2 directory (cgroup2 is mounted at {})",
                path.display(),
                mount.display()
            )
        );
    }
}

#[test]
fn every_zero_and_count_zero() {
    if !privileged() {
        return;
    }
    let target = Target::start(&races());
    let pid = target.pid();
    let line = bad_input(&["--pid", &pid, "--uprobe", "shop::inspect", "--every", "0"]);
    assert_eq!(
        line,
        "oi-trace: error: --every must be at least 1 (sample every Nth hit), got 0"
    );
    let line = bad_input(&["--pid", &pid, "--uprobe", "shop::inspect", "--count", "0"]);
    assert_eq!(
        line,
        "oi-trace: error: --count must be at least 1 (stop after K samples), got 0"
    );
    target.assert_untouched();
}

#[test]
fn conflicting_and_missing_options() {
    if !privileged() {
        return;
    }
    let target = Target::start(&races());
    let pid = target.pid();
    let rows: [(&[&str], &str); 5] = [
        (
            &[
                "--pid",
                &pid,
                "--uprobe",
                "shop::inspect",
                "--count-only",
                "--count",
                "3",
            ],
            "the argument '--count-only' cannot be used with '--count <K>' (see --help)",
        ),
        (
            &[
                "--pid",
                &pid,
                "--cgroup",
                "/sys/fs/cgroup",
                "--uprobe",
                "shop::inspect",
            ],
            "the argument '--pid <PID>' cannot be used with '--cgroup <PATH>' (see --help)",
        ),
        (
            &["--uprobe", "shop::inspect"],
            "the following required arguments were not provided: <--pid <PID>|--cgroup \
             <PATH>> (see --help)",
        ),
        (
            &[
                "--pid",
                &pid,
                "--uprobe",
                "shop::inspect",
                "--pretty",
                "--format",
                "tree",
            ],
            "--pretty applies to --format json only",
        ),
        (
            &[
                "--pid",
                &pid,
                "--uprobe",
                "shop::inspect",
                "--every",
                "many",
            ],
            "invalid value 'many' for '--every <N>': invalid digit found in string (see --help)",
        ),
    ];
    for (args, message) in rows {
        let line = bad_input(args);
        assert_eq!(line, format!("oi-trace: error: {message}"), "{args:?}");
    }
    target.assert_untouched();
}

/// oi-trace run through `setpriv` with fewer privileges.
fn run_with_privileges(setpriv: &[&str], args: &[&str]) -> Finished {
    let out = Command::new("setpriv")
        .args(setpriv)
        .arg("--")
        .arg(oi_e2e::oi_trace_bin())
        .args(args)
        .output()
        .expect("setpriv runs");
    Finished::from(out)
}

#[test]
fn missing_capabilities_are_named() {
    if !privileged() {
        return;
    }
    let target = Target::start(&races());
    let pid = target.pid();
    let args = ["--pid", &pid, "--uprobe", "shop::inspect", "--count", "1"];
    let needs = "oi-trace needs CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (run it as root, or \
                 give this copy `setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep`)";
    let rows: [(&[&str], &str); 3] = [
        (
            &["--inh-caps=-all", "--bounding-set=-sys_ptrace"],
            "missing capability CAP_SYS_PTRACE",
        ),
        (
            // CAP_SYS_ADMIN would stand in for both.
            &["--inh-caps=-all", "--bounding-set=-bpf,-perfmon,-sys_admin"],
            "missing capabilities CAP_BPF, CAP_PERFMON",
        ),
        (
            &["--reuid=65534", "--regid=65534", "--clear-groups"],
            "missing capabilities CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE",
        ),
    ];
    for (setpriv, missing) in rows {
        let out = run_with_privileges(setpriv, &args);
        assert_one_error_line(&out);
        assert_eq!(
            out.stderr[0],
            format!("oi-trace: error: {missing}: {needs}"),
            "{setpriv:?}"
        );
    }
    target.assert_untouched();
}

#[test]
fn already_traced_by_gdb() {
    if !privileged() {
        return;
    }
    if Command::new("gdb").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no gdb");
        return;
    }
    let target = Target::start(&races());
    // gdb attaches (stopping the target), holds it until the file `go` exists (at most 60 s),
    // then detaches as a batch run ends. Killing gdb instead can leave the target in the
    // group stop that gdb's attach began: the kernel's rule when a tracer dies, not ours.
    let dir = TempDir::new("gdb");
    let go = dir.file("go");
    let hold = format!(
        "shell for i in $(seq 1200); do [ -e '{}' ] && break; sleep 0.05; done",
        go.display()
    );
    let mut gdb = Command::new("gdb")
        .args(["-q", "-nx", "-batch", "-p", &target.pid(), "-ex", &hold])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("gdb");
    let status_file = format!("/proc/{}/status", target.pid());
    let deadline = std::time::Instant::now() + 20 * SECOND;
    let tracer = loop {
        let status = std::fs::read_to_string(&status_file).unwrap();
        let tracer = status
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .unwrap()
            .trim()
            .to_string();
        if tracer != "0" {
            break tracer;
        }
        assert!(std::time::Instant::now() < deadline, "gdb did not attach");
        std::thread::sleep(Duration::from_millis(20));
    };
    let line = bad_input(&["--pid", &target.pid(), "--uprobe", "shop::inspect"]);
    assert_eq!(
        line,
        format!(
            "oi-trace: error: pid {} is already traced by pid {tracer} (gdb)",
            target.pid()
        )
    );
    // gdb's detach lets the target run on.
    std::fs::write(&go, b"").expect("let gdb go");
    let deadline = std::time::Instant::now() + 60 * SECOND;
    while gdb.try_wait().expect("wait for gdb").is_none() {
        assert!(std::time::Instant::now() < deadline, "gdb did not detach");
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = std::time::Instant::now() + 5 * SECOND;
    while target.fixture.state() != 'R' && target.fixture.state() != 'S' {
        assert!(std::time::Instant::now() < deadline, "target left stopped");
        std::thread::sleep(Duration::from_millis(20));
    }
    target.assert_untouched();
}
