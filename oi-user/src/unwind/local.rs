//! The kernel unwinder's walk in user space, over a copy of the top of a stack: for the
//! allocations `allocs --mechanism inject` samples inside the target, whose wrappers copy the
//! caller's registers and stack into the data part (`inject::record::sample`).
//!
//! The same rows as the kernel's (`debuginfo::cfi::unwind_rows`, one table per file, found by
//! device and inode and shared by every mapping of it), the same step
//! (`oi-ebpf/src/stack.rs`): CFA from the row (rsp + off, rbp + off, a PLT entry), return
//! address at CFA − 8, rbp from CFA + 8·slot where saved; the frame pointer where no row
//! covers a pc; the walk ends at an undefined return address (`_start`, a thread's start) or
//! a zero return address or frame pointer. Every frame here is a return address, so each is
//! looked up at pc − 1 (the call, in the caller's function). Words are read only from the
//! copy: a frame whose words lie above it ends the walk (truncated). Bounded by
//! [`MAX_FRAMES`]; never reads the target's memory, only `/proc/PID/maps` and its files.

use std::{collections::HashMap, sync::Arc};

use oi_common::stack::{MAX_FRAMES, Row, rule};

use super::{FileKey, file_key};
use crate::{
    debuginfo::{Binary, cfi},
    inferior::procfs,
};

/// One file's rows and where its ELF addresses start (`debuginfo::cfi::UnwindRows`).
struct FileRows {
    rows: Vec<Row>,
    base: u64,
}

/// One executable mapping: pc − `bias` is the offset its file's rows use.
struct Mapped {
    start: u64,
    end: u64,
    bias: u64,
    rows: Arc<FileRows>,
}

/// The unwind rows of one process's executable mappings.
#[derive(Default)]
pub struct LocalTables {
    files: HashMap<FileKey, Arc<FileRows>>,
    /// Sorted by start.
    mapped: Vec<Mapped>,
    seen: Vec<procfs::Mapping>,
}

/// A stack walked: frames innermost first, and whether it reached its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walked {
    pub frames: Vec<u64>,
    pub ended: bool,
}

impl LocalTables {
    /// Reads `pid`'s executable mappings and loads the rows of files not seen yet; cheap when
    /// nothing changed since the last call (one read of `/proc/PID/maps`).
    pub fn track(&mut self, pid: i32) {
        let Ok(maps) = procfs::mappings(pid) else {
            return;
        };
        let seen: Vec<procfs::Mapping> = maps.into_iter().filter(|m| m.executable).collect();
        if seen == self.seen {
            return;
        }
        let mut mapped = Vec::with_capacity(seen.len());
        for m in &seen {
            if let Some(entry) = self.load(pid, m) {
                mapped.push(entry);
            }
        }
        mapped.sort_by_key(|m| m.start);
        self.mapped = mapped;
        self.seen = seen;
    }

    fn load(&mut self, pid: i32, m: &procfs::Mapping) -> Option<Mapped> {
        let host = procfs::reachable_path(pid, &m.path, Some((m.start, m.end))).ok()?;
        let key = file_key(&host)?;
        let binary = Binary::open(&host).ok()?;
        let bias = binary.load_bias(m.start, m.offset)?;
        let rows = match self.files.get(&key) {
            Some(rows) => rows.clone(),
            None => {
                // A file whose CFI cannot be read gets no rows: frame pointers there.
                let compiled = cfi::unwind_rows(&binary).unwrap_or_default();
                let rows = Arc::new(FileRows {
                    rows: compiled.rows,
                    base: compiled.base,
                });
                self.files.insert(key, rows.clone());
                rows
            }
        };
        Some(Mapped {
            start: m.start,
            end: m.end,
            bias: bias.wrapping_add(rows.base),
            rows,
        })
    }

    /// The row covering `pc`; `None` where nothing covers it.
    pub fn find_row(&self, pc: u64) -> Option<Row> {
        let i = self
            .mapped
            .partition_point(|m| m.start <= pc)
            .checked_sub(1)?;
        let m = &self.mapped[i];
        if pc >= m.end {
            return None;
        }
        let offset = u32::try_from(pc.wrapping_sub(m.bias)).ok()?;
        let rows = &m.rows.rows;
        let j = rows.partition_point(|r| r.pc <= offset).checked_sub(1)?;
        Some(rows[j])
    }

