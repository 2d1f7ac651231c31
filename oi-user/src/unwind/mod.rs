//! CFI unwind tables for the kernel-side unwinder (owner: the unwind work).
