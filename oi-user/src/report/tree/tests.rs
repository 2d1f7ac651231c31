//! Unit tests of `tree`.

use super::*;

#[test]
fn human_sizes() {
    assert_eq!(human(512), "512 B");
    assert_eq!(human(1_258_291), "1.2 MiB");
    assert_eq!(thousands(999_990), "999,990");
    assert_eq!(thousands(12), "12");
}

#[test]
fn values_as_cpp_prints_them() {
    let s = |size, kind| Scalar { size, kind };
    assert_eq!(
        show_value(&s(4, ScalarKind::Signed), (0xffff_fffe, 0)),
        "-2"
    );
    assert_eq!(
        show_value(&s(8, ScalarKind::Unsigned), (u64::MAX, 0)),
        "18446744073709551615"
    );
    assert_eq!(
        show_value(&s(1, ScalarKind::Char { signed: true }), (0x61, 0)),
        "'a' (97)"
    );
    assert_eq!(show_value(&s(1, ScalarKind::Bool), (1, 0)), "true");
    assert_eq!(
        show_value(&s(8, ScalarKind::Float), (0.25f64.to_bits(), 0)),
        "0.25"
    );
    assert_eq!(
        show_value(&s(4, ScalarKind::Float), (u64::from(1.5f32.to_bits()), 0)),
        "1.5"
    );
    // long double 3.0: mantissa 0xC000…, exponent 16384.
    assert_eq!(
        show_value(&s(16, ScalarKind::Float), (0xc000_0000_0000_0000, 0x4000)),
        "3"
    );
    assert_eq!(show_value(&s(8, ScalarKind::Pointer), (0, 0)), "null");
    assert_eq!(
        show_value(&s(8, ScalarKind::Pointer), (0x7f00_1000, 0)),
        "0x7f001000"
    );
    let e = ScalarKind::Enum {
        signed: false,
        enumerators: vec![(1, "Read".into()), (2, "Write".into()), (4, "Exec".into())],
    };
    assert_eq!(show_value(&s(4, e.clone()), (2, 0)), "Write");
    assert_eq!(show_value(&s(4, e.clone()), (5, 0)), "Read | Exec");
    assert_eq!(show_value(&s(4, e), (9, 0)), "9");
}
