//! `--format tree`: an indented tree with names, types, human sizes and the share of the
//! root's total; children largest first; containers with many elements show only the largest
//! few and summarise the rest (`… 999,990 more elements`). Memory is bounded by keeping at
//! most [`KEEP`] children per node while decoding.

use std::io::Write;

use super::{NodeOut, ReportError, Sink};

/// Children shown per node.
pub const KEEP: usize = 10;

#[derive(Debug, Default)]
struct TreeNode {
    label: String,
    size: u64,
    children: Vec<TreeNode>,
    omitted: u64,
    omitted_size: u64,
}

#[derive(Default)]
pub struct TreeSink {
    stack: Vec<TreeNode>,
    roots: Vec<TreeNode>,
}

impl TreeSink {
    pub fn new() -> Self {
        Self::default()
    }

    /// Prints every root decoded so far and forgets them.
    pub fn write(&mut self, out: &mut dyn Write) -> Result<(), ReportError> {
        for root in std::mem::take(&mut self.roots) {
            let total = root.size.max(1);
            print(out, &root, total, 0)?;
        }
        Ok(())
    }
}

/// `1.2 MiB`, `512 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `999,990`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn print(out: &mut dyn Write, n: &TreeNode, total: u64, depth: usize) -> Result<(), ReportError> {
    let pct = n.size as f64 * 100.0 / total as f64;
    writeln!(
        out,
        "{:indent$}{}  {} ({pct:.1}%)",
        "",
        n.label,
        human(n.size),
        indent = depth * 2
    )?;
    let mut kids: Vec<&TreeNode> = n.children.iter().collect();
    kids.sort_by_key(|k| std::cmp::Reverse(k.size));
    for k in kids {
        print(out, k, total, depth + 1)?;
    }
    if n.omitted > 0 {
        writeln!(
            out,
            "{:indent$}… {} more elements ({})",
            "",
            thousands(n.omitted),
            human(n.omitted_size),
            indent = (depth + 1) * 2
        )?;
    }
    Ok(())
}

impl Sink for TreeSink {
    fn begin(&mut self, n: &NodeOut<'_>) -> Result<(), ReportError> {
        let ty = n.node.type_names.last().map(String::as_str).unwrap_or("");
        let mut label = format!("{}: {ty}", n.name);
        if let Some((l, c)) = n.length_capacity {
            label.push_str(&format!(" [len {}, cap {}]", thousands(l), thousands(c)));
        }
        self.stack.push(TreeNode {
            label,
            size: n.size,
            ..TreeNode::default()
        });
        Ok(())
    }

    fn end(&mut self) -> Result<(), ReportError> {
        let Some(done) = self.stack.pop() else {
            return Ok(());
        };
        let Some(parent) = self.stack.last_mut() else {
            self.roots.push(done);
            return Ok(());
        };
        if parent.children.len() < KEEP {
            parent.children.push(done);
            return Ok(());
        }
        // Keep the KEEP largest: replace the smallest kept child if this one is larger.
        let (i, smallest) = parent
            .children
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| c.size)
            .map(|(i, c)| (i, c.size))
            .unwrap_or((0, 0));
        parent.omitted += 1;
        if done.size > smallest {
            parent.omitted_size = parent.omitted_size.saturating_add(smallest);
            parent.children[i] = done;
        } else {
            parent.omitted_size = parent.omitted_size.saturating_add(done.size);
        }
        Ok(())
    }

    /// Only the first [`KEEP`] of identical elements can be shown: the rest are equally
    /// large, never replace a kept one, and are only counted.
    fn wanted(&self, count: u64) -> u64 {
        count.min(KEEP as u64)
    }

    fn skip(&mut self, count: u64, size: u64) -> Result<(), ReportError> {
        if let Some(parent) = self.stack.last_mut() {
            parent.omitted = parent.omitted.saturating_add(count);
            parent.omitted_size = parent
                .omitted_size
                .saturating_add(count.saturating_mul(size));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1_258_291), "1.2 MiB");
        assert_eq!(thousands(999_990), "999,990");
        assert_eq!(thousands(12), "12");
    }
}
