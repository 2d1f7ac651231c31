//! One measurement on the calling thread: the compiled walker on the object (contained by
//! `guard`), the interpreter when the walker faults or finds the object corrupt, then the
//! `report` decoder, exactly as oi-trace decodes a sample. A size alone needs no decoding:
//! the walker is compiled with sizes and adds up the total the decoder would find.
//!
//! The steady state of a size ([`size_steady`]) is the optimistic walker of sizes entered
//! with a call on the caller's stack (`guard::run_direct`), with its frame on that stack:
//! no visited-set table, no buffer, no thread-local of this library, no system call, no
//! allocation. Everything else (the first call, reports, objects the optimistic walker
//! cannot do) uses what each thread keeps between calls (a walk stack, the visited-set
//! table, an output buffer, the walker's frame and its generation counter), so that those
//! calls too cost the walk and the decoding and nothing else. Never writes to the measured
//! object.

use std::cell::RefCell;
use std::ptr;
use std::sync::atomic::Ordering;

use oi_trace::footprint::measure::{OutputFormat, WALK_STACK};
use oi_trace::interp::RemoteReader;
use oi_trace::jit::{self, RECOMMENDED_STACK, SCRATCH_BYTES, WalkFrame};
use oi_trace::report;

use crate::abi::{NOT_MEASURED, OilSteady};
use crate::guard::{self, STATUS_FAULT, ThreadState, WalkStack};
use crate::resolve::{Compiled, Walker};
use crate::{Error, Format};

/// Output buffer a thread starts with, in bytes (grown to what a walk needs, then kept).
const FIRST_OUT_BYTES: usize = 64 << 10;

/// What one thread keeps between measurements.
struct Env {
    stack: WalkStack,
    /// The visited-set table (`SCRATCH_BYTES`, zero pages until touched).
    scratch: Scratch,
    out: Vec<u8>,
    /// The walker's frame, kept so that a call sets only the fields it uses.
    frame: WalkFrame,
    /// The walker's generation tag for the scratch table, kept between calls.
    generation: u64,
}

/// An anonymous mapping: zeroed by the kernel and only the slots a walk touches cost memory.
struct Scratch(*mut libc::c_void);

impl Scratch {
    fn new() -> Result<Self, Error> {
        // SAFETY: a fresh private anonymous mapping owned by the value.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                SCRATCH_BYTES as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::Internal(format!(
                "cannot map the walk's visited-set table: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Self(p))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no walk runs (the Env is borrowed by one).
        unsafe {
            libc::munmap(self.0, SCRATCH_BYTES as usize);
        }
    }
}

impl Env {
    fn new() -> Result<Self, Error> {
        Ok(Self {
            stack: WalkStack::new(WALK_STACK).map_err(|e| Error::Internal(e.to_string()))?,
            scratch: Scratch::new()?,
            out: vec![0; FIRST_OUT_BYTES],
            frame: WalkFrame::default(),
            generation: 0,
        })
    }
}

thread_local! {
    static ENV: RefCell<Option<Env>> = const { RefCell::new(None) };
}

/// What a measurement produces.
pub enum Output {
    Size(u64),
    Text(String),
}

/// Runs `f` on this thread's walk stack (building a walker recurses as deep as the type
/// nests, and the calling thread's own stack may be small).
pub fn on_walk_stack<R>(f: impl FnOnce() -> Result<R, Error>) -> Result<R, Error> {
    ENV.with(|cell| {
        let mut guard = cell.try_borrow_mut().map_err(|_| Error::Reentrant)?;
        if guard.is_none() {
            *guard = Some(Env::new()?);
        }
        let env = guard
            .as_mut()
            .ok_or_else(|| Error::Internal("no walk environment".into()))?;
        guard::on_stack(&mut env.stack, f)
    })
}

/// The inclusive size of the object at `obj`: the steady state ([`size_steady`]), else the
/// first call (which compiles the optimistic walker and tries it), else the exact walker
/// through [`measure`].
pub fn size(c: &Compiled, obj: usize) -> Result<u64, Error> {
    if obj == 0 {
        return Err(Error::Null);
    }
    if let Some(total) = guard::with_thread_state(|st| size_steady(c, obj, st)) {
        return Ok(total);
    }
    if !c.optimistic_tried() {
        on_walk_stack(|| {
            c.compile_optimistic();
            Ok(())
        })?;
        if let Some(total) = guard::with_thread_state(|st| size_steady(c, obj, st)) {
            return Ok(total);
        }
    }
    match measure(c, obj, None)? {
        Output::Size(s) => Ok(s),
        Output::Text(_) => Err(Error::Internal("a report instead of a size".into())),
    }
}

