//! User stacks in the kernel (owner: the unwind work).
