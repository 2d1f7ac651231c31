//! `--format tree`: where the bytes of a sample are, for a person. One line per node with its
//! name, its type as C++ is written (`--names oi`: OI's spelling), its inclusive size and its
//! share of the root; containers add `len/cap` and the bytes lost to unused capacity;
//! pointers say when they are null; `--values` adds scalar values. Children come largest
//! first, `--top K` of them (default 10), then one line `… N more members|elements (X)`;
//! identical sibling elements (alike in all their line shows: name, type, size, len/cap,
//! value) fold into one line `[] × N`, shown with the subtree of one of them (with
//! `--values`, only elements whose subtrees hold the same values fold); a struct's padding is a `(padding)`
//! line per gap, so a struct's lines add up to its size.
//!
//! Memory is bounded while decoding however many elements a sample has: per node, the
//! [`Options::top`] largest children (exactly: a larger one replaces the smallest kept),
//! and at most [`GROUPS`] distinct kinds of element with their counts; the byte and element
//! counts of the `… more` line are exact whatever was dropped. Never touches a process.

use std::collections::HashMap;
use std::io::Write;

use super::{NodeOut, ReportError, Sink};
use crate::plan::{Node, Op, Plan, Scalar, ScalarKind};

/// Distinct kinds of element (name, type, size, value) counted per node; further kinds are
/// still counted in the `… more` line, but cannot fold.
pub const GROUPS: usize = 4096;
/// Largest subtree (in nodes) kept to show under a folded line that has no kept member.
const REPRESENTATIVE_NODES: usize = 64;

/// Which spelling of type names the tree uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Names {
    /// As people write them (`std::map<int, std::string>`).
    #[default]
    Readable,
    /// Object Introspection's, as in the JSON.
    Oi,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Children shown per node before the `… more` line.
    pub top: usize,
    pub names: Names,
    /// Show the scalar values the walk read (`--values`).
    pub values: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            top: 10,
            names: Names::Readable,
            values: false,
        }
    }
}

/// A printed node, its lines decided.
#[derive(Debug, Clone)]
struct TreeNode {
    head: Head,
    lines: Vec<Line>,
    /// Nodes in this subtree as kept (bounds what is kept as a representative).
    nodes: usize,
    /// With `--values`: a hash of every value in the subtree, kept or not, so that only
    /// elements with the same values fold.
    values: u64,
}

/// What a node's own line says.
#[derive(Debug, Clone)]
struct Head {
    name: String,
    ty: String,
    size: u64,
    /// ` = 42` (`--values`), ` → null` (a null pointer).
    value: Option<String>,
    /// `len 3 / cap 10, 24 B unused`.
    extra: Option<String>,
}

#[derive(Debug, Clone)]
enum Line {
    Child(TreeNode),
    /// `count` siblings alike, `each` bytes apiece; `node` is one of them.
    Fold {
        count: u64,
        each: u64,
        node: TreeNode,
    },
    Padding {
        bytes: u64,
        at: Option<u64>,
    },
    More {
        count: u64,
        bytes: u64,
        members: bool,
    },
}

impl Line {
    fn bytes(&self) -> u64 {
        match self {
            Line::Child(n) => n.head.size,
            Line::Fold { count, each, .. } => count.saturating_mul(*each),
            Line::Padding { bytes, .. } | Line::More { bytes, .. } => *bytes,
        }
    }
}

/// Siblings that fold together: alike in everything their line shows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    name: String,
    ty: String,
    size: u64,
    value: Option<String>,
    extra: Option<String>,
    /// [`TreeNode::values`] (0 without `--values`).
    values: u64,
}

#[derive(Debug)]
struct Group {
    count: u64,
    /// Arrival order of its first member (ties print in the order met).
    seq: u64,
    representative: Option<TreeNode>,
}

/// A node whose children are still arriving.
struct Open {
    head: Head,
    /// Padding lines, decided when the node begins.
    padding: Vec<Line>,
    /// Children are struct members (else container elements, pointees…).
    members: bool,
    /// The largest children so far, with their key and arrival order.
    kept: Vec<(TreeNode, Key, u64)>,
    groups: HashMap<Key, Group>,
    children: u64,
    children_bytes: u64,
    last_key: Option<Key>,
    /// [`TreeNode::values`] so far: own value, then the children's in order.
    values: u64,
}

