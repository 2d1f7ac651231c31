//! `calls --pprof`: the call tree as a pprof profile, one sample per node (a stack beneath the
//! entry, entry at the root), with the report's numbers: `calls/count`, `wall/nanoseconds` (the
//! node's total time, its callees' included: the report's `total_ns`) and `self/nanoseconds`
//! (without its callees: `self_ns`, the default type).
//!
//! Self times add up the way pprof adds values: a function's `cum` is its total time and the
//! profile's total is the entry's. Wall times are per stack: `-raw`, `-traces` and a node's
//! `flat` show them as the report does, but summed over a subtree they count each callee again,
//! so a flame graph is drawn from `self`. Frames are functions, not addresses: the tree is
//! keyed by function, so each location is one function with its demangled and mangled names.

use std::collections::HashMap;

use crate::export::pprof::{
    builder::{Builder, FunctionKey, Head, LineAt, write_file},
    proto::Profile,
};
use crate::{
    calls::tree::CallNode,
    error::{Error, Result},
};

/// Writes `--pprof FILE` of the trees; `symbols` gives each function's tree name and its
/// symbol (mangled).
pub fn write<'a>(
    path: &std::path::Path,
    roots: &[CallNode],
    entry: &str,
    place: &str,
    symbols: impl Iterator<Item = (&'a str, &'a str)>,
    elapsed: std::time::Duration,
) -> Result<()> {
    let mut by_name: HashMap<&str, &str> = HashMap::new();
    for (name, symbol) in symbols {
        by_name.entry(name).or_insert(symbol);
    }
    let run = Run {
        entry,
        place,
        symbols: &by_name,
        elapsed,
    };
    write_file(&profile(roots, &run), path).map_err(|e| {
        Error::internal(format!(
            "writing a pprof profile to {}: {e}",
            path.display()
        ))
    })
}

/// What the comments and frames say besides the tree.
pub struct Run<'a> {
    pub entry: &'a str,
    /// `pid 4242` or `cgroup /sys/fs/cgroup/shop.slice`.
    pub place: &'a str,
    /// A tree name's symbol as the file gives it (mangled), where one is known.
    pub symbols: &'a HashMap<&'a str, &'a str>,
    pub elapsed: std::time::Duration,
}

/// The profile of the trees rooted at the entry.
pub fn profile(roots: &[CallNode], run: &Run<'_>) -> Profile {
    let mut b = Builder::new();
    let mut path = Vec::new();
    for root in roots {
        add(&mut b, root, &mut path, run);
    }
    b.finish(Head {
        sample_types: &[
            ("calls", "count"),
            ("wall", "nanoseconds"),
            ("self", "nanoseconds"),
        ],
        default_sample_type: "self",
        period_type: ("wall", "nanoseconds"),
        period: 1,
        time_nanos: crate::export::pprof::builder::started_ns(run.elapsed),
        duration_nanos: run.elapsed.as_nanos() as i64,
        comments: vec![
            format!("oi-trace calls beneath {} in {}", run.entry, run.place),
            "every call counted and timed, not sampled".to_string(),
            "wall: the calls' total time at this stack, callees included (not additive); \
             self: without callees (additive: cum is a function's total time)"
                .to_string(),
        ],
    })
}

/// A sample for `node` and each node beneath it; `path` holds the locations above it, root
/// first.
fn add(b: &mut Builder, node: &CallNode, path: &mut Vec<u64>, run: &Run<'_>) {
    let function = b.function(FunctionKey {
        name: node.name.clone(),
        system_name: run
            .symbols
            .get(node.name.as_str())
            .map_or_else(|| node.name.clone(), |s| s.to_string()),
        filename: String::new(),
    });
    path.push(b.location(0, 0, vec![LineAt { function, line: 0 }]));
    let leaf_first: Vec<u64> = path.iter().rev().copied().collect();
    b.sample(
        leaf_first,
        [node.calls, node.total_ns, node.self_ns]
            .map(|v| v as i64)
            .to_vec(),
    );
    for child in &node.children {
        add(b, child, path, run);
    }
    path.pop();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, calls: u64, total: u64, own: u64, children: Vec<CallNode>) -> CallNode {
        CallNode {
            name: name.into(),
            calls,
            total_ns: total,
            self_ns: own,
            children,
            ..CallNode::default()
        }
    }

    /// handle → parse → leaf: three samples, leaf first, the report's numbers; self adds up
    /// to the entry's total; the mangled name is the system name.
    #[test]
    fn one_sample_per_node() {
        let roots = [node(
            "shop::handle",
            2,
            100,
            40,
            vec![node(
                "shop::parse",
                4,
                60,
                50,
                vec![node("leaf", 8, 10, 10, vec![])],
            )],
        )];
        let symbols = HashMap::from([("shop::parse", "_ZN4shop5parseEv")]);
        let p = profile(
            &roots,
            &Run {
                entry: "shop::handle",
                place: "pid 1",
                symbols: &symbols,
                elapsed: std::time::Duration::from_secs(1),
            },
        );
        assert_eq!(p.sample.len(), 3);
        assert_eq!(p.sample[2].value, [8, 10, 10]);
        assert_eq!(p.sample[2].location_id.len(), 3);
        let selfs: i64 = p.sample.iter().map(|s| s.value[2]).sum();
        assert_eq!(selfs, 100);
        let s = |i: i64| p.string_table[i as usize].as_str();
        let parse = p
            .function
            .iter()
            .find(|f| s(f.name) == "shop::parse")
            .unwrap();
        assert_eq!(s(parse.system_name), "_ZN4shop5parseEv");
        assert_eq!(s(p.default_sample_type), "self");
    }
}
