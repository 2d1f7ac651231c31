//! One sample summed by member path: for every path from a root (`this.items[].name`, element
//! and captured-key names folded to `[]`, as the tree folds them), how many nodes lie at it
//! and their inclusive and exclusive bytes. What pictures ([`super::picture`]) and growth
//! over samples ([`super::growth`]) are made of.
//!
//! Paths are a trie keyed by (name, type), so that alternatives of a variant stay apart.
//! Identical elements the decoder skips ([`Sink::skip`]) are added as copies of the one it
//! showed: the sink records that one's contributions and repeats them. At most
//! [`MAX_PATHS`] paths are kept; bytes beyond are counted in [`Totals::untracked`].

use std::cell::Cell;
use std::collections::HashMap;

use super::{NodeOut, ReportError, Sink};

/// Most distinct paths per sample (a chased linked list makes one path per level).
pub const MAX_PATHS: usize = 100_000;

#[derive(Debug, Clone)]
pub struct PathNode {
    /// Folded name (`items`, `[]`, `*`), the root's label for a root.
    pub name: String,
    /// Readable type name.
    pub ty: String,
    pub count: u64,
    pub inclusive: u64,
    pub exclusive: u64,
    pub children: Vec<usize>,
    index: HashMap<(String, String), usize>,
}

/// Contributions recorded while one element is shown, to repeat for skipped copies.
struct Recording {
    /// Depth (stack length with the element open) of the element recorded.
    depth: usize,
    open: bool,
    /// (path, count, inclusive, exclusive).
    adds: Vec<(usize, u64, u64, u64)>,
}

#[derive(Default)]
pub struct Totals {
    /// The trie; roots are those with no parent, in `roots`.
    pub nodes: Vec<PathNode>,
    pub roots: Vec<usize>,
    /// Bytes (inclusive, at the shallowest untracked node) beyond [`MAX_PATHS`].
    pub untracked: u64,
    root_label: String,
    /// Open nodes: trie index, or `None` under an untracked node.
    stack: Vec<Option<usize>>,
    /// Set by `wanted`: the next node at this depth is an element to record.
    record_next: Cell<Option<usize>>,
    recordings: Vec<Recording>,
}

/// `[key]` of a captured map key, like every element, is `[]`.
pub fn fold_name(name: &str) -> &str {
    if name.starts_with('[') { "[]" } else { name }
}

impl Totals {
    pub fn new() -> Self {
        Self::default()
    }

    /// Names from a root down to node `i`, inclusive (for paths and frames).
    pub fn path_to(&self, i: usize) -> Vec<usize> {
        let mut parents = vec![usize::MAX; self.nodes.len()];
        for (p, n) in self.nodes.iter().enumerate() {
            for &c in &n.children {
                parents[c] = p;
            }
        }
        let mut path = vec![i];
        let mut cur = i;
        while parents[cur] != usize::MAX {
            cur = parents[cur];
            path.push(cur);
        }
        path.reverse();
        path
    }

    /// Every node with its path from the root, depth first.
    pub fn walk(&self, mut f: impl FnMut(&[usize])) {
        let mut path = Vec::new();
        for &r in &self.roots {
            self.walk_from(r, &mut path, &mut f);
        }
    }

    fn walk_from(&self, i: usize, path: &mut Vec<usize>, f: &mut impl FnMut(&[usize])) {
        path.push(i);
        f(path);
        for &c in &self.nodes[i].children {
            self.walk_from(c, path, f);
        }
        path.pop();
    }

