//! The harness of the end-to-end journeys: build C++ fixtures with g++, start them, run
//! `oi-trace` on them, and clean up every process, cgroup and file a test made.
//!
//! Fixtures print `ready PID` when started and wait for SIGUSR1 before their measured work,
//! so a test can arm oi-trace first; they print `done ...` after it and exit when their stdin
//! closes.

pub mod demo;
pub mod pprof;
use std::{
    io::{BufRead as _, BufReader, Read as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    sync::{
        Mutex,
        atomic::{AtomicU32, Ordering},
        mpsc::{Receiver, RecvTimeoutError, channel},
    },
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

pub use nix::sys::signal::Signal::{SIGINT, SIGKILL, SIGTERM, SIGUSR1};

/// The workspace root: the parent of the package cargo runs us for (`tests/` for the
/// journeys, `xtask/` for the bench and soak). Read at run time, so that a build directory
/// copied from another checkout of the workspace still uses its own tree's fixtures and
/// binary; the directory this crate was compiled in is the fallback outside cargo.
pub fn workspace_root() -> PathBuf {
    let package = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    package
        .parent()
        .map_or_else(|| package.clone(), Path::to_path_buf)
}

/// Copies the program `from` to `to` from a child process (`cp -p`), so that the test process
/// never holds a descriptor that writes `to`. Tests run on many threads: a fixture that
/// another test forks while this process has `to` open for writing inherits that descriptor
/// until it execs, and running `to` in that moment fails with ETXTBSY ("Text file busy").
pub fn copy_executable(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-p")
        .arg(from)
        .arg(to)
        .status()
        .expect("run cp");
    assert!(status.success(), "cp {} {}", from.display(), to.display());
}

/// The `oi-trace` binary under test: `$OI_TRACE_BIN`, else `release/oi-trace` under
/// `$CARGO_TARGET_DIR` (which the build honours), else under the workspace's `target/`.
pub fn oi_trace_bin() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || workspace_root().join("target"),
        |d| workspace_root().join(d),
    );
    let path = std::env::var_os("OI_TRACE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| target.join("release/oi-trace"));
    assert!(
        path.exists(),
        "{} missing: run `cargo xtask test` (it builds it first)",
        path.display()
    );
    path
}

/// True when this process may load eBPF and ptrace (root). Without privileges a test returns
/// early, loudly, unless `OI_TRACE_REQUIRE_PRIVS=1`, where missing privileges fail it.
pub fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var("OI_TRACE_REQUIRE_PRIVS").as_deref() != Ok("1"),
        "OI_TRACE_REQUIRE_PRIVS=1 but this test runs without root (needs CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE)"
    );
    eprintln!("SKIPPED: needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE)");
    false
}

/// How to build one fixture binary from `tests/fixtures/NAME.cpp` (or `DIR/NAME.cpp`) into
/// `target/fixtures/` (or another folder): `g++ -g -O1 -std=c++17`, then the variant's flags
/// (a later `-O` wins), rebuilt only when a source is newer than the binary, and written
/// under a temporary name then renamed, so that a running fixture keeps the file it maps.
/// The one way journeys, unit tests and `cargo xtask bench` build C++.
#[derive(Clone, Debug)]
pub struct FixtureBuild {
    source: String,
    /// The folder of the source (default `tests/fixtures`).
    source_dir: Option<PathBuf>,
    /// The folder of the binary (default `target/fixtures`).
    out_dir: Option<PathBuf>,
    output: String,
    flags: Vec<String>,
    shared_libs: Vec<&'static str>,
    libs: Vec<String>,
    proto: Option<&'static str>,
    oil: bool,
    /// `g++` unless [`FixtureBuild::compiler`] says otherwise.
    compiler: &'static str,
}

static BUILD_LOCK: Mutex<()> = Mutex::new(());

impl FixtureBuild {
    pub fn new(source: impl Into<String>) -> Self {
        let source = source.into();
        Self {
            output: source.clone(),
            source,
            source_dir: None,
            out_dir: None,
            flags: Vec::new(),
            shared_libs: Vec::new(),
            libs: Vec::new(),
            proto: None,
            oil: false,
            compiler: "g++",
        }
    }

    /// Builds with another compiler driver (`clang++`, with `-stdlib=libc++` in the flags).
    pub fn compiler(mut self, compiler: &'static str) -> Self {
        self.compiler = compiler;
        self
    }

