//! Quiescent patching: every function's entry becomes a `jmp rel32` to its wrapper in the
//! segment, all written while every thread of the process is stopped once (not once per
//! function), and all undone the same way.
//!
//! Patch: stop all threads; a function with a thread's RIP strictly inside the bytes to
//! replace is left alone for this round (its threads run on and the round is retried a few
//! times, then it is refused with [`Refusal::ThreadInside`]); the bytes still equal what was
//! analysed, or the function is refused ([`Refusal::Changed`]); the jump is written through
//! `/proc/PID/mem`, which reaches the private read-only code pages as a debugger's
//! breakpoint does; all threads run on. Threads created later run the patched code.
//!
//! Unpatch ([`undo`], also what the guardian runs for a killed oi-trace): stop all; put every
//! original byte back and read it back; move any thread inside a relocated prologue to the
//! matching original instruction; put back every return address a call stub hooked
//! (`spans::undo`, again in every later round); run on. Then wait, at most [`DRAIN`], until no
//! thread is inside a wrapper (the data part's [`InFlight`] words add up to zero); stop all
//! again; if no RIP lies in the segment and they are still zero, unmap each part, else run on
//! and retry.
//! Threads that never leave (one parked forever inside the allocator a wrapper called) keep
//! the segment mapped: the code is already the original, so the target is safe; we say so in
//! one line on stderr. Never unmaps under a thread.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{
    relocate::{PATCH_LEN, Refusal, Relocated},
    segment::{self, Part, Segment, SegmentError},
    spans::undo::{self as returns, Returns},
};
use crate::{
    error::Error,
    inferior::{
        Tracer,
        bootstrap::{self, Bootstrap},
        hijack::Held,
        remote::{self, HeldSignals, RemoteError},
    },
};

/// How long unpatching waits for threads to leave the wrappers before it leaves the segment.
pub const DRAIN: Duration = Duration::from_secs(5);
/// Rounds a patch retries a function that a thread is inside.
const PATCH_ROUNDS: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error(transparent)]
    Segment(#[from] SegmentError),
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error("{0}")]
    Stop(#[from] Error),
    #[error("the bytes at {addr:#x} are not the originals after unpatching")]
    NotRestored { addr: u64 },
}

/// One function to patch: its prologue relocated into the segment, and the code its entry
/// jumps to (the wrapper, which calls or jumps to `relocated.at` to run the original).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    pub relocated: Relocated,
    pub wrapper: u64,
}

impl Site {
    pub fn entry(&self) -> u64 {
        self.relocated.entry
    }

    /// The patch: `jmp wrapper`, then `int3` over the rest of the replaced instructions
    /// (never executed: no branch lands there, no thread was there).
    fn jump(&self) -> Vec<u8> {
        let rel = self.wrapper.wrapping_sub(self.entry() + PATCH_LEN as u64) as i64;
        let mut bytes = vec![0xe9];
        bytes.extend((rel as i32).to_le_bytes());
        bytes.resize(self.relocated.len(), 0xcc);
        bytes
    }

    /// Whether the jump reaches the wrapper (the segment was placed for that).
    fn reachable(&self) -> bool {
        let rel = i128::from(self.wrapper) - i128::from(self.entry() + PATCH_LEN as u64);
        i32::try_from(rel).is_ok()
    }

    /// Strictly inside the bytes the patch replaces (at the entry, a thread just runs the
    /// patch or the original, whichever is there).
    fn inside(&self, rip: u64) -> bool {
        rip > self.entry() && rip < self.entry() + self.relocated.len() as u64
    }
}

/// All it takes to undo an injection in one process, and nothing more: what the guardian
/// is sent before the first byte is patched.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Undo {
    pub pid: i32,
    /// The sites patched (or about to be).
    pub sites: Vec<Site>,
    pub parts: Vec<Part>,
    /// Where the wrappers count the threads inside them, if they do.
    pub in_flight: Vec<InFlight>,
    /// Where call stubs keep the shadow stacks of hooked return addresses
    /// (`spans::undo::Returns`): put back before the exit stub may go.
    #[serde(default)]
    pub returns: Vec<Returns>,
}

