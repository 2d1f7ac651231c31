//! The target program of one case: its C++ source, written the way OI's gen_tests.py writes
//! its test target, and its build, cached by the hash of the compiler command and source.
//!
//! The suite's `raw_definitions` go first, its `definitions` inside `namespace ns_<suite>`,
//! with `get_<case>()` returning the case's `setup` tuple and `extern "C" void
//! oid_test_case_<suite>_<case>(a0, a1, ...)`, the function oi-trace probes. `main()` prints
//! its pid, builds the tuple once, calls the function with it every 5 ms for ever, and prints
//! `ready` after the first call. Every target includes the union of the headers of every
//! buildable suite: OI compiles all suites into one program, and some suites rely on headers
//! that only another suite includes.

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context as _, Result};
use regex::Regex;
use serde_json::json;

use super::{
    cases::{Case, INTEGRATION_DIR, Suite, needs_library},
    process,
};

pub const CXX: &str = "g++";
pub const CXXFLAGS: [&str; 3] = ["-std=c++20", "-g", "-O0"];
const COMPILE_TIMEOUT: Duration = Duration::from_secs(300);

/// Headers every target includes besides the suites' own.
const BASE_HEADERS: [&str; 13] = [
    "cassert",
    "chrono",
    "cstdint",
    "cstdio",
    "filesystem",
    "iostream",
    "memory",
    "thread",
    "tuple",
    "type_traits",
    "utility",
    "sys/prctl.h",
    "unistd.h",
];

/// The headers of every target: [`BASE_HEADERS`] and the includes of every buildable suite,
/// sorted. Taken from all suites, not the selected ones, so that a filter does not change
/// the sources and their cache keys.
pub fn headers(suites: &[Suite]) -> Vec<String> {
    let mut headers: Vec<String> = BASE_HEADERS.iter().map(|h| h.to_string()).collect();
    for suite in suites.iter().filter(|s| s.excluded.is_none()) {
        for include in &suite.includes {
            if needs_library(&[], std::slice::from_ref(include)).is_none() {
                headers.push(include.clone());
            }
        }
    }
    headers.sort();
    headers.dedup();
    headers
}

/// A parameter declared as gen_tests.py declares it: `int(&)[5]` as `int(&a0)[5]`,
/// `int[5][10]` as `int a0[5][10]`, `const Foo&` as `const Foo& a0`.
pub fn param_decl(param: &str, i: usize) -> String {
    if param.contains(']') {
        if let Some((start, end)) = param.split_once(')') {
            return format!("{start}a{i}){end}");
        }
        if let Some((type_name, dims)) = param.split_once('[') {
            return format!("{type_name} a{i}[{dims}");
        }
    }
    format!("{param} a{i}")
}