    /// Compiles against OIL: `-I oil/include` (rebuilt when `oil.h` changes) and linked to
    /// `liboil.so` beside the `oi-trace` under test, with an rpath to it.
    pub fn with_oil(mut self) -> Self {
        self.oil = true;
        self
    }

    /// The source is `DIR/NAME.cpp` (a unit test's own, a generated program).
    pub fn source_in(mut self, dir: impl Into<PathBuf>) -> Self {
        self.source_dir = Some(dir.into());
        self
    }

    /// The binary goes to `DIR` instead of `target/fixtures/`.
    pub fn output_in(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Where the source is and where the binary goes (created).
    fn dirs(&self) -> (PathBuf, PathBuf) {
        let src_dir = self
            .source_dir
            .clone()
            .unwrap_or_else(|| workspace_root().join("tests/fixtures"));
        let out_dir = self
            .out_dir
            .clone()
            .unwrap_or_else(|| workspace_root().join("target/fixtures"));
        std::fs::create_dir_all(&out_dir)
            .unwrap_or_else(|e| panic!("create {}: {e}", out_dir.display()));
        (src_dir, out_dir)
    }

    /// A variant built from the same source (e.g. `-no-pie`) under another file name.
    pub fn variant(mut self, output: &str, flags: &[&str]) -> Self {
        self.output = output.to_string();
        self.flags.extend(flags.iter().map(|f| f.to_string()));
        self
    }

    /// Links `tests/fixtures/LIB.cpp`, built as `libLIB.so`, with an rpath to it.
    pub fn shared_lib(mut self, lib: &'static str) -> Self {
        self.shared_libs.push(lib);
        self
    }

    /// Links installed libraries (`-lprotobuf`, `-labsl_raw_hash_set`, ...).
    pub fn libs(mut self, libs: &[&str]) -> Self {
        self.libs.extend(libs.iter().map(|l| l.to_string()));
        self
    }

    /// Compiles `tests/fixtures/PROTO.proto` with `protoc --cpp_out` into
    /// `target/fixtures/gen/` and builds the generated `PROTO.pb.cc` into the fixture, which
    /// includes `"PROTO.pb.h"`. Link `-lprotobuf` with `libs`.
    pub fn protoc(mut self, proto: &'static str) -> Self {
        self.proto = Some(proto);
        self
    }

    /// Compiles the source, with the variant's flags, as a shared object
    /// `target/fixtures/libOUTPUT.so` (a plugin a fixture dlopens) and returns its path.
    pub fn build_shared(&self) -> PathBuf {
        let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let (src_dir, out_dir) = self.dirs();
        let out = out_dir.join(format!("lib{}.so", self.output));
        let mut flags = self.flags.clone();
        flags.extend(["-shared".into(), "-fPIC".into()]);
        compile(
            self.compiler,
            &src_dir.join(format!("{}.cpp", self.source)),
            &out,
            &flags,
            &self.libs,
            &[],
        );
        out
    }

    /// Compiles (when the source is newer than the binary) and returns the binary's path.
    pub fn build(&self) -> PathBuf {
        let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let (src_dir, out_dir) = self.dirs();
        let fixtures = workspace_root().join("tests/fixtures");
        let mut link = vec!["-pthread".to_string()];
        for lib in &self.shared_libs {
            let so = out_dir.join(format!("lib{lib}.so"));
            compile(
                self.compiler,
                &fixtures.join(format!("{lib}.cpp")),
                &so,
                &["-shared".into(), "-fPIC".into()],
                &[],
                &[],
            );
            link.extend([
                format!("-L{}", out_dir.display()),
                format!("-l{lib}"),
                format!("-Wl,-rpath,{}", out_dir.display()),
            ]);
        }
        let out = out_dir.join(&self.output);
        let mut flags = self.flags.clone();
        // The fixtures' own headers (`alloc_count.h`, ...): a fixture that includes one is
        // stale when it changes (every fixture is checked against all of them; there are few).
        let mut inputs: Vec<PathBuf> = std::fs::read_dir(&fixtures)
            .expect("read tests/fixtures")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "h"))
            .collect();
        if let Some(proto) = self.proto {
            let gen_dir = out_dir.join("gen");
            std::fs::create_dir_all(&gen_dir).expect("create target/fixtures/gen");
            let source = fixtures.join(format!("{proto}.proto"));
            let generated = gen_dir.join(format!("{proto}.pb.cc"));
            let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            if modified(&generated).is_none() || modified(&generated) < modified(&source) {
                let status = Command::new("protoc")
                    .arg(format!("--cpp_out={}", gen_dir.display()))
                    .arg(format!("-I{}", fixtures.display()))
                    .arg(&source)
                    .status()
                    .expect("protoc runs (cargo xtask setup installs protobuf-compiler)");
                assert!(status.success(), "protoc failed on {}", source.display());
            }
            flags.push(format!("-I{}", gen_dir.display()));
            inputs.push(generated.clone());
            // After the fixture's source on the command line, like the libraries.
            link.insert(0, generated.display().to_string());
        }
        link.extend(self.libs.iter().cloned());
        if self.oil {
            let include = workspace_root().join("oil/include");
            let lib = oi_trace_bin()
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            assert!(
                lib.join("liboil.so").exists(),
                "{}/liboil.so missing: run `cargo xtask build`",
                lib.display()
            );
            flags.push(format!("-I{}", include.display()));
            inputs.push(include.join("oil.h"));
            link.extend([
                format!("-L{}", lib.display()),
                "-loil".into(),
                format!("-Wl,-rpath,{}", lib.display()),
            ]);
        }
        compile(
            self.compiler,
            &src_dir.join(format!("{}.cpp", self.source)),
            &out,
            &flags,
            &link,
            &inputs,
        );
        out
    }
}