/// Words of the target that add up to the number of threads inside the wrappers: `count`
/// words, `stride` bytes apart, from `addr` (one shared word, or one word per thread slot, so
/// that the wrappers need no shared cache line). The bounds are the tracer's, never read back
/// from the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub addr: u64,
    pub count: u64,
    pub stride: u64,
}

impl InFlight {
    /// The most bytes one [`Self::sum`] reads (16 MiB: 65536 slots of 256 bytes).
    const MAX_SPAN: u64 = 16 << 20;

    /// The sum of the words in `pid`, or `None` when they cannot be read (the process is gone,
    /// or the part was never mapped: nobody is inside). A span beyond the bound counts as
    /// inside: the segment is then never unmapped.
    fn sum(&self, pid: i32) -> Option<u64> {
        if self.count == 0 {
            return Some(0);
        }
        // From the first word to the end of the last one.
        let span = (self.count - 1)
            .saturating_mul(self.stride)
            .saturating_add(8);
        if self.stride < 8 || span > Self::MAX_SPAN {
            return Some(1);
        }
        let mut bytes = vec![0u8; span as usize];
        remote::read_memory(pid, self.addr, &mut bytes).ok()?;
        Some(
            bytes
                .chunks(self.stride as usize)
                .filter_map(|w| Some(u64::from_le_bytes(w.get(..8)?.try_into().ok()?)))
                .fold(0, u64::saturating_add),
        )
    }
}

impl Undo {
    /// `plans` of one process as one plan: undone with one stop of its threads.
    pub fn merged(plans: &[&Undo]) -> Option<Self> {
        let first = plans.first()?;
        Some(Self {
            pid: first.pid,
            sites: plans.iter().flat_map(|p| p.sites.iter().cloned()).collect(),
            parts: plans.iter().flat_map(|p| p.parts.iter().copied()).collect(),
            in_flight: plans
                .iter()
                .flat_map(|p| p.in_flight.iter().copied())
                .collect(),
            returns: plans
                .iter()
                .flat_map(|p| p.returns.iter().copied())
                .collect(),
        })
    }

    /// Which segment of which process the plan undoes: (pid, address of its first part).
    pub fn key(&self) -> (i32, u64) {
        (self.pid, self.parts.first().map_or(0, |p| p.addr))
    }
}

/// Every thread of a process stopped, for as long as this lives; all run on when it drops,
/// with any signal that arrived meanwhile delivered again.
pub struct Stopped<'a> {
    tracer: &'a mut Tracer,
    pid: i32,
    held: Vec<(i32, HeldSignals)>,
}

impl<'a> Stopped<'a> {
    pub fn new(tracer: &'a mut Tracer, pid: i32) -> Result<Self, Error> {
        tracer.stop_all(pid)?;
        Ok(Self {
            tracer,
            pid,
            held: Vec::new(),
        })
    }

    /// Each stopped thread and its registers.
    fn threads(&self) -> Vec<(i32, remote::Regs)> {
        self.tracer
            .threads_of(self.pid)
            .into_iter()
            .filter_map(|tid| Some((tid, remote::get_regs(tid).ok()?)))
            .collect()
    }

    /// Runs `f` with one thread held for remote system calls (the leader when it lives).
    fn held<R>(
        &mut self,
        bootstrap: &mut Option<Bootstrap>,
        f: impl FnOnce(&mut Held) -> R,
    ) -> Result<R, RemoteError> {
        let threads = self.tracer.threads_of(self.pid);
        let tid = if threads.contains(&self.pid) {
            self.pid
        } else {
            *threads.first().ok_or(RemoteError::Gone(self.pid))?
        };
        let mut h = Held::begin(self.pid, tid, *bootstrap)?;
        *bootstrap = Some(h.bootstrap());
        let r = f(&mut h);
        self.held.push((tid, h.restore()?));
        Ok(r)
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        self.tracer.resume_all(self.pid);
        for (tid, signals) in &mut self.held {
            signals.redeliver(self.pid, *tid);
        }
    }
}

