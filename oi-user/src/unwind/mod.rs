//! CFI unwind tables for the kernel-side unwinder (`oi-ebpf/src/stack.rs`): which files each
//! tracked process executes, their `.eh_frame` compiled into rows (`debuginfo::cfi`), loaded
//! into the eBPF maps every program that calls `user_stack` carries.
//!
//! Why in the kernel: the allocation profiler keys its per-site maps by the whole user stack
//! of every allocation, at millions a second, in code built without frame pointers (Debian's
//! -O2 default). Copying stacks to user space cannot keep up and gives the kernel no key, and
//! frame pointers alone stop at the first -O2 function. So user space does the expensive part
//! once per file (DWARF CFI → rows: CFA = rsp+off or rbp+off, rbp saved at CFA+off, end of the
//! stack), and the eBPF side only searches and steps.
//!
//! One row array serves every process: a file mapped by several processes (cgroup mode, a
//! shared library) is loaded once, found by its device and inode, and its rows are released when
//! no tracked process maps it any more. Each process gets a sorted list of its executable
//! mappings (at most `MAX_MAPPINGS`) pointing into the array. [`Unwinder::track`] re-reads
//! `/proc/PID/maps` and does nothing else when the executable mappings did not change, so it
//! can run every second to pick up `dlopen`. Files are read the way the rest of the tracer
//! reads them (`inferior::procfs::reachable_path`): deleted binaries, other mount namespaces.
//! Everything is bounded: rows that do not fit the array, mappings beyond `MAX_MAPPINGS`, are
//! counted in `rows_dropped`; their frames are then stepped by the frame pointer.
//!
//! Never touches the target beyond reading `/proc`; never writes a row a tracked process's
//! mappings point at (a file's range is reused only once no tracked process maps it).

use std::collections::{BTreeMap, HashMap};

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray},
};
use object::{Object as _, ObjectSegment as _};
use oi_common::stack::{
    MAX_MAPPINGS, MAX_ROWS, Mapping, ProcessMappings, ROW_SEARCH_STEPS, Row, counter,
};

use crate::{
    debuginfo::{Binary, cfi},
    error::{Error, Result},
    inferior::procfs,
};

const ROWS_MAP: &str = "UNWIND_ROWS";
const MAPPINGS_MAP: &str = "UNWIND_MAPPINGS";
const COUNTERS_MAP: &str = "UNWIND_COUNTERS";

/// Sizes the unwinder's maps in an object about to be loaded: every object of `oi-ebpf`
/// carries them (they are statics of its library), tiny unless a loader of a program that
/// calls `user_stack` asks for the real size here.
pub fn size_maps<'a, 'b>(loader: &'b mut EbpfLoader<'a>) -> &'b mut EbpfLoader<'a> {
    loader.map_max_entries(ROWS_MAP, MAX_ROWS)
}

/// What the unwinder holds and what it could not do.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct UnwindStats {
    /// Files whose rows are loaded.
    pub files: u64,
    /// Rows loaded, over every file.
    pub rows: u64,
    /// Rows that did not fit (the row array, or a process's mapping list, was full).
    pub rows_dropped: u64,
    /// Processes the kernel's table of processes had no room for (`MAX_UNWIND_PROCESSES`):
    /// their stacks are stepped by the frame pointer, beyond the allocator's caller.
    pub processes_untracked: u64,
    /// Frames the kernel stepped by the frame pointer for want of a row.
    pub frames_without_cfi: u64,
    /// Stacks the kernel cut before their end (frame limit, unreadable or unfollowable frame).
    pub truncated_stacks: u64,
}

/// One file's rows in the array, and how to place it in a process.
struct FileTable {
    first_row: u32,
    rows: u32,
    /// ELF address of row offset 0.
    base: u64,
    /// Loadable segments: (file offset, file size, virtual address), for the load bias.
    segments: Vec<(u64, u64, u64)>,
    /// Tracked processes that map it.
    users: u32,
}

impl FileTable {
    /// Runtime address minus ELF address for a mapping of this file at `start` from file
    /// offset `offset` (as `Binary::load_bias`, from the kept segments).
    fn load_bias(&self, start: u64, offset: u64) -> Option<u64> {
        self.segments.iter().find_map(|&(seg_off, size, vaddr)| {
            let end = seg_off.checked_add(size.max(1))?;
            (seg_off <= offset && offset < end)
                .then(|| start.wrapping_sub(vaddr.wrapping_add(offset - seg_off)))
        })
    }
}

/// (device, inode, size, modification time in ns) of a mapped file: the inode alone could be
/// a new file's after the old one was deleted.
type FileKey = (u64, u64, u64, i64);

fn file_key(path: &std::path::Path) -> Option<FileKey> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).ok()?;
    let mtime = meta.mtime().saturating_mul(1_000_000_000) + meta.mtime_nsec();
    Some((meta.dev(), meta.ino(), meta.size(), mtime))
}

