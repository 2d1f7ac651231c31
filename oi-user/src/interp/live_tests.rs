//! Live tests of the whole footprint pipeline (DWARF → plan → interpreter → report) on C++
//! fixtures from `tests/fixtures/footprint_*.cpp`, without the eBPF trigger: a tiny ptrace
//! breakpoint stops the fixture at the probed function's first instruction (or at its return
//! address), the registers at that point play the part of the eBPF-captured ones, and the
//! JSON the [`Measurer`] prints is compared with the numbers the fixture computed about itself
//! (exact equality). Fixture processes are killed by pid when a test ends, pass or fail.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use oi_common::EntryRegs;
use serde_json::Value;

use crate::debuginfo::{Binary, find_function};
use crate::footprint::measure::{Measurer, OutputFormat};
use crate::interp::RemoteReader;

/// Builds `tests/fixtures/NAME.cpp` with `flags` (`-O0` when none) into `target/fixtures/`,
/// named after both (`footprint_basicO1`).
pub fn build_fixture(name: &str, flags: &[&str]) -> PathBuf {
    let flags: &[&str] = if flags.is_empty() { &["-O0"] } else { flags };
    let tag = flags.join("").replace(['-', '='], "");
    oi_e2e::FixtureBuild::new(name)
        .variant(&format!("{name}{tag}"), flags)
        .build()
}

#[derive(Debug)]
struct Probe {
    is_return: bool,
    symbol: String,
    args: Vec<String>,
    features: Vec<String>,
    expect: Vec<(String, String, u64)>,
}

/// A running fixture; killed (by pid) when dropped.
struct Fixture {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The fixture's own walk time, when it reports one.
    native_ns: Option<u64>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pid_of(f: &Fixture) -> Pid {
    Pid::from_raw(f.child.id() as i32)
}

fn start(exe: &Path) -> (Fixture, Vec<Probe>) {
    let mut child = Command::new(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start fixture");
    let stdin = child.stdin.take();
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut f = Fixture {
        child,
        stdin,
        stdout,
        native_ns: None,
    };
    let mut probes: Vec<Probe> = Vec::new();
    loop {
        let mut line = String::new();
        let n = f.stdout.read_line(&mut line).expect("read fixture");
        assert!(n > 0, "fixture exited before READY");
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["READY"] => break,
            ["NATIVE_NS", _] => f.native_ns = w[1].parse().ok(),
            ["PROBE", kind, sym, args, feats] => probes.push(Probe {
                is_return: *kind == "return",
                symbol: sym.to_string(),
                args: args.split(',').map(String::from).collect(),
                features: if *feats == "-" {
                    vec![]
                } else {
                    feats.split(',').map(String::from).collect()
                },
                expect: vec![],
            }),
            ["E", path, key, value] => probes.last_mut().expect("E before PROBE").expect.push((
                path.to_string(),
                key.to_string(),
                value.parse().expect("number"),
            )),
            _ => panic!("unexpected fixture line: {line}"),
        }
    }
    (f, probes)
}

/// Load bias of `exe` in process `pid`, from its first mapping.
fn load_bias(pid: Pid, exe: &Path, binary: &Binary) -> u64 {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let canon = exe.canonicalize().expect("canonical exe");
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 6 && Path::new(f[5]) == canon {
            let start =
                u64::from_str_radix(f[0].split('-').next().unwrap_or("0"), 16).expect("hex");
            let off = u64::from_str_radix(f[2], 16).expect("hex");
            return binary.load_bias(start, off).expect("bias");
        }
    }
    panic!("{} not mapped in {pid}", exe.display());
}

fn wait_trap(pid: Pid) -> nix::libc::user_regs_struct {
    loop {
        match waitpid(pid, None).expect("waitpid") {
            WaitStatus::Stopped(_, Signal::SIGTRAP) => return ptrace::getregs(pid).expect("regs"),
            WaitStatus::Stopped(_, sig) => ptrace::cont(pid, sig).expect("cont"),
            WaitStatus::PtraceEvent(..) => ptrace::cont(pid, None).expect("cont"),
            other => panic!("fixture did not reach the breakpoint: {other:?}"),
        }
    }
}

