//! The four `std::unordered_*` containers: `_M_h` is a `_Hashtable` with `_M_buckets`,
//! `_M_bucket_count`, the singly linked list head `_M_before_begin._M_nxt` and
//! `_M_element_count`. Nodes are a next pointer, then the value at round(8, alignof V). The
//! charged node size always includes the cached hash word (docs/semantics.md,
//! "libstdc++ node sizes"), whatever libstdc++ really allocates.

use super::{LayoutError, field, round_up};
use crate::typegraph::{TypeGraph, TypeId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HashLayout {
    pub bucket_count_off: u64,
    pub before_begin_off: u64,
    pub count_off: u64,
    pub value_off: u64,
    pub value_size: u64,
    /// Charged node size (with the hash word).
    pub node_size: u64,
    pub size: u64,
}

pub fn layout(
    tg: &TypeGraph,
    id: TypeId,
    value_size: u64,
    value_align: u64,
) -> Result<HashLayout, LayoutError> {
    let value_off = round_up(8, value_align);
    let hash_off = round_up(value_off + value_size, 8);
    Ok(HashLayout {
        bucket_count_off: field(tg, id, &["_M_h", "_M_bucket_count"])?.0,
        before_begin_off: field(tg, id, &["_M_h", "_M_before_begin"])?.0,
        count_off: field(tg, id, &["_M_h", "_M_element_count"])?.0,
        value_off,
        value_size,
        node_size: round_up(hash_off + 8, value_align.max(8)),
        size: tg.size(id),
    })
}

impl HashLayout {
    /// `key_size` is sizeof T for sets, sizeof K for maps.
    pub fn exclusive(&self, len: u64, buckets: u64, key_size: u64) -> u64 {
        self.size + 8 * buckets + len * (self.node_size - key_size)
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
