//! Allocating stacks: captured with the CFI unwinder, stored once under a hash of the process
//! and the frames, each with a site index; the last stack of each CPU is remembered.

use super::*;

/// Captures the user stack, stores it under its id (a hash of the process and the frames)
/// and returns the id (never 0) and its site index; (0, 0) when it could not be stored.
#[inline(always)]
pub(crate) fn capture_stack(ctx: &ProbeContext, pid_tgid: u64) -> (u64, u32) {
    let (Some(scratch), Some(last), Some(last_site)) = (
        SCRATCH.get_ptr_mut(0),
        LAST_STACK.get_ptr_mut(0),
        LAST_STACK.get_ptr_mut(1),
    ) else {
        return (0, 0);
    };
    // SAFETY: this CPU's value of a per-CPU array; nothing else runs on this CPU meanwhile.
    let stack = unsafe { &mut *scratch };
    let len = user_stack(ctx, &mut stack.frames);
    stack.len = len as u32;
    stack.tgid = (pid_tgid >> 32) as u32;
    // FNV-1a over the process and the frames.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ u64::from(stack.tgid);
    for (i, frame) in stack.frames.iter().enumerate() {
        if i >= len || i >= MAX_FRAMES {
            break;
        }
        h = (h ^ *frame).wrapping_mul(0x0100_0000_01b3);
    }
    if h == 0 {
        h = 1;
    }
    // SAFETY: this CPU's slots of a per-CPU array.
    if unsafe { *last } == h {
        // SAFETY: as above.
        let site = unsafe { *last_site } as u32;
        if SITE_STACKS.get(site) == Some(&h) {
            return (h, site);
        }
    }
    // A lookup first: a known stack (the usual case) costs no bucket lock.
    // SAFETY: a plain read of a map value.
    let site = match unsafe { STACKS.get(&h) } {
        Some(known) => known.site,
        None => store_stack(h, stack),
    };
    if site == 0 {
        count(&COUNTERS, counter::STACKS_FULL);
        return (0, 0);
    }
    // SAFETY: as above.
    unsafe {
        *last = h;
        *last_site = u64::from(site);
    }
    (h, site)
}

/// Stores a new stack under id `h` with the next site index, which it returns (0: not
/// stored, the tables are full).
#[inline(always)]
pub(crate) fn store_stack(h: u64, stack: &mut Stack) -> u32 {
    let Some(next) = SITE_COUNT.get_ptr_mut(0) else {
        return 0;
    };
    let site = add(next, 1);
    if site > u64::from(MAX_SITE.load()) {
        return 0;
    }
    let Some(site_stack) = SITE_STACKS.get_ptr_mut(site as u32) else {
        return 0;
    };
    // SAFETY: a value of an array map.
    unsafe { *site_stack = h };
    stack.site = site as u32;
    match STACKS.insert(&h, stack, BPF_NOEXIST as u64) {
        Ok(()) => site as u32,
        // EEXIST: another CPU stored it meanwhile, with its own index.
        // SAFETY: a plain read of a map value.
        Err(-17) => unsafe { STACKS.get(&h) }.map_or(0, |s| s.site),
        Err(_) => 0,
    }
}
