//! Running walker code inside a frozen thread of the target.
//!
//! Once per process, one region is reserved in the target by remote syscalls (PROT_NONE, so
//! it costs no memory and no commit charge until parts are opened) and laid out as:
//! a code part (written while RW, then made RX; never RWX) holding a call stub and the
//! walkers; a data part (RW) holding the stub's register save area, a header, the walker's
//! frame and scratch memory; a guard page; the walker's private stack; a guard page; and the
//! output buffer, whose RW part grows in place inside its reservation. One `munmap` removes
//! it all, so the segments of a killed run are found and removed in one step, and no address
//! recorded in the target can go stale.
//!
//! The stub is self-restoring: it saves the FPU/SSE state, calls the walker, restores the
//! FPU/SSE state, makes a harmless `getpid` (the tracer's signal that the walk ended: it stops
//! there under PTRACE_SYSCALL and puts the registers back itself), then reloads every register
//! from the save area and jumps back to where the thread was. So if the tracer dies mid-walk,
//! the thread still returns to its own code with its registers intact; and the tracer never
//! needs the FPU state of a walk that returned (a sample's hot path has no FPREGS calls).
//! Around its call of the walker the stub stores the time stamp counter (`rdtsc`) into two
//! words after the header, read with the frame: the walk's own time, without the ptrace
//! stops (`oi-trace -v`). The tracer zeroes them with each frame it writes, so the second
//! stamp also tells the walk's end: at a syscall stop with it set, the frame and the output's
//! first bytes are read in that one call, with no look at the registers. While the thread
//! waits, each system call counts (on a VM, each is a first touch after a sleep, 10–30 µs):
//! the save area, header, stamps and frame go in one write, the frame and stamps come back
//! in one read, and the tracer sleeps through a walk until shortly before the time the
//! last walk of the same walker took, then polls for the end instead of being woken by it.
//! A process that made `rdtsc` fault (`PR_SET_TSC`) would see every walk fault, contained
//! like any other walker fault; none we know of does.

use std::time::{Duration, Instant};

