//! User stacks captured in the kernel: the frame limit and the CFI unwind table rows (owner: the unwind work).
//!
//! A captured stack is an array of [`MAX_FRAMES`] addresses, innermost first: the probed
//! instruction, then each caller's return address.

/// Frames per captured stack, the probed pc included.
pub const MAX_FRAMES: usize = 48;
