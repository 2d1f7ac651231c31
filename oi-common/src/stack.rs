//! User stacks captured in the kernel: the frame limit and the CFI unwind table rows (owner: the unwind work).