/// The unwinder's fixture (`unwind_chain.cpp`) and its library (`unwind_hop.cpp`), built with
/// `flags` into `target/fixtures/unwind{FLAGS}/`, with a second copy of the library that the
/// fixture loads with dlopen when asked. Each file is rebuilt only when its source is newer:
/// a running fixture of another test must keep mapping the file its probe is attached to.
pub fn unwind_chain(flags: &[&str]) -> PathBuf {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let tag = flags.join("").replace(['-', '='], "");
    let dir = workspace_root()
        .join("target/fixtures")
        .join(format!("unwind{tag}"));
    let hop = FixtureBuild::new("unwind_hop")
        .variant("unwind_hop", flags)
        .output_in(&dir)
        .build_shared();
    // The same library under another name (another file).
    let copy = dir.join("libunwind_hop_dl.so");
    let modified = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    if modified(&copy) < modified(&hop) {
        let tmp = dir.join(format!("libunwind_hop_dl.so.{}", std::process::id()));
        std::fs::copy(&hop, &tmp).expect("copy the library");
        std::fs::rename(&tmp, &copy).expect("rename the copy");
    }
    FixtureBuild::new("unwind_chain")
        .variant("unwind_chain", flags)
        .output_in(&dir)
        .libs(&[
            &format!("-L{}", dir.display()),
            "-lunwind_hop",
            &format!("-Wl,-rpath,{}", dir.display()),
        ])
        .build()
}

/// `COMPILER -g -O1 FLAGS -o OUT SRC LINK`, skipped when OUT is newer than SRC and `inputs`.
fn compile(
    compiler: &str,
    src: &Path,
    out: &Path,
    flags: &[String],
    link: &[String],
    inputs: &[PathBuf],
) {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let Some(o) = modified(out)
        && std::iter::once(src)
            .chain(inputs.iter().map(PathBuf::as_path))
            .all(|i| modified(i).is_some_and(|m| o > m))
    {
        return;
    }
    // Build beside the target and rename, so a concurrent reader never sees half a binary.
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let status = Command::new(compiler)
        .args(["-g", "-O1", "-std=c++17"])
        .args(flags)
        .arg("-o")
        .arg(&tmp)
        .arg(src)
        .args(link)
        .status()
        .unwrap_or_else(|e| panic!("{compiler} runs: {e}"));
    assert!(status.success(), "{compiler} failed on {}", src.display());
    std::fs::rename(&tmp, out).expect("rename fixture");
}

/// Lines of a child's output stream, read on a thread so a test can wait with a timeout.
pub struct Lines {
    rx: Receiver<String>,
    seen: Vec<String>,
    /// The process writing them, whose kernel stacks a timeout reports.
    writer: i32,
}

