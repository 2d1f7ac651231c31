//! The region mapped into one process ([`Segments`]): where its parts lie, reading back
//! what a walk left, and finding and removing a region a killed run left in a process.

use super::*;

/// The region mapped into one process, its stack and its output buffer.
#[derive(Debug, Clone)]
pub struct Segments {
    pub base: u64,
    pub code_len: u64,
    /// Entry address of each walker, in the order they were given.
    pub walkers: Vec<u64>,
    pub stack: u64,
    pub output: u64,
    pub output_len: u64,
    /// BLAKE3 of the code region as written (stub and walkers): what the audit line names.
    /// (Zero for a leftover found in a process, which is only ever unmapped.)
    pub code_digest: [u8; 32],
}

impl Segments {
    /// After a walk, in one read: what it left (see [`ReadBack`]), and whether the stub
    /// stamped its return (the stamps are zeroed when a frame is written).
    pub(super) fn read_back(&self, tgid: i32) -> Result<(ReadBack, bool), RemoteError> {
        // The stamps and the frame in one piece (each piece of a remote read costs a lookup
        // of the target's pages), the output's first bytes in another.
        let mut near = vec![0u8; (FRAME - STAMPS) as usize + size_of::<WalkFrame>()];
        let mut prefix = vec![0u8; OUTPUT_PREFIX.min(self.output_len as usize)];
        remote::read_parts(
            tgid,
            &mut [
                (self.data() + STAMPS, near.as_mut_slice()),
                (self.output, prefix.as_mut_slice()),
            ],
        )?;
        let mut frame = WalkFrame::default();
        // SAFETY: WalkFrame is repr(C) plain integers without padding: every bit pattern is
        // a valid value, and `near` holds its size from FRAME − STAMPS on.
        unsafe {
            std::ptr::copy_nonoverlapping(
                near[(FRAME - STAMPS) as usize..].as_ptr(),
                (&mut frame as *mut WalkFrame).cast::<u8>(),
                size_of::<WalkFrame>(),
            );
        }
        let stamp = |i: usize| u64::from_le_bytes(near[i..i + 8].try_into().unwrap_or([0; 8]));
        let back = ReadBack {
            frame,
            prefix,
            ticks: stamp(8).wrapping_sub(stamp(0)),
        };
        Ok((back, stamp(8) != 0))
    }

    /// Maps code (stub + `walkers`, each `(bytes, entry offset)`) and data into the process of
    /// the held thread. Nothing is left mapped if any step fails.
    pub fn create(h: &mut Held, walkers: &[(&[u8], u64)]) -> Result<Self, RemoteError> {
        let mut entries = Vec::new();
        let mut offset = STUB_LEN;
        for (bytes, entry) in walkers {
            entries.push(offset + entry);
            offset = round_up(offset + bytes.len() as u64, 16);
        }
        let code_len = round_up(offset, PAGE);
        let mut code = stub(code_len);
        for (bytes, _) in walkers {
            code.resize(round_up(code.len() as u64, 16) as usize, 0xcc);
            code.extend_from_slice(bytes);
        }
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let total = code_len + REGION_AFTER_CODE;
        let base = h.reserve(total)?;
        let data = base + code_len;
        let seg = Self {
            base,
            code_len,
            walkers: entries.iter().map(|e| base + e).collect(),
            stack: data + STACK_AFTER_DATA,
            output: data + OUTPUT_AFTER_DATA,
            output_len: INITIAL_OUTPUT,
            code_digest: *blake3::hash(&code).as_bytes(),
        };
        let result = (|| {
            h.mprotect(base, code_len + DATA_LEN, rw)?;
            remote::write_memory(h.tgid, base, &code)?;
            let header: Vec<u8> = [MAGIC, code_len, total, 0]
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect();
            remote::write_memory(h.tgid, data + HEADER, &header)?;
            h.mprotect(base, code_len, libc::PROT_READ | libc::PROT_EXEC)?;
            // Recognisable by its header from here on: the note is no longer needed.
            h.forget_pending();
            // From here on, remote syscalls go through our stub and restore themselves.
            h.arm(base, code_len, None)?;
            h.mprotect(seg.stack, STACK_LEN, rw)?;
            h.mprotect(seg.output, seg.output_len, rw)
        })();
        if let Err(e) = result {
            let _ = h.munmap(base, total);
            return Err(e);
        }
        Ok(seg)
    }

    pub fn data(&self) -> u64 {
        self.base + self.code_len
    }

    pub fn frame(&self) -> u64 {
        self.data() + FRAME
    }

    pub fn register_objects(&self) -> (u64, u64) {
        (self.data() + REGISTER_OBJECTS, REGISTER_OBJECTS_LEN)
    }

    pub fn scratch(&self) -> (u64, u64) {
        (self.data() + SCRATCH, SCRATCH_LEN)
    }

