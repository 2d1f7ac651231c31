//! The hooked return addresses still on a target's stacks, put back: what unpatching (and
//! the guardian, for a killed oi-trace) does, with every thread stopped, before the segment
//! that holds the exit stub may go.
//!
//! Every hooked return slot was written after its shadow entry was pushed, so the shadow
//! stacks name them all. For each thread area, newest entry first, a slot that still holds
//! the exit stub's address gets the entry's real return address back (a tail call's callee
//! has the exit stub as its real one; the older entry of the same slot writes the caller's).
//! The areas are read from the target's memory, as the guardian has no view of its own, and
//! bounded: the depth by [`SHADOW_CAP`], the slots by the layout oi-trace chose. Nothing is
//! written where the exit stub's address is not, so a stale entry never touches a stack.

use serde::{Deserialize, Serialize};

use oi_common::inject::{
    HEADER_SIZE, SLOT_SIZE,
    offset::OWNER,
    spans::{SHADOW_CAP, SHADOW_ENTRY_SIZE, SHADOW_OFFSET, SpansLayout, offset},
};

use crate::inferior::remote::{self, RemoteError};

/// Where a process's shadow stacks are and what a hooked slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Returns {
    /// The data part's address in the target.
    pub data: u64,
    /// Its thread slots (`SpansLayout::slots`).
    pub slots: u64,
    /// The exit stub's address.
    pub exit: u64,
}

/// Puts back every hooked return address of `pid` (all its threads stopped); how many.
pub fn restore(pid: i32, r: &Returns) -> Result<usize, RemoteError> {
    let Some(layout) = SpansLayout::new(r.slots) else {
        return Ok(0);
    };
    let mut restored = 0;
    for index in 0..layout.slots {
        let mut owner = [0u8; 8];
        remote::read_memory(
            pid,
            r.data + HEADER_SIZE + index * SLOT_SIZE + OWNER,
            &mut owner,
        )?;
        if u64::from_le_bytes(owner) == 0 {
            continue;
        }
        let area = r.data + layout.area_offset(index);
        let mut depth = [0u8; 8];
        remote::read_memory(pid, area + offset::SHADOW_DEPTH, &mut depth)?;
        let depth = u64::from_le_bytes(depth).min(SHADOW_CAP);
        let mut entries = vec![0u8; (depth * SHADOW_ENTRY_SIZE) as usize];
        remote::read_memory(pid, area + SHADOW_OFFSET, &mut entries)?;
        for entry in entries.chunks_exact(SHADOW_ENTRY_SIZE as usize).rev() {
            let word = |at: u64| {
                let at = at as usize;
                u64::from_le_bytes(entry[at..at + 8].try_into().unwrap_or_default())
            };
            let (ret, slot) = (word(offset::RET), word(offset::SLOT));
            let mut now = [0u8; 8];
            // A slot that is not readable is not a live stack's.
            if remote::read_memory(pid, slot, &mut now).is_err() {
                continue;
            }
            if u64::from_le_bytes(now) == r.exit {
                remote::write_memory(pid, slot, &ret.to_le_bytes())?;
                restored += 1;
            }
        }
    }
    Ok(restored)
}