struct Tracked {
    /// The executable mappings last seen: (start, end, offset, path).
    seen: Vec<procfs::Mapping>,
    files: Vec<FileKey>,
}

/// Loads and keeps the unwind tables of the tracked processes in the kernel.
pub struct Unwinder {
    rows: RowArray,
    mappings: BpfHashMap<MapData, u32, ProcessMappings>,
    counters: PerCpuArray<MapData, u64>,
    capacity: u32,
    /// Rows `next_row..capacity` are unused; `free` holds released ranges below it (first →
    /// length), never adjacent to each other.
    next_row: u32,
    free: BTreeMap<u32, u32>,
    files: HashMap<FileKey, FileTable>,
    processes: HashMap<i32, Tracked>,
    rows_dropped: u64,
    /// Processes refused because the kernel's process table was full, until they are forgotten.
    untracked: std::collections::HashSet<i32>,
    processes_untracked: u64,
    /// The last [`ProcessMappings::generation`] written.
    generation: u32,
}

fn map_err(what: &'static str) -> impl Fn(aya::maps::MapError) -> Error {
    move |e| Error::internal(format!("eBPF map {what}: {e}"))
}

impl Unwinder {
    /// Takes the unwinder's maps from a loaded object whose program calls `user_stack` (sized
    /// with [`size_maps`] before loading; otherwise the row array holds one row and nearly
    /// every row counts as dropped).
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| Error::internal(format!("eBPF map {name} missing")))
        };
        let rows = RowArray::new(take(ROWS_MAP)?)?;
        let mappings = BpfHashMap::try_from(take(MAPPINGS_MAP)?).map_err(map_err(MAPPINGS_MAP))?;
        let counters = PerCpuArray::try_from(take(COUNTERS_MAP)?).map_err(map_err(COUNTERS_MAP))?;
        Ok(Self {
            // The kernel's search finds a row among at most 2^ROW_SEARCH_STEPS.
            capacity: rows.capacity().min(1 << ROW_SEARCH_STEPS),
            rows,
            mappings,
            counters,
            next_row: 0,
            free: BTreeMap::new(),
            files: HashMap::new(),
            processes: HashMap::new(),
            rows_dropped: 0,
            untracked: std::collections::HashSet::new(),
            processes_untracked: 0,
            generation: 0,
        })
    }

    /// A generation no list written in this run had (0 is never used).
    fn next_generation(&mut self) -> u32 {
        self.generation = self.generation.wrapping_add(1).max(1);
        self.generation
    }

    /// Loads the rows of every executable mapping of `pid` the kernel does not have yet and
    /// tells the kernel the process's mappings. Cheap when nothing changed since the last call
    /// (one read of `/proc/PID/maps`): call it again to pick up `dlopen`.
    pub fn track(&mut self, pid: i32) -> Result<()> {
        if self.untracked.contains(&pid) {
            return Ok(());
        }
        let seen: Vec<procfs::Mapping> = procfs::mappings(pid)?
            .into_iter()
            .filter(|m| m.executable)
            .collect();
        if self.processes.get(&pid).is_some_and(|t| t.seen == seen) {
            return Ok(());
        }
        let mut entries: Vec<Mapping> = Vec::with_capacity(seen.len());
        let mut files: Vec<FileKey> = Vec::new();
        for m in &seen {
            let Some(key) = self.load_file(pid, m) else {
                continue;
            };
            let table = &self.files[&key];
            let Some(bias) = table.load_bias(m.start, m.offset) else {
                continue;
            };
            if !files.contains(&key) {
                files.push(key);
            }
            entries.push(Mapping {
                start: m.start,
                end: m.end,
                bias: bias.wrapping_add(table.base),
                first_row: table.first_row,
                rows: table.rows,
            });
        }
        entries.sort_by_key(|e| e.start);
        if entries.len() > MAX_MAPPINGS {
            self.rows_dropped += entries[MAX_MAPPINGS..]
                .iter()
                .map(|e| u64::from(e.rows))
                .sum::<u64>();
            entries.truncate(MAX_MAPPINGS);
        }
        let mut value = ProcessMappings {
            count: entries.len() as u32,
            generation: self.next_generation(),
            entries: [Mapping::default(); MAX_MAPPINGS],
        };
        value.entries[..entries.len()].copy_from_slice(&entries);
        // Users first, so that a file this process keeps is never released in between.
        for key in &files {
            if let Some(t) = self.files.get_mut(key) {
                t.users += 1;
            }
        }
        let old = self.processes.insert(pid, Tracked { seen, files });
        // The kernel switches to the new list at once (a hash update replaces the value whole).
        let written = self.mappings.insert(pid as u32, value, 0);
        if let Some(old) = old {
            self.release(&old.files);
        }
        match written {
            Ok(()) => Ok(()),
            // The process table is full (a new key; an update of a tracked one never fails
            // so): counted and reported, the run goes on with frame-pointer stacks for it.
            Err(aya::maps::MapError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(libc::E2BIG) =>
            {
                if let Some(t) = self.processes.remove(&pid) {
                    self.release(&t.files);
                }
                self.untracked.insert(pid);
                self.processes_untracked += 1;
                Ok(())
            }
            Err(e) => Err(map_err(MAPPINGS_MAP)(e)),
        }
    }

    /// Drops a process: the kernel forgets its mappings, and files no other tracked process
    /// maps give their rows back.
    pub fn forget(&mut self, pid: i32) {
        self.untracked.remove(&pid);
        let _ = self.mappings.remove(&(pid as u32));
        if let Some(t) = self.processes.remove(&pid) {
            self.release(&t.files);
        }
    }

    pub fn stats(&self) -> UnwindStats {
        let kernel = |index: u32| -> u64 {
            self.counters
                .get(&index, 0)
                .map(|per_cpu| per_cpu.iter().sum())
                .unwrap_or(0)
        };
        let loaded = self.files.values().filter(|t| t.rows > 0);
        UnwindStats {
            files: loaded.clone().count() as u64,
            rows: loaded.map(|t| u64::from(t.rows)).sum(),
            rows_dropped: self.rows_dropped,
            processes_untracked: self.processes_untracked,
            frames_without_cfi: kernel(counter::FRAMES_WITHOUT_CFI),
            truncated_stacks: kernel(counter::TRUNCATED_STACKS),
        }
    }

    /// The table of the file `m` maps, loading it on first sight; `None` when the file
    /// cannot be reached or read (its frames are then stepped by the frame pointer).
    fn load_file(&mut self, pid: i32, m: &procfs::Mapping) -> Option<FileKey> {
        let host = procfs::reachable_path(pid, &m.path, Some((m.start, m.end))).ok()?;
        let key = file_key(&host)?;
        if self.files.contains_key(&key) {
            return Some(key);
        }
        let binary = Binary::open(&host).ok()?;
        let segments = binary
            .object()
            .ok()?
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, size, s.address())
            })
            .collect();
        // A file whose CFI cannot be read gets no rows: frame pointers there.
        let compiled = cfi::unwind_rows(&binary).unwrap_or_default();
        let n = u32::try_from(compiled.rows.len()).unwrap_or(u32::MAX);
        let placed = match (n > 0).then(|| self.allocate(n)).flatten() {
            Some(first) if self.write_rows(first, &compiled.rows) => Some(first),
            Some(first) => {
                self.free_range(first, n);
                None
            }
            None => None,
        };
        if placed.is_none() {
            self.rows_dropped += u64::from(n);
        }
        let (first_row, rows) = placed.map_or((0, 0), |first| (first, n));
        self.files.insert(
            key,
            FileTable {
                first_row,
                rows,
                base: compiled.base,
                segments,
                users: 0,
            },
        );
        Some(key)
    }

    fn write_rows(&mut self, first: u32, rows: &[Row]) -> bool {
        self.rows.write(first, rows)
    }

    /// A free range of `n` rows: the smallest released range that fits (so the same files,
    /// mapped again, find their old ranges), else rows never used.
    fn allocate(&mut self, n: u32) -> Option<u32> {
        let best = self
            .free
            .iter()
            .filter(|&(_, &len)| len >= n)
            .min_by_key(|&(_, &len)| len)
            .map(|(&first, &len)| (first, len));
        if let Some((first, len)) = best {
            self.free.remove(&first);
            if len > n {
                self.free.insert(first + n, len - n);
            }
            return Some(first);
        }
        let end = self.next_row.checked_add(n)?;
        if end > self.capacity {
            return None;
        }
        let first = self.next_row;
        self.next_row = end;
        Some(first)
    }

    /// Gives rows back, merged with free neighbours; free rows at the end shrink the used
    /// part.
    fn free_range(&mut self, mut first: u32, mut len: u32) {
        if let Some((&before, &before_len)) = self.free.range(..first).next_back()
            && before + before_len == first
        {
            self.free.remove(&before);
            first = before;
            len += before_len;
        }
        if let Some(after_len) = self.free.remove(&(first + len)) {
            len += after_len;
        }
        if first + len == self.next_row {
            self.next_row = first;
        } else {
            self.free.insert(first, len);
        }
    }

    fn release(&mut self, files: &[FileKey]) {
        for key in files {
            let Some(t) = self.files.get_mut(key) else {
                continue;
            };
            t.users = t.users.saturating_sub(1);
            if t.users == 0 {
                let t = self.files.remove(key).expect("present");
                if t.rows > 0 {
                    self.free_range(t.first_row, t.rows);
                }
            }
        }
    }
}

pub mod check;
pub mod local;
mod rows;

use rows::RowArray;
#[cfg(test)]
pub(crate) mod live_tests;
