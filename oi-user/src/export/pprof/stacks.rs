//! Code addresses of live processes as pprof locations: each address in its mapping (the
//! executable segment of a file, with the file's GNU build id), named by the profilers' one
//! [`Symbolizer`] with its inlined frames as extra lines, innermost first.
//!
//! Reads `/proc/PID/maps` and the mapped files' build ids, once per process and file; the
//! processes must still map their files (the profilers export before they let go of them, as
//! they symbolize). Never touches a process beyond `/proc`.

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use super::builder::{Builder, FunctionKey, LineAt, MappingKey};
use crate::{
    debuginfo::Binary,
    inferior::procfs,
    symbolize::{Frame, Symbolizer},
};

pub struct Stacks<'a> {
    symbolizer: &'a mut Symbolizer,
    /// Executable mappings per process, the main executable's first.
    maps: HashMap<u32, Vec<procfs::Mapping>>,
    build_ids: HashMap<(u32, PathBuf), String>,
}

impl<'a> Stacks<'a> {
    pub fn new(symbolizer: &'a mut Symbolizer) -> Self {
        Self {
            symbolizer,
            maps: HashMap::new(),
            build_ids: HashMap::new(),
        }
    }

    /// The frames of each address of `tgid` (pass return addresses minus one), innermost
    /// first per address.
    pub fn frames(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Arc<[Frame]>> {
        self.symbolizer.frames(tgid, addrs)
    }

    /// The location of `address` in `tgid` with `frames` (innermost first) as its lines.
    pub fn location(&mut self, b: &mut Builder, tgid: u32, address: u64, frames: &[Frame]) -> u64 {
        let mapping = self.mapping(b, tgid, address);
        let lines = frames
            .iter()
            .map(|f| {
                let (file, line) = file_and_line(f.source.as_deref());
                let function = b.function(FunctionKey {
                    name: f.function.to_string(),
                    system_name: f.symbol.to_string(),
                    filename: file.to_string(),
                });
                LineAt { function, line }
            })
            .collect();
        b.location(mapping, address, lines)
    }

    /// The id of the mapping that holds `address` in `tgid`, added on first use; 0 when no
    /// file-backed mapping holds it (JIT code, a process gone).
    fn mapping(&mut self, b: &mut Builder, tgid: u32, address: u64) -> u64 {
        let maps = self
            .maps
            .entry(tgid)
            .or_insert_with(|| executable_maps(tgid));
        let Some(m) = maps.iter().find(|m| (m.start..m.end).contains(&address)) else {
            return 0;
        };
        let build_id = self
            .build_ids
            .entry((tgid, m.path.clone()))
            .or_insert_with(|| build_id(tgid, m))
            .clone();
        b.mapping(&MappingKey {
            start: m.start,
            limit: m.end,
            offset: m.offset,
            filename: m.path.display().to_string(),
            build_id,
        })
    }

    /// Adds the main executable's mapping of `tgid` now, so that it is the profile's first
    /// (pprof takes mapping 1 for the main binary).
    pub fn main_binary_first(&mut self, b: &mut Builder, tgid: u32) {
        let maps = self
            .maps
            .entry(tgid)
            .or_insert_with(|| executable_maps(tgid));
        if let Some(start) = maps.first().map(|m| m.start) {
            self.mapping(b, tgid, start);
        }
    }
}

/// The executable mappings of `tgid`, the main executable's first; none once it is gone.
fn executable_maps(tgid: u32) -> Vec<procfs::Mapping> {
    let mut maps: Vec<procfs::Mapping> = procfs::mappings(tgid as i32)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.executable)
        .collect();
    if let Ok(exe) = std::fs::read_link(format!("/proc/{tgid}/exe")) {
        let exe = exe.to_string_lossy();
        let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
        if let Some(i) = maps.iter().position(|m| m.path.as_os_str() == exe) {
            let main = maps.remove(i);
            maps.insert(0, main);
        }
    }
    maps
}

/// The GNU build id of the file `tgid` maps at `m`, in lowercase hex; empty without one.
fn build_id(tgid: u32, m: &procfs::Mapping) -> String {
    let Ok(path) = procfs::reachable_path(tgid as i32, &m.path, Some((m.start, m.end))) else {
        return String::new();
    };
    let Ok(binary) = Binary::open(&path) else {
        return String::new();
    };
    match binary.object().map(|o| object::Object::build_id(&o)) {
        Ok(Ok(Some(id))) => id.iter().map(|b| format!("{b:02x}")).collect(),
        _ => String::new(),
    }
}

/// `shop.cpp:42` → (`shop.cpp`, 42); no line is 0.
fn file_and_line(source: Option<&str>) -> (&str, i64) {
    let Some(source) = source else {
        return ("", 0);
    };
    match source.rsplit_once(':') {
        Some((file, line)) => match line.parse() {
            Ok(n) => (file, n),
            Err(_) => (source, 0),
        },
        None => (source, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_and_line_split() {
        assert_eq!(file_and_line(Some("shop.cpp:42")), ("shop.cpp", 42));
        assert_eq!(file_and_line(Some("shop.cpp")), ("shop.cpp", 0));
        assert_eq!(file_and_line(None), ("", 0));
    }

    /// This process's own code: its mapping is the test binary's, with its build id (cargo
    /// links with one), and the function is named.
    #[test]
    #[inline(never)]
    fn locates_this_process() {
        let here = locates_this_process as *const () as u64;
        let mut symbolizer = Symbolizer::new();
        let mut stacks = Stacks::new(&mut symbolizer);
        let mut b = Builder::new();
        let pid = std::process::id();
        stacks.main_binary_first(&mut b, pid);
        let frames = stacks.frames(pid, &[here]);
        let loc = stacks.location(&mut b, pid, here, &frames[0]);
        let p = b.finish(super::super::builder::Head {
            sample_types: &[],
            default_sample_type: "",
            period_type: ("", ""),
            period: 0,
            time_nanos: 0,
            duration_nanos: 0,
            comments: vec![],
        });
        let location = &p.location[loc as usize - 1];
        assert_eq!(location.mapping_id, 1, "the main binary is mapping 1");
        let mapping = &p.mapping[0];
        assert!((mapping.memory_start..mapping.memory_limit).contains(&here));
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(
            p.string_table[mapping.filename as usize],
            exe.display().to_string()
        );
        assert!(!p.string_table[mapping.build_id as usize].is_empty());
        let names: Vec<&str> = location
            .line
            .iter()
            .map(|l| &*p.string_table[p.function[l.function_id as usize - 1].name as usize])
            .collect();
        assert!(
            names.iter().any(|n| n.contains("locates_this_process")),
            "{names:?}"
        );
    }
}