    fn child(&mut self, parent: Option<usize>, name: &str, ty: &str) -> Option<usize> {
        let key = (fold_name(name).to_string(), ty.to_string());
        let found = match parent {
            Some(p) => self.nodes[p].index.get(&key).copied(),
            None => self
                .roots
                .iter()
                .copied()
                .find(|&r| self.nodes[r].name == key.0 && self.nodes[r].ty == key.1),
        };
        if found.is_some() {
            return found;
        }
        if self.nodes.len() >= MAX_PATHS {
            return None;
        }
        let i = self.nodes.len();
        self.nodes.push(PathNode {
            name: key.0.clone(),
            ty: key.1.clone(),
            count: 0,
            inclusive: 0,
            exclusive: 0,
            children: Vec::new(),
            index: HashMap::new(),
        });
        match parent {
            Some(p) => {
                self.nodes[p].children.push(i);
                self.nodes[p].index.insert(key, i);
            }
            None => self.roots.push(i),
        }
        Some(i)
    }

    fn add(&mut self, i: usize, count: u64, inclusive: u64, exclusive: u64) {
        let n = &mut self.nodes[i];
        n.count = n.count.saturating_add(count);
        n.inclusive = n.inclusive.saturating_add(inclusive);
        n.exclusive = n.exclusive.saturating_add(exclusive);
    }
}

impl Sink for Totals {
    fn root(&mut self, label: &str) {
        self.root_label = label.to_string();
    }

    fn begin(&mut self, n: &NodeOut<'_>) -> Result<(), ReportError> {
        let ty = if n.node.readable.is_empty() {
            n.node.type_names.last().map(String::as_str).unwrap_or("")
        } else {
            n.node.readable.as_str()
        };
        let name = if self.stack.is_empty() && !self.root_label.is_empty() {
            self.root_label.clone()
        } else {
            n.name.to_string()
        };
        let depth = self.stack.len() + 1;
        if let Some(d) = self.record_next.take()
            && d == depth
        {
            self.recordings.push(Recording {
                depth,
                open: true,
                adds: Vec::new(),
            });
        }
        let slot = match self.stack.last() {
            Some(None) => None,
            Some(Some(p)) => self.child(Some(*p), &name, ty),
            None => self.child(None, &name, ty),
        };
        match slot {
            Some(i) => {
                self.add(i, 1, n.size, n.exclusive);
                for r in self.recordings.iter_mut().filter(|r| r.open) {
                    r.adds.push((i, 1, n.size, n.exclusive));
                }
            }
            // The shallowest untracked node carries its whole subtree.
            None if !matches!(self.stack.last(), Some(None)) => {
                self.untracked = self.untracked.saturating_add(n.size);
            }
            None => {}
        }
        self.stack.push(slot);
        Ok(())
    }

    fn end(&mut self) -> Result<(), ReportError> {
        let depth = self.stack.len();
        self.stack.pop();
        for r in &mut self.recordings {
            if r.depth == depth {
                r.open = false;
            }
        }
        // Recordings of elements below a node that has ended are of no more use.
        self.recordings.retain(|r| r.depth <= depth);
        Ok(())
    }

    fn wanted(&self, count: u64) -> u64 {
        if count > 1 {
            self.record_next.set(Some(self.stack.len() + 1));
        }
        count.min(1)
    }

    fn skip(&mut self, count: u64, size: u64) -> Result<(), ReportError> {
        let depth = self.stack.len() + 1;
        let Some(pos) = self.recordings.iter().rposition(|r| r.depth == depth) else {
            // Nothing recorded (the element was untracked): count the bytes.
            if !matches!(self.stack.last(), Some(None)) {
                self.untracked = self.untracked.saturating_add(count.saturating_mul(size));
            }
            return Ok(());
        };
        let rec = self.recordings.remove(pos);
        for &(i, c, inclusive, exclusive) in &rec.adds {
            let add = (
                c.saturating_mul(count),
                inclusive.saturating_mul(count),
                exclusive.saturating_mul(count),
            );
            self.add(i, add.0, add.1, add.2);
            // An element being recorded further out contains these copies.
            for r in self.recordings.iter_mut().filter(|r| r.open) {
                r.adds.push((i, add.0, add.1, add.2));
            }
        }
        Ok(())
    }
}
