//! `std::optional<T>`: `_M_payload._M_payload` (a union holding the value) and
//! `_M_payload._M_engaged`. Child `el` when engaged; C = 1.

use super::{LayoutError, field};
use crate::typegraph::{TypeGraph, TypeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OptionalLayout {
    pub value_off: u64,
    pub engaged_off: u64,
}

pub fn layout(tg: &TypeGraph, id: TypeId) -> Result<OptionalLayout, LayoutError> {
    Ok(OptionalLayout {
        value_off: field(tg, id, &["_M_payload", "_M_payload"])?.0,
        engaged_off: field(tg, id, &["_M_payload", "_M_engaged"])?.0,
    })
}