use nix::{
    sys::{
        ptrace,
        signal::Signal,
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::Pid,
};

use super::{
    bootstrap::{self, Bootstrap},
    procfs::{self, Region},
    remote::{self, HeldSignals, Regs, RemoteError},
};
use crate::jit::WalkFrame;

const PAGE: u64 = 4096;
/// Offsets inside the data part.
const SAVE_AREA: u64 = 0; // 17 registers then the rip slot
const RIP_SLOT: u64 = SAVE_AREA + 17 * 8;
const FXSAVE_AREA: u64 = 256; // 512 bytes, 16-byte aligned
/// What a later run needs to recognise and remove the region of a run that was killed:
/// magic, length of the code part, length of the whole region, and the busy word.
const HEADER: u64 = 768;
const HEADER_LEN: usize = 32;
/// Offset in the header of the id of the thread armed to run in the region (0: none): set
/// before the thread can be pointed at the stub, cleared once it has its registers back. A
/// killed run may leave it set; a later run removes the region only when that thread is
/// provably outside (see [`Segments::leftovers`]).
const BUSY: u64 = 24;
const MAGIC: u64 = u64::from_le_bytes(*b"OITRSEG3");
/// Where the stub writes the time stamp counter just before it calls the walker and just
/// after the walker returns (two words): the walk's own time, without the ptrace stops.
const STAMPS: u64 = HEADER + HEADER_LEN as u64;
const FRAME: u64 = 1024;
const FRAME_MAX: u64 = 1024;
const _: () = assert!(size_of::<WalkFrame>() as u64 <= FRAME_MAX);
const _: () = assert!(RIP_SLOT + 8 <= FXSAVE_AREA && FXSAVE_AREA + 512 <= HEADER);
const _: () = assert!(STAMPS + 16 <= FRAME);
/// Copies of objects that arrived in registers (by-value arguments, small return values).
const REGISTER_OBJECTS: u64 = FRAME + FRAME_MAX;
pub const REGISTER_OBJECTS_LEN: u64 = 2048;
const SCRATCH: u64 = REGISTER_OBJECTS + REGISTER_OBJECTS_LEN;
/// The visited-address sets (generation-tagged, so zeroed once at mapping time).
pub const SCRATCH_LEN: u64 = crate::jit::SCRATCH_BYTES;
const DATA_LEN: u64 = SCRATCH + SCRATCH_LEN;
/// The walker's private stack: deep enough for the interpreter's nesting limit; only the
/// depth a walk reaches costs memory.
pub const STACK_LEN: u64 = crate::jit::RECOMMENDED_STACK;
/// First size of the output buffer's open part (only what walks write is touched); it grows
/// to what a walk reports it needs, up to the reservation.
const INITIAL_OUTPUT: u64 = 16 * 1024 * 1024;
const OUTPUT_RESERVE: u64 = 4 << 30;
/// Offsets of the stack and the output from the start of the data part (guard pages between).
const STACK_AFTER_DATA: u64 = DATA_LEN + PAGE;
const OUTPUT_AFTER_DATA: u64 = STACK_AFTER_DATA + STACK_LEN + PAGE;
const REGION_AFTER_CODE: u64 = OUTPUT_AFTER_DATA + OUTPUT_RESERVE;
/// Offset in the stub of the instruction after its `syscall`: where the "done" stop is.
const STUB_DONE: u64 = 57;
/// Offset of the stub's `syscall` instruction (followed by its self-restore).
const STUB_SYSCALL: u64 = 55;
/// Bytes of output read together with the frame after a walk (most samples fit).
pub const OUTPUT_PREFIX: usize = 4096;
/// How long the tracer polls for the end of a walk past the moment it expects it, before it
/// sleeps: waking a sleeping tracer costs more than that on virtual machines (a halted vCPU
/// takes 40–80 µs to wake after a long idle), and most walks of a site take about as long as
/// the last one.
const SPIN: Duration = Duration::from_micros(250);
/// How long before a walk's expected end the tracer stops sleeping and starts polling: the
/// sleep's own wake-up (timer slack, the halted vCPU) then falls inside the walk, not after it.
const SPIN_LEAD: Duration = Duration::from_micros(300);
/// How long a walk may go without news before the tracer checks that its thread still lives.
const LIVENESS_CHECK: Duration = Duration::from_millis(20);
const STUB_LEN: u64 = 128;

/// The stub's machine code for a region whose data part starts `code_len` bytes after it.
fn stub(code_len: u64) -> Vec<u8> {
    let d = code_len as i64;
    let rel = |target: i64, next_insn: i64| ((target - next_insn) as i32).to_le_bytes();
    let mut code = Vec::with_capacity(STUB_LEN as usize);
    code.extend([0x48, 0x0f, 0xae, 0x05]); // fxsave64 [rip+disp]
    code.extend(rel(d + FXSAVE_AREA as i64, 8));
    // The time stamp counter before and after the walk (rdtsc clobbers only rax and rdx,
    // which the walker's call does not take). Read by the tracer as the in-target walk time.
    let stamp = |code: &mut Vec<u8>, slot: u64| {
        code.extend([0x0f, 0x31]); // rdtsc
        code.extend([0x48, 0xc1, 0xe2, 0x20]); // shl rdx, 32
        code.extend([0x48, 0x09, 0xd0]); // or rax, rdx
        code.extend([0x48, 0x89, 0x05]); // mov [rip+disp], rax
        let next = code.len() as i64 + 4;
        code.extend(rel(d + slot as i64, next));
    };
    stamp(&mut code, STAMPS);
    code.extend([0xff, 0xd6]); // call rsi (the walker; rdi = its frame)
    stamp(&mut code, STAMPS + 8);
    code.extend([0x48, 0x0f, 0xae, 0x0d]); // fxrstor64 [rip+disp]
    let next = code.len() as i64 + 4;
    code.extend(rel(d + FXSAVE_AREA as i64, next));
    code.extend([0xb8, 39, 0, 0, 0]); // mov eax, SYS_getpid
    debug_assert_eq!(code.len() as u64, STUB_SYSCALL);
    code.extend([0x0f, 0x05]); // syscall: the tracer stops here
    debug_assert_eq!(code.len() as u64, STUB_DONE);
    code.extend([0x48, 0x8d, 0x25]); // lea rsp, [rip+disp]: the save area
    let next = code.len() as i64 + 4;
    code.extend(rel(d + SAVE_AREA as i64, next));
    // pop r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi
    code.extend([
        0x41, 0x5f, 0x41, 0x5e, 0x41, 0x5d, 0x41, 0x5c, 0x5d, 0x5b, 0x41, 0x5b, 0x41, 0x5a,
    ]);
    code.extend([0x41, 0x59, 0x41, 0x58, 0x58, 0x59, 0x5a, 0x5e, 0x5f]);
    code.push(0x9d); // popfq
    code.push(0x5c); // pop rsp
    code.extend([0xff, 0x25]); // jmp [rip+disp]: the saved rip
    let next = code.len() as i64 + 4;
    code.extend(rel(d + RIP_SLOT as i64, next));
    code.resize(STUB_LEN as usize, 0xcc);
    code
}

/// The save area's image, in the stub's pop order.
fn save_area(regs: &Regs) -> Vec<u8> {
    [
        regs.r15,
        regs.r14,
        regs.r13,
        regs.r12,
        regs.rbp,
        regs.rbx,
        regs.r11,
        regs.r10,
        regs.r9,
        regs.r8,
        regs.rax,
        regs.rcx,
        regs.rdx,
        regs.rsi,
        regs.rdi,
        regs.eflags,
        regs.rsp,
        regs.rip,
    ]
    .iter()
    .flat_map(|v| v.to_le_bytes())
    .collect()
}

/// The frame as the bytes the walker reads.
fn frame_bytes(frame: &WalkFrame) -> &[u8] {
    // SAFETY: WalkFrame is repr(C) plain integers without padding; viewing it as bytes for
    // its whole size is sound.
    unsafe {
        std::slice::from_raw_parts(
            (frame as *const WalkFrame).cast::<u8>(),
            size_of::<WalkFrame>(),
        )
    }
}

fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

/// A thread we hold in a ptrace-stop to act in it; `end` gives it back exactly as it was.
pub struct Held {
    pub tgid: i32,
    pub tid: i32,
    saved: Regs,
    held: HeldSignals,
    /// Where remote syscalls go while no stub of ours is armed.
    bootstrap: Bootstrap,
    /// The bytes our restoring stub replaced in the slack, while it is written there.
    slack_saved: Option<Vec<u8>>,
    /// Our stub's `syscall`, once the save area holds this thread's state: a remote syscall
    /// through it is followed by the stub's self-restore, so even a tracer killed mid-call
    /// leaves the thread intact.
    gadget: Option<u64>,
    /// The busy word of the armed region (see [`BUSY`]).
    busy_word: Option<u64>,
    /// The thread waits at the entry of the stub's `getpid` after a walk (see `land`).
    at_done_stop: bool,
}

/// What a walk that returned left in the target, read at its end in one system call.
#[derive(Debug)]
pub struct ReadBack {
    /// The frame (status, output size, generation).
    pub frame: WalkFrame,
    /// The first [`OUTPUT_PREFIX`] bytes of the output (all of it, for most samples).
    pub prefix: Vec<u8>,
    /// Time stamp counter ticks between the stub's call of the walker and its return.
    pub ticks: u64,
}

/// How one call of a walker ended.
#[derive(Debug)]
pub enum CallEnd {
    Returned(Box<ReadBack>),
    /// The walker raised `signal` touching `addr` (a corrupt or freed object) at `pc`.
    Faulted {
        signal: Signal,
        addr: u64,
        pc: u64,
    },
    TimedOut,
}

impl Held {
    /// Takes hold of `tid`, which must be in a ptrace-stop (e.g. the signal-delivery-stop of the
    /// trigger's SIGSTOP, which is thereby suppressed).
    /// `bootstrap`: what [`Bootstrap::find`] gave for this process before (None: find it).
    pub fn begin(tgid: i32, tid: i32, bootstrap: Option<Bootstrap>) -> Result<Self, RemoteError> {
        let saved = remote::get_regs(tid)?;
        let bootstrap = match bootstrap {
            Some(b) => b,
            None => Bootstrap::find(tgid)?,
        };
        Ok(Self {
            tgid,
            tid,
            saved,
            held: HeldSignals::default(),
            bootstrap,
            slack_saved: None,
            gadget: None,
            busy_word: None,
            at_done_stop: false,
        })
    }

    pub fn bootstrap(&self) -> Bootstrap {
        self.bootstrap
    }

    /// Anonymous private memory in the target (see [`remote::mmap`]).
    pub fn mmap(
        &mut self,
        at: u64,
        len: u64,
        prot: i32,
        extra_flags: i32,
    ) -> Result<u64, RemoteError> {
        self.land()?;
        let (tid, insn) = (self.tid, self.insn()?);
        remote::mmap(
            tid,
            &self.saved,
            insn,
            at,
            len,
            prot,
            extra_flags,
            &mut self.held,
        )
    }

    pub fn munmap(&mut self, addr: u64, len: u64) -> Result<(), RemoteError> {
        self.land()?;
        let (tid, insn) = (self.tid, self.insn()?);
        remote::munmap(tid, &self.saved, insn, addr, len, &mut self.held)
    }

    pub fn mprotect(&mut self, addr: u64, len: u64, prot: i32) -> Result<(), RemoteError> {
        self.land()?;
        let (tid, insn) = (self.tid, self.insn()?);
        remote::mprotect(tid, &self.saved, insn, addr, len, prot, &mut self.held)
    }

    /// Any other system call `nr` in the held thread; its result, or the errno as an error
    /// naming `what`.
    pub fn syscall(
        &mut self,
        what: &'static str,
        nr: i64,
        args: [u64; 6],
    ) -> Result<u64, RemoteError> {
        self.land()?;
        let (tid, insn) = (self.tid, self.insn()?);
        let r = remote::syscall(tid, &self.saved, insn, nr, args, &mut self.held)?;
        remote::check(what, r).map(|v| v as u64)
    }

    /// The `syscall` instruction remote syscalls use: our segment's stub once armed; before,
    /// a restoring stub written into the slack (or, without slack, a borrowed one).
    fn insn(&mut self) -> Result<u64, RemoteError> {
        if let Some(gadget) = self.gadget {
            return Ok(gadget);
        }
        match self.bootstrap {
            Bootstrap::Borrowed(insn) => Ok(insn),
            Bootstrap::Slack(at) => {
                if self.slack_saved.is_none() {
                    let mut original = vec![0u8; bootstrap::STUB_LEN as usize];
                    remote::read_memory(self.tgid, at, &mut original)?;
                    let stub = bootstrap::restoring_syscall(&remote::restorable(&self.saved));
                    bootstrap::poke(self.tgid, at, &stub)?;
                    self.slack_saved = Some(original);
                }
                Ok(at)
            }
        }
    }

    /// Reserves `len` bytes (PROT_NONE) for a region. With slack, the address is chosen
    /// first, in a hole with a free page on each side (so the kernel merges it with nothing),
    /// and noted in the slack before the call: a run killed before the region has its header
    /// still leaves a way to find and remove it ([`Self::remove_pending`]).
    fn reserve(&mut self, len: u64) -> Result<u64, RemoteError> {
        let Bootstrap::Slack(at) = self.bootstrap else {
            return self.mmap(0, len, libc::PROT_NONE, libc::MAP_NORESERVE);
        };
        let mut last = None;
        for _ in 0..8 {
            let Some(addr) = bootstrap::free_hole(self.tgid, len) else {
                break;
            };
            bootstrap::poke(self.tgid, at + bootstrap::NOTE, &bootstrap::note(addr, len))?;
            let flags = libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE;
            match self.mmap(addr, len, libc::PROT_NONE, flags) {
                Ok(got) if got == addr => return Ok(got),
                // A kernel without MAP_FIXED_NOREPLACE may place it elsewhere: give it back.
                Ok(got) => {
                    let _ = self.munmap(got, len);
                    self.forget_pending();
                    break;
                }
                // Taken meanwhile by the target itself: look again.
                Err(e) => last = Some(e),
            }
        }
        self.forget_pending();
        match last {
            Some(RemoteError::Syscall { errno, .. }) if errno != nix::errno::Errno::EEXIST => {
                Err(RemoteError::Syscall {
                    what: "mmap",
                    errno,
                })
            }
            _ => self.mmap(0, len, libc::PROT_NONE, libc::MAP_NORESERVE),
        }
    }

    fn forget_pending(&mut self) {
        if let Bootstrap::Slack(at) = self.bootstrap {
            let _ = bootstrap::poke(self.tgid, at + bootstrap::NOTE, &[0; bootstrap::NOTE_LEN]);
        }
    }

    /// Removes the region a killed run had reserved but not yet given its header, if its
    /// note in the slack says so and the maps agree exactly.
    pub fn remove_pending(&mut self) {
        let Bootstrap::Slack(at) = self.bootstrap else {
            return;
        };
        if let Some((addr, len)) = bootstrap::read_note(self.tgid, at)
            && bootstrap::is_lone_anonymous(self.tgid, addr, len)
        {
            let _ = self.munmap(addr, len);
        }
        self.forget_pending();
    }

    /// Puts back what our restoring stub replaced (never executed bytes, but the process is
    /// left exactly as it was). Only once no remote syscall of this hold is in flight.
    fn clear_slack(&mut self) {
        if let (Some(original), Bootstrap::Slack(at)) = (self.slack_saved.take(), self.bootstrap) {
            let _ = bootstrap::poke(self.tgid, at, &original);
        }
    }

    /// Writes this thread's registers (as they must be restored, syscall restart included)
    /// into the save area of the region at `base`, so the stub can restore the thread by
    /// itself from here on, and marks the region busy with this thread. With `frame`, a
    /// sample's walk frame goes in the same write, with the stamps zeroed (see `call`).
    /// The FPU state is not needed: a remote syscall leaves it alone, and a walk saves and
    /// restores it in the stub.
    pub fn arm(
        &mut self,
        base: u64,
        code_len: u64,
        frame: Option<&WalkFrame>,
    ) -> Result<(), RemoteError> {
        let total = code_len + REGION_AFTER_CODE;
        // One piece from the save area on, the stub's FXSAVE area (written by the stub before
        // it is read) and the zeroed stamps included: each piece of a remote write costs a
        // lookup of the target's pages, and this write is made while the thread waits.
        let len = match frame {
            Some(_) => FRAME as usize + size_of::<WalkFrame>(),
            None => (STAMPS + 16) as usize,
        };
        let mut image = vec![0u8; len];
        let saved = save_area(&remote::restorable(&self.saved));
        image[SAVE_AREA as usize..][..saved.len()].copy_from_slice(&saved);
        for (i, word) in [MAGIC, code_len, total, self.tid as u64].iter().enumerate() {
            image[HEADER as usize + 8 * i..][..8].copy_from_slice(&word.to_le_bytes());
        }
        if let Some(frame) = frame {
            image[FRAME as usize..].copy_from_slice(frame_bytes(frame));
        }
        let data = base + code_len;
        // Busy is set in the same write as the save area, before the thread can ever be
        // pointed at the stub.
        remote::write_memory(self.tgid, data + SAVE_AREA, &image)?;
        self.busy_word = Some(data + HEADER + BUSY);
        self.gadget = Some(base + STUB_SYSCALL);
        self.clear_slack();
        Ok(())
    }

    /// Points the held thread at the stub → `walker(frame)`, with the save area filled so
    /// that the stub can bring the thread back by itself, and `frame` written. Nothing runs
    /// until it is resumed.
    pub fn prepare_call(
        &mut self,
        seg: &Segments,
        walker: u64,
        frame: &WalkFrame,
    ) -> Result<(), RemoteError> {
        self.land()?;
        let tid = self.tid;
        if self.saved.orig_rax != u64::MAX {
            // Only ever called at a probe hit in user code; inside a syscall the stub's
            // self-restoring exit could not restart it.
            return Err(RemoteError::Unexpected {
                tid,
                what: "a walk",
                status: "thread is inside a system call".into(),
            });
        }
        if self.gadget != Some(seg.base + STUB_SYSCALL) {
            self.arm(seg.base, seg.code_len, Some(frame))?;
        } else {
            // The stamps are zeroed with the frame: the stub's second one, written after the
            // walker returns, then tells its end from any other stop (see `call`).
            remote::write_parts(
                self.tgid,
                &[
                    (seg.frame(), frame_bytes(frame)),
                    (seg.data() + STAMPS, &[0u8; 16]),
                ],
            )?;
        }
        let mut regs = self.saved;
        regs.rip = seg.base;
        regs.rsp = seg.stack + STACK_LEN;
        regs.rdi = seg.frame();
        regs.rsi = walker;
        regs.orig_rax = u64::MAX;
        // The walker expects the ABI's flags: direction forward, no trap, no alignment check.
        regs.eflags &= !(0x400 | 0x100 | 0x40000);
        remote::set_regs(tid, &regs)
    }

    /// Runs the stub → `walker(frame)` and waits for its end, at most `timeout`. The thread is
    /// held again afterwards, with its own registers back. `expect`: how long the walk is
    /// likely to take (the last walk of this walker; zero when unknown): the tracer sleeps
    /// until shortly before then and polls from there, so that seeing the walk's end costs no
    /// wake-up of a sleeping tracer.
    pub fn call(
        &mut self,
        seg: &Segments,
        walker: u64,
        frame: &WalkFrame,
        timeout: Duration,
        expect: Duration,
    ) -> Result<CallEnd, RemoteError> {
        let tid = self.tid;
        self.prepare_call(seg, walker, frame)?;
        let pid = Pid::from_raw(tid);
        ptrace::syscall(pid, None).map_err(|e| ptrace_error(tid, e))?;
        let started = Instant::now();
        let deadline = started + timeout;
        let mut interrupted = false;
        let mut quiet_since = started;
        let spin_from = started + expect.saturating_sub(SPIN_LEAD);
        let spin_until = started + expect + expect / 4 + SPIN;
        let end = loop {
            let status = match waitpid(pid, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) if (spin_from..spin_until).contains(&Instant::now()) => {
                    // Yield, not spin: the walker may be queued on this very CPU.
                    let _ = nix::sched::sched_yield();
                    continue;
                }
                Ok(WaitStatus::StillAlive) => {
                    // Killed meanwhile: a dead thread-group leader is reported only once the
                    // other threads are reaped, so waiting for it alone would never end.
                    // Checked only once nothing came for a while: it costs four syscalls.
                    if quiet_since.elapsed() >= LIVENESS_CHECK {
                        if !procfs::is_alive(tid) {
                            return Err(RemoteError::Gone(tid));
                        }
                        quiet_since = Instant::now();
                    }
                    if !interrupted && Instant::now() >= deadline {
                        let _ = ptrace::interrupt(pid);
                        interrupted = true;
                    }
                    let now = Instant::now();
                    let mut nap = deadline.saturating_duration_since(now).min(LIVENESS_CHECK);
                    if now < spin_from {
                        nap = nap.min(spin_from - now);
                    }
                    remote::wait_sigchld(nap);
                    continue;
                }
                Ok(status) => status,
                Err(_) => return Err(RemoteError::Gone(tid)),
            };
            quiet_since = Instant::now();
            match status {
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                    return Err(RemoteError::Gone(tid));
                }
                WaitStatus::PtraceEvent(_, _, ev) if ev == libc::PTRACE_EVENT_EXEC => {
                    // Another thread's execve killed the walk; the survivor (reported under
                    // this tid) runs the new program: nothing of the old one to restore.
                    let _ = ptrace::cont(pid, None);
                    return Err(RemoteError::Exec(tid));
                }
                WaitStatus::PtraceSyscall(_) => {
                    // The stub's stamp after the walker's return is followed by no system call
                    // but the done stop's `getpid`: with the stamp there, this stop is the
                    // walk's end, and what it left is read in the same call. Without it
                    // (cannot happen: the walker makes no system calls) the registers say.
                    let back = seg.read_back(self.tgid)?;
                    if back.1 || remote::get_regs(tid)?.rip == seg.base + STUB_DONE {
                        break CallEnd::Returned(Box::new(back.0));
                    }
                    // Not ours (cannot happen: the walker makes no syscalls); keep going.
                    ptrace::syscall(pid, None).map_err(|e| ptrace_error(tid, e))?;
                }
                WaitStatus::Stopped(
                    _,
                    sig @ (Signal::SIGSEGV
                    | Signal::SIGBUS
                    | Signal::SIGILL
                    | Signal::SIGFPE
                    | Signal::SIGTRAP),
                ) => {
                    let addr = ptrace::getsiginfo(pid).map(|info| {
                        // SAFETY: for these signals the kernel fills si_addr.
                        unsafe { info.si_addr() as u64 }
                    });
                    let pc = remote::get_regs(tid).map(|r| r.rip).unwrap_or(0);
                    break CallEnd::Faulted {
                        signal: sig,
                        addr: addr.unwrap_or(0),
                        pc,
                    };
                }
                WaitStatus::Stopped(_, sig) => {
                    // Not for the walker: hold it and deliver it once the thread is back.
                    self.held.0.push(sig);
                    ptrace::syscall(pid, None).map_err(|e| ptrace_error(tid, e))?;
                }
                WaitStatus::PtraceEvent(_, sig, ev) if ev == libc::PTRACE_EVENT_STOP => {
                    if interrupted {
                        break CallEnd::TimedOut;
                    }
                    if sig != Signal::SIGTRAP {
                        self.held.0.push(sig);
                    }
                    ptrace::syscall(pid, None).map_err(|e| ptrace_error(tid, e))?;
                }
                _ => {
                    ptrace::syscall(pid, None).map_err(|e| ptrace_error(tid, e))?;
                }
            }
        };
        if matches!(end, CallEnd::Returned(_)) {
            // Left at the stub's `getpid` entry, FPU state already restored by the stub:
            // `end` resumes straight from there, and only a caller that needs more remote
            // work pays for `land`.
            self.at_done_stop = true;
        } else {
            self.restore_fpu(seg)?;
            self.put_back()?;
        }
        Ok(end)
    }

    /// After a walk that did not return: the FPU state the stub saved on entry goes back
    /// (the walker may have changed it). Unless the thread never ran the stub's first
    /// instruction, which is the one that saves it.
    fn restore_fpu(&self, seg: &Segments) -> Result<(), RemoteError> {
        if remote::get_regs(self.tid)?.rip == seg.base {
            return Ok(());
        }
        let mut image = [0u8; 512];
        remote::read_memory(self.tgid, seg.data() + FXSAVE_AREA, &mut image)?;
        remote::set_fpregs_image(self.tid, &image)
    }

    /// Registers as they were at the hold (a remote syscall or a returned walk leaves the FPU
    /// state as it was). A tracer killed before this leaves a thread that finishes the
    /// stub's self-restore.
    fn put_back(&self) -> Result<(), RemoteError> {
        remote::set_regs(self.tid, &remote::restorable(&self.saved))
    }

    /// Once the thread has its own registers back: it will not run in the region any more.
    fn not_busy(&mut self) {
        if let Some(word) = self.busy_word.take() {
            let _ = remote::write_memory(self.tgid, word, &0u64.to_le_bytes());
        }
    }

    /// Brings a thread left at the stub's `getpid` entry to a quiet ptrace-stop with its own
    /// registers, so that remote syscalls or another call can follow.
    pub fn land(&mut self) -> Result<(), RemoteError> {
        if std::mem::take(&mut self.at_done_stop) {
            self.put_back()?;
            // At the getpid entry with orig_rax = -1: the kernel skips it; stop at its exit.
            let pid = Pid::from_raw(self.tid);
            ptrace::syscall(pid, None).map_err(|e| ptrace_error(self.tid, e))?;
            match remote::wait_for(self.tid, &mut self.held, remote::ptrace_syscall)? {
                WaitStatus::PtraceSyscall(_) => self.put_back()?,
                other => {
                    return Err(RemoteError::Unexpected {
                        tid: self.tid,
                        what: "the walker's return",
                        status: format!("{other:?}"),
                    });
                }
            }
        }
        Ok(())
    }

    /// Puts registers and FPU state back but leaves the thread stopped (for a caller that
    /// detaches it next); returns the signals held meanwhile, to be delivered after that.
    pub fn restore(mut self) -> Result<HeldSignals, RemoteError> {
        self.clear_slack();
        self.put_back()?;
        self.not_busy();
        Ok(self.held)
    }

    /// Gives the thread back: registers and FPU state as they were, running, our SIGSTOP
    /// suppressed, held signals delivered again in their order. Returns when (CLOCK_MONOTONIC
    /// ns) the thread was let run: just before PTRACE_CONT, since the thread, woken on this
    /// CPU, often preempts us inside that call and runs on before a clock read after it.
    pub fn end(mut self) -> Result<u64, RemoteError> {
        // From the stub's getpid entry too: with orig_rax = -1 the kernel skips the call.
        // (Letting the stub restore the thread from its save area instead would save this
        // call, but another thread's sample may arm that area before this one runs again.)
        self.clear_slack();
        self.put_back()?;
        let resumed = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map_or(0, |t| {
                t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
            });
        let cont = ptrace::cont(Pid::from_raw(self.tid), None);
        // The busy word is cleared once the thread runs: its registers are back, so it is
        // outside the region either way, and one memory write less holds it up. (Killed
        // before this, we leave the word set, as a kill just before it always could.)
        self.not_busy();
        cont.map_err(|e| ptrace_error(self.tid, e))?;
        self.held.redeliver(self.tgid, self.tid);
        // The thread may be queued on this CPU: let it go first.
        let _ = nix::sched::sched_yield();
        Ok(resumed)
    }
}

fn ptrace_error(tid: i32, errno: nix::errno::Errno) -> RemoteError {
    if errno == nix::errno::Errno::ESRCH {
        RemoteError::Gone(tid)
    } else {
        RemoteError::Ptrace {
            tid,
            what: "resume",
            errno,
        }
    }
}

mod segments;
mod tsc_clock;

pub use segments::Segments;
pub use tsc_clock::TscClock;

#[cfg(test)]
mod tests;
