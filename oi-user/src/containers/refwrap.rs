//! `std::reference_wrapper<T>`: one pointer `_M_data`; child `ref_val`.

use super::{LayoutError, field};
use crate::typegraph::{TypeGraph, TypeId};

pub fn offset(tg: &TypeGraph, id: TypeId) -> Result<u64, LayoutError> {
    Ok(field(tg, id, &["_M_data"])?.0)
}
