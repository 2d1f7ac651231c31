//! Memory access seam with two real implementations: [`RemoteReader`] (another process,
//! through `process_vm_readv`) and [`LocalReader`] (a byte buffer at a chosen base address,
//! for unit tests and for arguments that arrived in registers).

use std::collections::{HashMap, VecDeque};
use std::io::IoSliceMut;
use std::sync::Mutex;

use nix::sys::uio::{RemoteIoVec, process_vm_readv};
use nix::unistd::Pid;

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ReadError {
    #[error("cannot read {len} bytes of target memory at {addr:#x}: {reason}")]
    Fault {
        addr: u64,
        len: usize,
        reason: String,
    },
}

/// `Sync` so that a walk can run on a thread of its own (with a stack deep enough for deeply
/// nested or long chased structures).
pub trait MemoryReader: Sync {
    /// Fills `buf` with the bytes at `addr`, entirely or not at all.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError>;

    /// Several reads at once; implementations batch them when they can.
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<(), ReadError> {
        for (addr, buf) in reqs.iter_mut() {
            self.read(*addr, buf)?;
        }
        Ok(())
    }

    /// Address ranges that may hold glibc heap chunks (`heap::ranges_from_maps`); none by
    /// default.
    fn heap_ranges(&self) -> Vec<(u64, u64)> {
        Vec::new()
    }
}

/// Reads another process's memory with `process_vm_readv` (no ptrace stop needed, but the
/// caller keeps the thread frozen so that the object does not change under the walk).
pub struct RemoteReader {
    pid: Pid,
}

/// Most iovecs per `process_vm_readv` (Linux's UIO_MAXIOV).
const MAX_IOV: usize = 1024;

impl RemoteReader {
    pub fn new(pid: i32) -> Self {
        Self {
            pid: Pid::from_raw(pid),
        }
    }

    fn fault(addr: u64, len: usize, reason: impl ToString) -> ReadError {
        ReadError::Fault {
            addr,
            len,
            reason: reason.to_string(),
        }
    }
}

impl MemoryReader for RemoteReader {
    fn heap_ranges(&self) -> Vec<(u64, u64)> {
        super::heap_ranges::ranges_of(self.pid.as_raw())
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let mut done = 0;
        // A read crossing into an unmapped page returns short: retry from there to report
        // the exact failing address.
        while done < buf.len() {
            let len = buf.len() - done;
            let at = addr + done as u64;
            let remote = [RemoteIoVec {
                base: at as usize,
                len,
            }];
            let mut local = [IoSliceMut::new(&mut buf[done..])];
            match process_vm_readv(self.pid, &mut local, &remote) {
                Ok(0) => return Err(Self::fault(at, len, "unmapped")),
                Ok(n) => done += n,
                Err(e) => return Err(Self::fault(at, len, e)),
            }
        }
        Ok(())
    }

    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<(), ReadError> {
        for chunk in reqs.chunks_mut(MAX_IOV) {
            let total: usize = chunk.iter().map(|r| r.1.len()).sum();
            let remote: Vec<RemoteIoVec> = chunk
                .iter()
                .map(|(a, b)| RemoteIoVec {
                    base: *a as usize,
                    len: b.len(),
                })
                .collect();
            let got = {
                let mut local: Vec<IoSliceMut<'_>> =
                    chunk.iter_mut().map(|(_, b)| IoSliceMut::new(b)).collect();
                process_vm_readv(self.pid, &mut local, &remote)
            };
            if got.ok() != Some(total) {
                // Find the culprit one by one for a precise error.
                for (addr, buf) in chunk.iter_mut() {
                    self.read(*addr, buf)?;
                }
            }
        }
        Ok(())
    }
}

/// Small reads through a cache of aligned blocks: node-based containers (lists, trees, hash
/// tables) read one node at a time, and their nodes usually sit next to each other, so one
/// `process_vm_readv` of a block serves many nodes. Valid only while the target is frozen.
/// Large reads (element arrays) go straight through.
pub struct CachedReader<'a> {
    inner: &'a dyn MemoryReader,
    cache: Mutex<BlockCache>,
}

#[derive(Default)]
struct BlockCache {
    blocks: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

const BLOCK: u64 = 64 << 10;
const MAX_BLOCKS: usize = 256;

impl<'a> CachedReader<'a> {
    pub fn new(inner: &'a dyn MemoryReader) -> Self {
        Self {
            inner,
            cache: Mutex::new(BlockCache::default()),
        }
    }