/// A segment in one process and the functions patched to reach it.
#[derive(Debug)]
pub struct Injection {
    segment: Segment,
    patched: Vec<Site>,
    bootstrap: Option<Bootstrap>,
    /// Where in the data part the wrappers count the threads inside them (`addr` an offset).
    in_flight: Option<InFlight>,
    /// The shadow stacks of the call stubs, if any hook returns into this segment.
    returns: Option<Returns>,
}

/// How an unpatch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpatched {
    /// Bytes restored and the segment unmapped.
    Clean,
    /// Bytes restored; threads did not leave our code within [`DRAIN`], so the segment
    /// stays mapped (unused from now on).
    SegmentLeft,
}

impl Injection {
    /// Stops every thread of `pid`, maps a segment near every span of `near` (see
    /// `Segment::create`), lets them run on. `before` is told the undo plan (the parts, no
    /// sites yet) before anything is mapped.
    pub fn create(
        tracer: &mut Tracer,
        pid: i32,
        near: &[(u64, u64)],
        (code_len, data_len): (u64, u64),
        before: &mut dyn FnMut(&Undo),
    ) -> Result<Self, InjectError> {
        let mut bootstrap = None;
        let mut stopped = Stopped::new(tracer, pid)?;
        let mut announce = |parts: &[Part]| {
            before(&Undo {
                pid,
                sites: Vec::new(),
                parts: parts.to_vec(),
                in_flight: Vec::new(),
                returns: Vec::new(),
            })
        };
        let segment = stopped.held(&mut bootstrap, |h| {
            Segment::create(h, near, code_len, data_len, &mut announce)
        })??;
        Ok(Self {
            segment,
            patched: Vec::new(),
            bootstrap,
            in_flight: None,
            returns: None,
        })
    }

    pub fn segment(&mut self) -> &mut Segment {
        &mut self.segment
    }

    pub fn segment_ref(&self) -> &Segment {
        &self.segment
    }

    pub fn pid(&self) -> i32 {
        self.segment.pid()
    }

    /// The wrappers keep the count of threads inside them at this offset of the data part.
    pub fn set_in_flight(&mut self, offset: usize) {
        self.set_in_flight_words(offset, 1, 8);
    }

    /// The wrappers keep the count of threads inside them in `count` words, `stride` bytes
    /// apart, from this offset of the data part (one per thread slot).
    pub fn set_in_flight_words(&mut self, offset: usize, count: u64, stride: u64) {
        self.in_flight = Some(InFlight {
            addr: offset as u64,
            count,
            stride,
        });
    }

    /// Call stubs hook return addresses into this segment: unpatching puts them back first.
    pub fn set_returns(&mut self, returns: Returns) {
        self.returns = Some(returns);
    }

    pub fn patched(&self) -> &[Site] {
        &self.patched
    }

    /// What undoing everything takes, as it stands (plus `pending` sites about to be patched).
    pub fn undo_plan(&self, pending: &[Site]) -> Undo {
        Undo {
            pid: self.pid(),
            sites: self.patched.iter().chain(pending).cloned().collect(),
            parts: self.segment.parts().to_vec(),
            in_flight: self
                .in_flight
                .map(|w| InFlight {
                    addr: self.segment.data_addr() + w.addr,
                    ..w
                })
                .into_iter()
                .collect(),
            returns: self.returns.into_iter().collect(),
        }
    }

