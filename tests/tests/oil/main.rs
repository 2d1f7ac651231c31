//! Journeys of OIL (`oil/include/oil.h` + `liboil.so`): C++ programs built with g++ -g at -O0
//! and -O2 measure their own objects; the reports equal, byte for byte, what `oi-trace`
//! prints for the same object in the same process at a probed call; sizes equal what the
//! programs compute from the allocations they made; a program without debug information,
//! a corrupt object, 16 threads at first use; and the Rust API on a C++ library's objects.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use oi_e2e::{Fixture, FixtureBuild, OiTrace, SIGUSR1, workspace_root};

/// Builds `tests/fixtures/NAME.cpp` against `oil.h` and `liboil.so` with `flags` (after
/// `-g`, so `-g0` removes debug information) into `target/fixtures/OUT`.
fn build(name: &'static str, out: &str, flags: &[&str]) -> PathBuf {
    FixtureBuild::new(name)
        .variant(out, flags)
        .with_oil()
        .build()
}

/// The value after `key ` on the next line that starts with it.
fn value(f: &mut Fixture, key: &str) -> String {
    let line = f.stdout.expect(&format!("{key} "), Duration::from_secs(60));
    line[key.len() + 1..].to_string()
}

fn number(f: &mut Fixture, key: &str) -> u64 {
    let v = value(f, key);
    v.parse()
        .unwrap_or_else(|_| panic!("`{key}` is not a number: {v}"))
}

/// Runs oi-trace on `app::inspect`'s arg0 for one call, which `poke` makes the fixture do.
fn oi_trace_inspect(f: &Fixture, format: &str, pokes: &mut u32) -> String {
    let pid = f.pid.to_string();
    let t = OiTrace::attached(&[
        "--pid",
        &pid,
        "--uprobe",
        "app::inspect",
        "--arg",
        "arg0",
        "--format",
        format,
        "--count",
        "1",
    ]);
    *pokes += 1;
    f.signal(SIGUSR1);
    let done = t.finish(Duration::from_secs(60));
    assert!(done.status.success(), "oi-trace: {:?}", done.stderr);
    done.stdout
}

fn json_tree_and_size_equal_oi_trace(opt: &str) {
    if !oi_e2e::privileged() {
        return;
    }
    let exe = build("oil_app", &format!("oil_app{opt}"), &[opt]);
    let mut f = Fixture::start(&exe, &[]);
    let size = number(&mut f, "size");
    let expect = number(&mut f, "expect");
    assert_eq!(
        size, expect,
        "oil::size against the program's own allocations"
    );
    let json = value(&mut f, "json") + "\n";
    f.stdout.expect("tree-begin", Duration::from_secs(10));
    let mut tree = String::new();
    loop {
        let line = f.stdout.expect("", Duration::from_secs(10));
        if line == "tree-end" {
            break;
        }
        tree.push_str(&line);
        tree.push('\n');
    }
    let doc = oi_e2e::json(&json);
    assert_eq!(
        doc[0]["size"].as_u64(),
        Some(size),
        "json root size = oil::size"
    );
    assert_eq!(doc[0]["typeNames"][0], "app::State");
    let members: Vec<&str> = doc[0]["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(
        members,
        [
            "names", "by_id", "index", "config", "shared", "sensor", "limit", "title"
        ]
    );

    // The polymorphic class alone: found through its vtable's module, measured as declared.
    let sensor = number(&mut f, "sensor-size");
    assert_eq!(sensor, number(&mut f, "sensor-expect"));
    let sensor_json = oi_e2e::json(&value(&mut f, "sensor-json"));
    assert_eq!(sensor_json[0]["typeNames"][0], "app::Sensor");
    assert_eq!(sensor_json[0]["members"][0]["name"], "_vptr.Device");

    // A class template with value arguments: typeid's name spells them as casts, the DWARF
    // name as plain values; the lookup finds it all the same.
    let ring = number(&mut f, "ring-size");
    assert_eq!(
        ring,
        number(&mut f, "ring-expect"),
        "{opt}: Ring<int, 4, …>"
    );
    let ring_json = oi_e2e::json(&value(&mut f, "ring-json"));
    assert_eq!(ring_json[0]["size"].as_u64(), Some(ring));
    let ring_name = ring_json[0]["typeNames"][0].as_str().unwrap_or_default();
    assert!(
        ring_name.starts_with("app::Ring<int, 4, true, "),
        "{opt}: {ring_name}"
    );

    // The same object at a probed call, measured by oi-trace from outside: the same bytes.
    let mut pokes = 0;
    let traced = oi_trace_inspect(&f, "json", &mut pokes);
    assert_eq!(traced, json, "oi-trace --format json vs oil::json");
    f.stdout.expect("inspected", Duration::from_secs(10));
    let traced = oi_trace_inspect(&f, "tree", &mut pokes);
    // oi-trace titles each sample's tree (`# pid P, hit N`) and labels the root with the
    // parameter's name too (`arg0 s:`, where OIL, given an object, has `arg0:`); the tree
    // itself is the same.
    let (title, body) = traced.split_once('\n').expect("a title line");
    assert!(title.starts_with("# pid "), "{traced}");
    let body = body
        .strip_prefix("arg0 s: ")
        .unwrap_or_else(|| panic!("root not labelled `arg0 s`: {traced}"));
    let tree = tree
        .strip_prefix("arg0: ")
        .unwrap_or_else(|| panic!("oil root not labelled `arg0`: {tree}"));
    assert_eq!(body, tree, "oi-trace --format tree vs oil::tree");
    f.stdout.expect("inspected", Duration::from_secs(10));
    f.assert_running();
    assert!(f.finish().success());
}

