//! An allocation's usable size, by the header's rule (`oi_common::inject::usable`), the same
//! rules as the uprobe path (`oi-ebpf/src/bin/allocs.rs`):
//! - glibc 2.36's `malloc_usable_size`: the chunk size from the header word at block − 8 (low
//!   three bits flags) minus 16 for an mmapped chunk (bit 1), minus 8 otherwise; the requested
//!   size if that underflows;
//! - jemalloc 5 (Debian's libjemalloc2: 16-byte quantum, four classes per doubling, 4 KiB
//!   pages): the size class of the request (`sz_s2u`), or of the request rounded up to its
//!   alignment when it has one (`sz_sa2u`), a pure function of both;
//! - otherwise the requested size.
//!
//! Reads no memory but the data part's header and, for glibc, the one chunk header word.

use iced_x86::IcedError;
use iced_x86::code_asm::*;
use oi_common::inject::{offset, usable};

use super::shape::Align;

/// jemalloc 5's page, largest small size class and smallest large one (4 KiB pages).
pub(super) const JEMALLOC_PAGE: u64 = 4096;
pub(super) const JEMALLOC_SMALL_MAX: u64 = 14336;
pub(super) const JEMALLOC_LARGE_MIN: u64 = 16384;

/// rcx = the request's alignment (0: none) from the saved arguments (r12, r13, r14: the
/// entry's rdi, rsi, rdx). Clobbers r8.
pub(super) fn alignment(a: &mut CodeAssembler, align: Align) -> Result<(), IcedError> {
    let flags = match align {
        Align::None => {
            a.xor(ecx, ecx)?;
            return Ok(());
        }
        Align::Rdi => return a.mov(rcx, r12),
        Align::Rsi => return a.mov(rcx, r13),
        Align::Page => return a.mov(ecx, JEMALLOC_PAGE as u32),
        Align::FlagsRsi => r13,
        Align::FlagsRdx => r14,
    };
    // MALLOCX_LG_ALIGN(la): la in the low six bits; 0 is no alignment.
    let mut none = a.create_label();
    a.mov(rcx, flags)?;
    a.and(ecx, 63)?;
    a.je(none)?;
    a.mov(r8d, 1)?;
    a.shl(r8, cl)?;
    a.mov(rcx, r8)?;
    a.set_label(&mut none)?;
    Ok(())
}

/// rdx = the usable size of the block at rdi of rsi requested bytes, alignment in rcx
/// ([`alignment`]). r10: the data part. Clobbers rax, rcx, r8, r9.
pub(super) fn usable_size(a: &mut CodeAssembler) -> Result<(), IcedError> {
    let mut glibc = a.create_label();
    let mut jemalloc = a.create_label();
    let mut requested = a.create_label();
    let mut done = a.create_label();
    a.mov(rax, qword_ptr(r10 + offset::USABLE_RULE))?;
    a.cmp(rax, usable::GLIBC as i32)?;
    a.je(glibc)?;
    a.cmp(rax, usable::JEMALLOC as i32)?;
    a.je(jemalloc)?;
    a.set_label(&mut requested)?;
    a.mov(rdx, rsi)?;
    a.jmp(done)?;

    a.set_label(&mut glibc)?;
    a.mov(rax, qword_ptr(rdi - 8))?;
    a.mov(rdx, rax)?;
    a.and(rdx, -8)?;
    a.mov(ecx, 8)?;
    a.mov(r8d, 16)?;
    a.test(al, 2)?;
    a.cmovne(rcx, r8)?;
    a.sub(rdx, rcx)?;
    a.jb(requested)?;
    a.jmp(done)?;

    a.set_label(&mut jemalloc)?;
    let mut unaligned = a.create_label();
    let mut large = a.create_label();
    a.test(rcx, rcx)?;
    a.je(unaligned)?;
    a.cmp(rsi, JEMALLOC_SMALL_MAX as i32)?;
    a.ja(large)?;
    a.cmp(rcx, JEMALLOC_PAGE as i32)?;
    a.ja(large)?;
    // The request rounded up to the alignment (`(size + align − 1) & !(align − 1)`).
    a.lea(rax, qword_ptr(rsi + rcx - 1))?;
    a.dec(rcx)?;
    a.not(rcx)?;
    a.and(rax, rcx)?;
    size_class(a)?;
    a.mov(rdx, rax)?;
    a.cmp(rax, JEMALLOC_LARGE_MIN as i32)?;
    a.jb(done)?;
    a.set_label(&mut large)?;
    a.mov(edx, JEMALLOC_LARGE_MIN as u32)?;
    a.cmp(rsi, JEMALLOC_LARGE_MIN as i32)?;
    a.jbe(done)?;
    a.set_label(&mut unaligned)?;
    a.mov(rax, rsi)?;
    size_class(a)?;
    a.mov(rdx, rax)?;
    a.set_label(&mut done)?;
    Ok(())
}

/// rax = jemalloc's size class of rax (`sz_s2u`): 8 up to 8 bytes; classes 16 bytes apart up
/// to 128; four per doubling above (spaced a quarter of the power of two below); sizes above
/// 2^62 unchanged. Clobbers rcx, r8, r9.
fn size_class(a: &mut CodeAssembler) -> Result<(), IcedError> {
    let mut above8 = a.create_label();
    let mut wide = a.create_label();
    let mut done = a.create_label();
    a.cmp(rax, 8)?;
    a.ja(above8)?;
    a.mov(eax, 8)?;
    a.jmp(done)?;
    a.set_label(&mut above8)?;
    a.mov(r8, 1u64 << 62)?;
    a.cmp(rax, r8)?;
    a.ja(done)?;
    // ⌈log2 size⌉ = ⌊log2 (2 size − 1)⌋.
    a.lea(r8, qword_ptr(rax + rax - 1))?;
    a.bsr(r8, r8)?;
    a.lea(r9, qword_ptr(r8 - 3))?;
    a.cmp(r8, 7)?;
    a.jae(wide)?;
    a.mov(r9d, 4)?;
    a.set_label(&mut wide)?;
    a.mov(ecx, r9d)?;
    a.mov(r8d, 1)?;
    a.shl(r8, cl)?;
    a.dec(r8)?;
    a.add(rax, r8)?;
    a.not(r8)?;
    a.and(rax, r8)?;
    a.set_label(&mut done)?;
    Ok(())
}

/// The same rule in Rust: the reference the emitted code is tested against.
#[cfg(test)]
pub(super) fn jemalloc_usable(size: u64, align: u64) -> u64 {
    fn class(size: u64) -> u64 {
        if size <= 8 {
            return 8;
        }
        if size > 1 << 62 {
            return size;
        }
        let ceil_lg = 63 - ((size << 1) - 1).leading_zeros() as u64;
        let lg_delta = if ceil_lg < 7 { 4 } else { ceil_lg - 3 };
        let mask = (1u64 << lg_delta) - 1;
        (size + mask) & !mask
    }
    if align == 0 {
        return class(size);
    }
    if size <= JEMALLOC_SMALL_MAX && align <= JEMALLOC_PAGE {
        let usize = class((size + align - 1) & !(align - 1));
        if usize < JEMALLOC_LARGE_MIN {
            return usize;
        }
    }
    if size <= JEMALLOC_LARGE_MIN {
        JEMALLOC_LARGE_MIN
    } else {
        class(size)
    }
}
