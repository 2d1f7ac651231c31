//! Walking at a sample: each argument's object walked by the interpreter (on a thread with a
//! stack deep enough for the deepest walk) into its stream, and the streams decoded into the
//! report. Never writes to the target.

use super::*;

impl Measurer {
    /// Walks every requested argument of one sample and writes the result to `out`.
    ///
    /// The walk and the decoding recurse as deep as the object nests (a chased linked list
    /// of 100,000 nodes is 100,000 levels), so they run on a thread with a large stack; the
    /// output streams back to `out` in chunks.
    pub fn measure(
        &self,
        regs: &EntryRegs,
        load_bias: u64,
        mem: &dyn MemoryReader,
        format: OutputFormat,
        out: &mut dyn Write,
    ) -> Result<(), MeasureError> {
        let regs = *regs;
        on_walk_thread(out, move |w| {
            self.measure_here(&regs, load_bias, mem, format, w)
        })
    }

    /// [`Self::measure`] on the calling thread.
    pub fn measure_here(
        &self,
        regs: &EntryRegs,
        load_bias: u64,
        mem: &dyn MemoryReader,
        format: OutputFormat,
        out: &mut dyn Write,
    ) -> Result<(), MeasureError> {
        // Addresses in registers are runtime addresses already; the bias only matters for
        // ELF addresses (vtable symbols, polymorphic-inheritance).
        let mut streams = Vec::with_capacity(self.args.len());
        for a in &self.args {
            streams.push(self.walk_arg(a, regs, load_bias, mem)?);
        }
        self.write_report(&streams, format, out)
    }

    /// Walks every requested argument (the interpreter, through `mem`) and returns their
    /// streams, on a thread with a stack deep enough for the deepest walk. Of several
    /// arguments, each is walked on its own: one whose walk fails is that root's `Err` and
    /// the others are still measured; a single argument's failure is the error.
    pub fn walk_streams(
        &self,
        regs: &EntryRegs,
        load_bias: u64,
        mem: &dyn MemoryReader,
    ) -> Result<Vec<RootStream>, MeasureError> {
        let walked: Vec<Result<Vec<u8>, MeasureError>> = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("oi-walk".into())
                .stack_size(WALK_STACK)
                .spawn_scoped(scope, || {
                    self.args
                        .iter()
                        .map(|a| self.walk_arg(a, regs, load_bias, mem))
                        .collect()
                })
                // A panic in the walk is a bug: let it surface as one.
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .map_err(|e| MeasureError::Report(e.into()))
        })?;
        if walked.len() == 1 {
            return walked.into_iter().map(|w| w.map(Ok)).collect();
        }
        Ok(walked
            .into_iter()
            .map(|w| w.map_err(|e| e.to_string()))
            .collect())
    }

    /// Writes the result of one sample from its per-argument streams, however they were
    /// produced (interpreter or JIT walker). Recurses as deep as the object nests: call it
    /// on a thread with a stack of [`WALK_STACK`].
    pub fn write_report(
        &self,
        streams: &[Vec<u8>],
        format: OutputFormat,
        out: &mut dyn Write,
    ) -> Result<(), MeasureError> {
        let mut writer = SampleWriter::new(format.report_format());
        let streams: Vec<RootStream> = streams.iter().cloned().map(Ok).collect();
        self.report(&streams, &mut writer, out, None)?;
        Ok(())
    }

    /// [`Self::write_report`] through a writer that lasts over the samples of a run;
    /// `totals`, if given, is filled with the sample summed by member path in the same pass.
    /// Returns the roots printed as failed (`label: why`; see `SampleWriter::write`).
    pub fn report(
        &self,
        streams: &[RootStream],
        writer: &mut SampleWriter,
        out: &mut dyn Write,
        totals: Option<&mut Totals>,
    ) -> Result<Vec<String>, MeasureError> {
        let labels: Vec<String> = self.args.iter().map(ArgPlan::label).collect();
        let roots: Vec<Root<'_>> = self
            .args
            .iter()
            .zip(&labels)
            .zip(streams)
            .map(|((a, label), s)| Root {
                label,
                node: a.root,
                stream: s.as_deref().map_err(String::as_str),
            })
            .collect();
        Ok(writer.write(&self.plan, &roots, out, totals)?)
    }

    /// Per-argument streams (for tests comparing backends, and for benchmarks).
    pub fn walk_arg_streams(
        &self,
        regs: &EntryRegs,
        load_bias: u64,
        mem: &dyn MemoryReader,
    ) -> Result<Vec<(NodeId, Vec<u8>)>, MeasureError> {
        self.args
            .iter()
            .map(|a| Ok((a.root, self.walk_arg(a, regs, load_bias, mem)?)))
            .collect()
    }

    pub(super) fn walk_arg(
        &self,
        a: &ArgPlan,
        regs: &EntryRegs,
        bias: u64,
        mem: &dyn MemoryReader,
    ) -> Result<Vec<u8>, MeasureError> {
        let walk_err = |source| MeasureError::Walk {
            arg: a.name.clone(),
            source,
        };
        let stream = match self.locate_arg(a, regs, bias, mem)? {
            Located::Memory(addr) => crate::interp::run(&self.plan, a.root, addr, mem, true, bias),
            Located::Registers(bytes) => {
                let overlay = Overlay {
                    local: LocalReader::new(REGISTER_OBJECT, bytes),
                    inner: mem,
                };
                crate::interp::run(&self.plan, a.root, REGISTER_OBJECT, &overlay, false, bias)
            }
            Located::Unavailable => return Ok(Vec::new()),
        };
        stream.map_err(walk_err)
    }
}

/// Sends written bytes to the thread that owns the real output.
struct ChannelWriter(std::sync::mpsc::SyncSender<Vec<u8>>);

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .send(buf.to_vec())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "output closed"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `work` on a thread with a stack deep enough for the deepest walk, streaming what it
/// writes to `out` in chunks.
pub(super) fn on_walk_thread<'a>(
    out: &mut dyn Write,
    work: impl FnOnce(&mut dyn Write) -> Result<(), MeasureError> + Send + 'a,
) -> Result<(), MeasureError> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(16);
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("oi-walk".into())
            .stack_size(WALK_STACK)
            .spawn_scoped(scope, move || {
                let mut w = std::io::BufWriter::with_capacity(1 << 16, ChannelWriter(tx));
                work(&mut w)?;
                w.flush().map_err(|e| MeasureError::Report(e.into()))
            })
            .map_err(|e| MeasureError::Report(e.into()))?;
        let mut write_error = None;
        for chunk in rx {
            if let Err(e) = out.write_all(&chunk) {
                // Dropping the receiver makes the worker's next write fail and stop.
                write_error = Some(e);
                break;
            }
        }
        let result = worker
            .join()
            // A panic in the walk is a bug: let it surface as one.
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        match write_error {
            Some(e) => Err(MeasureError::Report(e.into())),
            None => result,
        }
    })
}
