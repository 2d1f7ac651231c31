//! Events to call-tree nodes: per thread, a stack of the open calls rebuilt from the ENTRY,
//! EXIT and UNWOUND events, and each closed call added to its node, keyed by (parent node,
//! function) as the uprobe path's kernel maps key them (`oi_common::calls`), so that
//! `calls::tree` builds the same tree from either.
//!
//! Bounded: at most `max_nodes` nodes (a call that finds the table full is counted in
//! `nodes_full`, and so is every call beneath it), at most [`MAX_DEPTH`] open calls per
//! thread (deeper ones are counted on the deepest node, like `--depth`), at most
//! [`MAX_THREADS`] threads. Events are untrusted: an exit that matches no open call is
//! counted in `unmatched`, never believed.

use std::collections::HashMap;

use oi_common::{
    calls::{MAX_DEPTH, NO_NODE, NodeKey, NodeStats, ROOT},
    inject::spans::{Event, kind},
};

/// Threads whose open calls are kept (slot indices are bounded by the layout, this is a
/// second bound).
const MAX_THREADS: usize = 1 << 16;

/// One open call.
#[derive(Debug, Clone, Copy)]
struct Open {
    function: u32,
    /// Its node; [`NO_NODE`] when the table was full, [`DEEPER`] beyond the depth limit.
    node: u32,
    tsc: u64,
    child_ns: u64,
}

/// A call beyond the depth limit: counted on the deepest timed node, not timed.
const DEEPER: u32 = u32::MAX - 2;
/// A call of the entry function past the window limit, and every call beneath it.
const SKIPPED: u32 = u32::MAX - 3;

/// What the events did not fit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Calls closed as left without returning (exceptions, longjmp).
    pub abandoned: u64,
    /// Exits (or unwinds) that matched no open call, or another function's.
    pub unmatched: u64,
    pub nodes_full: u64,
    pub deeper: u64,
    /// Calls of the entry function completed (windows closed).
    pub windows_closed: u64,
    /// Calls of the entry function left out because the limit (`--count`) was reached.
    pub windows_skipped: u64,
    /// Events of unknown kind, or of threads beyond the bound.
    pub bad: u64,
}

/// The nodes built so far.
pub struct Nodes {
    ns_per_tick_q32: u64,
    max_nodes: u32,
    /// Deepest level below the root that is timed (the root is level 0).
    depth: u32,
    ids: HashMap<NodeKey, u32>,
    stats: Vec<NodeStats>,
    keys: Vec<NodeKey>,
    threads: HashMap<u64, Vec<Open>>,
    /// Calls of the entry function to take at most; those opened once it is reached are
    /// skipped whole.
    window_limit: Option<u64>,
    windows_opened: u64,
    events: u64,
    pub counters: Counters,
}

impl Nodes {
    pub fn new(
        ns_per_tick_q32: u64,
        max_nodes: u32,
        depth: Option<u32>,
        window_limit: Option<u64>,
    ) -> Self {
        Self {
            window_limit,
            windows_opened: 0,
            events: 0,
            ns_per_tick_q32,
            max_nodes,
            depth: depth.unwrap_or(MAX_DEPTH - 1).min(MAX_DEPTH - 1),
            ids: HashMap::new(),
            stats: Vec::new(),
            keys: Vec::new(),
            threads: HashMap::new(),
            counters: Counters::default(),
        }
    }

    fn ns(&self, from: u64, to: u64) -> u64 {
        ((u128::from(to.saturating_sub(from)) * u128::from(self.ns_per_tick_q32)) >> 32) as u64
    }

    /// Takes one event of thread `thread`.
    pub fn event(&mut self, thread: u64, e: Event) {
        self.events += 1;
        if !self.threads.contains_key(&thread) && self.threads.len() >= MAX_THREADS {
            self.counters.bad += 1;
            return;
        }
        match e.kind() {
            kind::ENTRY => self.enter(thread, e.function(), e.tsc),
            kind::EXIT => self.close(thread, e.function(), e.tsc, false),
            kind::UNWOUND => self.close(thread, e.function(), e.tsc, true),
            _ => self.counters.bad += 1,
        }
    }

    fn enter(&mut self, thread: u64, function: u32, tsc: u64) {
        let stack = self.threads.entry(thread).or_default();
        let (parent, level) = match stack.last() {
            None => (ROOT, 0),
            Some(top) => (top.node, stack.len() as u32),
        };
        if parent == ROOT {
            self.windows_opened += 1;
        }
        let node = if parent == ROOT && self.window_limit.is_some_and(|l| self.windows_opened > l)
            || parent == SKIPPED
        {
            SKIPPED
        } else if parent == NO_NODE {
            self.counters.nodes_full += 1;
            NO_NODE
        } else if parent == DEEPER || level > self.depth {
            // Counted on the deepest timed node: the nearest frame that has a real node.
            let deepest = stack
                .iter()
                .rev()
                .find(|o| o.node != DEEPER && o.node != NO_NODE)
                .map(|o| o.node);
            self.counters.deeper += 1;
            if let Some(n) = deepest
                && let Some(s) = self.stats.get_mut(n as usize)
            {
                s.deeper += 1;
            }
            DEEPER
        } else {
            let key = NodeKey { parent, function };
            match self.ids.get(&key) {
                Some(&id) => id,
                None if (self.stats.len() as u64) < u64::from(self.max_nodes) => {
                    let id = self.stats.len() as u32;
                    self.ids.insert(key, id);
                    self.stats.push(NodeStats::default());
                    self.keys.push(key);
                    id
                }
                None => {
                    self.counters.nodes_full += 1;
                    NO_NODE
                }
            }
        };
        let stack = self.threads.entry(thread).or_default();
        if stack.len() >= 2 * MAX_DEPTH as usize {
            // More open calls than any shadow stack holds: the events are not believable.
            self.counters.bad += 1;
            return;
        }
        stack.push(Open {
            function,
            node,
            tsc,
            child_ns: 0,
        });
    }

    fn close(&mut self, thread: u64, function: u32, tsc: u64, unwound: bool) {
        let Some(open) = self.threads.get_mut(&thread).and_then(Vec::pop) else {
            self.counters.unmatched += 1;
            return;
        };
        if open.function != function {
            self.counters.unmatched += 1;
        }
        let ns = self.ns(open.tsc, tsc);
        if unwound {
            self.counters.abandoned += 1;
        }
        let stack = self.threads.get_mut(&thread);
        let parent = stack.as_ref().and_then(|s| s.last().copied());
        if let Some(s) = self.stats.get_mut(open.node as usize) {
            s.calls += 1;
            s.total_ns += ns;
            s.self_ns += ns.saturating_sub(open.child_ns);
            if unwound {
                s.abandoned += 1;
            }
            if let Some(top) = self.threads.get_mut(&thread).and_then(|s| s.last_mut()) {
                top.child_ns += ns;
            }
        }
        if parent.is_none() {
            if open.node == SKIPPED {
                self.counters.windows_skipped += 1;
            } else {
                self.counters.windows_closed += 1;
            }
        }
    }

    /// Events taken.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Open calls of every thread (calls of the entry still running, and what is beneath).
    pub fn open_windows(&self) -> usize {
        self.threads.values().filter(|s| !s.is_empty()).count()
    }

    /// The nodes as the uprobe path's maps give them: ((parent, function), id, stats).
    pub fn nodes(&self) -> Vec<(NodeKey, u32, NodeStats)> {
        self.keys
            .iter()
            .zip(&self.stats)
            .enumerate()
            .map(|(id, (&key, &stats))| (key, id as u32, stats))
            .collect()
    }
}
