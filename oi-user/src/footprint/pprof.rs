//! Footprint `--pprof`: the last sample's footprint as a pprof profile, one sample per member
//! path with bytes of its own (`this.items[].name`, element and key names folded to `[]` as
//! the tree folds them), `inuse_space/bytes` its exclusive bytes and `inuse_objects/count` the
//! nodes at the path. A path's frames are its prefixes, root first, each named by its path and
//! type, so that `pprof -top` lists the members that hold the most bytes themselves and
//! `-top -cum` the ones that hold the most beneath them (their inclusive size); the total is
//! the sampled roots' size.

use crate::export::pprof::{
    builder::{Builder, Head},
    proto::Profile,
};
use crate::report::{growth::path_text, totals::Totals};

/// The profile of one sample's `totals`; `title` says which sample.
pub fn profile(totals: &Totals, title: &str) -> Profile {
    let mut b = Builder::new();
    totals.walk(|path| {
        let Some(&last) = path.last() else { return };
        let node = &totals.nodes[last];
        let mut frames = Vec::with_capacity(path.len());
        for depth in 1..=path.len() {
            let prefix = &path[..depth];
            let text = path_text(prefix.iter().map(|&i| totals.nodes[i].name.as_str()));
            let ty = &totals.nodes[prefix[depth - 1]].ty;
            let label = if ty.is_empty() {
                text
            } else {
                format!("{text}: {ty}")
            };
            frames.push(b.named_frame(&label));
        }
        frames.reverse();
        b.sample(frames, vec![node.count as i64, node.exclusive as i64]);
    });
    let mut comments = vec![
        format!("oi-trace footprint of {title}"),
        "exact: every byte the walk reached; one sample per member path, its own bytes (cum \
         is the member's inclusive size)"
            .to_string(),
    ];
    if totals.untracked > 0 {
        comments.push(format!(
            "{} bytes beyond the path limit are not in the profile",
            totals.untracked
        ));
    }
    b.finish(Head {
        sample_types: &[("inuse_objects", "count"), ("inuse_space", "bytes")],
        default_sample_type: "inuse_space",
        period_type: ("space", "bytes"),
        period: 1,
        time_nanos: crate::export::pprof::builder::started_ns(std::time::Duration::ZERO),
        duration_nanos: 0,
        comments,
    })
}
