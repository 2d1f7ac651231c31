//! Exists so that `oi-user` can name this crate as a build dependency (aya-build needs that to
//! rebuild the eBPF object when it changes). The programs live in `main.rs`.
#![no_std]
