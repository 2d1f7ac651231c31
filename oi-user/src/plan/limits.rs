//! The bounds every walker (JIT and interpreter) keeps and the decoder checks a stream against:
//! a stream beyond them is corrupt or forged. Constants only.

/// Most elements one container may report (a larger count means a corrupt object; it would
/// also mean hundreds of millions of result nodes).
pub const MAX_ELEMENTS: u64 = 1 << 28;
/// Deepest nesting walked (chased pointers make it as deep as a linked list is long). Keeps
/// the walk, and the report's replay of it, inside the walking thread's stack.
pub const MAX_DEPTH: u32 = 50_000;
/// Longest captured string key.
pub const MAX_CAPTURED_KEY: u64 = 1 << 20;
