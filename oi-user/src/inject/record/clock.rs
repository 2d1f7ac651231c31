//! The TSC's scale for lifetimes: nanoseconds per tick × 2^32 (`Header::ns_per_tick_q32`),
//! measured once against the monotonic clock. The tracer measures it in its own process and
//! writes it into the header: on x86-64 machines with an invariant TSC (constant rate,
//! synchronized across CPUs) every process reads one clock.

use std::{
    sync::OnceLock,
    time::{Duration, Instant},
};

/// Nanoseconds per TSC tick × 2^32, measured once (20 ms) and kept.
pub fn ns_per_tick_q32() -> u64 {
    static SCALE: OnceLock<u64> = OnceLock::new();
    *SCALE.get_or_init(|| {
        let start = Instant::now();
        let t0 = rdtsc();
        std::thread::sleep(Duration::from_millis(20));
        let ticks = rdtsc().wrapping_sub(t0).max(1);
        let ns = start.elapsed().as_nanos();
        ((ns << 32) / u128::from(ticks)) as u64
    })
}

/// The time-stamp counter, what the wrappers read with `rdtsc`.
pub fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter; every x86-64 CPU has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_scale_turns_ticks_into_the_monotonic_clocks_nanoseconds() {
        let scale = super::ns_per_tick_q32();
        let start = std::time::Instant::now();
        let t0 = super::rdtsc();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let ticks = super::rdtsc() - t0;
        let ns = start.elapsed().as_nanos() as f64;
        let scaled = ((u128::from(ticks) * u128::from(scale)) >> 32) as f64;
        assert!(
            (scaled / ns - 1.0).abs() < 0.05,
            "{scaled} ns by the TSC, {ns} ns"
        );
    }
}
