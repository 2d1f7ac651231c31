//! What a plan says of sizes before any walk: the static total of a subtree that reads nothing
//! at runtime, and the bytes in opaque unions inside it. The JIT folds them into its code, the
//! decoder adds them for nodes the stream skips; both take them from here so they agree.
//! Never reads a stream or the target.

use super::{NodeId, Op, Plan};

/// Inclusive size of the subtree of `id` counting only static sizes: the size of a node
/// that reads nothing at runtime (`dynamic == false`). Memoised in `memo` (one entry per
/// plan node). Recurses only through members held by value, which cannot form a cycle.
pub fn static_total(plan: &Plan, id: NodeId, memo: &mut [Option<u64>]) -> u64 {
    if let Some(s) = memo[id] {
        return s;
    }
    let n = &plan.nodes[id];
    let s = match &n.op {
        Op::Bitfield => 0,
        Op::Struct {
            members, padding, ..
        } => members.iter().fold(*padding, |t, m| {
            t.saturating_add(static_total(plan, m.1, memo))
        }),
        Op::Array {
            elem,
            count,
            exclusive,
            ..
        } => exclusive.saturating_add(count.saturating_mul(static_total(plan, *elem, memo))),
        Op::Pair { first, second }
        | Op::Entry {
            key: first,
            value: second,
            ..
        } => {
            let e = n.static_size.saturating_sub(
                plan.nodes[first.1]
                    .static_size
                    .saturating_add(plan.nodes[second.1].static_size),
            );
            e.saturating_add(static_total(plan, first.1, memo))
                .saturating_add(static_total(plan, second.1, memo))
        }
        _ => n.static_size,
    };
    memo[id] = Some(s);
    s
}

/// Bytes in opaque unions (`Node::opaque_union`) inside the subtree of `id` that reads
/// nothing at runtime. Memoised in `memo` (one entry per plan node, filled on first use);
/// recurses only through members held by value, as [`static_total`].
pub fn static_unions(plan: &Plan, id: NodeId, memo: &mut Vec<Option<u64>>) -> u64 {
    if memo.len() != plan.nodes.len() {
        *memo = vec![None; plan.nodes.len()];
    }
    if let Some(u) = memo[id] {
        return u;
    }
    let n = &plan.nodes[id];
    let u = if n.opaque_union {
        n.static_size
    } else {
        match &n.op {
            Op::Struct { members, .. } => members.iter().fold(0u64, |t, m| {
                t.saturating_add(static_unions(plan, m.1, memo))
            }),
            Op::Array { elem, count, .. } => count.saturating_mul(static_unions(plan, *elem, memo)),
            Op::Pair { first, second }
            | Op::Entry {
                key: first,
                value: second,
                ..
            } => static_unions(plan, first.1, memo)
                .saturating_add(static_unions(plan, second.1, memo)),
            _ => 0,
        }
    };
    memo[id] = Some(u);
    u
}