#[test]
fn oil_reports_equal_oi_trace_byte_for_byte_o0() {
    json_tree_and_size_equal_oi_trace("-O0");
}

#[test]
fn oil_reports_equal_oi_trace_byte_for_byte_o2() {
    json_tree_and_size_equal_oi_trace("-O2");
}

#[test]
fn oil_without_debug_information_throws_a_clear_error() {
    let exe = build("oil_app", "oil_app_nodebug", &["-O2", "-g0"]);
    let mut f = Fixture::start(&exe, &[]);
    let line = value(&mut f, "error");
    assert!(
        line.starts_with("oil: cannot find the type `app::State`: "),
        "{line}"
    );
    assert!(line.contains("has no debug information"), "{line}");
    assert!(line.contains(&exe.display().to_string()), "{line}");
    assert!(line.contains("rebuild it with -g"), "{line}");
    assert_eq!(f.finish().code(), Some(3), "the program caught oil::Error");
}

#[test]
fn oil_sixteen_threads_at_first_use_compile_once() {
    for opt in ["-O0", "-O2"] {
        let exe = build("oil_threads", &format!("oil_threads{opt}"), &[opt]);
        let mut f = Fixture::start(&exe, &[]);
        for t in 0..16 {
            let line = f.stdout.expect("thread ", Duration::from_secs(60));
            let w: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(w.len(), 6, "{line}");
            assert_eq!(w[1], t.to_string(), "{line}");
            assert_eq!(
                w[3], w[5],
                "thread {t}: oil::size vs the program's own count"
            );
        }
        assert_eq!(
            number(&mut f, "compilations"),
            1,
            "{opt}: one build for 16 threads"
        );
        let ms: f64 = value(&mut f, "first-call-ms").parse().expect("ms");
        assert!(ms > 0.0);
        f.stdout.expect("done", Duration::from_secs(10));
        assert!(f.finish().success());
    }
}

#[test]
fn oil_corrupt_objects_throw_and_the_program_keeps_its_fault_handling() {
    for opt in ["-O0", "-O2"] {
        let exe = build("oil_faults", &format!("oil_faults{opt}"), &[opt]);
        let mut f = Fixture::start(&exe, &[]);
        let valid = value(&mut f, "valid");
        let (got, want) = valid.split_once(" expect ").expect("valid N expect M");
        assert_eq!(got, want, "{opt}");
        let error = value(&mut f, "corrupt-error");
        assert!(
            error.starts_with("oil: walking `app::Victim` at 0x") && error.contains("cannot read"),
            "{error}"
        );
        assert_eq!(value(&mut f, "valid-again"), got);
        assert_eq!(
            value(&mut f, "own-handler"),
            "1",
            "the program's handler ran"
        );
        assert!(value(&mut f, "replaced-error").contains("cannot read"));
        assert_eq!(
            value(&mut f, "own-handler"),
            "2",
            "the program's new handler ran"
        );
        assert!(value(&mut f, "signal-error").contains("cannot read"));
        assert_eq!(
            value(&mut f, "own-handler"),
            "3",
            "the handler the program set with signal() ran"
        );
        let garbage = value(&mut f, "garbage");
        assert_eq!(garbage, "200 errors 200", "{opt}");
        let small = value(&mut f, "small-stack");
        let (n, error) = small.split_once(" error ").expect("small-stack N error E");
        assert_eq!(n, got, "{opt}: measured on a small stack");
        assert!(
            error.starts_with("oil: walking `app::Victim` at 0x") && error.contains("cannot read"),
            "{opt}: {error}"
        );
        let deep = value(&mut f, "deep");
        let (got_deep, want_deep) = deep.split_once(" expect ").expect("deep N expect M");
        assert_eq!(got_deep, want_deep, "{opt}: a chain deeper than the stack");
        assert_eq!(value(&mut f, "valid-last"), got);
        let leaf = value(&mut f, "leaf");
        let words: Vec<&str> = leaf.split(' ').collect();
        assert!(
            matches!(words[..], [n, "expect", m, "direct", "1"] if n == m),
            "{opt}: a leaf walker, called directly, measures exactly: {leaf}"
        );
        let error = value(&mut f, "leaf-error");
        assert!(
            error.starts_with("oil: walking `Leaf` at 0x") && error.contains("cannot read"),
            "{opt}: {error}"
        );
        let regs = value(&mut f, "leaf-registers");
        let (got_regs, want_regs) = regs
            .split_once(" expect ")
            .expect("leaf-registers N expect M");
        assert_eq!(
            got_regs, want_regs,
            "{opt}: the caller's registers after faults"
        );
        f.stdout.expect("done", Duration::from_secs(10));
        f.assert_running();
        assert!(f.finish().success());
    }
}