/// Runs to the breakpoint at `addr` (int3), then restores the byte and rewinds rip.
fn run_to(pid: Pid, addr: u64, then: impl FnOnce()) -> nix::libc::user_regs_struct {
    // Stopped right on that instruction (the same function probed twice): step over it
    // first, or the new breakpoint would fire on the old hit.
    if ptrace::getregs(pid).expect("regs").rip == addr {
        ptrace::step(pid, None).expect("step");
        wait_trap(pid);
    }
    let orig = ptrace::read(pid, addr as ptrace::AddressType).expect("peek");
    ptrace::write(pid, addr as ptrace::AddressType, (orig & !0xff) | 0xcc).expect("poke");
    ptrace::cont(pid, None).expect("cont");
    then();
    let mut regs = wait_trap(pid);
    assert_eq!(regs.rip - 1, addr, "stopped at an unexpected place");
    ptrace::write(pid, addr as ptrace::AddressType, orig).expect("restore");
    regs.rip = addr;
    ptrace::setregs(pid, regs).expect("setregs");
    regs
}

fn entry_regs(r: &nix::libc::user_regs_struct) -> EntryRegs {
    EntryRegs {
        rdi: r.rdi,
        rsi: r.rsi,
        rdx: r.rdx,
        rcx: r.rcx,
        r8: r.r8,
        r9: r.r9,
        rsp: r.rsp,
        rip: r.rip,
        rax: r.rax,
        rbx: r.rbx,
        rbp: r.rbp,
        r10: r.r10,
        r11: r.r11,
        r12: r.r12,
        r13: r.r13,
        r14: r.r14,
        r15: r.r15,
        xmm: [0; 16],
    }
}

/// Follows `0/name/[]#2` through the JSON result.
fn find<'v>(json: &'v Value, path: &str) -> &'v Value {
    let mut parts = path.split('/');
    let root: usize = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("root index");
    let mut cur = &json[root];
    for part in parts {
        let (name, nth) = match part.split_once('#') {
            Some((n, i)) => (n, i.parse::<usize>().expect("index")),
            None => (part, 0),
        };
        let members = cur["members"].as_array().expect("members");
        cur = members
            .iter()
            .filter(|m| m["name"] == name)
            .nth(nth)
            .unwrap_or_else(|| panic!("no {part} in {path}"));
    }
    cur
}

/// A fixture stopped under ptrace, its probes read, ready to run to them.
struct Session {
    f: Fixture,
    probes: Vec<Probe>,
    pid: Pid,
    bias: u64,
    binary: Binary,
    stdin: Option<ChildStdin>,
}

fn attach(name: &str, flags: &[&str]) -> Session {
    let exe = build_fixture(name, flags);
    let binary = Binary::open(&exe).expect("open fixture");
    let (mut f, probes) = start(&exe);
    assert!(!probes.is_empty(), "fixture {name} declared no probes");
    let pid = pid_of(&f);
    ptrace::seize(pid, ptrace::Options::empty()).expect("seize");
    ptrace::interrupt(pid).expect("interrupt");
    match waitpid(pid, None).expect("waitpid") {
        WaitStatus::PtraceEvent(..) | WaitStatus::Stopped(..) => {}
        other => panic!("unexpected {other:?}"),
    }
    let bias = load_bias(pid, &exe, &binary);
    let stdin = f.stdin.take();
    Session {
        f,
        probes,
        pid,
        bias,
        binary,
        stdin,
    }
}

impl Session {
    /// Builds the measurer of probe `i` and runs the fixture to that probe's hit.
    fn hit(&mut self, i: usize) -> (Measurer, EntryRegs) {
        let p = &self.probes[i];
        let syms = find_function(&self.binary, &p.symbol).expect("symbols");
        let sym = syms
            .first()
            .unwrap_or_else(|| panic!("no symbol {}", p.symbol));
        let measurer = Measurer::new(&self.binary, sym, &p.args, &p.features, p.is_return)
            .unwrap_or_else(|e| panic!("Measurer::new({}): {e}", p.symbol));
        let stdin = &mut self.stdin;
        let mut regs = run_to(self.pid, self.bias + sym.address, || {
            if let Some(mut s) = stdin.take() {
                s.write_all(b"go\n").expect("write go");
            }
        });
        if p.is_return {
            let ret =
                ptrace::read(self.pid, regs.rsp as ptrace::AddressType).expect("return address");
            regs = run_to(self.pid, ret as u64, || {});
        }
        (measurer, entry_regs(&regs))
    }

