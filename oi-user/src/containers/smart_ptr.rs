//! `std::unique_ptr` (the stored pointer inside `_M_t`'s tuple; a stateful deleter sits beside
//! it), `std::shared_ptr` (`_M_ptr`, then the control block pointer, never counted) and
//! `std::weak_ptr` (16 bytes, never followed).

use super::{LayoutError, field, first_pointer, unexpected};
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
