use iced_x86::{Code, Decoder, DecoderOptions, Instruction};

use super::*;

const ENTRY: u64 = 0x5555_5555_1000;
/// A destination 1 GiB below the function: within reach, far enough that every rel8 and
/// RIP-relative displacement must change.
const AT: u64 = ENTRY - (1 << 30);

fn decode_all(code: &[u8], ip: u64) -> Vec<Instruction> {
    let mut dec = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut out = Vec::new();
    while dec.can_decode() {
        out.push(dec.decode());
    }
    out
}

/// push rbp; mov rbp, rsp; sub rsp, 16; mov [rbp-4], edi; ... ret
const FRAME_PROLOGUE: &[u8] = &[
    0x55, // push rbp
    0x48, 0x89, 0xe5, // mov rbp, rsp
    0x48, 0x83, 0xec, 0x10, // sub rsp, 16
    0x89, 0x7d, 0xfc, // mov [rbp-4], edi
    0xc9, // leave
    0xc3, // ret
];

#[test]
fn a_frame_prologue_moves_whole_instructions_and_jumps_back() {
    let p = analyse(ENTRY, FRAME_PROLOGUE).unwrap();
    assert_eq!(
        p.len, 8,
        "push, mov and sub: the first whole instructions past 5 bytes"
    );
    let r = relocate(&p, AT).unwrap();
    assert_eq!(&r.code[..8], &FRAME_PROLOGUE[..8]);
    let out = decode_all(&r.code, AT);
    assert_eq!(out.len(), 4);
    assert_eq!(out[3].code(), Code::Jmp_rel32_64);
    assert_eq!(out[3].near_branch_target(), ENTRY + 8);
    assert_eq!(r.offsets, vec![(0, 0), (1, 1), (4, 4), (8, 8)]);
    assert_eq!(r.original, &FRAME_PROLOGUE[..8]);
    // A thread inside the copy goes back to the matching original instruction.
    assert_eq!(r.original_of(AT), Some(ENTRY));
    assert_eq!(r.original_of(AT + 4), Some(ENTRY + 4));
    assert_eq!(r.original_of(AT + 8), Some(ENTRY + 8));
    assert_eq!(r.original_of(AT + r.code.len() as u64), None);
    assert_eq!(r.original_of(AT - 1), None);
}

#[test]
fn a_rip_relative_operand_still_reaches_its_target() {
    // mov rax, [rip+0x2000]; ret (padded)
    let body = [0x48, 0x8b, 0x05, 0x00, 0x20, 0x00, 0x00, 0xc3];
    let target = ENTRY + 7 + 0x2000;
    let p = analyse(ENTRY, &body).unwrap();
    assert_eq!(p.len, 7);
    let r = relocate(&p, AT).unwrap();
    let out = decode_all(&r.code, AT);
    assert!(out[0].is_ip_rel_memory_operand());
    assert_eq!(out[0].ip_rel_memory_address(), target);
    assert_ne!(&r.code[..7], &body[..7], "the displacement changed");
    assert_eq!(out[1].near_branch_target(), ENTRY + 7);
}

#[test]
fn a_short_conditional_jump_becomes_a_near_one_to_the_same_target() {
    // test rdi, rdi; je +0x10; xor eax, eax; ret; ... (the je's target beyond the prologue)
    let mut body = vec![0x48, 0x85, 0xff, 0x74, 0x10, 0x31, 0xc0, 0xc3];
    body.resize(0x20, 0x90);
    let target = ENTRY + 5 + 0x10;
    let p = analyse(ENTRY, &body).unwrap();
    assert_eq!(p.len, 5);
    let r = relocate(&p, AT).unwrap();
    let out = decode_all(&r.code, AT);
    assert_eq!(
        out[1].code(),
        Code::Je_rel32_64,
        "rel8 cannot reach back from 1 GiB"
    );
    assert_eq!(out[1].near_branch_target(), target);
    assert_eq!(out[2].near_branch_target(), ENTRY + 5);
}