/// The fixture library of the Rust API journey, loaded into this test process.
fn rust_api_lib() -> usize {
    use std::sync::OnceLock;
    static LIB: OnceLock<usize> = OnceLock::new();
    *LIB.get_or_init(|| {
        let root = workspace_root();
        let src = root.join("tests/fixtures/oil_rust_api.cpp");
        let so = root.join("target/fixtures/liboil_rust_api.so");
        std::fs::create_dir_all(so.parent().expect("dir")).expect("target/fixtures");
        let tmp = so.with_extension(format!("tmp{}", std::process::id()));
        let out = Command::new("g++")
            .args(["-g", "-O1", "-std=c++17", "-shared", "-fPIC", "-o"])
            .arg(&tmp)
            .arg(&src)
            .output()
            .expect("g++");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp, &so).expect("rename");
        let c = std::ffi::CString::new(so.to_str().expect("utf8")).expect("path");
        // SAFETY: dlopen of a library just built; its constructors are libstdc++'s.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
        assert!(!h.is_null(), "dlopen {}", so.display());
        h as usize
    })
}

fn lib_fn(name: &str) -> *mut libc::c_void {
    let c = std::ffi::CString::new(name).expect("name");
    // SAFETY: a symbol of the library, which stays loaded.
    let p = unsafe { libc::dlsym(rust_api_lib() as *mut libc::c_void, c.as_ptr()) };
    assert!(!p.is_null(), "no {name}");
    p
}

#[test]
fn oil_rust_api_measures_a_cpp_librarys_objects() {
    // SAFETY: the library's functions, with their C signatures.
    let (make, own_size) = unsafe {
        (
            std::mem::transmute::<*mut libc::c_void, extern "C" fn(i32) -> *mut libc::c_void>(
                lib_fn("make_catalog"),
            ),
            std::mem::transmute::<*mut libc::c_void, extern "C" fn(*const libc::c_void) -> usize>(
                lib_fn("catalog_size"),
            ),
        )
    };
    let opts = oil::Options::default();
    for n in [0, 7, 300] {
        let obj = make(n);
        // SAFETY: a live lib::Catalog that nothing else touches.
        let size = unsafe { oil::size(obj, "lib::Catalog", &opts) }.expect("size");
        assert_eq!(size, own_size(obj) as u64, "{n} titles");
        // SAFETY: as above.
        let json = unsafe { oil::json(obj, "lib::Catalog", &opts) }.expect("json");
        let doc = oi_e2e::json(&json);
        assert_eq!(doc[0]["size"].as_u64(), Some(size));
        assert_eq!(doc[0]["members"][0]["length"].as_u64(), Some(n as u64));
        // The mangled name (what typeid gives) finds the same walker's type.
        let w = oil::lookup("N3lib7CatalogE", None, &[], &opts).expect("lookup");
        assert_eq!(w.name(), "lib::Catalog");
        // SAFETY: as above.
        assert_eq!(unsafe { w.size(obj) }.expect("size"), size);
    }
    let obj = make(3);
    let bad = |name: &str, features: &[&str]| {
        let opts = oil::Options {
            features: features.iter().map(|s| s.to_string()).collect(),
        };
        // SAFETY: as above (the call fails before reading it).
        unsafe { oil::size(obj, name, &opts) }
            .expect_err(name)
            .to_string()
    };
    let e = bad("lib::Catalog", &["bogus"]);
    assert!(e.contains("unknown feature `bogus`"), "{e}");
    let e = bad("lib::NoSuchType", &[]);
    assert!(
        e.starts_with("cannot find the type `lib::NoSuchType`: "),
        "{e}"
    );
    let e = bad("_Z3fooi", &[]);
    assert!(e.contains("is not a C++ type name"), "{e}");
    // SAFETY: a null object is refused before anything is read.
    let e = unsafe { oil::size(std::ptr::null(), "lib::Catalog", &oil::Options::default()) };
    assert!(matches!(e, Err(oil::Error::Null)), "{e:?}");
}