    /// Seals the segment's code (first time) and patches `sites` with all threads stopped
    /// once per round; `before` is told the undo plan before any byte is written (the
    /// guardian's copy). One result per site, in order.
    pub fn patch(
        &mut self,
        tracer: &mut Tracer,
        sites: &[Site],
        before: &mut dyn FnMut(&Undo),
    ) -> Result<Vec<Result<(), Refusal>>, InjectError> {
        let pid = self.pid();
        let mut results: Vec<Option<Result<(), Refusal>>> = sites
            .iter()
            .map(|s| {
                (!s.reachable()).then_some(Err(Refusal::Unrelocatable {
                    why: format!("the wrapper at {:#x} is out of a jump's reach", s.wrapper),
                }))
            })
            .collect();
        before(&self.undo_plan(sites));
        for round in 0..PATCH_ROUNDS {
            if round > 0 {
                std::thread::sleep(Duration::from_millis(1 << round));
            }
            let mut stopped = Stopped::new(tracer, pid)?;
            if !self.segment.is_sealed() {
                let segment = &mut self.segment;
                stopped.held(&mut self.bootstrap, |h| segment.seal(h))??;
            }
            let rips: Vec<u64> = stopped.threads().iter().map(|(_, r)| r.rip).collect();
            for (site, result) in sites.iter().zip(&mut results) {
                if result.is_some() || rips.iter().any(|&rip| site.inside(rip)) {
                    continue;
                }
                let mut now = vec![0u8; site.relocated.len()];
                remote::read_memory(pid, site.entry(), &mut now)?;
                if now != site.relocated.original {
                    *result = Some(Err(Refusal::Changed));
                    continue;
                }
                bootstrap::poke(pid, site.entry(), &site.jump())?;
                self.patched.push(site.clone());
                *result = Some(Ok(()));
            }
            drop(stopped);
            if results.iter().all(Option::is_some) {
                break;
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or(Err(Refusal::ThreadInside)))
            .collect())
    }

    /// Undoes every patch and removes the segment (see the module's comment).
    pub fn unpatch(self, tracer: &mut Tracer) -> Result<Unpatched, InjectError> {
        let mut bootstrap = self.bootstrap;
        undo(tracer, &self.undo_plan(&[]), &mut bootstrap, DRAIN)
    }

    /// [`Self::unpatch`], then `read` of our view of the data part, which outlives the
    /// target's mapping: every count the wrappers made, the last ones included.
    pub fn unpatch_then_read<R>(
        self,
        tracer: &mut Tracer,
        read: impl FnOnce(&[u8]) -> R,
    ) -> (Result<Unpatched, InjectError>, R) {
        let mut bootstrap = self.bootstrap;
        let result = undo(tracer, &self.undo_plan(&[]), &mut bootstrap, DRAIN);
        (result, read(self.segment.data()))
    }
}

/// Undoes several injections of one process as one plan, with one stop of its threads per
/// round: the call stubs of every segment hook return addresses into the one exit stub, so no
/// segment may go while another still hooks calls. The injections' views of their data parts
/// stay readable until they are dropped.
pub fn unpatch_together(
    tracer: &mut Tracer,
    injections: &[&Injection],
) -> Result<Unpatched, InjectError> {
    let plans: Vec<Undo> = injections.iter().map(|i| i.undo_plan(&[])).collect();
    let Some(plan) = Undo::merged(&plans.iter().collect::<Vec<_>>()) else {
        return Ok(Unpatched::Clean);
    };
    let mut bootstrap = injections.iter().find_map(|i| i.bootstrap);
    undo(tracer, &plan, &mut bootstrap, DRAIN)
}

