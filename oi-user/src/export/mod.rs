//! The tools' results in standard formats that other programs read and backends ingest.
//!
//! `pprof`: gzipped `profile.proto` for `allocs`, `calls` and footprints. Each exporter takes
//! a tool's finished report (never its maps or its target), so that the file says exactly
//! what the tool's own report says. Sits beside the tools: it reads their report types, a tool
//! calls it where it writes its other outputs, and the core never reaches it.

pub mod pprof;
