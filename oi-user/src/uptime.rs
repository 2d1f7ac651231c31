//! How long this oi-trace has been running, for the lines that report start-up time ("armed
//! 412 ms after start"): the time a user waits, from the command to the first event counted.
//! `mark` is called first thing in `main`; before it (in tests), the first call starts the
//! clock.

use std::{
    sync::OnceLock,
    time::{Duration, Instant},
};

static START: OnceLock<Instant> = OnceLock::new();

/// Starts the clock (only the first call counts).
pub fn mark() {
    START.get_or_init(Instant::now);
}

/// Time since [`mark`].
pub fn elapsed() -> Duration {
    START.get_or_init(Instant::now).elapsed()
}
