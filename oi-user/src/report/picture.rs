//! `--svg FILE` and `--folded FILE`: a footprint as an icicle picture, through the one
//! picture writer of every tool ([`super::flame`], inferno). Each member path of a sample
//! ([`Totals`]) is a frame labelled `name: type` (`[] × 1,000: std::string` for a path
//! holding many elements), weighted by its exclusive bytes: a frame is as wide as the bytes
//! of its subtree, and inferno's tooltip gives them exactly, with their share of the total.
//!
//! Pure: a sample's totals in, files out.

use std::io::Write;

use super::flame::{Folded, Picture};
use super::totals::Totals;
use super::tree::thousands;

/// The stacks of one sample: every path with bytes of its own, as frames from the root.
pub fn folded(totals: &Totals) -> Folded {
    let mut f = Folded::new();
    totals.walk(|path| {
        let frames: Vec<String> = path.iter().map(|&i| label(totals, i)).collect();
        if let Some(&last) = path.last() {
            f.add(&frames, totals.nodes[last].exclusive);
        }
    });
    f
}

fn label(totals: &Totals, i: usize) -> String {
    let n = &totals.nodes[i];
    let name = if n.count > 1 {
        format!("{} × {}", n.name, thousands(n.count))
    } else {
        n.name.clone()
    };
    if n.ty.is_empty() {
        name
    } else {
        format!("{name}: {}", n.ty)
    }
}

/// Writes the folded text to `out`.
pub fn write_folded(totals: &Totals, out: impl Write) -> std::io::Result<()> {
    folded(totals).write_to(out)
}

/// Draws the sample as an icicle graph (roots on top, width = bytes) into `out`.
pub fn write_svg(totals: &Totals, title: &str, out: impl Write) -> std::io::Result<()> {
    let subtitle = "width: bytes; hover for exact sizes, click to zoom";
    folded(totals).write_svg_to(
        out,
        &Picture {
            title,
            subtitle: Some(subtitle),
            unit: "bytes",
            icicle: true,
        },
    )
}
