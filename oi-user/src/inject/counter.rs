//! The simplest wrapper: count the call in a word of the data part, then run the original.
//! `mov r11, COUNTER; lock inc qword [r11]; jmp ORIGINAL`: r11 is a scratch register of the
//! System V ABI (neither an argument nor preserved), and the flags are dead at a call, so
//! the original sees exactly what its caller passed. The core's journeys patch with it.

use iced_x86::{
    IcedError,
    code_asm::{CodeAssembler, qword_ptr, r11},
};

/// The wrapper's code for address `at`: counts in the word at `counter`, then jumps to
/// `original` (the relocated prologue).
pub fn counting_wrapper(at: u64, counter: u64, original: u64) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    a.mov(r11, counter)?;
    a.lock().inc(qword_ptr(r11))?;
    a.jmp(original)?;
    a.assemble(at)
}

#[cfg(test)]
mod tests {
    use iced_x86::{Code, Decoder, DecoderOptions};

    use super::*;

    #[test]
    fn the_wrapper_counts_then_jumps_to_the_original() {
        let at = 0x7f00_0000_0000;
        let code = counting_wrapper(at, 0x7f00_0001_0008, at - 0x1000).unwrap();
        let insns: Vec<_> = Decoder::with_ip(64, &code, at, DecoderOptions::NONE)
            .into_iter()
            .collect();
        assert_eq!(insns.len(), 3);
        assert_eq!(insns[0].immediate64(), 0x7f00_0001_0008);
        assert!(insns[1].has_lock_prefix());
        assert_eq!(insns[2].code(), Code::Jmp_rel32_64);
        assert_eq!(insns[2].near_branch_target(), at - 0x1000);
    }
}
