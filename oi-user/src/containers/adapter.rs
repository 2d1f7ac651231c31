//! Container adapters: `std::stack`, `std::queue`, `std::priority_queue`, as
//! docs/semantics.md, "Structs and standard containers", charges them; we follow Object
//! Introspection (its `types/*_container_adapter_type.toml` and its v1 tree builder): the
//! underlying container (the protected member `c`) is the adapter's single child, named `[]` as
//! OI's type path names it; the adapter's `length`, `capacity` and `pointer` are the child's (the
//! pointer moved back to the adapter by `c`'s offset); its exclusiveSize is `sizeof(adapter) −
//! sizeof(c)` (priority_queue's comparator and padding). A comparator is never a child (the same
//! section).
//!
//! The adapter reads nothing of its own from the target: its walk is `c`'s walk, and the report
//! takes its length and capacity from `c`'s words (`Op::Struct::adapter`). This must stay so:
//! the stream format and both walkers know nothing of adapters.

use super::{LayoutError, field};
use crate::typegraph::{TypeGraph, TypeId};

/// (offset, declared type) of the underlying container `c`.
pub fn underlying(tg: &TypeGraph, id: TypeId) -> Result<(u64, TypeId), LayoutError> {
    field(tg, id, &["c"])
}