pub struct TreeSink<'p> {
    plan: &'p Plan,
    opts: Options,
    stack: Vec<Open>,
    /// Decoded roots, or the line of a root that has no result.
    roots: Vec<Result<TreeNode, String>>,
    root_label: Option<String>,
}

impl<'p> TreeSink<'p> {
    pub fn new(plan: &'p Plan, opts: Options) -> Self {
        Self {
            plan,
            opts,
            stack: Vec::new(),
            roots: Vec::new(),
            root_label: None,
        }
    }

    /// Prints every root decoded so far and forgets them.
    pub fn write(&mut self, out: &mut dyn Write) -> Result<(), ReportError> {
        for root in std::mem::take(&mut self.roots) {
            match root {
                Ok(root) => {
                    let total = root.head.size.max(1);
                    print(out, &root, None, total, 0)?;
                }
                Err(line) => writeln!(out, "{line}")?,
            }
        }
        Ok(())
    }

    fn type_name(&self, node: &Node) -> String {
        let oi = node.type_names.last().map(String::as_str).unwrap_or("");
        match self.opts.names {
            Names::Oi => oi.to_string(),
            Names::Readable if node.readable.is_empty() => oi.to_string(),
            Names::Readable => node.readable.clone(),
        }
    }

    /// `len 3 / cap 10, 24 B unused` for the containers people size by capacity.
    fn extra(&self, n: &NodeOut<'_>) -> Option<String> {
        if let Some(block) = n.heap_block {
            return Some(format!("heap block {}", human(block)));
        }
        if n.not_walked && n.node.foreign {
            return Some("unknown standard library, not walked".into());
        }
        if n.not_walked {
            return Some("union, not walked".into());
        }
        let (len, cap) = n.length_capacity?;
        let unused = |bytes: u64| {
            if bytes > 0 {
                format!(", {} unused", human(bytes))
            } else {
                String::new()
            }
        };
        let both = |elem: u64| {
            format!(
                "len {} / cap {}{}",
                thousands(len),
                thousands(cap),
                unused(cap.saturating_sub(len).saturating_mul(elem))
            )
        };
        Some(match &n.node.op {
            Op::String(l) => {
                // Inline (SSO) capacity is inside the object: nothing is lost.
                let heap = n.exclusive > l.size;
                if heap {
                    both(l.char_size)
                } else {
                    format!("len {} / cap {} (inline)", thousands(len), thousands(cap))
                }
            }
            Op::Vector { layout, .. } => both(layout.elem_size),
            Op::Deque { layout, .. } => both(layout.elem_size),
            Op::Described { .. } => format!("len {} / cap {}", thousands(len), thousands(cap)),
            Op::VectorBool { .. } => format!(
                "len {} / cap {} bits{}",
                thousands(len),
                thousands(cap),
                unused(cap.saturating_sub(len) / 8)
            ),
            Op::List { .. } | Op::RbTree { .. } | Op::Hashtable { .. } => {
                format!("len {}", thousands(len))
            }
            _ => return None,
        })
    }

    /// ` = 42` with `--values`; ` → null` for a null smart or chased pointer.
    fn value(&self, n: &NodeOut<'_>) -> Option<String> {
        if let (Some(words), Some(scalar)) = (n.value, &n.node.value)
            && self.opts.values
        {
            return Some(format!(" = {}", show_value(scalar, words)));
        }
        match n.node.op {
            Op::SmartPtr { .. }
            | Op::RefWrap { .. }
            | Op::RawPointer { .. }
            | Op::HeapPointer { .. }
                if n.pointer == Some(0) =>
            {
                Some(" → null".into())
            }
            _ => None,
        }
    }

