//! `oi-trace allocs` (owner: the allocs work).
