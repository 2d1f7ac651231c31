//! Types the allocation profiler shares with its eBPF program (owner: the allocs work).