    fn finish(mut self) {
        ptrace::detach(self.pid, None).expect("detach");
        let mut line = String::new();
        let _ = self.f.stdout.read_line(&mut line);
    }
}

/// Runs every probe of a fixture and checks its expectations; returns the raw and parsed
/// JSON outputs.
pub fn run_fixture(name: &str, flags: &[&str]) -> Vec<(String, Value)> {
    let mut s = attach(name, flags);
    let mut outputs = Vec::new();
    let mut failures = Vec::new();
    for i in 0..s.probes.len() {
        let (measurer, regs) = s.hit(i);
        let p = &s.probes[i];
        let mut out = Vec::new();
        measurer
            .measure(
                &regs,
                s.bias,
                &RemoteReader::new(s.pid.as_raw()),
                OutputFormat::Json,
                &mut out,
            )
            .unwrap_or_else(|e| panic!("measure {}: {e}", p.symbol));
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.ends_with("]\n") && text.matches('\n').count() == 1,
            "one line per sample"
        );
        let json: Value = serde_json::from_str(&text).expect("valid JSON");
        if std::env::var_os("OI_DUMP").is_some() {
            eprintln!("{text}");
        }
        for (path, key, want) in &p.expect {
            let got = find(&json, path)[key.as_str()].as_u64();
            if got != Some(*want) {
                failures.push(format!(
                    "{} {path} {key}: got {got:?}, fixture says {want}",
                    p.symbol
                ));
            }
        }
        outputs.push((text, json));
    }
    s.finish();
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
    outputs
}

/// Counts bytes and newlines without keeping them.
#[derive(Default)]
struct Counter {
    bytes: u64,
    lines: u64,
}

impl Write for Counter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.bytes += b.len() as u64;
        self.lines += b.iter().filter(|c| **c == b'\n').count() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn basic_structs_strings_vectors_and_abi() {
    let runs = run_fixture("footprint_basic", &["-O1"]);
    // Key order of a node (docs/semantics.md, "JSON shape"), checked on the raw text.
    let text = &runs[0].0;
    assert!(text.starts_with(r#"[{"size":"#), "{text}");
    let order = [
        "\"size\"",
        "\"name\"",
        "\"typePath\"",
        "\"typeNames\"",
        "\"staticSize\"",
        "\"exclusiveSize\"",
        "\"is_primitive\"",
        "\"members\"",
    ];
    let pos: Vec<usize> = order.iter().map(|k| text.find(k).expect("key")).collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "key order in {text}");
    let counts_text = &text[text.find("\"name\":\"counts\"").expect("counts")..];
    let order = [
        "\"exclusiveSize\"",
        "\"pointer\"",
        "\"length\"",
        "\"capacity\"",
        "\"is_primitive\"",
    ];
    let pos: Vec<usize> = order
        .iter()
        .map(|k| counts_text.find(k).expect("key"))
        .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "container key order");
    let out: Vec<Value> = runs.into_iter().map(|r| r.1).collect();
    let root = &out[0][0];
    assert_eq!(root["name"], "a0");
    assert_eq!(root["typeNames"], serde_json::json!(["Inventory"]));
    let counts = find(&out[0], "0/counts");
    assert_eq!(
        counts["typeNames"],
        serde_json::json!(["std::vector<int32_t, std::allocator<int32_t>>"])
    );
    assert_eq!(counts["typePath"], serde_json::json!(["a0", "counts"]));
    let name = find(&out[0], "0/name");
    assert_eq!(
        name["typeNames"],
        serde_json::json!([
            "string",
            "std::__cxx11::basic_string<int8_t, std::char_traits<int8_t>, std::allocator<int8_t>>"
        ])
    );
    assert_eq!(
        find(&out[0], "0/id")["typeNames"],
        serde_json::json!(["int32_t", "__int32_t", "int32_t"])
    );
    assert_eq!(find(&out[0], "0/id")["is_primitive"], false);
    assert_eq!(find(&out[0], "0/ratio")["is_primitive"], true);
}

#[test]
fn basic_at_o0_too() {
    run_fixture("footprint_basic", &["-O0"]);
}

