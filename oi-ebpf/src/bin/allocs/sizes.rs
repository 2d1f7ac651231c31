//! What an allocation weighs: whether it is sampled and what it then stands for, the usable
//! size glibc's and jemalloc's allocators give a block (read from glibc's chunk header,
//! computed from jemalloc's size classes), its lifetime's bucket, and a saturating product.
//! No map but the load-time globals and the `--every` sequence.

use super::*;

/// Whether this allocation of `size` bytes is taken, as its weight (0: not taken): `--every`
/// counts calls exactly across CPUs; `--sample-bytes` draws.
#[inline(always)]
pub(crate) fn sample_weight(size: u64) -> u64 {
    let bytes = SAMPLE_BYTES.load();
    if bytes != 0 {
        if size >= bytes {
            return WEIGHT_ONE;
        }
        let size = if size == 0 { 1 } else { size };
        // SAFETY: a plain helper call.
        let draw = u64::from(unsafe { bpf_get_prandom_u32() });
        // draw / 2^32 < size / B, without division on the hot path (B < 2^31 by user space).
        return if draw * bytes < size << 32 {
            bytes * WEIGHT_ONE / size
        } else {
            0
        };
    }
    let every = EVERY.load();
    if every <= 1 {
        return WEIGHT_ONE;
    }
    let Some(seq) = SEQUENCE.get_ptr_mut(0) else {
        return WEIGHT_ONE;
    };
    if (add(seq, 1) - 1) % every == 0 {
        WEIGHT_ONE
    } else {
        0
    }
}

/// glibc 2.36's `malloc_usable_size` (`musable`): the chunk's size from its header word (the
/// 8 bytes before the block, low three bits flags), minus the header for an mmapped chunk
/// (`IS_MMAPPED`, bit 1), minus the size field alone for an ordinary one.
#[inline(always)]
pub(crate) fn glibc_usable(block: u64) -> Option<u64> {
    // SAFETY: a user-memory read through the helper, which fails cleanly.
    let header = unsafe { bpf_probe_read_user((block - 8) as *const u64) }.ok()?;
    let size = header & !7;
    let overhead = if header & 2 != 0 { 16 } else { 8 };
    size.checked_sub(overhead)
}

/// jemalloc 5's page (Debian's x86-64 build: `LG_PAGE` 12).
pub(crate) const JEMALLOC_PAGE: u64 = 4096;
/// jemalloc 5's largest small size class and smallest large one, for 4 KiB pages.
pub(crate) const JEMALLOC_SMALL_MAX: u64 = 14336;
pub(crate) const JEMALLOC_LARGE_MIN: u64 = 16384;

/// The alignment a jemalloc `flags` argument asks for (`MALLOCX_LG_ALIGN(la)` is `la` in the
/// low six bits; 0: none).
#[inline(always)]
pub(crate) fn jemalloc_flags_align(flags: u64) -> u64 {
    let lg = flags & 63;
    if lg == 0 { 0 } else { 1 << lg }
}

/// jemalloc 5's usable size of a request of `size` bytes aligned to `align` (0: none): its
/// size class (`sz_s2u`, or `sz_sa2u` when aligned), what `malloc_usable_size` and `sallocx`
/// give. A pure function of the request for a given build (quantum 16 bytes, 4 size classes
/// per doubling, 4 KiB pages: Debian's libjemalloc2).
#[inline(always)]
pub(crate) fn jemalloc_usable(size: u64, align: u64) -> u64 {
    if align == 0 {
        return jemalloc_size_class(size);
    }
    if size <= JEMALLOC_SMALL_MAX && align <= JEMALLOC_PAGE {
        let usize = jemalloc_size_class((size + align - 1) & !(align - 1));
        if usize < JEMALLOC_LARGE_MIN {
            return usize;
        }
    }
    if size <= JEMALLOC_LARGE_MIN {
        JEMALLOC_LARGE_MIN
    } else {
        jemalloc_size_class(size)
    }
}

/// `sz_s2u`: 8 up to 8 bytes; then classes 16 bytes apart up to 128, and four classes per
/// doubling above (the spacing is a quarter of the power of two below).
#[inline(always)]
pub(crate) fn jemalloc_size_class(size: u64) -> u64 {
    if size <= 8 {
        return 8;
    }
    if size > 1 << 62 {
        return size;
    }
    let ceil_lg = lg_floor((size << 1) - 1);
    let lg_delta = if ceil_lg < 7 { 4 } else { ceil_lg - 3 };
    let mask = (1u64 << lg_delta) - 1;
    (size + mask) & !mask
}

/// ⌊log2 x⌋ for x > 0, without a loop (BPF has no count-leading-zeros).
#[inline(always)]
pub(crate) fn lg_floor(mut x: u64) -> u64 {
    let mut lg = 0;
    for shift in [32, 16, 8, 4, 2, 1] {
        if x >> shift != 0 {
            x >>= shift;
            lg += shift;
        }
    }
    lg
}

/// The bytes an allocation of `size` with `weight` stands for: B for a sampled small one.
#[inline(always)]
pub(crate) fn estimated_bytes(size: u64, weight: u64) -> u64 {
    if weight == WEIGHT_ONE {
        size
    } else {
        SAMPLE_BYTES.load()
    }
}

/// Bucket of a lifetime: how many bounds it reaches.
#[inline(always)]
pub(crate) fn bucket(ns: u64) -> usize {
    let bounds = BUCKET_NS.load();
    let n = BOUNDS.load() as usize;
    let mut b = 0;
    for (i, bound) in bounds.iter().enumerate() {
        if i < n && ns >= *bound {
            b = i + 1;
        }
    }
    b
}

/// `a × b`, saturated (the allocator fails such a request). Done in 32-bit halves: LLVM turns
/// an overflow test of a 64-bit product into a 128-bit multiplication, which BPF lacks.
#[inline(always)]
pub(crate) fn times(a: u64, b: u64) -> u64 {
    let (ah, al, bh, bl) = (a >> 32, a & 0xffff_ffff, b >> 32, b & 0xffff_ffff);
    if ah != 0 && bh != 0 {
        return u64::MAX;
    }
    let cross = ah * bl + al * bh;
    if cross >> 32 != 0 {
        return u64::MAX;
    }
    let low = al * bl;
    let product = low.wrapping_add(cross << 32);
    if product < low { u64::MAX } else { product }
}