    /// Stack bytes the walker may use (a page is left for the stub's own call).
    pub fn stack_budget(&self) -> u64 {
        STACK_LEN - PAGE
    }

    pub fn total_len(&self) -> u64 {
        self.code_len + REGION_AFTER_CODE
    }

    /// Opens at least `needed` bytes of the output buffer (in place: its address stays).
    pub fn grow_output(&mut self, h: &mut Held, needed: u64) -> Result<(), RemoteError> {
        let bigger = round_up(needed.max(self.output_len * 2), PAGE).min(OUTPUT_RESERVE);
        if bigger < needed {
            return Err(RemoteError::OutputTooLarge {
                needed,
                limit: OUTPUT_RESERVE,
            });
        }
        h.mprotect(
            self.output + self.output_len,
            bigger - self.output_len,
            libc::PROT_READ | libc::PROT_WRITE,
        )?;
        self.output_len = bigger;
        Ok(())
    }

    /// Regions a killed oi-trace left in `pid` that no thread is inside. Recognised by their
    /// data part: an anonymous RW mapping of exactly the data part's size (guard pages keep
    /// the kernel from merging it with anything), right after anonymous RX memory that holds
    /// our stub, with our header.
    /// `held_tid`: the thread the caller holds (stopped at a probe, so not inside).
    pub fn leftovers(pid: i32, held_tid: i32) -> Vec<Self> {
        let anon: Vec<Region> = procfs::regions(pid)
            .into_iter()
            .filter(|r| r.anonymous)
            .collect();
        let mut found = Vec::new();
        for pair in anon.windows(2) {
            let (code, data) = (&pair[0], &pair[1]);
            if !code.perms.starts_with("r-x")
                || !data.perms.starts_with("rw-")
                || code.end != data.start
                || data.end - data.start != DATA_LEN
            {
                continue;
            }
            let mut header = [0u8; HEADER_LEN];
            if remote::read_memory(pid, data.start + HEADER, &mut header).is_err() {
                continue;
            }
            let word = |i: usize| {
                u64::from_le_bytes(header[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]))
            };
            let (magic, code_len, total) = (word(0), word(1), word(2));
            if magic != MAGIC
                || code_len % PAGE != 0
                || code_len > data.start - code.start
                || total != code_len + REGION_AFTER_CODE
            {
                continue;
            }
            let base = data.start - code_len;
            let mut head = vec![0u8; STUB_LEN as usize];
            if remote::read_memory(pid, base, &mut head).is_err()
                || head != stub(code_len)
                || !covered_by(&anon, base, base + total)
                || !outside(
                    pid,
                    word((BUSY / 8) as usize),
                    held_tid,
                    (base, base + total),
                )
            {
                continue;
            }
            found.push(Self {
                base,
                code_len,
                walkers: Vec::new(),
                stack: data.start + STACK_AFTER_DATA,
                output: data.start + OUTPUT_AFTER_DATA,
                output_len: 0,
                // A leftover is only ever unmapped, never audited as a new mapping.
                code_digest: [0; 32],
            });
        }
        found
    }

    /// Unmaps the whole region from the process of the held thread.
    pub fn destroy(&self, h: &mut Held) -> Result<(), RemoteError> {
        h.munmap(self.base, self.total_len())
    }
}

/// Whether thread `busy` (a region's busy word) is surely not running inside `region`: none,
/// the thread we hold, a thread that is gone, or one blocked in a system call with its
/// instruction and stack pointers elsewhere (our code makes no blocking call). A thread
/// that is running cannot be told: the region is left for a later run.
fn outside(pid: i32, busy: u64, held_tid: i32, (start, end): (u64, u64)) -> bool {
    if busy == 0 || busy == held_tid as u64 {
        return true;
    }
    let Ok(line) = std::fs::read_to_string(format!("/proc/{pid}/task/{busy}/syscall")) else {
        return !std::path::Path::new(&format!("/proc/{pid}/task/{busy}")).exists();
    };
    // "NR args... SP PC" when blocked, "running" otherwise.
    let words: Vec<&str> = line.split_whitespace().collect();
    let addr = |w: &str| u64::from_str_radix(w.trim_start_matches("0x"), 16).ok();
    match words.as_slice() {
        [.., sp, pc] if words.len() >= 3 => match (addr(sp), addr(pc)) {
            (Some(sp), Some(pc)) => !(start..end).contains(&sp) && !(start..end).contains(&pc),
            _ => false,
        },
        _ => false,
    }
}

/// Whether `[start, end)` is covered without gaps by anonymous mappings (the kernel may have
/// merged the region's ends with neighbours; nothing else may lie inside it).
fn covered_by(anon: &[Region], start: u64, end: u64) -> bool {
    let mut at = start;
    for m in anon {
        if m.start <= at && at < m.end {
            at = m.end;
            if at >= end {
                return true;
            }
        }
    }
    false
}
