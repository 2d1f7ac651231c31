//! The call tree rebuilt from the program's maps: nodes keyed (parent node, function) become a
//! tree of named nodes, where the children of a node that share a name are merged (overloads,
//! and a function with its `.isra`/`.constprop` clones, are one function to the reader).
//!
//! Also here, because they are arithmetic on the tree: pruning by `--min-time`, the probe hits
//! whose cost each node's time contains, and folded stacks. Pure: no maps, no processes.

use std::collections::HashMap;

use oi_common::calls::{NodeKey, NodeStats, ROOT};

/// One node of the tree: one function at one path below the entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallNode {
    pub name: String,
    pub calls: u64,
    pub total_ns: u64,
    pub self_ns: u64,
    /// Calls directly beneath this node that the depth limit left untimed.
    pub deeper: u64,
    /// Calls closed by the stack pointer (left by an exception or a longjmp).
    pub abandoned: u64,
    /// Heaviest first.
    pub children: Vec<CallNode>,
}

impl CallNode {
    pub fn average_ns(&self) -> u64 {
        self.total_ns.checked_div(self.calls).unwrap_or(0)
    }

    /// Calls of this node and of every node beneath it.
    pub fn calls_in_subtree(&self) -> u64 {
        self.calls
            + self
                .children
                .iter()
                .map(Self::calls_in_subtree)
                .sum::<u64>()
    }

    /// Untimed calls beneath the depth limit in this subtree.
    pub fn deeper_in_subtree(&self) -> u64 {
        self.deeper
            + self
                .children
                .iter()
                .map(Self::deeper_in_subtree)
                .sum::<u64>()
    }

    /// Probe hits whose cost lies inside this node's total time: two for every call beneath it
    /// (its entry and its return, timed or beyond the depth limit), and about one for each of
    /// its own calls (the end of the entry hit after the clock is read, the start of the return
    /// hit before it is).
    pub fn hits_inside(&self) -> u64 {
        let beneath = self.calls_in_subtree() - self.calls + self.deeper_in_subtree();
        self.calls + 2 * beneath
    }

    fn absorb(&mut self, other: CallNode) {
        self.calls += other.calls;
        self.total_ns += other.total_ns;
        self.self_ns += other.self_ns;
        self.deeper += other.deeper;
        self.abandoned += other.abandoned;
        self.children.extend(other.children);
    }

    /// Merges children of the same name (recursively) and orders them heaviest first.
    fn normalize(&mut self) {
        let mut merged: Vec<CallNode> = Vec::with_capacity(self.children.len());
        let mut index: HashMap<String, usize> = HashMap::new();
        for child in std::mem::take(&mut self.children) {
            match index.get(&child.name) {
                Some(&i) => merged[i].absorb(child),
                None => {
                    index.insert(child.name.clone(), merged.len());
                    merged.push(child);
                }
            }
        }
        for child in &mut merged {
            child.normalize();
        }
        merged.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then_with(|| a.name.cmp(&b.name))
        });
        self.children = merged;
    }

    /// Removes the nodes (with what is beneath them) whose total time is below `min_ns`; their
    /// time stays in their parent's total. Returns how many nodes went.
    pub fn prune(&mut self, min_ns: u64) -> usize {
        let before = self.children.len();
        self.children.retain(|c| c.total_ns >= min_ns);
        let mut gone = before - self.children.len();
        for child in &mut self.children {
            gone += child.prune(min_ns);
        }
        gone
    }

    /// Folded stacks: every node's path, weighted by its self time, so that in a flame graph
    /// a frame's width is its total time.
    pub fn fold(&self, out: &mut crate::report::flame::Folded) {
        fn walk<'a>(
            node: &'a CallNode,
            path: &mut Vec<&'a str>,
            out: &mut crate::report::flame::Folded,
        ) {
            path.push(&node.name);
            out.add(path, node.self_ns);
            for child in &node.children {
                walk(child, path, out);
            }
            path.pop();
        }
        walk(self, &mut Vec::new(), out);
    }
}

