//! Which address ranges of a process may hold glibc malloc chunks, from `/proc/PID/maps`:
//! the ranges `heap` checks pointers against and every `MemoryReader` reports. Reads only the
//! maps text; never the target's memory.

/// Most ranges a walk considers (the JIT's `WalkFrame::heaps`); `[heap]` first, then in
/// address order. Pointers into ranges left out are measured as OI does (no block).
pub const MAX_HEAPS: usize = 32;

/// The ranges of `/proc/PID/maps` text that may hold malloc chunks: private, readable and
/// writable, anonymous (no file, inode 0) or `[heap]`; never `[stack]` or `[vvar]`-like
/// pseudo files. Adjacent ranges merge; at most [`MAX_HEAPS`], `[heap]` first.
pub fn ranges_from_maps(maps: &str) -> Vec<(u64, u64)> {
    let mut heap = Vec::new();
    let mut anon: Vec<(u64, u64)> = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let name = f.next().unwrap_or("");
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) else {
            continue;
        };
        if !perms.starts_with("rw") || !perms.ends_with('p') || inode != "0" {
            continue;
        }
        match name {
            "[heap]" => heap.push((s, e)),
            "" => match anon.last_mut() {
                Some(last) if last.1 == s => last.1 = e,
                _ => anon.push((s, e)),
            },
            _ => {}
        }
    }
    heap.extend(anon);
    heap.truncate(MAX_HEAPS);
    heap
}

/// [`ranges_from_maps`] of a live process (none if its maps cannot be read).
pub fn ranges_of(pid: i32) -> Vec<(u64, u64)> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|m| ranges_from_maps(&m))
        .unwrap_or_default()
}
