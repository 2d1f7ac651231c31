//! Journeys: `oi-trace --mode remote` on live g++ fixtures, compared with the numbers each
//! fixture computes about itself (SEMANTICS.md), exact equality. The footprint pipeline is
//! also tested without the CLI in `oi-user` (`interp::live_tests`), with the same fixtures.

mod footprint_common;

use footprint_common::check_fixture;

#[test]
fn structs_strings_vectors_this_by_value_and_retval() {
    check_fixture("footprint_basic", "-O1");
}

#[test]
fn every_container_family_and_nesting() {
    check_fixture("footprint_containers", "-O1");
}

#[test]
fn type_kinds_and_features() {
    check_fixture("footprint_types", "-O1");
}

#[test]
fn polymorphic_inheritance() {
    check_fixture("footprint_poly", "-O1");
}
