//! `std::unique_ptr` (the stored pointer inside `_M_t`'s tuple; a stateful deleter sits beside
//! it), `std::shared_ptr` (`_M_ptr`, then the control block pointer, never counted) and
//! `std::weak_ptr` (16 bytes, never followed). Under real sizes a `shared_ptr`'s control
//! block is charged too ([`control_block`]): libstdc++'s `_Sp_counted_base` is a vptr and two
//! 4-byte counts (16 bytes); `make_shared`'s `_Sp_counted_ptr_inplace` holds the object after
//! them, at round(16, alignof T), the block rounded to max(8, alignof T); a block of its own
//! (`_Sp_counted_ptr`, or `_Sp_counted_deleter` with a stateless deleter) adds the pointer:
//! 24 bytes.

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

/// Offset of `_M_ptr` of a shared_ptr.
pub fn shared_ptr_offset(tg: &TypeGraph, id: TypeId) -> Result<u64, LayoutError> {
    Ok(field(tg, id, &["_M_ptr"])?.0)
}

/// The control block of `shared_ptr` `id` to `t` (a complete type), as real sizes charge it.
pub fn control_block(tg: &TypeGraph, id: TypeId, t: TypeId) -> Result<ControlBlock, LayoutError> {
    let (offset, _) = field(tg, id, &["_M_refcount", "_M_pi"])?;
    let (size, align) = (tg.size(t), tg.align(t));
    let inplace_at = round_up(16, align);
    Ok(ControlBlock {
        offset,
        inplace_at,
        inplace_extra: round_up(inplace_at + size, align.max(8)) - size,
        separate: 24,
    })
}