/// Undoes `plan` in its process (traced by `tracer`, or seized here): see the module's
/// comment. `drain`: how long threads may take to leave our code.
pub fn undo(
    tracer: &mut Tracer,
    plan: &Undo,
    bootstrap: &mut Option<Bootstrap>,
    drain: Duration,
) -> Result<Unpatched, InjectError> {
    let pid = plan.pid;
    let in_flight = || -> u64 {
        plan.in_flight
            .iter()
            .map(|w| w.sum(pid).unwrap_or(0))
            .fold(0, u64::saturating_add)
    };
    let deadline = Instant::now() + drain;
    let mut first = true;
    loop {
        let mut stopped = Stopped::new(tracer, pid)?;
        if std::mem::take(&mut first) {
            restore_bytes(pid, &plan.sites)?;
        }
        move_out_of_prologues(&stopped, &plan.sites)?;
        // Every hooked return address back, in each round: a thread stopped inside an entry
        // stub may have hooked its caller's since the last one.
        for r in &plan.returns {
            returns::restore(pid, r)?;
        }
        let inside = stopped
            .threads()
            .iter()
            .any(|(_, r)| plan.parts.iter().any(|p| p.contains(r.rip)));
        // With every thread stopped, none in our code and none between a wrapper's entry and
        // its `ret`, and nothing patched to enter it: no thread can ever come back to it.
        if !inside && in_flight() == 0 {
            let parts: Vec<Part> = plan
                .parts
                .iter()
                .copied()
                .filter(|p| still_ours(pid, p))
                .collect();
            stopped.held(bootstrap, |h| {
                // A memfd the target made for a segment a kill cut short before the mapping
                // was closed: no descriptor of ours stays either.
                for fd in our_memfds(pid) {
                    let _ = h.syscall("close", libc::SYS_close, [fd, 0, 0, 0, 0, 0]);
                }
                segment::unmap(h, &parts)
            })??;
            return Ok(Unpatched::Clean);
        }
        drop(stopped);
        if Instant::now() >= deadline {
            eprintln!(
                "oi-trace: pid {pid}: threads stayed inside the injected code for {drain:?}; \
                 its original code is back, the unused segment stays mapped"
            );
            return Ok(Unpatched::SegmentLeft);
        }
        std::thread::sleep(Duration::from_millis(1));
        while in_flight() != 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Whether anything of `plan` is still in its process: one of our jumps, a part still ours,
/// or a descriptor of our memfd. Read without stopping anything (for the guardian, once the
/// process that patched is gone and nobody else changes these).
pub fn remains(plan: &Undo) -> bool {
    let pid = plan.pid;
    plan.sites.iter().any(|site| {
        let mut now = vec![0u8; site.relocated.len()];
        remote::read_memory(pid, site.entry(), &mut now).is_ok() && now == site.jump()
    }) || plan.parts.iter().any(|p| still_ours(pid, p))
        || !our_memfds(pid).is_empty()
}

/// Puts the original bytes back where our jump still is (bytes that are neither it nor the
/// original, a new program's after an exec, are not ours to touch), and reads them back.
fn restore_bytes(pid: i32, sites: &[Site]) -> Result<(), InjectError> {
    for site in sites {
        let mut now = vec![0u8; site.relocated.len()];
        remote::read_memory(pid, site.entry(), &mut now)?;
        if now == site.jump() {
            bootstrap::poke(pid, site.entry(), &site.relocated.original)?;
            remote::read_memory(pid, site.entry(), &mut now)?;
        }
        if now != site.relocated.original {
            return Err(InjectError::NotRestored { addr: site.entry() });
        }
    }
    Ok(())
}

/// Threads inside a relocated prologue go to the original instruction it copies (the
/// original bytes are back, so they run the same code from there).
fn move_out_of_prologues(stopped: &Stopped<'_>, sites: &[Site]) -> Result<(), RemoteError> {
    for (tid, mut regs) in stopped.threads() {
        if let Some(rip) = sites.iter().find_map(|s| s.relocated.original_of(regs.rip)) {
            regs.rip = rip;
            remote::set_regs(tid, &regs)?;
        }
    }
    Ok(())
}

/// Whether `part` is still exactly one mapping of ours (a guardian acting late must not unmap
/// what the target mapped there since): anonymous private code (RW until sealed, then RX),
/// or our memfd.
pub fn still_ours(pid: i32, part: &Part) -> bool {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return false;
    };
    let range = format!("{:x}-{:x} ", part.addr, part.addr + part.len);
    maps.lines().any(|line| {
        let anonymous = line.split_whitespace().count() == 5;
        line.starts_with(&range)
            && (line.contains(segment::MEMFD_PATH)
                || (anonymous && (line.contains(" r-xp ") || line.contains(" rw-p "))))
    })
}

/// The target's descriptors of our memfd (only ever open for an instant, see `segment`).
fn our_memfds(pid: i32) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|l| l.to_string_lossy().starts_with(segment::MEMFD_PATH))
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The span of the library that maps `addr` in `pid` (for [`Injection::create`]).
pub fn span_of(pid: i32, addr: u64) -> Option<(u64, u64)> {
    segment::library_span(pid, addr)
}