#[test]
fn every_container_family_and_nesting() {
    let runs = run_fixture("footprint_containers", &["-O1"]);
    let out = &runs[0].1;
    let name = |p: &str| find(out, p)["typeNames"].clone();
    assert_eq!(
        name("0/mp"),
        serde_json::json!([
            "std::map<int32_t, double, less<int>, std::allocator<std::pair<int32_t const, double>>>"
        ])
    );
    assert_eq!(
        name("0/sp"),
        serde_json::json!(["std::shared_ptr<std::vector<uint64_t, std::allocator<uint64_t>>>"])
    );
    assert_eq!(
        name("0/arr"),
        serde_json::json!(["std::array<uint64_t, 8>"])
    );
    assert_eq!(
        name("0/opt_full"),
        serde_json::json!(["std::optional<uint64_t>"])
    );
    assert_eq!(name("0/carr2"), serde_json::json!(["int32_t[3][2]"]));
    assert_eq!(name("0/mp/[]#0"), serde_json::json!([]));
    assert_eq!(find(out, "0/mp/[]#0")["is_primitive"], true);
}

#[test]
fn every_type_kind_and_the_features() {
    let runs = run_fixture("footprint_types", &["-O1"]);
    let j = |i: usize| &runs[i].1;
    let names = |i: usize, p: &str| find(j(i), p)["typeNames"].clone();
    use serde_json::json;
    assert_eq!(
        names(0, "0/td"),
        json!(["small_t", "int8_t", "__int8_t", "int8_t"])
    );
    assert_eq!(find(j(0), "0/td")["is_primitive"], false);
    assert_eq!(names(0, "0/color"), json!(["ns::Color"]));
    assert_eq!(names(0, "0/opaque"), json!(["uintptr_t (stubbed)"]));
    assert_eq!(find(j(0), "0/opaque")["is_primitive"], true);
    assert_eq!(names(0, "0/fn"), json!(["uintptr_t (stubbed)"]));
    assert_eq!(names(0, "0/matrix"), json!(["int32_t[3][2]"]));
    assert_eq!(names(0, "0/matrix/[]#0"), json!(["int32_t[3]"]));
    assert_eq!(names(0, "0/ld"), json!(["long double"]));
    // Pre-order numbering: Kinds 0, then 12 typedefs/enums/structs before it.
    assert_eq!(names(0, "0/anon_member"), json!(["__oi_anon_13"]));
    assert_eq!(
        find(j(0), "0/six")["members"].as_array().map(Vec::len),
        Some(6)
    );
    assert!(
        find(j(0), "0/u")["members"]
            .as_array()
            .is_some_and(Vec::is_empty)
    );
    // chase-raw-pointers: typed pointers are spelled, the pointee is `*`.
    assert_eq!(names(1, "0/ip"), json!(["int32_t*"]));
    assert_eq!(names(1, "0/vp"), json!(["void*"]));
    assert_eq!(names(1, "0/ip/*"), json!(["int32_t"]));
    // Polymorphic class: vptr first, as an ordinary stubbed member.
    let poly: Vec<String> = find(j(3), "0")["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(poly, ["_vptr.Bv", "i", "v", "j"]);
    // capture-keys: string keys as text, non-scalar keys as addresses.
    let by_str = find(j(6), "0/by_str");
    assert_eq!(by_str["members"][0]["name"], "[abc]");
    assert_eq!(by_str["members"][0]["data"], "abc");
    assert_eq!(
        by_str["members"][0]["typePath"],
        json!(["a0", "by_str", "[abc]"])
    );
    let by_pair = &find(j(6), "0/by_pair")["members"][0];
    assert!(
        by_pair["data"]
            .as_str()
            .is_some_and(|s| s.starts_with("0x")),
        "{by_pair}"
    );
    let multi = &find(j(6), "0/multi")["members"][0];
    assert_eq!(multi["name"], "[]");
    assert!(multi.get("data").is_none());
    // Anonymous numbering per root: a member struct is 1; typedef 1, its struct 2.
    assert_eq!(names(7, "0/s"), json!(["__oi_anon_1"]));
    assert_eq!(names(7, "1/t"), json!(["AnonTd", "__oi_anon_2"]));
}

/// A scratch directory under `target/fixtures`, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/fixtures")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn objcopy(args: &[&std::ffi::OsStr]) {
    let st = Command::new("objcopy")
        .args(args)
        .status()
        .expect("run objcopy");
    assert!(st.success(), "objcopy {args:?} failed");
}