/// The steady state of `oil::size`: the optimistic walker, compiled already, on the caller's
/// stack, its inputs and results in registers (no frame). `None` for anything but a
/// finished walk (not compiled yet, no room on this stack, a fault, a corrupt object, a
/// shared pointee), which [`size`] then handles; a shared pointee or a type that nests too
/// deep for the caller's stack take the exact walker from then on.
#[inline]
pub fn size_steady(c: &Compiled, obj: usize, st: &mut ThreadState) -> Option<u64> {
    let OilSteady { status, size } = walk_steady(c, obj, st);
    match status {
        jit::STATUS_DONE => Some(size),
        jit::STATUS_REVISIT | jit::STATUS_STACK => {
            c.give_up_optimistic();
            if status == jit::STATUS_STACK {
                c.deep.store(true, Ordering::Relaxed);
            }
            None
        }
        _ => None,
    }
}

/// The optimistic walker on `obj`, on the caller's stack, as it returns: `(STATUS_DONE,
/// total)`, or another status (a fault, a shared pointee...), or [`NOT_MEASURED`] (not
/// compiled yet, given up, no room on this stack). Decides nothing: [`size_steady`] does.
/// The usual call is a few compares and the walk, entered last (no frame of its own); a
/// thread's first walk, and every walk that is due to check the fault handler, take
/// [`walk_steady_checked`].
#[inline]
pub fn walk_steady(c: &Compiled, obj: usize, st: &mut ThreadState) -> OilSteady {
    let entry = c.steady_entry.load(Ordering::Acquire);
    if entry == 0 || obj == 0 {
        return NOT_MEASURED;
    }
    // SAFETY: `entry` is the optimistic walker's, registered and alive for the life of the
    // process (`Compiled` is never freed).
    match unsafe { guard::run_direct_optimistic(st, entry, obj as u64, c.bias) } {
        Some((status, size)) => OilSteady { status, size },
        None => walk_steady_checked(c, entry, obj, st),
    }
}

/// [`walk_steady`] after reading this thread's stack bounds (its first walk) and checking
/// the fault handler (when due).
#[cold]
#[inline(never)]
fn walk_steady_checked(c: &Compiled, entry: usize, obj: usize, st: &mut ThreadState) -> OilSteady {
    if guard::check_handlers(st).is_err() {
        return NOT_MEASURED;
    }
    // SAFETY: as in `walk_steady`.
    match unsafe { guard::run_direct_optimistic(st, entry, obj as u64, c.bias) } {
        Some((status, size)) => OilSteady { status, size },
        None => NOT_MEASURED,
    }
}

/// The frame of a one-root walk of `obj` into this thread's buffers (no heap ranges yet).
fn start_frame(env: &mut Env, c: &Compiled, obj: usize) {
    let frame = &mut env.frame;
    frame.out = env.out.as_mut_ptr() as u64;
    frame.out_len = env.out.len() as u64;
    frame.scratch = env.scratch.0 as u64;
    frame.scratch_len = SCRATCH_BYTES;
    frame.nargs = 1;
    frame.unseeded = 0;
    frame.bias = c.bias;
    frame.args[0] = obj as u64;
    frame.heaps_len = 0;
}

/// Measures the object at `obj` with `c`: its inclusive size, or its report in `format`.
pub fn measure(c: &Compiled, obj: usize, format: Option<Format>) -> Result<Output, Error> {
    if obj == 0 {
        return Err(Error::Null);
    }
    ENV.with(|cell| {
        let mut guard = cell.try_borrow_mut().map_err(|_| Error::Reentrant)?;
        if guard.is_none() {
            *guard = Some(Env::new()?);
        }
        let env = guard
            .as_mut()
            .ok_or_else(|| Error::Internal("no walk environment".into()))?;
        measure_in(env, c, obj, format)
    })
}

fn measure_in(
    env: &mut Env,
    c: &Compiled,
    obj: usize,
    format: Option<Format>,
) -> Result<Output, Error> {
    let report = format.is_some();
    let walker = match c.walker(report) {
        Some(w) => w,
        None => guard::on_stack(&mut env.stack, || c.compile_walker(report)),
    }
    .as_ref()
    .map_err(Clone::clone)?;
    let native = walk_native(env, c, walker, obj)?;
    let Env { stack, out, .. } = env;
    match native {
        Some((_, total)) if !report => Ok(Output::Size(total)),
        Some((bytes, _)) => {
            let stream = &out[8..8 + bytes];
            guard::on_stack(stack, || decode(c, stream, format))
        }
        None => {
            // The walker faulted or found the object corrupt: the interpreter reads through
            // process_vm_readv, which fails with EFAULT where a load would fault, and says
            // which read failed (or succeeds, if another thread repaired the object).
            let mem = RemoteReader::new(std::process::id() as i32);
            guard::on_stack(stack, || {
                let stream = c
                    .measurer
                    .walk_object(obj as u64, c.bias, &mem)
                    .map_err(|e| Error::Walk {
                        ty: c.name.clone(),
                        addr: obj as u64,
                        reason: walk_reason(&e),
                    })?;
                decode(c, &stream, format)
            })
        }
    }
}

