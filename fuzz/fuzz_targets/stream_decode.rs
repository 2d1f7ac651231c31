//! Fuzzer bytes as a walker's output, decoded into every report format against plans of
//! real fixtures (see `oi_fuzz::fixtures`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: oi_fuzz::fixtures::init(), |data: &[u8]| {
    oi_fuzz::fixtures::decode(data);
});