    /// Walks the stack whose innermost frame returns to `pc` with stack pointer `sp` and
    /// frame pointer `bp`, reading words only from `stack` (the bytes from `sp` up).
    pub fn walk(&self, pc: u64, sp: u64, bp: u64, stack: &[u8]) -> Walked {
        let read = |addr: u64| -> Option<u64> {
            let at = usize::try_from(addr.checked_sub(sp)?).ok()?;
            let bytes = stack.get(at..at.checked_add(8)?)?;
            Some(u64::from_le_bytes(bytes.try_into().ok()?))
        };
        let (mut pc, mut sp, mut bp) = (pc, sp, bp);
        let mut frames = Vec::new();
        let mut ended = false;
        while frames.len() < MAX_FRAMES {
            frames.push(pc);
            let row = self.find_row(pc.wrapping_sub(1));
            let step = match row.map(|r| (r.rule, r)) {
                Some((rule::CFA_RSP, r)) => {
                    Some((sp.wrapping_add(u64::from(r.cfa_offset)), r.rbp_slot))
                }
                Some((rule::CFA_RBP, r)) => {
                    Some((bp.wrapping_add(u64::from(r.cfa_offset)), r.rbp_slot))
                }
                Some((rule::CFA_PLT, r)) => {
                    let pushed = if (pc & 15) >= u64::from(r.cfa_offset) {
                        8
                    } else {
                        0
                    };
                    Some((sp.wrapping_add(8 + pushed), r.rbp_slot))
                }
                Some((rule::END, _)) => {
                    ended = true;
                    break;
                }
                Some((rule::NONE, _)) | None => None,
                Some(_) => break,
            };
            let (cfa, ra) = match step {
                Some((cfa, rbp_slot)) => {
                    let Some(ra) = read(cfa.wrapping_sub(8)) else {
                        break;
                    };
                    if rbp_slot != 0 {
                        let at = cfa.wrapping_add((i64::from(rbp_slot) * 8) as u64);
                        let Some(saved) = read(at) else {
                            break;
                        };
                        bp = saved;
                    }
                    (cfa, ra)
                }
                None => {
                    // The caller by the frame pointer: saved rbp at [rbp], return address above.
                    if bp == 0 {
                        ended = true;
                        break;
                    }
                    let (Some(next_bp), Some(ra)) = (read(bp), read(bp.wrapping_add(8))) else {
                        break;
                    };
                    let cfa = bp.wrapping_add(16);
                    bp = next_bp;
                    (cfa, ra)
                }
            };
            if ra == 0 {
                ended = true;
                break;
            }
            // A caller's frame is above its callee's: anything else would loop.
            if cfa <= sp {
                break;
            }
            pc = ra;
            sp = cfa;
        }
        Walked { frames, ended }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(rows: Vec<Row>) -> LocalTables {
        LocalTables {
            files: HashMap::new(),
            mapped: vec![Mapped {
                start: 0x1000,
                end: 0x9000,
                bias: 0x1000,
                rows: Arc::new(FileRows { rows, base: 0 }),
            }],
            seen: Vec::new(),
        }
    }

    fn row(pc: u32, rule: u8, cfa_offset: u16, rbp_slot: i8) -> Row {
        Row {
            pc,
            cfa_offset,
            rule,
            rbp_slot,
        }
    }

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn steps_by_rsp_and_rbp_rows_to_the_end() {
        // f (0x100..0x200): CFA = rsp + 24, rbp saved at CFA − 16; g (0x200..0x300): CFA = rbp
        // + 16; _start (0x300..): the end.
        let t = tables(vec![
            row(0x100, rule::CFA_RSP, 24, -2),
            row(0x200, rule::CFA_RBP, 16, -2),
            row(0x300, rule::END, 0, 0),
        ]);
        let sp = 0x7000_0000u64;
        // f's frame: sp+0 local, sp+8 saved rbp (= g's frame base), sp+16 return into g.
        // g's frame (rbp = sp + 40): [rbp] saved rbp 0, [rbp+8] return into _start.
        let stack = words(&[0, sp + 40, 0x1250, 0, 0, 0, 0x1310]);
        let w = t.walk(0x1150, sp, 0xdead, &stack);
        assert_eq!(w.frames, vec![0x1150, 0x1250, 0x1310]);
        assert!(w.ended);
    }

    #[test]
    fn stops_where_the_copy_ends() {
        let t = tables(vec![row(0x100, rule::CFA_RSP, 64, 0)]);
        let w = t.walk(0x1150, 0x7000_0000, 0, &words(&[1, 2]));
        assert_eq!((w.frames, w.ended), (vec![0x1150], false));
        // A frame pointer below the copy: stopped.
        let t = tables(Vec::new());
        let sp = 0x7000_0000u64;
        let w = t.walk(0x1150, sp, sp, &words(&[sp - 64, 0x1400]));
        assert_eq!((w.frames.len(), w.ended), (2, false));
    }

    #[test]
    fn a_pc_outside_every_mapping_follows_the_frame_pointer() {
        let t = tables(Vec::new());
        let sp = 0x7000_0000u64;
        let stack = words(&[sp + 16, 0xaaaa_0000, 0, 0xbbbb_0000]);
        let w = t.walk(0x50_0000, sp, sp, &stack);
        assert_eq!(w.frames, vec![0x50_0000, 0xaaaa_0000, 0xbbbb_0000]);
        assert!(w.ended, "rbp 0 ends the walk");
    }
}
