//! The decoder's passes over one root's stream: the first checks it and computes every
//! inclusive size (`size_root`, or `total_size` alone), the second hands the nodes to a sink
//! (`Sized::print`). A stream that does not decode fails in the first pass, before anything of
//! its root is printed.

use super::*;

/// A root whose first pass succeeded: every size is known and nothing has been printed yet,
/// so a stream that cannot be decoded fails before its root reaches a printer (its place in
/// the output then says so, see `output`).
pub struct Sized<'a> {
    plan: &'a Plan,
    root: NodeId,
    stream: &'a [u8],
    sizes: Vec<u64>,
    statics: Vec<Option<u64>>,
    /// Bytes of this sample in unions that were not walked (opaque: not one member, no
    /// description), found by the first pass.
    pub unions: u64,
}

/// The first pass of [`decode`]: checks the stream and computes the inclusive sizes.
pub fn size_root<'a>(
    plan: &'a Plan,
    root: NodeId,
    stream: &'a [u8],
) -> Result<Sized<'a>, ReportError> {
    let mut statics = vec![None; plan.nodes.len()];
    let mut measure = Decoder::start(plan, stream, &mut statics, true);
    measure.node(root, None)?;
    let sizes = std::mem::take(&mut measure.sizes);
    let unions = measure.unions;
    Ok(Sized {
        plan,
        root,
        stream,
        sizes,
        statics,
        unions,
    })
}

impl Sized<'_> {
    /// The second pass: hands every node to `sink`.
    pub fn print(mut self, sink: &mut dyn Sink) -> Result<(), ReportError> {
        let mut print = Decoder {
            sizes: self.sizes,
            sink: Some(sink),
            ..Decoder::start(self.plan, self.stream, &mut self.statics, true)
        };
        print.node(self.root, None)?;
        Ok(())
    }
}

/// Total size of one root (first pass only); for tests and summaries.
pub fn total_size(plan: &Plan, root: NodeId, stream: &[u8]) -> Result<u64, ReportError> {
    let mut statics = vec![None; plan.nodes.len()];
    let mut d = Decoder::start(plan, stream, &mut statics, false);
    d.node(root, None)
}