fn plan_of(
    exe: &Path,
    symbol: &str,
    args: &[&str],
) -> Result<String, crate::footprint::measure::MeasureError> {
    let binary = Binary::open(exe).expect("open");
    let sym = find_function(&binary, symbol)
        .expect("symbols")
        .into_iter()
        .next()
        .expect("symbol");
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    Measurer::new(&binary, &sym, &args, &[], false).map(|m| format!("{:?}", m.plan()))
}

#[test]
fn separate_and_compressed_debug_info() {
    let exe = build_fixture("footprint_basic", &["-O1"]);
    let dir = scratch("debuglink");
    let sym = "_Z8take_refRK9Inventory";
    let want = plan_of(&exe, sym, &["arg0"]).expect("plan from the original");
    // Compressed debug sections (zlib).
    let z = dir.join("compressed");
    objcopy(&[
        "--compress-debug-sections=zlib".as_ref(),
        exe.as_os_str(),
        z.as_os_str(),
    ]);
    assert_eq!(plan_of(&z, sym, &["arg0"]).expect("compressed"), want);
    // Stripped binary + .gnu_debuglink to a debug file beside it.
    let debug = dir.join("app.debug");
    let stripped = dir.join("app");
    objcopy(&[
        "--only-keep-debug".as_ref(),
        exe.as_os_str(),
        debug.as_os_str(),
    ]);
    let link = format!("--add-gnu-debuglink={}", debug.display());
    objcopy(&[
        "--strip-debug".as_ref(),
        link.as_ref(),
        exe.as_os_str(),
        stripped.as_os_str(),
    ]);
    assert_eq!(
        plan_of(&stripped, sym, &["arg0"]).expect("via debuglink"),
        want
    );
    // Without the debug file: a clear bad-input error.
    std::fs::remove_file(&debug).expect("rm");
    let err = plan_of(&stripped, sym, &["arg0"]).expect_err("no debug info");
    assert!(err.is_bad_input());
    assert!(err.to_string().contains("no debug information"), "{err}");
}

#[test]
fn argument_errors_are_bad_input_with_clear_messages() {
    let exe = build_fixture("footprint_basic", &["-O1"]);
    let err = plan_of(&exe, "_Z8take_intil", &["arg7"]).expect_err("arg7");
    assert!(err.is_bad_input());
    assert_eq!(
        err.to_string(),
        "no such argument `arg7`: take_int(int, long) has 2 parameter(s) (arg0..arg1)"
    );
    let err = plan_of(&exe, "_Z8take_intil", &["this"]).expect_err("this");
    assert!(
        err.to_string().contains("not a non-static member function"),
        "{err}"
    );
    let err = plan_of(&exe, "_Z8take_intil", &["retval"]).expect_err("retval");
    assert!(err.to_string().contains("--uretprobe"), "{err}");
    let err = plan_of(&exe, "_Z8take_intil", &["bogus"]).expect_err("bogus");
    assert!(err.is_bad_input());
}

#[test]
fn polymorphic_inheritance_measures_the_dynamic_type() {
    let runs = run_fixture("footprint_poly", &["-O1"]);
    assert_eq!(
        find(&runs[0].1, "0")["typeNames"],
        serde_json::json!(["Poly"])
    );
    assert_eq!(
        find(&runs[1].1, "0")["typeNames"],
        serde_json::json!(["Shape"])
    );
    assert_eq!(
        find(&runs[2].1, "0/shape/ptr_val")["typeNames"],
        serde_json::json!(["Labelled"])
    );
}

#[test]
fn types_with_dwarf4_bitfield_encoding() {
    // DWARF 4 describes bitfields with DW_AT_bit_offset (from the storage unit's MSB).
    run_fixture("footprint_types", &["-O1", "-gdwarf-4"]);
}

#[test]
fn basic_at_o2() {
    run_fixture("footprint_basic", &["-O2"]);
}

#[test]
fn containers_at_o0() {
    run_fixture("footprint_containers", &["-O0"]);
}

