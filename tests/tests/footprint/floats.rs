//! Floating-point arguments and results travel in xmm registers, which the eBPF side cannot
//! see: they are read from the stopped thread's FPU state, checked against the other
//! arguments of the same call (the fixture derives them from one counter), in both modes. An
//! argument the probed instruction itself overwrites is refused, never read wrong. At -O1 and
//! -O2.

use std::time::Duration;

use oi_e2e::{Fixture, FixtureBuild, privileged, run_oi_trace};

const SECOND: Duration = Duration::from_secs(1);

/// The fixture at -O1 (the harness's default) and at -O2.
fn fixtures() -> impl Iterator<Item = Fixture> {
    [
        FixtureBuild::new("floats").build(),
        FixtureBuild::new("floats")
            .variant("floats_O2", &["-O2"])
            .build(),
    ]
    .into_iter()
    .map(|binary| {
        let mut f = Fixture::start(&binary, &[]);
        f.stdout.expect("tick", 20 * SECOND);
        f
    })
}

/// One sample as a tree with values: `name → value` of every line `name: type = value …`.
fn values(pid: i32, probe: &[&str], args: &str, mode: &str) -> Vec<(String, f64)> {
    let pid = pid.to_string();
    let mut argv = vec!["--pid", &pid];
    argv.extend_from_slice(probe);
    argv.extend_from_slice(&[
        "--arg", args, "--count", "1", "--format", "tree", "--values", "--mode", mode,
    ]);
    let out = run_oi_trace(&argv, 60 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    out.stdout
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.trim().split_once(": ")?;
            let value = rest.split_once(" = ")?.1.split_whitespace().next()?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn get(values: &[(String, f64)], name: &str) -> f64 {
    values
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} in {values:?}"))
        .1
}

#[test]
fn float_and_double_arguments_and_results() {
    if !privileged() {
        return;
    }
    for mut f in fixtures() {
        for mode in ["jit", "remote"] {
            // weigh(long n, float f, double d): f = n % 1000 + 0.5, d = n * 0.25.
            let v = values(f.pid, &["--uprobe", "shop::weigh"], "arg0,arg1,arg2", mode);
            let n = get(&v, "arg0 n");
            assert_eq!(get(&v, "arg1 f"), n % 1000.0 + 0.5, "{mode}: {v:?}");
            assert_eq!(get(&v, "arg2 d"), n * 0.25, "{mode}: {v:?}");
            // place(Tagged{weight, id}, …): weight in xmm0, id in rdi; weight = id * 0.5.
            let v = values(f.pid, &["--uprobe", "shop::place"], "arg0", mode);
            assert_eq!(get(&v, "weight"), get(&v, "id") * 0.5, "{mode}: {v:?}");
            // Results: a double in xmm0, a struct of two doubles in xmm0 and xmm1.
            let v = values(f.pid, &["--uretprobe", "shop::golden"], "retval", mode);
            assert_eq!(get(&v, "retval"), 1.618_033_988_749_895, "{mode}");
            let v = values(f.pid, &["--uretprobe", "shop::centre"], "retval", mode);
            assert_eq!((get(&v, "x"), get(&v, "y")), (2.5, -4.25), "{mode}: {v:?}");
        }
        f.assert_running();
        f.stdout.expect("tick", 20 * SECOND);
    }
}

#[test]
fn an_argument_the_probed_instruction_overwrites_is_refused() {
    if !privileged() {
        return;
    }
    // place's first instruction at -O1 and -O2 is `mulsd %xmm0,%xmm1`: `scale` (xmm1) is gone
    // by the time the thread stops.
    for mut f in fixtures() {
        let pid = f.pid.to_string();
        let out = run_oi_trace(
            &[
                "--pid",
                &pid,
                "--uprobe",
                "shop::place",
                "--arg",
                "arg1",
                "--count",
                "1",
            ],
            60 * SECOND,
        );
        assert_eq!(out.status.code(), Some(2), "{out:#?}");
        assert_eq!(out.stderr.len(), 1, "{out:#?}");
        assert!(
            out.stderr[0].contains("`arg1`")
                && out.stderr[0].contains("it is in xmm1, which the probed instruction `mulsd`"),
            "{out:#?}"
        );
        f.assert_running();
        f.stdout.expect("tick", 20 * SECOND);
    }
}
