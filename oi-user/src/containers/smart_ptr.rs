//! `std::unique_ptr` (the stored pointer inside `_M_t`'s tuple; a stateful deleter sits beside
//! it), `std::shared_ptr` (`_M_ptr`, then the control block pointer, never counted) and
//! `std::weak_ptr` (16 bytes, never followed). Under real sizes a `shared_ptr`'s control
//! block is charged too ([`control_block`]): libstdc++'s `_Sp_counted_base` is a vptr and two
//! 4-byte counts (16 bytes); `make_shared`'s `_Sp_counted_ptr_inplace` holds the object after
//! them, at round(16, alignof T), the block rounded to max(8, alignof T); a block of its own
//! (`_Sp_counted_ptr`, or `_Sp_counted_deleter` with a stateless deleter) adds the pointer:
//! 24 bytes. libc++'s `std::__1::shared_ptr` (`__ptr_`, `__cntrl_`) is the same with a
//! `__shared_weak_count` of a vptr and two 8-byte counts (24 bytes): `make_shared`'s
//! `__shared_ptr_emplace` holds the object at round(24, alignof T), and a block of its own
//! (`__shared_ptr_pointer` with a stateless deleter) adds the pointer: 32 bytes.

use super::{LayoutError, field, first_pointer, round_up, unexpected};
use crate::plan::ControlBlock;
use crate::typegraph::{Kind, TypeGraph, TypeId};

/// Offset of the stored pointer of a unique_ptr: the pointer to its element type (a
/// stateful deleter may hold pointers of its own, and sits before it in memory).
pub fn unique_ptr_offset(tg: &TypeGraph, id: TypeId) -> Result<u64, LayoutError> {
    let elem = tg.type_arg(id, 0).map(|t| {
        let r = tg.resolve(t);
        match &tg.get(r).kind {
            Kind::Array { elem, .. } => tg.resolve(*elem),
            _ => r,
        }
    });
    first_pointer(tg, id, elem, 0)
        .or_else(|| first_pointer(tg, id, None, 0))
        .map(|p| p.0)
        .ok_or_else(|| unexpected(tg, id, "no stored pointer"))
}

/// Offset of the stored pointer of a shared_ptr (`_M_ptr`; libc++'s `__ptr_`).
pub fn shared_ptr_offset(tg: &TypeGraph, id: TypeId) -> Result<u64, LayoutError> {
    Ok(field(tg, id, &["_M_ptr"])
        .or_else(|_| field(tg, id, &["__ptr_"]))?
        .0)
}

/// The control block of `shared_ptr` `id` to `t` (a complete type), as real sizes charge it.
pub fn control_block(tg: &TypeGraph, id: TypeId, t: TypeId) -> Result<ControlBlock, LayoutError> {
    // The counts' bytes (after the vptr) and the block's own pointer: libstdc++, else libc++.
    let (offset, counts) = match field(tg, id, &["_M_refcount", "_M_pi"]) {
        Ok((offset, _)) => (offset, 16),
        Err(_) => (field(tg, id, &["__cntrl_"])?.0, 24),
    };
    let (size, align) = (tg.size(t), tg.align(t));
    let inplace_at = round_up(counts, align);
    Ok(ControlBlock {
        offset,
        inplace_at,
        inplace_extra: round_up(inplace_at + size, align.max(8)) - size,
        separate: counts + 8,
    })
}
