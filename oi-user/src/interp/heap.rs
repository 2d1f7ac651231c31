//! glibc heap blocks, for `--feature chase-raw-pointers`: which address ranges may hold
//! malloc chunks (the target's anonymous writable mappings: `[heap]`, other arenas' heaps,
//! mmapped chunks), and whether a pointer is the start of an allocated block, and of what
//! usable size (`malloc_usable_size`'s number, glibc 2.36 on x86-64).
//!
//! The walker runs on arbitrary pointers, so a chunk header is only read inside a listed
//! range, and only believed when it is consistent: the pointer 16-aligned; an arena chunk of
//! a size that is a multiple of 16 and at least 32, ending inside the range, whose next
//! chunk says (PREV_INUSE) that this one is allocated; an mmapped chunk page-aligned, with
//! a zero prev_size, a page-multiple size, ending inside the range. Faults are contained by
//! the tracer but never relied on. The JIT (`jit::codegen`) mirrors [`block_usable`] check
//! for check. Never writes to the target.

pub use super::heap_ranges::{MAX_HEAPS, ranges_from_maps, ranges_of};
use super::memory::{MemoryReader, ReadError};

const PREV_INUSE: u64 = 1;
const IS_MMAPPED: u64 = 2;
const SIZE_BITS: u64 = 7;
const PAGE: u64 = 4096;

fn word(mem: &dyn MemoryReader, addr: u64) -> Result<u64, ReadError> {
    let mut b = [0u8; 8];
    mem.read(addr, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// The usable size of the allocated glibc block that starts at `p`, or 0 when `p` is not
/// (by the checks of the module doc) the start of one inside `ranges`.
pub fn block_usable(
    mem: &dyn MemoryReader,
    ranges: &[(u64, u64)],
    p: u64,
) -> Result<u64, ReadError> {
    if p & 15 != 0 || p < 16 {
        return Ok(0);
    }
    let chunk = p - 16;
    let Some(&(_, end)) = ranges.iter().find(|r| r.0 <= chunk && p <= r.1) else {
        return Ok(0);
    };
    let head = word(mem, p - 8)?;
    let size = head & !SIZE_BITS;
    let room = end - chunk;
    if head & IS_MMAPPED != 0 {
        if chunk & (PAGE - 1) != 0 || size & (PAGE - 1) != 0 || size == 0 || size > room {
            return Ok(0);
        }
        if word(mem, chunk)? != 0 {
            return Ok(0);
        }
        return Ok(size - 16);
    }
    // The next chunk's size word must lie inside the range too.
    if size < 32 || size & 15 != 0 || room < 16 || size > room - 16 {
        return Ok(0);
    }
    if word(mem, chunk + size + 8)? & PREV_INUSE == 0 {
        return Ok(0);
    }
    Ok(size - 8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::LocalReader;

    #[test]
    fn maps_give_anonymous_writable_ranges_heap_first() {
        let maps = "\
55d0c000-55d0d000 r--p 00000000 08:01 123 /usr/bin/x
55d0e000-55d0f000 rw-p 00002000 08:01 123 /usr/bin/x
55d10000-55d31000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
7f0000021000-7f0004000000 ---p 00000000 00:00 0
7f1000000000-7f1000001000 rw-p 00000000 00:00 0
7f1000001000-7f1000003000 rw-p 00000000 00:00 0
7ffd0000-7ffd2000 rw-p 00000000 00:00 0 [stack]
";
        assert_eq!(
            ranges_from_maps(maps),
            [
                (0x55d1_0000, 0x55d3_1000),
                (0x7f00_0000_0000, 0x7f00_0002_1000),
                (0x7f10_0000_0000, 0x7f10_0000_3000),
            ]
        );
    }

    /// A small arena: a 48-byte chunk, a 4112-byte chunk, then the top chunk.
    fn arena() -> (LocalReader, Vec<(u64, u64)>) {
        let base = 0x10_0000u64;
        let mut bytes = vec![0u8; 8192];
        let mut put = |at: u64, v: u64| {
            let i = (at - base) as usize;
            bytes[i..i + 8].copy_from_slice(&v.to_le_bytes());
        };
        put(base + 8, 48 | PREV_INUSE);
        put(base + 48 + 8, 4112 | PREV_INUSE);
        put(base + 48 + 4112 + 8, 1024 | PREV_INUSE);
        (LocalReader::new(base, bytes), vec![(base, base + 8192)])
    }

    #[test]
    fn arena_chunks_are_recognised_at_their_start_only() {
        let (mem, r) = arena();
        let base = 0x10_0000;
        assert_eq!(block_usable(&mem, &r, base + 16).unwrap(), 40);
        assert_eq!(block_usable(&mem, &r, base + 64).unwrap(), 4104);
        // Inside a block, misaligned, outside every range: not a block.
        assert_eq!(block_usable(&mem, &r, base + 80).unwrap(), 0);
        assert_eq!(block_usable(&mem, &r, base + 17).unwrap(), 0);
        assert_eq!(block_usable(&mem, &r, 0x20_0000).unwrap(), 0);
        assert_eq!(block_usable(&mem, &[], base + 16).unwrap(), 0);
    }

    #[test]
    fn a_free_chunk_or_one_past_its_range_is_no_block() {
        let (mut mem, r) = arena();
        // The 48-byte chunk's successor says it is free.
        mem.bytes[48 + 8] = (4112 & 0xff) as u8;
        assert_eq!(block_usable(&mem, &r, 0x10_0000 + 16).unwrap(), 0);
        // A range that ends inside the 4112-byte chunk.
        let short = [(0x10_0000, 0x10_0000 + 4096)];
        assert_eq!(block_usable(&mem, &short, 0x10_0000 + 64).unwrap(), 0);
    }

    #[test]
    fn mmapped_chunks_are_page_aligned_with_no_prev_size() {
        let base = 0x40_0000u64;
        let mut bytes = vec![0u8; 3 * 4096];
        bytes[8..16].copy_from_slice(&((3 * 4096) | IS_MMAPPED).to_le_bytes());
        let mem = LocalReader::new(base, bytes);
        let r = [(base, base + 3 * 4096)];
        assert_eq!(block_usable(&mem, &r, base + 16).unwrap(), 3 * 4096 - 16);
        let r = [(base, base + 2 * 4096)];
        assert_eq!(block_usable(&mem, &r, base + 16).unwrap(), 0);
    }
}
