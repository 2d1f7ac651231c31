//! The clock of the walks' own time: the time stamp counter the stub reads around a walk,
//! turned into nanoseconds against CLOCK_MONOTONIC.

/// Turns the time stamp counter's ticks the stub records into nanoseconds: the counter's
/// rate is measured against CLOCK_MONOTONIC, from one reading taken when the clock is made
/// to one taken at each conversion, so it grows more exact the longer oi-trace runs (an
/// error of a few microseconds in the pair of readings, over the run so far). Assumes the
/// invariant counter of current x86-64 processors (`constant_tsc`, `nonstop_tsc`), the
/// same on every core.
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    anchor: (u64, u64),
}

impl Default for TscClock {
    fn default() -> Self {
        Self::new()
    }
}

impl TscClock {
    pub fn new() -> Self {
        Self {
            anchor: Self::pair(),
        }
    }

    /// (counter, CLOCK_MONOTONIC ns) read together: the counter between two clock readings
    /// at most 5 µs apart (else retried a few times: a preemption between them).
    pub(super) fn pair() -> (u64, u64) {
        let mono = || {
            nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
                t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
            })
        };
        let mut best = (0, 0, u64::MAX);
        for _ in 0..8 {
            let before = mono();
            // SAFETY: rdtsc reads a counter; it has no memory effects.
            let tsc = unsafe { core::arch::x86_64::_rdtsc() };
            let after = mono();
            let spread = after.saturating_sub(before);
            if spread < best.2 {
                best = (tsc, before + spread / 2, spread);
            }
            if spread < 5_000 {
                break;
            }
        }
        (best.0, best.1)
    }

    /// `ticks` in nanoseconds; None until a millisecond has passed since the clock was
    /// made (too short to measure the rate).
    pub fn ns(&self, ticks: u64) -> Option<u64> {
        let (tsc, mono) = Self::pair();
        let elapsed_ns = mono.checked_sub(self.anchor.1)?;
        let elapsed_ticks = tsc.checked_sub(self.anchor.0)?;
        if elapsed_ns < 1_000_000 || elapsed_ticks == 0 {
            return None;
        }
        Some((u128::from(ticks) * u128::from(elapsed_ns) / u128::from(elapsed_ticks)) as u64)
    }
}