impl Lines {
    /// Reads `stream` (written by process `writer`) on a thread of its own.
    pub fn spawn(stream: impl std::io::Read + Send + 'static, writer: i32) -> Self {
        let (tx, rx) = channel();
        thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            rx,
            seen: Vec::new(),
            writer,
        }
    }

    /// Waits for the next line starting with `prefix`; panics with everything seen on timeout.
    pub fn expect(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "no line starting with {prefix:?} within {timeout:?}; saw: {:#?}\nthe writer's threads in the kernel:\n{}",
                        self.seen,
                        kernel_stacks(self.writer)
                    )
                }
            }
        }
    }

    /// The lines that arrived since the last call, without waiting.
    pub fn take(&mut self) -> Vec<String> {
        let fresh: Vec<String> = self.rx.try_iter().collect();
        self.seen.extend(fresh.iter().cloned());
        fresh
    }

    /// Every line received so far by `expect`, `take` or `rest`, in order.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// Everything until the stream closes (the child exited).
    pub fn rest(&mut self) -> Vec<String> {
        while let Ok(line) = self.rx.recv_timeout(Duration::from_secs(30)) {
            self.seen.push(line);
        }
        self.seen.clone()
    }
}

/// A running fixture; killed by pid when dropped.
pub struct Fixture {
    child: Child,
    pub pid: i32,
    stdin: Option<ChildStdin>,
    pub stdout: Lines,
}

impl Fixture {
    pub fn start(binary: &Path, args: &[&str]) -> Self {
        Self::start_with(Command::new(binary).args(args))
    }

    /// Starts `cmd` (stdin and stdout piped) and waits for its `ready` line.
    pub fn start_with(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start fixture");
        let pid = child.id() as i32;
        let stdin = child.stdin.take();
        let mut stdout = Lines::spawn(child.stdout.take().expect("stdout"), pid);
        stdout.expect("ready", Duration::from_secs(20));
        Self {
            child,
            pid,
            stdin,
            stdout,
        }
    }

    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid), signal).expect("signal fixture");
    }

    /// The one-letter state from /proc/PID/stat.
    pub fn state(&self) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        stat.rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next())
            .unwrap_or('?')
    }

    /// Asserts the fixture is running or sleeping: not stopped, not traced-stopped, not gone.
    /// Waits until the fixture runs (is neither stopped nor traced), at most `timeout`; then
    /// [`Self::assert_running`] says what it is instead.
    pub fn wait_running(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.running_untraced() == (true, true) {
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
        self.assert_running();
    }

    pub fn assert_running(&self) {
        let (running, untraced) = self.running_untraced();
        assert!(running, "fixture {} is in state {}", self.pid, self.state());
        assert!(untraced, "fixture {} is still traced", self.pid);
    }

    /// Whether the fixture runs (state R, S or D), and whether nothing traces it.
    fn running_untraced(&self) -> (bool, bool) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        (
            matches!(self.state(), 'R' | 'S' | 'D'),
            status.contains("TracerPid:\t0"),
        )
    }

    /// Closes stdin (the fixture's cue to exit) and waits for its exit status.
    pub fn finish(mut self) -> ExitStatus {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait fixture") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "fixture {} did not exit",
                self.pid
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `oi-trace`; killed when dropped. Its stdout is drained from the start, as a
/// user's terminal would (a pipe nobody reads makes oi-trace hold back samples).
pub struct OiTrace {
    child: Child,
    pub stderr: Lines,
    stdout: Option<thread::JoinHandle<String>>,
}

/// What a finished `oi-trace` left.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: Vec<String>,
}

impl From<std::process::Output> for Finished {
    /// A run waited for by `Command::output` (one under another user or through `setpriv`).
    fn from(out: std::process::Output) -> Self {
        Self {
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr)
                .lines()
                .map(String::from)
                .collect(),
        }
    }
}

impl OiTrace {
    pub fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// Starts with extra environment variables (e.g. its own cache directory).
    pub fn start_with_env(args: &[&str], env: &[(&str, &Path)]) -> Self {
        let mut child = Command::new(oi_trace_bin())
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start oi-trace");
        let stderr = Lines::spawn(child.stderr.take().expect("stderr"), child.id() as i32);
        let stdout = child.stdout.take().map(|mut s| {
            thread::spawn(move || {
                let mut buf = String::new();
                let _ = s.read_to_string(&mut buf);
                buf
            })
        });
        Self {
            child,
            stderr,
            stdout,
        }
    }

