//! Test and benchmark program of the kernel-side unwinder, never loaded by a tool: a uprobe
//! that walks the stack of each hit of the target process with `oi_ebpf::stack::user_stack`
//! and with the kernel's frame-pointer walk (`bpf_get_stack`), and sends both to user space
//! (`oi-user/src/unwind/live_tests.rs`), or only counts hits for the cost measurements
//! (`MODE`, bits of `oi_common::stack::check_mode`).
#![no_std]
#![no_main]

use aya_ebpf::{
    EbpfContext, Global,
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_current_pid_tgid, generated::bpf_get_stack},
    macros::{map, uprobe},
    maps::{PerCpuArray, RingBuf},
    programs::ProbeContext,
};
use oi_common::stack::{MAX_FRAMES, StackSample, check_mode};
use oi_ebpf::stack::user_stack;

/// The process whose hits count (set by the loader).
#[unsafe(no_mangle)]
static TARGET_TGID: Global<u32> = Global::new(0);
/// What each hit does: bits of `check_mode`.
#[unsafe(no_mangle)]
static MODE: Global<u32> = Global::new(0);

/// Hits of the target process (per CPU).
#[map]
static HITS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Where a sample is assembled (too large for the BPF stack).
#[map]
static SCRATCH: PerCpuArray<StackSample> = PerCpuArray::with_max_entries(1, 0);

#[map]
static SAMPLES: RingBuf = RingBuf::with_byte_size(64 * 1024, 0);

#[uprobe]
pub fn oi_stack_check(ctx: ProbeContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    if (pid_tgid >> 32) as u32 != TARGET_TGID.load() {
        return 0;
    }
    if let Some(hits) = HITS.get_ptr_mut(0) {
        // SAFETY: this CPU's slot of a per-CPU array.
        unsafe { *hits += 1 };
    }
    let mode = MODE.load();
    if mode == 0 {
        return 0;
    }
    let Some(sample) = SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: `sample` is this CPU's value of a per-CPU array; nothing else runs on this CPU
    // while the program does.
    let sample = unsafe { &mut *sample };
    sample.tgid = (pid_tgid >> 32) as u32;
    sample.tid = pid_tgid as u32;
    sample.fp_frames = 0;
    sample.cfi_frames = 0;
    if mode & check_mode::FRAME_POINTERS != 0 {
        // SAFETY: the buffer is the sample's `fp` array, of exactly the size passed.
        let bytes = unsafe {
            bpf_get_stack(
                ctx.as_ptr(),
                sample.fp.as_mut_ptr().cast(),
                (MAX_FRAMES * 8) as u32,
                BPF_F_USER_STACK as u64,
            )
        };
        if bytes > 0 {
            sample.fp_frames = (bytes / 8) as u32;
        }
    }
    if mode & check_mode::CFI != 0 {
        sample.cfi_frames = user_stack(&ctx, &mut sample.cfi) as u32;
    }
    if mode & check_mode::SEND != 0 {
        let _ = SAMPLES.output::<StackSample>(sample, 0);
    }
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