/// The types of the tuple `get_<case>()` returns.
pub fn tuple_types(case: &Case) -> String {
    match &case.arg_types {
        Some(types) => types.join(", "),
        None => case
            .param_types
            .iter()
            .map(|p| format!("std::remove_cvref_t<{p}>"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

pub fn source(suite: &Suite, case: &Case, headers: &[String]) -> String {
    let ns = format!("ns_{}", suite.name);
    let mut out = format!(
        "// The target of OI's {INTEGRATION_DIR}/{}.toml, case {}, for oi-trace.\n",
        suite.name, case.name
    );
    for header in headers {
        let _ = writeln!(out, "#include <{header}>");
    }
    let params: Vec<String> = case
        .param_types
        .iter()
        .enumerate()
        .map(|(i, p)| param_decl(p, i))
        .collect();
    // Keeps the arguments alive and in memory where the probe reads them.
    let mut barrier: String = (0..params.len())
        .map(|i| format!("    asm volatile(\"\" : : \"r\"(std::addressof(a{i})) : \"memory\");\n"))
        .collect();
    if barrier.is_empty() {
        barrier = "    asm volatile(\"\" : : : \"memory\");\n".to_string();
    }
    let _ = write!(
        out,
        "\n{raw}\nnamespace {ns} {{\n{definitions}\n\n  std::tuple<{tuple}> get_{name}() {{\n\
         {setup}\n  }}\n\n  extern \"C\" void __attribute__((noinline)) {symbol}({params}) {{\n\
         {barrier}  }}\n}} // namespace {ns}\n",
        raw = suite.raw_definitions,
        definitions = suite.definitions,
        tuple = tuple_types(case),
        name = case.name,
        setup = case.setup,
        symbol = case.symbol,
        params = params.join(", "),
    );
    let _ = write!(
        out,
        "\nint main() {{\n\
         \x20 // Any tracer may attach, even under Yama's ptrace_scope=1.\n\
         \x20 prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);\n\
         \x20 std::printf(\"%d\\n\", (int)getpid());\n\
         \x20 std::fflush(stdout);\n\
         \x20 auto val = {ns}::get_{name}();\n\
         \x20 for (bool first = true;; first = false) {{\n\
         \x20   std::apply({ns}::{symbol}, val);\n\
         \x20   if (first) {{\n\
         \x20     std::printf(\"ready\\n\");\n\
         \x20     std::fflush(stdout);\n\
         \x20   }}\n\
         \x20   std::this_thread::sleep_for(std::chrono::milliseconds(5));\n\
         \x20 }}\n\
         }}\n",
        name = case.name,
        symbol = case.symbol,
    );
    out
}

/// A case's build: its program, or why there is none.
pub struct Build {
    pub exe: Result<PathBuf, String>,
    pub log: PathBuf,
    pub cached: bool,
}

/// Builds `source` under `cache/<hash>/`, or finds it built there. The error is the
/// harness's own (a file it cannot write); a program that does not compile is a [`Build`]
/// without one.
pub fn build(case: &Case, source: &str, cache: &Path, rebuild: bool) -> Result<Build> {
    let key = format!("{CXX}\0{}\0{source}", CXXFLAGS.join(" "));
    let dir = cache.join(format!("{:032x}", fnv1a(key.as_bytes())));
    let meta_path = dir.join("meta.json");
    let cpp = dir.join("target.cpp");
    let exe = dir.join("target");
    let log = dir.join("build.log");
    if !rebuild && let Some(exe) = cached(&dir, source) {
        return Ok(Build {
            exe,
            log,
            cached: true,
        });
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let _ = fs::remove_file(&meta_path);
    fs::write(&cpp, source).with_context(|| format!("writing {}", cpp.display()))?;
    let tmp = dir.join("target.tmp");
    let mut cmd = Command::new(CXX);
    cmd.args(CXXFLAGS).arg("-o").arg(&tmp).arg(&cpp);
    let command = format!("{cmd:?}");
    let finished = process::run(&mut cmd, COMPILE_TIMEOUT)
        .with_context(|| format!("running {CXX}; is it installed?"))?;
    let stderr = String::from_utf8_lossy(&finished.stderr);
    fs::write(
        &log,
        format!(
            "{command}\n\n{}{stderr}",
            String::from_utf8_lossy(&finished.stdout)
        ),
    )
    .with_context(|| format!("writing {}", log.display()))?;
    if let Some(stopped) = finished.stopped {
        // Not cached: a slow machine may build it next time.
        return Ok(Build {
            exe: Err(format!("the compiler was stopped ({stopped:?})")),
            log,
            cached: false,
        });
    }
    let error = if !finished.status.success() {
        Some(format!("does not compile: {}", first_error(&stderr)))
    } else {
        fs::rename(&tmp, &exe).with_context(|| format!("renaming {}", tmp.display()))?;
        if defines_function(&exe, &case.symbol) {
            None
        } else {
            Some(format!("nm finds no function {}", case.symbol))
        }
    };
    let meta = json!({
        "case": case.id(),
        "symbol": case.symbol,
        "command": command,
        "error": error,
    });
    let tmp_meta = dir.join("meta.json.tmp");
    fs::write(&tmp_meta, format!("{meta:#}\n"))
        .and_then(|()| fs::rename(&tmp_meta, &meta_path))
        .with_context(|| format!("writing {}", meta_path.display()))?;
    Ok(Build {
        exe: error.map_or(Ok(exe), Err),
        log,
        cached: false,
    })
}

/// The outcome of an earlier build of `source` in `dir`, if it is there complete.
fn cached(dir: &Path, source: &str) -> Option<Result<PathBuf, String>> {
    let meta = fs::read_to_string(dir.join("meta.json")).ok()?;
    let meta: serde_json::Value = serde_json::from_str(&meta).ok()?;
    if fs::read_to_string(dir.join("target.cpp")).ok()? != source {
        return None;
    }
    match meta["error"].as_str() {
        Some(error) => Some(Err(error.to_string())),
        None => {
            let exe = dir.join("target");
            exe.exists().then_some(Ok(exe))
        }
    }
}

/// FNV-1a, 128 bits: a cache key that stays the same across Rust releases.
fn fnv1a(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u128::from(b)).wrapping_mul(PRIME))
}

/// The compiler's first error line, or its last line.
fn first_error(stderr: &str) -> String {
    let error = Regex::new(r"\berror:").expect("regex");
    let line = stderr
        .lines()
        .find(|l| error.is_match(l))
        .or_else(|| stderr.lines().rfind(|l| !l.trim().is_empty()))
        .unwrap_or("no compiler output")
        .trim();
    // The build directory's path says nothing.
    let line = match line.find("target.cpp:") {
        Some(at) => &line[at..],
        None => line,
    };
    line.chars().take(300).collect()
}

/// True when `nm` lists `symbol` as a function defined in `exe`.
fn defines_function(exe: &Path, symbol: &str) -> bool {
    let Ok(out) = Command::new("nm").arg("--defined-only").arg(exe).output() else {
        return false;
    };
    out.status.success()
        && String::from_utf8_lossy(&out.stdout).lines().any(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            matches!(parts[..], [_, "T" | "t", name] if name == symbol)
        })
}

#[cfg(test)]
mod tests {
    use super::{super::cases::parse_suite, *};

    #[test]
    fn parameters_as_gen_tests_declares_them() {
        assert_eq!(param_decl("const int(&)[10]", 0), "const int(&a0)[10]");
        assert_eq!(param_decl("int[5][10]", 1), "int a1[5][10]");
        assert_eq!(param_decl("const Foo&", 2), "const Foo& a2");
        assert_eq!(param_decl("int", 3), "int a3");
    }

    const SUITE: &str = r#"
includes = ["vector"]
raw_definitions = "struct Raw {};"
definitions = "struct Foo { int a; std::vector<int> v; };"
[cases.two_args]
  param_types = ["const Foo&", "int"]
  args = "arg0,arg1"
  setup = "return {Foo{1, {2, 3}}, 7};"
[cases.typed]
  param_types = ["const Foo&"]
  arg_types = ["Foo"]
  setup = "return {};"
[cases.none]
  param_types = []
  setup = "return {};"
"#;

    #[test]
    fn generates_the_target() {
        let suite = parse_suite("demo", SUITE).unwrap();
        let case = suite.cases.iter().find(|c| c.name == "two_args").unwrap();
        let headers = headers(std::slice::from_ref(&suite));
        assert!(headers.contains(&"vector".to_string()));
        assert!(headers.contains(&"sys/prctl.h".to_string()));
        let src = source(&suite, case, &headers);
        let want = [
            "#include <vector>\n",
            "\nstruct Raw {};\nnamespace ns_demo {\nstruct Foo { int a; std::vector<int> v; };\n",
            "  std::tuple<std::remove_cvref_t<const Foo&>, std::remove_cvref_t<int>> \
             get_two_args() {\nreturn {Foo{1, {2, 3}}, 7};\n  }\n",
            "  extern \"C\" void __attribute__((noinline)) \
             oid_test_case_demo_two_args(const Foo& a0, int a1) {\n",
            "(std::addressof(a1))",
            "} // namespace ns_demo\n",
            "  auto val = ns_demo::get_two_args();\n",
            "std::apply(ns_demo::oid_test_case_demo_two_args, val);",
        ];
        for part in want {
            assert!(src.contains(part), "{part:?} not in:\n{src}");
        }
        assert!(src.find("struct Raw").unwrap() < src.find("namespace ns_demo").unwrap());
    }

    #[test]
    fn tuple_of_arg_types_and_no_params() {
        let suite = parse_suite("demo", SUITE).unwrap();
        let typed = suite.cases.iter().find(|c| c.name == "typed").unwrap();
        assert_eq!(tuple_types(typed), "Foo");
        let none = suite.cases.iter().find(|c| c.name == "none").unwrap();
        let src = source(&suite, none, &[]);
        assert!(src.contains("std::tuple<> get_none()"));
        assert!(
            src.contains("oid_test_case_demo_none() {\n    asm volatile(\"\" : : : \"memory\");")
        );
    }

    #[test]
    fn headers_skip_excluded_suites() {
        let a = parse_suite("a", r#"includes = ["map"]"#).unwrap();
        let b = parse_suite("b", r#"includes = ["folly/X.h", "set"]"#).unwrap();
        let headers = headers(&[a, b]);
        assert!(headers.contains(&"map".to_string()));
        assert!(headers.contains(&"cstdint".to_string()));
        assert!(!headers.iter().any(|h| h == "set" || h.starts_with("folly")));
    }

    #[test]
    fn compiler_errors_are_short() {
        let stderr = "/long/path/target.cpp: In function 'int main()':\n\
                      /long/path/target.cpp:3:5: error: 'x' was not declared\n";
        assert_eq!(
            first_error(stderr),
            "target.cpp:3:5: error: 'x' was not declared"
        );
        assert_eq!(first_error("ld: oops\n\n"), "ld: oops");
    }

    #[test]
    fn cache_key_is_stable() {
        assert_eq!(fnv1a(b""), 0x6c62272e07bb014262b821756295c58d);
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
    }
}