    /// One `(padding)` line per gap between members, or one for the whole when gaps cannot
    /// be placed (bitfields); always adding up to the struct's exclusive size.
    fn padding(&self, n: &NodeOut<'_>) -> Vec<Line> {
        let (members, total) = match &n.node.op {
            Op::Struct {
                members, padding, ..
            } => (members.as_slice(), *padding),
            Op::Pair { .. } => (&[][..], n.exclusive),
            _ => return Vec::new(),
        };
        if total == 0 {
            return Vec::new();
        }
        let whole = vec![Line::Padding {
            bytes: total,
            at: None,
        }];
        if members.is_empty()
            || members
                .iter()
                .any(|m| matches!(self.plan.nodes[m.1].op, Op::Bitfield))
        {
            return whole;
        }
        let mut spans: Vec<(u64, u64)> = members
            .iter()
            .map(|&(off, id)| (off, off.saturating_add(self.plan.nodes[id].static_size)))
            .collect();
        spans.sort_unstable();
        let mut gaps = Vec::new();
        let mut end = 0;
        for (start, stop) in spans {
            if start > end {
                gaps.push(Line::Padding {
                    bytes: start - end,
                    at: Some(end),
                });
            }
            end = end.max(stop);
        }
        if n.node.static_size > end {
            gaps.push(Line::Padding {
                bytes: n.node.static_size - end,
                at: Some(end),
            });
        }
        let sum: u64 = gaps.iter().map(Line::bytes).sum();
        if sum == total { gaps } else { whole }
    }

    /// Decides the lines of a node whose children have all arrived.
    fn close(&self, open: Open) -> TreeNode {
        let top = self.opts.top;
        let mut candidates: Vec<(Line, u64)> = Vec::new();
        let mut folded: HashMap<Key, usize> = HashMap::new();
        let mut groups: Vec<(Key, Group)> = open
            .groups
            .into_iter()
            .filter(|(_, g)| g.count >= 2)
            .collect();
        groups.sort_by_key(|(_, g)| g.seq);
        for (key, g) in groups {
            folded.insert(key.clone(), candidates.len());
            let node = g.representative.unwrap_or_else(|| leaf(&key));
            candidates.push((
                Line::Fold {
                    count: g.count,
                    each: key.size,
                    node,
                },
                g.seq,
            ));
        }
        for (node, key, seq) in open.kept {
            match folded.get(&key) {
                // A kept member of a folded group shows its subtree under the fold line.
                Some(&i) => {
                    if let (Line::Fold { node: rep, .. }, _) = &mut candidates[i]
                        && rep.lines.is_empty()
                    {
                        *rep = node;
                    }
                }
                None => candidates.push((Line::Child(node), seq)),
            }
        }
        candidates.sort_by(|a, b| b.0.bytes().cmp(&a.0.bytes()).then(a.1.cmp(&b.1)));
        candidates.truncate(top);
        let (mut shown_count, mut shown_bytes) = (0u64, 0u64);
        for (line, _) in &candidates {
            shown_count += match line {
                Line::Fold { count, .. } => *count,
                _ => 1,
            };
            shown_bytes = shown_bytes.saturating_add(line.bytes());
        }
        let mut lines: Vec<Line> = candidates.into_iter().map(|(l, _)| l).collect();
        lines.extend(open.padding);
        // Largest first; padding after the children of the same size.
        lines.sort_by_key(|l| std::cmp::Reverse(l.bytes()));
        let more = open.children.saturating_sub(shown_count);
        if more > 0 {
            lines.push(Line::More {
                count: more,
                bytes: open.children_bytes.saturating_sub(shown_bytes),
                members: open.members,
            });
        }
        let nodes = 1 + lines
            .iter()
            .map(|l| match l {
                Line::Child(n) | Line::Fold { node: n, .. } => n.nodes,
                _ => 1,
            })
            .sum::<usize>();
        TreeNode {
            head: open.head,
            lines,
            nodes,
            values: open.values,
        }
    }
}

/// A childless node standing for a folded group none of whose members was kept.
fn leaf(key: &Key) -> TreeNode {
    TreeNode {
        head: Head {
            name: key.name.clone(),
            ty: key.ty.clone(),
            size: key.size,
            value: key.value.clone(),
            extra: key.extra.clone(),
        },
        lines: Vec::new(),
        nodes: 1,
        values: key.values,
    }
}

