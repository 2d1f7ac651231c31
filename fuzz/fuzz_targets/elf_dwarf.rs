//! Fuzzer bytes as an ELF file: symbols, DWARF, type graph and plan (see `oi_fuzz::elf`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(binary) = oi_fuzz::elf::open(data) {
        oi_fuzz::elf::exercise(&binary);
    }
});