/// A shipped container description that does not fit the program: OIL measures the type as
/// the plain class it is and says so once on stderr, as oi-trace does, however many sizes
/// and reports follow.
#[test]
fn oil_warns_once_of_a_shipped_description_that_does_not_fit() {
    for opt in ["-O0", "-O2"] {
        let exe = build("oil_misfit", &format!("oil_misfit{opt}"), &[opt]);
        let out = Command::new(&exe).output().expect("run the fixture");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{opt}: {stdout}\n{stderr}");
        let line = |key: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_else(|| panic!("{opt}: no `{key}` in {stdout}"))
                .to_string()
        };
        let expect = line("expect ");
        assert_eq!(line("size "), format!("{expect} {expect}"), "{opt}");
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("shipped description"))
            .collect();
        let want = "oil: warning: shipped description absl::debian3::InlinedVector \
                    (containers/abseil.toml:";
        assert_eq!(warnings.len(), 1, "{opt}: {stderr}");
        assert!(
            warnings[0].starts_with(want)
                && warnings[0].contains("does not fit this program: ")
                && warnings[0].ends_with("; measured as a plain class"),
            "{opt}: want `{want}…` in {:?}",
            warnings[0]
        );
    }
}

/// OIL measures with real sizes by default: the size of `footprint_owned`'s struct equals the
/// bytes its own operator new says the struct owns, exactly (`sizes-oi` gives OI's rules).
fn oil_size_equals_the_bytes_the_object_owns(opt: &str) {
    let exe = FixtureBuild::new("footprint_owned")
        .variant(&format!("footprint_owned_oil{opt}"), &[opt, "-DWITH_OIL"])
        .with_oil()
        .build();
    let mut f = Fixture::start(&exe, &[]);
    let owned = number(&mut f, "owned");
    assert_eq!(number(&mut f, "oil-size"), owned, "{opt}: oil::size");
    assert!(
        number(&mut f, "oil-size-oi") > owned,
        "{opt}: OI's rules count more here"
    );
}

/// The same with clang++ and libc++ (`cargo xtask setup` installs both): OIL measures a
/// libc++ program as oi-trace does, each of its containers as libc++ lays it out, exactly
/// what the struct owns. `sizes-oi` gives another number: its rules count a `vector<bool>`'s
/// bits as bytes and no `shared_ptr` control block.
fn oil_size_equals_the_bytes_a_libcxx_object_owns(opt: &str) {
    let exe = FixtureBuild::new("footprint_owned")
        .compiler("clang++")
        .variant(
            &format!("footprint_owned_oil_libcxx{opt}"),
            &[opt, "-stdlib=libc++", "-DWITH_OIL"],
        )
        .with_oil()
        .build();
    let mut f = Fixture::start(&exe, &[]);
    let owned = number(&mut f, "owned");
    assert_eq!(number(&mut f, "oil-size"), owned, "{opt}: oil::size");
    assert_ne!(
        number(&mut f, "oil-size-oi"),
        owned,
        "{opt}: OI's rules differ here"
    );
}

#[test]
fn oil_size_equals_the_bytes_a_libcxx_object_owns_o0() {
    oil_size_equals_the_bytes_a_libcxx_object_owns("-O0");
}

#[test]
fn oil_size_equals_the_bytes_a_libcxx_object_owns_o2() {
    oil_size_equals_the_bytes_a_libcxx_object_owns("-O2");
}

#[test]
fn oil_size_equals_the_bytes_the_object_owns_o0() {
    oil_size_equals_the_bytes_the_object_owns("-O0");
}

#[test]
fn oil_size_equals_the_bytes_the_object_owns_o2() {
    oil_size_equals_the_bytes_the_object_owns("-O2");
}