/// Mixes `v` into the hash `h` (FNV-1a over the bytes of `v`).
fn mix(h: u64, v: u64) -> u64 {
    v.to_le_bytes()
        .iter()
        .fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// A scalar as C++ would print it.
pub fn show_value(s: &Scalar, (low, high): (u64, u64)) -> String {
    let bits = 8 * s.size.min(8);
    let mask = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let raw = low & mask;
    let signed = || -> i128 {
        if s.size == 16 {
            ((u128::from(high) << 64) | u128::from(low)) as i128
        } else {
            let shift = 64 - bits;
            i128::from(((raw << shift) as i64) >> shift)
        }
    };
    match &s.kind {
        ScalarKind::Signed => signed().to_string(),
        ScalarKind::Unsigned if s.size == 16 => {
            ((u128::from(high) << 64) | u128::from(low)).to_string()
        }
        ScalarKind::Unsigned => raw.to_string(),
        ScalarKind::Char { signed: is_signed } => {
            let code = if *is_signed {
                signed()
            } else {
                i128::from(raw)
            };
            match u8::try_from(code) {
                Ok(c) if c.is_ascii_graphic() || c == b' ' => format!("'{}' ({code})", c as char),
                _ => code.to_string(),
            }
        }
        ScalarKind::Bool => (raw != 0).to_string(),
        ScalarKind::Float => match s.size {
            4 => format!("{}", f32::from_bits(raw as u32)),
            8 => format!("{}", f64::from_bits(raw)),
            _ => format!("{}", x87(low, high)),
        },
        ScalarKind::Pointer if raw == 0 => "null".into(),
        ScalarKind::Pointer => format!("{raw:#x}"),
        ScalarKind::Enum {
            signed: is_signed,
            enumerators,
        } => {
            if let Some((_, name)) = enumerators.iter().find(|(v, _)| *v == raw) {
                return name.clone();
            }
            // A set of flags: every bit named by a one-bit enumerator.
            let flags: Vec<&(u64, String)> = enumerators
                .iter()
                .filter(|(v, _)| v.is_power_of_two() && raw & v != 0)
                .collect();
            if raw != 0 && flags.iter().fold(0, |a, (v, _)| a | v) == raw {
                return flags
                    .iter()
                    .map(|(_, n)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(" | ");
            }
            if *is_signed {
                signed().to_string()
            } else {
                raw.to_string()
            }
        }
    }
}

/// An x87 80-bit extended value (the low 10 bytes of a `long double`) as the nearest f64.
fn x87(mantissa: u64, high: u64) -> f64 {
    let exponent = (high & 0x7fff) as i32;
    let sign = if high & 0x8000 != 0 { -1.0 } else { 1.0 };
    if exponent == 0x7fff {
        return if mantissa << 1 == 0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    // value = mantissa · 2^(exponent − 16383 − 63); denormals have exponent 1 − 16383.
    let e = exponent.max(1) - 16383 - 63;
    sign * (mantissa as f64) * 2f64.powi(e)
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

fn pct(bytes: u64, total: u64) -> String {
    format!("{:.1}%", bytes as f64 * 100.0 / total as f64)
}

/// Prints `n` and its lines; `fold`: (count, each) when it stands for a folded group.
fn print(
    out: &mut dyn Write,
    n: &TreeNode,
    fold: Option<(u64, u64)>,
    total: u64,
    depth: usize,
) -> Result<(), ReportError> {
    let h = &n.head;
    let indent = depth * 2;
    let value = h.value.as_deref().unwrap_or("");
    let extra = h
        .extra
        .as_ref()
        .map(|e| format!("  {e}"))
        .unwrap_or_default();
    // OI spells map entries with no type at all.
    let ty = if h.ty.is_empty() {
        String::new()
    } else {
        format!(": {}", h.ty)
    };
    match fold {
        None => writeln!(
            out,
            "{:indent$}{}{ty}{value}  {}  {}{extra}",
            "",
            h.name,
            human(h.size),
            pct(h.size, total),
        )?,
        Some((count, each)) => {
            let all = count.saturating_mul(each);
            writeln!(
                out,
                "{:indent$}{} × {}{ty}{value}  {} each, {}  {}{extra}",
                "",
                h.name,
                thousands(count),
                human(each),
                human(all),
                pct(all, total),
            )?
        }
    }
    let indent = indent + 2;
    for line in &n.lines {
        match line {
            Line::Child(c) => print(out, c, None, total, depth + 1)?,
            Line::Fold { count, each, node } => {
                print(out, node, Some((*count, *each)), total, depth + 1)?
            }
            Line::Padding { bytes, at } => {
                let at = at.map(|a| format!(" at +{a}")).unwrap_or_default();
                writeln!(
                    out,
                    "{:indent$}(padding{at})  {}  {}",
                    "",
                    human(*bytes),
                    pct(*bytes, total)
                )?
            }
            Line::More {
                count,
                bytes,
                members,
            } => {
                let what = match (members, *count == 1) {
                    (true, true) => "member",
                    (true, false) => "members",
                    (false, true) => "element",
                    (false, false) => "elements",
                };
                writeln!(
                    out,
                    "{:indent$}… {} more {what} ({}, {})",
                    "",
                    thousands(*count),
                    human(*bytes),
                    pct(*bytes, total)
                )?
            }
        }
    }
    Ok(())
}

impl Sink for TreeSink<'_> {
    fn root(&mut self, label: &str) {
        self.root_label = Some(label.to_string());
    }

    /// `arg1: std::string  not measured: <why>`, in the root's place.
    fn failed_root(&mut self, label: &str, node: &Node, why: &str) -> Result<(), ReportError> {
        let ty = self.type_name(node);
        let ty = if ty.is_empty() {
            String::new()
        } else {
            format!(": {ty}")
        };
        self.roots
            .push(Err(format!("{label}{ty}  not measured: {why}")));
        Ok(())
    }

    fn begin(&mut self, n: &NodeOut<'_>) -> Result<(), ReportError> {
        let name = match (&self.root_label, self.stack.is_empty()) {
            (Some(label), true) => label.clone(),
            _ => n.name.to_string(),
        };
        let head = Head {
            name,
            ty: self.type_name(n.node),
            size: n.size,
            value: self.value(n),
            extra: self.extra(n),
        };
        let values = match n.value {
            Some((low, high)) if self.opts.values => mix(mix(0xcbf2_9ce4_8422_2325, low), high),
            _ => 0,
        };
        self.stack.push(Open {
            values,
            head,
            padding: self.padding(n),
            members: matches!(
                n.node.op,
                Op::Struct { .. } | Op::Pair { .. } | Op::Entry { .. }
            ),
            kept: Vec::new(),
            groups: HashMap::new(),
            children: 0,
            children_bytes: 0,
            last_key: None,
        });
        Ok(())
    }

    fn end(&mut self) -> Result<(), ReportError> {
        let Some(open) = self.stack.pop() else {
            return Ok(());
        };
        let done = self.close(open);
        let top = self.opts.top;
        let Some(parent) = self.stack.last_mut() else {
            self.roots.push(Ok(done));
            return Ok(());
        };
        let seq = parent.children;
        parent.children += 1;
        if self.opts.values {
            parent.values = mix(parent.values, done.values);
        }
        parent.children_bytes = parent.children_bytes.saturating_add(done.head.size);
        let key = Key {
            name: done.head.name.clone(),
            ty: done.head.ty.clone(),
            size: done.head.size,
            value: done.head.value.clone(),
            extra: done.head.extra.clone(),
            values: done.values,
        };
        parent.last_key = Some(key.clone());
        let groups = parent.groups.len();
        match parent.groups.get_mut(&key) {
            Some(g) => g.count += 1,
            None if groups < GROUPS => {
                // The first few kinds keep a small subtree to show under a fold line.
                let representative =
                    (groups < 2 * top && done.nodes <= REPRESENTATIVE_NODES).then(|| done.clone());
                parent.groups.insert(
                    key.clone(),
                    Group {
                        count: 1,
                        seq,
                        representative,
                    },
                );
            }
            None => {}
        }
        if parent.kept.len() < top.max(1) {
            parent.kept.push((done, key, seq));
            return Ok(());
        }
        // Keep the largest: replace the smallest kept child if this one is larger.
        if let Some((i, smallest)) = parent
            .kept
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| c.0.head.size)
            .map(|(i, c)| (i, c.0.head.size))
            && done.head.size > smallest
        {
            parent.kept[i] = (done, key, seq);
        }
        Ok(())
    }

    /// Identical elements fold into one line: one of them is enough to see.
    fn wanted(&self, count: u64) -> u64 {
        count.min(1)
    }

    /// `count` more elements like the last one (same name, type and size, no values).
    fn skip(&mut self, count: u64, size: u64) -> Result<(), ReportError> {
        if let Some(parent) = self.stack.last_mut() {
            parent.children = parent.children.saturating_add(count);
            parent.children_bytes = parent
                .children_bytes
                .saturating_add(count.saturating_mul(size));
            if let Some(key) = &parent.last_key
                && let Some(g) = parent.groups.get_mut(key)
            {
                g.count = g.count.saturating_add(count);
            }
            if self.opts.values {
                parent.values = mix(parent.values, count);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
