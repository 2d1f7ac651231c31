//! Children the target forks under `--mechanism inject`: a child inherits the patched code, our
//! code part (a private copy) and our data part (shared: its allocations land in the parent's
//! counters, in the slot of the thread that forked, since its thread has the same thread
//! pointer). [`restore_children`] finds the children that still carry our segment and undoes
//! everything in each, exactly as in the parent (`inject::patch::undo`, with the child's pid),
//! so that a child is counted into the parent's figures only from its fork until it is found,
//! and keeps none of our code once oi-trace is gone.
//!
//! Children are read from `/proc/PID/task/*/children` (direct children only: a grandchild
//! forked before its parent was restored keeps the hooks). A child that executed a new
//! program or exited has nothing of ours left and is passed over. Never writes to a process
//! whose maps do not show our parts at their addresses.

use crate::inferior::Tracer;
use crate::inject::patch::{self, Undo, Unpatched};

/// The direct children of `pid` (of any of its threads), as `/proc` lists them.
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<i32> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Finds the children of the process of `plan` that still carry its segment or patches, and
/// undoes `plan` in each (seized for the time of it). `done` lists the children restored
/// before, which are not looked at again. Returns the children restored now; a child that
/// cannot be seized or undone is said on stderr and tried again next time.
pub fn restore_children(plan: &Undo, done: &[i32]) -> Vec<i32> {
    let mut restored = Vec::new();
    for child in children(plan.pid) {
        if done.contains(&child) {
            continue;
        }
        let child_plan = Undo {
            pid: child,
            ..plan.clone()
        };
        if !patch::remains(&child_plan) {
            continue;
        }
        let mut tracer = Tracer::default();
        if let Err(e) = tracer.seize(child) {
            eprintln!("oi-trace: cannot seize the forked child {child} to unpatch it: {e}");
            continue;
        }
        match patch::undo(&mut tracer, &child_plan, &mut None, patch::DRAIN) {
            Ok(Unpatched::Clean) => restored.push(child),
            // Its code is the original again: nothing enters the segment any more.
            Ok(Unpatched::SegmentLeft) => restored.push(child),
            Err(e) => eprintln!("oi-trace: unpatching the forked child {child}: {e}"),
        }
        tracer.release(child);
    }
    restored
}