    /// Starts and waits until the probes are armed.
    pub fn attached(args: &[&str]) -> Self {
        let mut t = Self::start(args);
        t.stderr
            .expect("oi-trace: attached", Duration::from_secs(60));
        t
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, signal: Signal) {
        let _ = kill(Pid::from_raw(self.pid()), signal);
    }

    /// Waits for the exit (at most `timeout`) and collects the output.
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let mut stdout = String::new();
        let reader = self.stdout.take();
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait oi-trace") {
                break status;
            }
            if Instant::now() > deadline {
                // Where each thread waits, read before the kill: a hang's only witness.
                let stacks = kernel_stacks(self.pid());
                let _ = self.child.kill();
                panic!(
                    "oi-trace did not exit within {timeout:?}; its threads in the kernel:\n{stacks}\nstderr: {:#?}",
                    self.stderr.rest()
                );
            }
            thread::sleep(Duration::from_millis(10));
        };
        if let Some(r) = reader {
            stdout = r.join().unwrap_or_default();
        }
        Finished {
            status,
            stdout,
            stderr: self.stderr.rest(),
        }
    }
}

impl Drop for OiTrace {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every thread of `pid` with its state and its kernel stack (`/proc/PID/task/TID/stack`,
/// readable by root), for the message of a test that timed out waiting for the process.
pub fn kernel_stacks(pid: i32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("(pid {pid} has no /proc entry)");
    };
    let mut out = String::new();
    for task in tasks.flatten() {
        let dir = task.path();
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        let comm = read("comm");
        let state = read("status")
            .lines()
            .find(|l| l.starts_with("State:"))
            .unwrap_or_default()
            .to_string();
        out += &format!(
            "thread {} ({}) {state} wchan {}\n{}",
            task.file_name().to_string_lossy(),
            comm.trim(),
            read("wchan"),
            read("stack")
        );
    }
    out
}

/// Runs `oi-trace` to completion with a timeout.
pub fn run_oi_trace(args: &[&str], timeout: Duration) -> Finished {
    OiTrace::start(args).finish(timeout)
}

/// A directory removed with everything in it when dropped.
pub struct TempDir(PathBuf);

static TEMP_COUNTER: AtomicU32 = AtomicU32::new(0);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("oi-e2e-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh cgroup v2 directory, removed when dropped (after its processes are gone).
pub struct TestCgroup(PathBuf);

impl TestCgroup {
    pub fn new(tag: &str) -> Self {
        let root = cgroup2_root().expect("cgroup2 is mounted");
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = root.join(format!("oi-e2e-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir(&path).expect("create cgroup");
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn add(&self, pid: i32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).expect("move into cgroup");
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Processes leave a cgroup only when they are reaped; give them a moment.
        for _ in 0..200 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The cgroup2 mount point, from our mountinfo.
pub fn cgroup2_root() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mountpoint = left.split_whitespace().nth(4)?;
        (right.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(mountpoint))
    })
}

/// `/proc/PID/maps` without the kernel's uprobe trampoline page, which the kernel adds at the
/// first hit of any uprobe and keeps for the life of the process. Empty once it is gone.
pub fn maps_of(pid: i32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.ends_with("[uprobes]"))
        .map(String::from)
        .collect()
}

/// Parses a JSON document.
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"))
}

/// A small deterministic generator, enough to spread the moments of a random-timing test.
/// Seeded from the clock; the seed is printed so a failing run can be replayed.
pub struct Lcg(u64);

impl Lcg {
    pub fn from_clock(what: &str) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        eprintln!("{what} from seed {seed}");
        Self(seed)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// `arg` as a POSIX shell reads it back: bare when it holds no character the shell treats
/// apart, else in single quotes. For the commands the demo and the conformance harness print
/// for people to copy.
pub fn shell_quoted(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-+=:,./@%".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quoted;

    #[test]
    fn quotes_for_the_shell() {
        assert_eq!(shell_quoted("--arg"), "--arg");
        assert_eq!(shell_quoted("arg0,arg1"), "arg0,arg1");
        assert_eq!(shell_quoted("a b"), "'a b'");
        assert_eq!(shell_quoted("it's"), r"'it'\''s'");
        assert_eq!(shell_quoted(""), "''");
    }
}