    /// Copies from the cached block at `base` if it is (or can be) loaded.
    fn copy_from_block(&self, base: u64, addr: u64, out: &mut [u8]) -> bool {
        let Ok(mut c) = self.cache.lock() else {
            return false;
        };
        if !c.blocks.contains_key(&base) {
            let mut block = vec![0u8; BLOCK as usize];
            // A block reaching past the end of a mapping fails: the caller reads directly.
            if self.inner.read(base, &mut block).is_err() {
                return false;
            }
            if c.order.len() >= MAX_BLOCKS
                && let Some(old) = c.order.pop_front()
            {
                c.blocks.remove(&old);
            }
            c.order.push_back(base);
            c.blocks.insert(base, block);
        }
        let Some(block) = c.blocks.get(&base) else {
            return false;
        };
        let start = (addr - base) as usize;
        out.copy_from_slice(&block[start..start + out.len()]);
        true
    }
}

impl MemoryReader for CachedReader<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let len = buf.len() as u64;
        let Some(end) = addr.checked_add(len) else {
            return self.inner.read(addr, buf);
        };
        if len == 0 || len > BLOCK / 4 {
            return self.inner.read(addr, buf);
        }
        let first = addr & !(BLOCK - 1);
        let last = (end - 1) & !(BLOCK - 1);
        let ok = if first == last {
            self.copy_from_block(first, addr, buf)
        } else {
            let split = (last - addr) as usize;
            let (a, b) = buf.split_at_mut(split);
            self.copy_from_block(first, addr, a) && self.copy_from_block(last, last, b)
        };
        if ok {
            Ok(())
        } else {
            self.inner.read(addr, buf)
        }
    }

    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<(), ReadError> {
        self.inner.read_many(reqs)
    }

    fn heap_ranges(&self) -> Vec<(u64, u64)> {
        self.inner.heap_ranges()
    }
}

/// A byte buffer that pretends to live at `base`.
pub struct LocalReader {
    pub base: u64,
    pub bytes: Vec<u8>,
}

impl LocalReader {
    pub fn new(base: u64, bytes: Vec<u8>) -> Self {
        Self { base, bytes }
    }
}

impl MemoryReader for LocalReader {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let fault = || ReadError::Fault {
            addr,
            len: buf.len(),
            reason: "outside the local buffer".into(),
        };
        let start = addr.checked_sub(self.base).ok_or_else(fault)? as usize;
        let end = start.checked_add(buf.len()).ok_or_else(fault)?;
        let src = self.bytes.get(start..end).ok_or_else(fault)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// `inner`, except that `[base, base + bytes.len())` reads from `bytes`: an argument that
/// arrived in registers, given a made-up address.
pub struct Overlay<'a> {
    pub local: LocalReader,
    pub inner: &'a dyn MemoryReader,
}

impl MemoryReader for Overlay<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let end = self.local.base + self.local.bytes.len() as u64;
        if addr >= self.local.base && addr < end {
            return self.local.read(addr, buf);
        }
        self.inner.read(addr, buf)
    }

    fn heap_ranges(&self) -> Vec<(u64, u64)> {
        self.inner.heap_ranges()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_reader_bounds() {
        let r = LocalReader::new(0x1000, vec![1, 2, 3, 4]);
        let mut b = [0u8; 2];
        r.read(0x1002, &mut b).unwrap();
        assert_eq!(b, [3, 4]);
        assert!(r.read(0x1003, &mut b).is_err());
        assert!(r.read(0xfff, &mut b).is_err());
    }

    #[test]
    fn cached_reads_match_direct_reads() {
        let bytes: Vec<u8> = (0..3 * BLOCK as usize).map(|i| (i % 251) as u8).collect();
        let local = LocalReader::new(0x10_0000, bytes.clone());
        let cached = CachedReader::new(&local);
        for (off, len) in [
            (0usize, 8usize),
            (100, 32),
            (BLOCK as usize - 4, 8),
            (2 * BLOCK as usize + 7, 40),
        ] {
            let mut b = vec![0u8; len];
            cached.read(0x10_0000 + off as u64, &mut b).expect("read");
            assert_eq!(b, bytes[off..off + len]);
        }
        // The last block reaches past the buffer's end only if misaligned: still correct.
        let mut b = [0u8; 4];
        cached
            .read(0x10_0000 + 3 * BLOCK - 4, &mut b)
            .expect("tail");
        assert!(cached.read(0x10_0000 + 3 * BLOCK - 2, &mut b).is_err());
    }

    #[test]
    fn remote_reader_reads_own_process() {
        let data: Vec<u8> = (0..100u8).collect();
        let r = RemoteReader::new(std::process::id() as i32);
        let mut b = [0u8; 10];
        r.read(data.as_ptr() as u64 + 5, &mut b).unwrap();
        assert_eq!(b[0], 5);
        let (mut x, mut y) = ([0u8; 3], [0u8; 4]);
        r.read_many(&mut [
            (data.as_ptr() as u64, &mut x[..]),
            (data.as_ptr() as u64 + 50, &mut y[..]),
        ])
        .unwrap();
        assert_eq!((x[2], y[0]), (2, 50));
        assert!(r.read(8, &mut b).is_err());
    }
}
