//! The four `std::unordered_*` containers: `_M_h` is a `_Hashtable` with `_M_buckets`,
//! `_M_bucket_count`, the singly linked list head `_M_before_begin._M_nxt` and
//! `_M_element_count`. Nodes are a next pointer, then the value at round(8, alignof V), then,
//! when the table caches hash codes, the code at round(end, 8). Whether it does is the
//! library's decision, written in the table's type (`_Hashtable_traits<cache, …>`, read by
//! [`caches_hash`]); OI's rules charge the hash word always (docs/semantics.md,
//! "libstdc++ node sizes").

use super::{LayoutError, field, round_up, unexpected};
use crate::typegraph::{TemplateArg, TypeGraph, TypeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HashLayout {
    pub bucket_count_off: u64,
    pub before_begin_off: u64,
    pub count_off: u64,
    pub value_off: u64,
    pub value_size: u64,
    /// Charged node size (with the hash word when cached).
    pub node_size: u64,
    pub size: u64,
}

pub fn layout(
    tg: &TypeGraph,
    id: TypeId,
    value_size: u64,
    value_align: u64,
    cached: bool,
) -> Result<HashLayout, LayoutError> {
    let value_off = round_up(8, value_align);
    let end = if cached {
        round_up(value_off + value_size, 8) + 8
    } else {
        value_off + value_size
    };
    Ok(HashLayout {
        bucket_count_off: field(tg, id, &["_M_h", "_M_bucket_count"])?.0,
        before_begin_off: field(tg, id, &["_M_h", "_M_before_begin"])?.0,
        count_off: field(tg, id, &["_M_h", "_M_element_count"])?.0,
        value_off,
        value_size,
        node_size: round_up(end, value_align.max(8)),
        size: tg.size(id),
    })
}

/// Whether unordered container `id`'s nodes hold the hash code: the first argument of the
/// `std::__detail::_Hashtable_traits` its `_M_h` is instantiated with. libstdc++ caches it
/// unless the hash is "fast" and cannot throw (`std::hash` of integers, pointers and
/// enums, and any hash the user declares fast): the type says which it chose.
pub fn caches_hash(tg: &TypeGraph, id: TypeId) -> Result<bool, LayoutError> {
    let (_, table) = field(tg, id, &["_M_h"])?;
    let st = tg
        .as_struct(table)
        .ok_or_else(|| unexpected(tg, id, "_M_h is not a class"))?;
    for arg in &st.template_args {
        let TemplateArg::Type { ty, .. } = arg else {
            continue;
        };
        let Some(traits) = tg.as_struct(*ty) else {
            continue;
        };
        let Some(name) = traits.name.as_deref() else {
            continue;
        };
        let Some(rest) = name.strip_prefix("std::__detail::_Hashtable_traits<") else {
            continue;
        };
        if let Some(TemplateArg::Value(v)) = traits
            .template_args
            .iter()
            .find(|a| matches!(a, TemplateArg::Value(_)))
        {
            return Ok(*v != 0);
        }
        if rest.starts_with("true") {
            return Ok(true);
        }
        if rest.starts_with("false") {
            return Ok(false);
        }
    }
    Err(unexpected(
        tg,
        id,
        "no _Hashtable_traits saying whether hash codes are cached",
    ))
}

impl HashLayout {
    /// `key_size` is sizeof T for sets, sizeof K for maps (OI's rules).
    pub fn exclusive(&self, len: u64, buckets: u64, key_size: u64) -> u64 {
        self.size + 8 * buckets + len * (self.node_size - key_size)
    }

    /// Real sizes: the object, the bucket array (none when the table uses the one bucket
    /// inside its object: libstdc++ allocates nothing for a bucket count of 1), and for a
    /// set each node beyond its value; a map's entries carry their own node's overhead.
    pub fn exclusive_real(&self, len: u64, buckets: u64, is_map: bool) -> u64 {
        let table = if buckets == 1 { 0 } else { 8 * buckets };
        let nodes = if is_map {
            0
        } else {
            len * (self.node_size - self.value_size)
        };
        self.size + table + nodes
    }

    /// exclusiveSize under `sizing`; `key_size` as [`Self::exclusive`].
    pub fn charge(
        &self,
        sizing: crate::plan::Sizing,
        len: u64,
        buckets: u64,
        key_size: u64,
        is_map: bool,
    ) -> u64 {
        match sizing {
            crate::plan::Sizing::Oi => self.exclusive(len, buckets, key_size),
            crate::plan::Sizing::Real => self.exclusive_real(len, buckets, is_map),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::round_up;

    #[test]
    fn charged_node_has_hash_word() {
        let node = |vs: u64, va: u64| round_up(round_up(round_up(8, va) + vs, 8) + 8, va.max(8));
        assert_eq!(node(4, 4), 24);
        assert_eq!(node(8, 4), 24);
        assert_eq!(56 + 8 * 13 + 3 * (24 - 4), 220);
    }
}
