//! The `record` figures of `cargo xtask bench`: what the in-target allocation wrappers
//! (`inject::record`) add to a malloc(64) + free pair, run in this process on libc's own
//! functions against the same pairs through the wrappers (`inject::record::local::pair_cost`:
//! alternating rounds, the best CPU time per pair of each; the wrappers' counts are checked
//! against the pairs run), on one thread and on four at once. Reported, no goal yet: the
//! wrappers are not attached to a target until the in-target hooks land.

use anyhow::{Context as _, Result};
use oi_trace::inject::record::local::pair_cost;

use super::Figure;

pub fn run(quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    let pairs: u64 = if quick { 500_000 } else { 5_000_000 };
    for threads in [1, 4] {
        let c = pair_cost(threads, pairs)
            .with_context(|| format!("measuring a wrapped pair on {threads} thread(s)"))?;
        figures.push(Figure {
            name: format!(
                "record: a malloc+free pair through the in-target wrappers, vs libc's, \
                 {threads} thread(s)"
            ),
            value: c.wrapped_ns,
            baseline: c.direct_ns,
            unit: "ns",
            goal: "report".into(),
            pass: None,
        });
    }
    Ok(())
}
