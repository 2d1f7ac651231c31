//! `std::pair<A, B>`: children `first` and `second` at their DWARF offsets; the node's
//! exclusiveSize is what the two leave over (padding).

use super::{LayoutError, field};
use crate::typegraph::{TypeGraph, TypeId};

/// ((offset, type) of `first`, (offset, type) of `second`).
pub fn layout(tg: &TypeGraph, id: TypeId) -> Result<[(u64, TypeId); 2], LayoutError> {
    Ok([field(tg, id, &["first"])?, field(tg, id, &["second"])?])
}
