//! `std::array<T, N>`: the C array `_M_elems` (absent or a 1-byte empty type when N = 0, hence
//! exclusiveSize 1 then). Elements are children `[]`, L = C = N.

use super::{LayoutError, unexpected};
use crate::typegraph::{TemplateArg, TypeGraph, TypeId};

/// (offset of the elements, element type, N).
pub fn layout(tg: &TypeGraph, id: TypeId) -> Result<(u64, TypeId, u64), LayoutError> {
    let st = tg
        .as_struct(id)
        .ok_or_else(|| unexpected(tg, id, "not a class"))?;
    let elem = tg
        .type_arg(id, 0)
        .ok_or_else(|| unexpected(tg, id, "no element type"))?;
    let n = st
        .template_args
        .iter()
        .find_map(|a| match a {
            TemplateArg::Value(v) => Some(u64::try_from(*v).unwrap_or(0)),
            TemplateArg::Type { .. } => None,
        })
        .ok_or_else(|| unexpected(tg, id, "no length argument"))?;
    let off = super::field(tg, id, &["_M_elems"])
        .map(|f| f.0)
        .unwrap_or(0);
    Ok((off, elem, n))
}
