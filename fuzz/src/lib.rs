//! Shared code of the fuzz targets in `fuzz_targets/`: opening fuzzer bytes as a binary the
//! way oi-trace opens one ([`elf`]), the fixed plans the stream decoder is fuzzed against
//! ([`fixtures`]), and a generator of well-formed streams for seeds ([`synth`]).
//!
//! Errors from the library are expected and ignored here: only a panic, a hang or unbounded
//! memory is a finding.

pub mod elf;
pub mod fixtures;
pub mod synth;

use std::io::{self, Write};

use oi_trace::footprint::measure::{Measurer, OutputFormat};

/// Most bytes of report one input may produce. A JSON report is as long as the element
/// counts in the stream say (that is its format), so a few bytes of input may legitimately
/// ask for gigabytes: the cap keeps each run short (formatting dominates it) without hiding
/// a decoder hang, since the first pass over the stream runs to its end before any output.
pub const OUTPUT_CAP: usize = 1 << 20;

/// Discards what is written, failing once more than [`OUTPUT_CAP`] bytes came (as a closed
/// pipe would: the decoder must stop with an error).
pub struct CappedSink {
    left: usize,
}

impl Default for CappedSink {
    fn default() -> Self {
        Self { left: OUTPUT_CAP }
    }
}

impl Write for CappedSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.left = self
            .left
            .checked_sub(buf.len())
            .ok_or_else(|| io::Error::other("report longer than the fuzzing cap"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub const FORMATS: [OutputFormat; 4] = [
    OutputFormat::Json,
    OutputFormat::JsonPretty,
    OutputFormat::Tree,
    OutputFormat::Csv,
];

/// Decodes `streams` with `m`'s plan into `format`, as the report thread does.
pub fn report(m: &Measurer, streams: &[Vec<u8>], format: OutputFormat) {
    let _ = m.write_report(streams, format, &mut CappedSink::default());
}
