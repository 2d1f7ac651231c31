//! Unit tests of `hijack`.

use super::*;

#[test]
fn tsc_clock_converts_ticks_to_the_monotonic_clock() {
    let clock = TscClock::new();
    std::thread::sleep(Duration::from_millis(20));
    let start = TscClock::pair();
    std::thread::sleep(Duration::from_millis(10));
    let end = TscClock::pair();
    let ns = clock.ns(end.0 - start.0).expect("rate known after 20 ms");
    let mono = end.1 - start.1;
    // Both measure the same interval; the readings' pairing error is a few µs.
    assert!(
        ns.abs_diff(mono) < mono / 50,
        "{ns} ns by the counter, {mono} ns"
    );
    assert_eq!(
        TscClock::new().ns(1),
        None,
        "no rate within the first millisecond"
    );
}

#[test]
fn stub_layout_matches_the_offsets_the_tracer_relies_on() {
    let code = stub(2 * PAGE);
    assert_eq!(code.len() as u64, STUB_LEN);
    let at = STUB_SYSCALL as usize;
    assert_eq!(
        &code[at..at + 2],
        &[0x0f, 0x05],
        "syscall ends at STUB_DONE"
    );
    assert_eq!(STUB_DONE, STUB_SYSCALL + 2);
    // FPU state is saved before the walker and restored before the done stop.
    assert_eq!(&code[0..4], &[0x48, 0x0f, 0xae, 0x05], "fxsave64 first");
    assert_eq!(
        &code[42..46],
        &[0x48, 0x0f, 0xae, 0x0d],
        "fxrstor64 after the call"
    );
    let fx = |at: usize, next: i64| {
        i32::from_le_bytes(code[at..at + 4].try_into().unwrap()) as i64 + next
    };
    assert_eq!(fx(4, 8), (2 * PAGE + FXSAVE_AREA) as i64);
    assert_eq!(fx(46, 50), (2 * PAGE + FXSAVE_AREA) as i64);
    // rdtsc stores the counter into the stamps right before and right after the call.
    assert_eq!(&code[8..10], &[0x0f, 0x31], "rdtsc before the call");
    assert_eq!(&code[24..26], &[0xff, 0xd6], "call rsi");
    assert_eq!(&code[26..28], &[0x0f, 0x31], "rdtsc after the call");
    assert_eq!(fx(20, 24), (2 * PAGE + STAMPS) as i64);
    assert_eq!(fx(38, 42), (2 * PAGE + STAMPS + 8) as i64);
    assert_eq!(fx(60, 64), (2 * PAGE + SAVE_AREA) as i64);
    // The jmp's rip-relative displacement lands on the rip slot.
    assert_eq!(&code[89..91], &[0xff, 0x25], "jmp [rip+disp]");
    assert_eq!(fx(91, 95), (2 * PAGE + RIP_SLOT) as i64);
    assert!(code[95..].iter().all(|&b| b == 0xcc));
    // SAFETY: an all-zero register set is a valid value (plain integers).
    let zero: Regs = unsafe { std::mem::zeroed() };
    assert_eq!(save_area(&zero).len() as u64, RIP_SLOT + 8);
}