#[test]
fn custom_allocators_comparators_and_adapters() {
    let runs = run_fixture("footprint_containers", &["-O1"]);
    let out = &runs[0].1;
    let names = |p: &str| find(out, p)["typeNames"].clone();
    use serde_json::json;
    assert_eq!(
        names("0/big_cmp"),
        json!([
            "std::map<int32_t, int32_t, BigLess, std::allocator<std::pair<int32_t const, int32_t>>>"
        ])
    );
    assert_eq!(
        names("0/alloc_vec"),
        json!(["std::vector<int32_t, MyAlloc<int>>"])
    );
    // priority_queue is a container adapter as OI shows it: its vector is the single child,
    // the empty comparator only shows in the exclusive size (1 byte + 7 of padding).
    assert_eq!(
        names("0/pq"),
        json!([
            "std::priority_queue<int32_t, std::vector<int32_t, std::allocator<int32_t>>, less<int>>"
        ])
    );
    let pq: Vec<&str> = find(out, "0/pq")["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(pq, ["[]"]);
    assert_eq!(find(out, "0/pq")["exclusiveSize"], 8);
    assert_eq!(find(out, "0/pq")["length"], find(out, "0/pq/[]")["length"]);
    assert_eq!(
        find(out, "0/pq")["capacity"],
        find(out, "0/pq/[]")["capacity"]
    );
}

#[test]
fn debug_file_found_by_build_id() {
    let exe = build_fixture("footprint_basic", &["-O1", "-Wl,--build-id"]);
    let binary = Binary::open(&exe).expect("open");
    let id: String = {
        use object::Object as _;
        let obj = binary.object().expect("parse");
        let id = obj.build_id().expect("notes").expect("a build id");
        id.iter().map(|b| format!("{b:02x}")).collect()
    };
    let root = scratch("buildid-root");
    let dir = root.join("usr/lib/debug/.build-id").join(&id[..2]);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let debug = dir.join(format!("{}.debug", &id[2..]));
    objcopy(&[
        "--only-keep-debug".as_ref(),
        exe.as_os_str(),
        debug.as_os_str(),
    ]);
    let stripped = root.join("app");
    objcopy(&[
        "--strip-debug".as_ref(),
        exe.as_os_str(),
        stripped.as_os_str(),
    ]);
    let stripped = Binary::open(&stripped).expect("open stripped");
    let sym = find_function(&stripped, "_Z8take_refRK9Inventory").expect("symbols")[0].clone();
    let found = crate::debuginfo::dwarf::with_debug_info_in(&stripped, &root, |di| {
        di.find_function(&sym).is_ok()
    });
    assert!(matches!(found, Ok(true)), "debug file not used");
    // Outside that root the stripped binary has no debug information.
    let err =
        crate::debuginfo::dwarf::with_debug_info_in(&stripped, Path::new("/nonexistent"), |_| ());
    assert!(matches!(
        err,
        Err(crate::debuginfo::dwarf::DwarfError::NoDebugInfo { .. })
    ));
}

#[test]
fn deep_chains_walk_on_a_big_stack_and_stop_at_the_limit() {
    let mut s = attach("footprint_deep", &["-O1"]);
    let mem = RemoteReader::new(s.pid.as_raw());
    let bias = s.bias;
    // 15,000 levels: exact (decoded without JSON, whose typePaths grow quadratically).
    let (m, regs) = s.hit(0);
    let want = s.probes[0].expect[0].2;
    let total = std::thread::scope(|sc| {
        std::thread::Builder::new()
            .stack_size(1 << 30)
            .spawn_scoped(sc, || {
                let streams = m.walk_arg_streams(&regs, bias, &mem).expect("walk");
                crate::report::total_size(m.plan(), streams[0].0, &streams[0].1).expect("decode")
            })
            .expect("thread")
            .join()
            .expect("join")
    });
    assert_eq!(total, want);
    // 30,000 links (60,000 nodes deep): a walk error (exit 1), and measure() itself does not overflow.
    let (m, regs) = s.hit(1);
    let err = m
        .measure(
            &regs,
            bias,
            &mem,
            OutputFormat::Json,
            &mut Counter::default(),
        )
        .expect_err("too deep");
    assert!(!err.is_bad_input());
    assert!(
        err.to_string().contains("nested deeper than 50000 levels"),
        "{err}"
    );
    s.finish();
}
