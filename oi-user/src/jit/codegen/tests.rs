//! Unit tests of `codegen`.

use super::covered;

#[test]
fn a_byte_is_covered_by_loads_around_it_at_most_a_page_apart() {
    // In a loaded word, or between two: covered.
    assert!(covered(&[16], 16));
    assert!(covered(&[16], 23));
    assert!(covered(&[0x30, 0x38, 0x40, 0x68], 0x50));
    // The two words span exactly a page: still covered; a byte more, not.
    assert!(covered(&[0, 4088], 100));
    assert!(!covered(&[0, 4089], 100));
    // Only on one side, or none: not covered.
    assert!(!covered(&[0x30, 0x38, 0x40], 0x50));
    assert!(!covered(&[0x68], 0x50));
    assert!(!covered(&[], 0));
    assert!(!covered(&[16], 24));
}