/// The interpreter's reason, without the probe wording (`walking `arg0` failed: `).
fn walk_reason(e: &oi_trace::footprint::measure::MeasureError) -> String {
    match e {
        oi_trace::footprint::measure::MeasureError::Walk { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// Runs the compiled walker; `Some((n, total))`: the stream is `out[8..8 + n]` and the
/// object's inclusive size `total`; `None`: it faulted or found the object corrupt (ask the
/// interpreter).
///
/// The walk runs on the caller's own stack when it has room (`guard::run_direct`, a call),
/// else on this thread's walk stack; a type that ran out of room there once goes to the walk
/// stack from then on (`Compiled::deep`).
fn walk_native(
    env: &mut Env,
    c: &Compiled,
    walker: &Walker,
    obj: usize,
) -> Result<Option<(usize, u64)>, Error> {
    start_frame(env, c, obj);
    let frame = &mut env.frame;
    if c.heap_blocks {
        // The interpreter this falls back to reads the same ranges from our maps.
        frame.set_heaps(&oi_trace::interp::heap::ranges_of(std::process::id() as i32));
    }
    loop {
        frame.generation = env.generation;
        let internal = |e: guard::GuardError| Error::Internal(e.to_string());
        let direct = if c.deep.load(Ordering::Relaxed) || !walker.direct {
            None
        } else {
            let entry = walker.local.entry_address();
            // SAFETY: the walker's code is registered and alive while `c` is (never freed);
            // the frame and its buffers are this thread's and outlive the call.
            guard::with_thread_state(|st| unsafe { guard::run_direct(st, entry, frame) })
                .map_err(internal)?
        };
        let ran_direct = direct.is_some();
        let (status, _fault_addr) = match direct {
            Some(r) => r,
            None => {
                frame.stack_len = RECOMMENDED_STACK;
                guard::run_walker(&mut env.stack, &walker.local, frame).map_err(internal)?
            }
        };
        match status {
            jit::STATUS_DONE => {
                env.generation = frame.generation;
                let used = frame.out_used as usize;
                if used == 0 {
                    // The walker of sizes alone writes no stream.
                    return Ok(Some((0, frame.total)));
                }
                let header = env.out.get(..used.min(env.out.len())).unwrap_or_default();
                return match header.first_chunk::<8>().map(|c| u64::from_le_bytes(*c)) {
                    Some(n) if n.checked_add(8) == Some(used as u64) => {
                        Ok(Some((n as usize, frame.total)))
                    }
                    _ => Err(Error::Internal(format!(
                        "the walker's output is malformed ({used} bytes)"
                    ))),
                };
            }
            jit::STATUS_FULL => {
                env.generation = frame.generation;
                let need = frame.out_used as usize;
                if need <= env.out.len() {
                    return Err(Error::Internal(
                        "the walker asked for no more output".into(),
                    ));
                }
                env.out.resize(need, 0);
                frame.out = env.out.as_mut_ptr() as u64;
                frame.out_len = env.out.len() as u64;
            }
            jit::STATUS_STACK if ran_direct => {
                // Deeper than the caller's stack allows: again on the walk stack, and this
                // type's walks go there from now on. The cut walk's tags are skipped.
                c.deep.store(true, Ordering::Relaxed);
                env.generation = env.generation.max(frame.generation) + jit::MAX_ROOTS as u64;
            }
            STATUS_FAULT | jit::STATUS_CORRUPT => {
                // A walk cut short leaves its generation's tags in the table and did not
                // write the generation back: skip past every tag it may have used.
                env.generation = env.generation.max(frame.generation) + jit::MAX_ROOTS as u64;
                return Ok(None);
            }
            _ => {
                return Err(Error::Internal(jit::check_status(frame).err().map_or_else(
                    || format!("walker status {status}"),
                    |e| e.to_string(),
                )));
            }
        }
    }
}

fn decode(c: &Compiled, stream: &[u8], format: Option<Format>) -> Result<Output, Error> {
    let report_err = |e: &dyn std::fmt::Display| Error::Internal(format!("cannot decode: {e}"));
    let Some(format) = format else {
        return report::total_size(c.measurer.plan(), c.root, stream)
            .map(Output::Size)
            .map_err(|e| report_err(&e));
    };
    let format = match format {
        Format::Json => OutputFormat::Json,
        Format::JsonPretty => OutputFormat::JsonPretty,
        Format::Tree => OutputFormat::Tree,
    };
    let mut out = Vec::new();
    c.measurer
        .write_report(&[stream.to_vec()], format, &mut out)
        .map_err(|e| report_err(&e))?;
    String::from_utf8(out)
        .map(Output::Text)
        .map_err(|e| report_err(&e))
}
