//! `std::variant<Ts...>`: the alternatives overlap in `_M_u` at offset 0; `_M_index` (the
//! smallest unsigned type that fits) selects one; all-ones means valueless by exception.
//! libc++'s `std::__1::variant` is the same shape under other names: its member `__impl` holds
//! the alternatives overlapping in `__data` (a recursive union of `__alt`s, each holding its
//! value at offset 0), and `__index` (`unsigned int` in LLVM 14's default ABI) selects one,
//! all-ones when valueless.
//! Built in rather than described: the description language has no union whose members are
//! the template arguments.

use super::{LayoutError, field};
use crate::typegraph::{TypeGraph, TypeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VariantLayout {
    pub storage_off: u64,
    pub index_off: u64,
    pub index_size: u64,
}

pub fn layout(tg: &TypeGraph, id: TypeId) -> Result<VariantLayout, LayoutError> {
    if let Ok((index_off, index_ty)) = field(tg, id, &["__impl", "__index"]) {
        return Ok(VariantLayout {
            storage_off: field(tg, id, &["__impl", "__data"])?.0,
            index_off,
            index_size: tg.size(index_ty).clamp(1, 8),
        });
    }
    let (index_off, index_ty) = field(tg, id, &["_M_index"])?;
    let storage_off = field(tg, id, &["_M_u"]).map(|f| f.0).unwrap_or(0);
    Ok(VariantLayout {
        storage_off,
        index_off,
        index_size: tg.size(index_ty).clamp(1, 8),
    })
}

impl VariantLayout {
    /// The active index, or None when valueless.
    pub fn index(&self, obj: &[u8]) -> Option<Option<u64>> {
        let raw = super::uint(obj, self.index_off, self.index_size)?;
        let npos = if self.index_size >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * self.index_size)) - 1
        };
        Some((raw != npos).then_some(raw))
    }
}
