//! Following a faulting walker's frame-pointer chain up to the code that called it, from a
//! signal handler: OIL's fault handler (`oil::guard`) uses it to find where a walk entered
//! by its trampoline resumes, and the JIT fuzz's child uses the same function to decide
//! whether that handler would recover, so the fuzz tests the real walk of the chain.
//!
//! Generated walker code keeps frame pointers: in each of its frames `[fp]` is the caller's
//! frame pointer and `[fp + 8]` the return address. The chain is followed only through
//! walker frames (each return address in walker code) and each link must lie above the last
//! on the stack, so a corrupt chain ends the walk rather than looping; it stops at the first
//! return address that is the walk's caller.

/// Most frames [`frame_chain`] follows: a walk nests at most `MAX_DEPTH` levels, each a
/// frame or less (tail calls replace theirs).
pub const MAX_CHAIN: usize = 1 << 16;

/// The stack pointer the walk's caller's call left (`fp + 16` of the walker frame whose
/// return address `is_caller` accepts), following the chain up from the interrupted frame
/// pointer `rbp` (`rsp` the interrupted stack pointer). `None` when a link lies below the
/// last or is misaligned, when a return address is neither the caller's nor in walker code
/// (`in_code`), or after [`MAX_CHAIN`] frames. `is_caller` is asked first, so a caller
/// outside walker code can be recognised as "not `in_code`". Async-signal-safe: it only
/// reads the stack.
///
/// # Safety
/// The interrupted instruction must be in walker code, and `rsp`/`rbp` its registers on the
/// current thread's stack: every word read (two per link, each at or above `rsp`, each link
/// above the last) is then a walker frame's, on live stack.
pub unsafe fn frame_chain(
    rsp: usize,
    rbp: usize,
    in_code: impl Fn(usize) -> bool,
    is_caller: impl Fn(usize) -> bool,
) -> Option<usize> {
    let (mut fp, mut floor) = (rbp, rsp);
    for _ in 0..MAX_CHAIN {
        if fp < floor || !fp.is_multiple_of(8) {
            return None;
        }
        // SAFETY: the caller's contract: `fp` is a walker frame's frame pointer at or above
        // the interrupted stack pointer (every link followed was a walker frame's).
        let (caller_fp, ret) = unsafe { (*(fp as *const usize), *((fp + 8) as *const usize)) };
        if is_caller(ret) {
            return Some(fp + 16);
        }
        if !in_code(ret) {
            return None;
        }
        floor = fp + 16;
        fp = caller_fp;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walker code and the caller's return address, for chains built on a test stack.
    const CODE: std::ops::Range<usize> = 0x1000..0x2000;
    const CALLER: usize = 0x9000;

    /// A stack of `words` with frames at the given word indexes, innermost first: each
    /// frame's `[fp]` links to the next, `[fp + 8]` is `rets[i]`. Returns the stack and the
    /// address of word 0.
    fn stack(frames: &[usize], rets: &[usize]) -> (Vec<usize>, usize) {
        let mut words = vec![0usize; 64];
        let base = words.as_ptr() as usize;
        for (i, (&at, &ret)) in frames.iter().zip(rets).enumerate() {
            words[at] = frames.get(i + 1).map_or(0, |&next| base + 8 * next);
            words[at + 1] = ret;
        }
        (words, base)
    }

    /// The chain from the frame pointer `rbp_off` bytes into `words` (the stack pointer at
    /// its start), as an offset into `words`.
    fn chain(words: &[usize], rbp_off: usize) -> Option<usize> {
        let base = words.as_ptr() as usize;
        // SAFETY: every frame the tests link lies inside `words`, which is live.
        let sp =
            unsafe { frame_chain(base, base + rbp_off, |a| CODE.contains(&a), |a| a == CALLER) };
        sp.map(|sp| sp - base)
    }

    #[test]
    fn follows_walker_frames_up_to_the_callers_return_address() {
        let (words, _) = stack(&[2, 10, 20], &[0x1100, 0x1200, CALLER]);
        assert_eq!(chain(&words, 16), Some(8 * 20 + 16));
        // The innermost frame returning to the caller at once.
        let (words, _) = stack(&[4], &[CALLER]);
        assert_eq!(chain(&words, 32), Some(48));
    }

    #[test]
    fn stops_at_a_return_address_outside_walker_code() {
        let (words, base) = stack(&[2, 10, 20], &[0x1100, 0x5000, CALLER]);
        assert_eq!(chain(&words, 16), None);
        // The fuzz's caller: the first return address outside walker code.
        // SAFETY: as in `chain`.
        let outside = unsafe {
            frame_chain(
                base,
                base + 16,
                |a| CODE.contains(&a),
                |a| !CODE.contains(&a),
            )
        };
        assert_eq!(outside, Some(base + 8 * 10 + 16));
    }

    #[test]
    fn refuses_links_below_the_last_or_misaligned() {
        // The second frame below the first.
        let (words, base) = stack(&[20, 10], &[0x1100, CALLER]);
        assert_eq!(chain(&words, 160), None);
        // A frame pointer below the interrupted stack pointer.
        // SAFETY: nothing is read: the first check fails.
        let below = unsafe { frame_chain(base + 64, base + 16, |_| true, |_| false) };
        assert_eq!(below, None);
        // A misaligned frame pointer.
        let (words, _) = stack(&[2], &[CALLER]);
        assert_eq!(chain(&words, 17), None);
        // A frame linking to itself ends below its own floor.
        let (mut words, base) = stack(&[2], &[0x1100]);
        words[2] = base + 16;
        assert_eq!(chain(&words, 16), None);
    }
}
