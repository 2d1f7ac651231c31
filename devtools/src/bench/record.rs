//! The `record` figures of `cargo xtask bench`: what the in-target allocation wrappers
//! (`inject::record`) add to a malloc(64) + free pair, run in this process on libc's own
//! functions against the same pairs through the wrappers (`inject::record::local::pair_cost`:
//! alternating rounds, the best CPU time per pair of each; the wrappers' counts are checked
//! against the pairs run), on one thread and on four at once, without sampling and with the
//! default sampling of `allocs --mechanism inject` (a sample every 512 KiB on average, its
//! stack copied into the ring). Reported, no goal: the goal is on the `allocs` rows.

use anyhow::{Context as _, Result};
use oi_trace::inject::record::{Sampling, local::pair_cost};

use super::Figure;

pub fn run(quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    let pairs: u64 = if quick { 500_000 } else { 5_000_000 };
    for (sampling, period, how) in [
        (Sampling::Off, 0, ""),
        (Sampling::Bytes, 512 << 10, ", sampled every 512 KiB"),
    ] {
        for threads in [1, 4] {
            let c = pair_cost(threads, pairs, sampling, period)
                .with_context(|| format!("measuring a wrapped pair on {threads} thread(s)"))?;
            figures.push(Figure {
                name: format!(
                    "record: a malloc+free pair through the in-target wrappers{how}, vs libc's, \
                 {threads} thread(s)"
                ),
                value: c.wrapped_ns,
                baseline: c.direct_ns,
                unit: "ns",
                goal: "report".into(),
                pass: None,
            });
        }
    }
    Ok(())
}