/// Builds the trees rooted at the entry function(s) from the program's nodes; `name_of` names
/// a function id, and nodes whose root function `keep_root` refuses are left out (the
/// calibration's). Roots of the same name merge. Nodes with no calls (an id a race left
/// unused) are dropped.
pub fn build(
    nodes: &[(NodeKey, u32, NodeStats)],
    name_of: &dyn Fn(u32) -> String,
    keep_root: &dyn Fn(u32) -> bool,
) -> Vec<CallNode> {
    let mut children: HashMap<u32, Vec<(u32, u32, NodeStats)>> = HashMap::new();
    for &(key, id, stats) in nodes {
        children
            .entry(key.parent)
            .or_default()
            .push((id, key.function, stats));
    }
    fn make(
        id: u32,
        function: u32,
        stats: NodeStats,
        children: &HashMap<u32, Vec<(u32, u32, NodeStats)>>,
        name_of: &dyn Fn(u32) -> String,
        depth: usize,
    ) -> CallNode {
        let mut node = CallNode {
            name: name_of(function),
            calls: stats.calls,
            total_ns: stats.total_ns,
            self_ns: stats.self_ns,
            deeper: stats.deeper,
            abandoned: stats.abandoned,
            children: Vec::new(),
        };
        // The kernel bounds the depth; the bound here only guards against a corrupt map.
        if depth < 4 * oi_common::calls::MAX_DEPTH as usize {
            node.children = children
                .get(&id)
                .into_iter()
                .flatten()
                .filter(|c| c.2.calls > 0 || c.2.deeper > 0)
                .map(|&(cid, f, s)| make(cid, f, s, children, name_of, depth + 1))
                .collect();
        }
        node
    }
    let mut root = CallNode {
        children: children
            .get(&ROOT)
            .into_iter()
            .flatten()
            .filter(|&&(_, f, s)| keep_root(f) && s.calls > 0)
            .map(|&(id, f, s)| make(id, f, s, &children, name_of, 0))
            .collect(),
        ..CallNode::default()
    };
    root.normalize();
    root.children
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(calls: u64, total_ns: u64, self_ns: u64) -> NodeStats {
        NodeStats {
            calls,
            total_ns,
            self_ns,
            ..NodeStats::default()
        }
    }

    /// handle(0) → parse(1) → leaf(3); handle → leaf; handle → parse' (an overload, function
    /// 2, same name): parse and parse' merge, and so do their leaf children.
    fn sample() -> Vec<CallNode> {
        let key = |parent, function| NodeKey { parent, function };
        let nodes = [
            (key(ROOT, 0), 0, stats(10, 1000, 100)),
            (key(0, 1), 1, stats(10, 500, 300)),
            (key(1, 3), 2, stats(20, 200, 200)),
            (key(0, 3), 3, stats(5, 50, 50)),
            (key(0, 2), 4, stats(2, 350, 330)),
            (key(4, 3), 5, stats(1, 20, 20)),
            (key(0, 3 + 100), 6, stats(0, 0, 0)),
            (key(ROOT, 9), 7, stats(3, 30, 30)),
        ];
        let names = ["shop::handle", "shop::parse", "shop::parse", "shop::leaf"];
        build(
            &nodes,
            &|f| {
                names
                    .get(f as usize)
                    .map_or("calibration", |n| n)
                    .to_string()
            },
            &|f| f != 9,
        )
    }

    #[test]
    fn children_of_one_name_merge_heaviest_first() {
        let roots = sample();
        assert_eq!(roots.len(), 1);
        let handle = &roots[0];
        assert_eq!((handle.name.as_str(), handle.calls), ("shop::handle", 10));
        let names: Vec<(&str, u64, u64)> = handle
            .children
            .iter()
            .map(|c| (c.name.as_str(), c.calls, c.total_ns))
            .collect();
        assert_eq!(names, [("shop::parse", 12, 850), ("shop::leaf", 5, 50)]);
        let parse = &handle.children[0];
        assert_eq!(parse.self_ns, 630);
        assert_eq!(parse.children.len(), 1);
        assert_eq!(
            (parse.children[0].calls, parse.children[0].total_ns),
            (21, 220)
        );
    }

    #[test]
    fn hits_and_pruning_and_folding() {
        let mut roots = sample();
        let handle = &mut roots[0];
        // 10 own calls; beneath: 12 parse + 21 leaf + 5 leaf = 38 calls, 2 hits each.
        assert_eq!(handle.hits_inside(), 10 + 2 * 38);
        let mut folded = crate::report::flame::Folded::new();
        handle.fold(&mut folded);
        assert_eq!(
            folded.text(),
            "shop::handle 100\nshop::handle;shop::leaf 50\nshop::handle;shop::parse 630\n\
             shop::handle;shop::parse;shop::leaf 220\n"
        );
        assert_eq!(handle.prune(300), 2);
        assert_eq!(handle.children.len(), 1);
        assert!(handle.children[0].children.is_empty());
    }
}
