//! The kernel-side unwinder's check program (`oi-ebpf/src/bin/stack_check.rs`), loaded for
//! one process: each hit of a uprobe walks the stack with `user_stack` and with the kernel's
//! frame-pointer walk and sends both, or only counts (`MODE`, bits of
//! `oi_common::stack::check_mode`). For the unwinder's live tests and `cargo xtask bench
//! --only unwind`; no tool loads it.

use std::path::Path;

use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, PerCpuArray},
    programs::uprobe::{UProbeAttachLocation, UProbeScope},
};

use super::size_maps;
use crate::{
    error::{Error, Result},
    probe::profiler::{load_object, load_uprobe, take_map, uprobe_mut},
};

const OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stack_check"));
const PROGRAM: &str = "oi_stack_check";

/// Loads the program for process `pid` with `mode`, its maps sized for the unwinder, then
/// those of `sizes` (map name, entries) as given (a test's small tables).
pub fn load(pid: u32, mode: u32, sizes: &[(&str, u32)]) -> Result<Ebpf> {
    let mut loader = EbpfLoader::new();
    loader
        .btf(None)
        .override_global("TARGET_TGID", &pid, true)
        .override_global("MODE", &mode, true);
    size_maps(&mut loader);
    for &(map, entries) in sizes {
        loader.map_max_entries(map, entries);
    }
    let mut ebpf = load_object(&mut loader, OBJECT, "the stack check program")?;
    load_uprobe(&mut ebpf, PROGRAM)?;
    Ok(ebpf)
}

/// Attaches the program to function `symbol` of `exe`, in process `pid` only.
pub fn attach(ebpf: &mut Ebpf, exe: &Path, symbol: &str, pid: u32) -> Result<()> {
    let pid = pid
        .try_into()
        .map_err(|_| Error::input("pid 0 is no process"))?;
    uprobe_mut(ebpf, PROGRAM)?
        .attach(
            UProbeAttachLocation::Symbol(symbol),
            exe,
            UProbeScope::OneProcess(pid),
        )
        .map_err(|e| Error::internal(format!("attaching to {symbol}: {e}")))?;
    Ok(())
}

/// The hits of the target process so far (takes the `HITS` map: once).
pub fn hits(ebpf: &mut Ebpf) -> Result<u64> {
    let hits: PerCpuArray<MapData, u64> = take_map(ebpf, "HITS")?;
    Ok(hits
        .get(&0, 0)
        .map_err(|e| Error::internal(format!("eBPF map HITS: {e}")))?
        .iter()
        .sum())
}