#[test]
fn every_refusal_says_why() {
    assert_eq!(
        analyse(ENTRY, &[0x31, 0xc0, 0xc3]).unwrap_err(),
        Refusal::TooShort { size: 3 }
    );
    // xor eax, eax; ret; then padding of the next function's alignment.
    assert_eq!(
        analyse(ENTRY, &[0x31, 0xc0, 0xc3, 0x90, 0x90, 0x90, 0x90]).unwrap_err(),
        Refusal::EndsEarly {
            offset: 2,
            mnemonic: "ret".into()
        }
    );
    // jmp +0 (to the next instruction): a tail jump inside the patch.
    assert!(matches!(
        analyse(ENTRY, &[0xeb, 0x00, 0x90, 0x90, 0x90, 0xc3]).unwrap_err(),
        Refusal::EndsEarly { offset: 0, .. }
    ));
    assert!(matches!(
        analyse(ENTRY, &[0x0f, 0x0b, 0x90, 0x90, 0x90, 0xc3]).unwrap_err(),
        Refusal::EndsEarly { offset: 0, .. }
    ));
    // A uprobe's int3 on the entry...
    assert!(matches!(
        analyse(ENTRY, &[0xcc, 0x48, 0x89, 0xe5, 0x90, 0x90, 0xc3]).unwrap_err(),
        Refusal::EndsEarly { offset: 0, .. } | Refusal::Breakpoint { offset: 0 }
    ));
    // ... or a byte 0xCC inside an instruction of the replaced bytes.
    assert_eq!(
        analyse(ENTRY, &[0xb8, 0xcc, 0, 0, 0, 0xc3]).unwrap_err(),
        Refusal::Breakpoint { offset: 1 }
    );
    // A loop back to +1, inside the replaced bytes, from the body's end.
    let mut body = FRAME_PROLOGUE.to_vec();
    body.extend([0x75, (1i8 - (body.len() as i8 + 2)) as u8]);
    assert_eq!(
        analyse(ENTRY, &body).unwrap_err(),
        Refusal::BranchInto {
            from: FRAME_PROLOGUE.len() as u64,
            to: 1
        }
    );
    // A branch to the entry itself is fine (it will take the patch, as any caller).
    let mut body = FRAME_PROLOGUE.to_vec();
    body.extend([0x75, (-(body.len() as i8 + 2)) as u8]);
    assert!(analyse(ENTRY, &body).is_ok());
    // call rel32 as the first instruction.
    assert_eq!(
        analyse(ENTRY, &[0xe8, 0, 0, 0, 0, 0xc3]).unwrap_err(),
        Refusal::CallInPrologue { offset: 0 }
    );
    // Undecodable bytes (a lone REX prefix at the end of the body's first instruction).
    assert!(matches!(
        analyse(ENTRY, &[0x55, 0x48, 0x89, 0xe5, 0x90, 0x06]).unwrap_err(),
        Refusal::Undecodable { offset: 5 }
    ));
    // A RIP-relative operand 3 GiB away from the destination.
    let body = [0x48, 0x8b, 0x05, 0x00, 0x20, 0x00, 0x00, 0xc3];
    let p = analyse(ENTRY, &body).unwrap();
    assert!(matches!(
        relocate(&p, ENTRY + (3 << 30)).unwrap_err(),
        Refusal::RipOutOfReach { offset: 0, .. }
    ));
    // An instruction the encoder cannot place: a jcc to a target it cannot reach and may not
    // rewrite, from the far end of the address space.
    let mut body = vec![0x48, 0x85, 0xff, 0x74, 0x10, 0x31, 0xc0, 0xc3];
    body.resize(0x20, 0x90);
    let p = analyse(ENTRY, &body).unwrap();
    assert!(matches!(
        relocate(&p, 0x7fff_0000_0000 + (1 << 40)).unwrap_err(),
        Refusal::Unrelocatable { .. }
    ));
}
