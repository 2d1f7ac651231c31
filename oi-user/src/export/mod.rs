//! The tools' results in standard formats that other programs read and backends ingest.
//!
//! `otlp` (experimental): OTLP profiles, the OpenTelemetry profiles signal, made from pprof
//! profiles (the agent sends them).
//!
//! `pprof`: gzipped `profile.proto`, the format's builder and the placing of code addresses in
//! their mappings. Each tool's exporter (`allocs::pprof`, `calls::pprof`, `footprint::pprof`)
//! takes that tool's finished report (never its maps or its target), so that the file says
//! exactly what the tool's own report says, and writes it with these. The core never reaches
//! it; it reaches no tool.

pub mod otlp;
pub mod pprof;
