//! The reader against the kernel's verdicts measured on Linux 6.18, and against `objdump` on
//! every function of a real g++ -O0 and -O2 fixture.

use std::{
    collections::{BTreeSet, HashMap},
    path::Path,
    process::Command,
};

use object::{Object as _, ObjectSection as _, ObjectSymbol as _, SymbolKind};

use super::*;
use crate::interp::live_tests::build_fixture;

/// What `perf_event_open` answered for a uprobe on each of these instructions on 6.18 (ok, or
/// ENOTSUPP): the table [`refusal`] must agree with.
#[test]
fn refusals_agree_with_the_kernel() {
    let cases: &[(&[u8], Option<Refusal>)] = &[
        (&[0xf0, 0x48, 0x83, 0x07, 0x01], Some(Refusal::Prefix(0xf0))), // lock add
        (&[0xf0, 0x48, 0x0f, 0xb1, 0x17], Some(Refusal::Prefix(0xf0))), // lock cmpxchg
        (&[0x0f, 0x05], None),                                          // syscall
        (&[0x0f, 0x0b], None),                                          // ud2
        (&[0x0f, 0x1f, 0x44, 0x00, 0x00], None),                        // nopl
        // cs nopw: the padding g++ puts between functions
        (
            &[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
            Some(Refusal::Prefix(0x2e)),
        ),
        (&[0x3e, 0xff, 0xe0], Some(Refusal::Prefix(0x3e))), // notrack jmp *%rax
        (&[0xc3], None),                                    // ret
        (&[0xf3, 0xc3], None),                              // rep ret
        (&[0xf2, 0xc3], None),                              // bnd ret
        (&[0xc2, 0x08, 0x00], None),                        // ret $8
        (&[0xc5, 0xf8, 0x77], None),                        // vzeroupper
        (&[0xc5, 0xfa, 0x6f, 0x07], Some(Refusal::Opcode(0x6f))), // vmovdqu
        (&[0xc5, 0xf9, 0xef, 0xc0], Some(Refusal::Opcode(0xef))), // vpxor
        (&[0x62, 0xf1, 0x7c, 0x48, 0x10, 0x07], None),      // vmovups zmm (EVEX)
        (&[0x66, 0x0f, 0x6f, 0x07], None),                  // movdqa
        (&[0x0f, 0x38, 0x00, 0xc1], None),                  // pshufb (three-byte opcode)
        (&[0x66, 0xe9, 0, 0, 0, 0], Some(Refusal::BranchOperandSize)), // jmpw
        (&[0xf3, 0x0f, 0x1e, 0xfa], None),                  // endbr64
        (&[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], None), // mov %fs:0x28,%rax
        (&[0xff, 0xe0], None),                              // jmp *%rax
        (&[0xff, 0x60, 0x10], None),                        // jmp *0x10(%rax)
        (&[0x55], None),                                    // push %rbp
        (&[0x41, 0x54], None),                              // push %r12
        (&[0x48, 0x8b, 0x05, 0, 0, 0, 0], None),            // mov 0(%rip),%rax
        (&[0xe8, 0, 0, 0, 0], None),                        // call
        (&[0x2e, 0x74, 0x00], Some(Refusal::Prefix(0x2e))), // je with a branch hint
        (&[0x48, 0x87, 0x07], None),                        // xchg (implicitly locked)
        (&[0xcc], Some(Refusal::Opcode(0xcc))),             // int3
        (&[0xc9], None),                                    // leave
        (&[0x8e, 0xd0], Some(Refusal::MasksInterrupts)),    // mov %eax,%ss
        (&[0x0f, 0x01, 0xd0], None),                        // xgetbv
        (&[0x0f], Some(Refusal::Undecodable)),
    ];
    for (bytes, want) in cases {
        assert_eq!(refusal(bytes), *want, "{bytes:02x?}");
    }
}

/// A function's parts (hot, and `.cold` if there is one), by mangled name.
struct Function {
    parts: Vec<(u64, u64)>,
}

/// Every function of `binary` with code in `.text`, keyed by mangled name, with its cold part.
fn read_functions(binary: &Path) -> (Vec<u8>, HashMap<String, Function>, u64, u64) {
    let data = std::fs::read(binary).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let text = obj.section_by_name(".text").unwrap();
    let (text_off, _) = text.file_range().unwrap();
    let mut by_name: HashMap<String, (u64, u64)> = HashMap::new();
    for sym in obj.symbols() {
        if sym.kind() == SymbolKind::Text
            && sym.size() > 0
            && sym.section_index() == Some(text.index())
        {
            by_name.insert(sym.name().unwrap().to_string(), (sym.address(), sym.size()));
        }
    }
    let mut out = HashMap::new();
    let mut seen = BTreeSet::new();
    for (name, &(address, size)) in &by_name {
        if name.ends_with(".cold") || !seen.insert(address) {
            continue;
        }
        let mut parts = vec![(address, size)];
        if let Some(&cold) = by_name.get(&format!("{name}.cold")) {
            parts.push(cold);
        }
        out.insert(name.clone(), Function { parts });
    }
    let text_addr = text.address();
    drop(obj);
    (data, out, text_addr, text_off)
}

fn parts_of<'a>(data: &'a [u8], f: &Function, text: (u64, u64)) -> Vec<Part<'a>> {
    f.parts
        .iter()
        .map(|&(address, size)| {
            let off = (address - text.0 + text.1) as usize;
            Part {
                address,
                bytes: &data[off..off + size as usize],
            }
        })
        .collect()
}

/// What objdump says of every instruction: address → (mnemonic without prefixes, operands).
fn objdump(binary: &Path) -> HashMap<u64, (String, String)> {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "-j", ".text"])
        .arg(binary)
        .output()
        .expect("objdump runs");
    assert!(out.status.success());
    let mut insns = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((addr, rest)) = line.trim_start().split_once(":\t") else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        let mut words = rest.split_whitespace().peekable();
        while words
            .peek()
            .is_some_and(|w| matches!(*w, "rep" | "repz" | "bnd" | "notrack" | "data16" | "cs"))
        {
            words.next();
        }
        let mnemonic = words.next().unwrap_or("").to_string();
        let operands = words.collect::<Vec<_>>().join(" ");
        insns.insert(addr, (mnemonic, operands));
    }
    insns
}

/// On every function of the fixture, the `ret`s and direct tail calls are exactly those
/// objdump shows (a direct jump is a tail call when it leaves the function and its cold
/// part), and every indirect tail call is an indirect `jmp` of objdump's.
fn check_against_objdump(flags: &[&str]) -> HashMap<String, Vec<ReturnSite>> {
    let binary = build_fixture("real_binaries", flags);
    let (data, functions, text_addr, text_off) = read_functions(&binary);
    let listing = objdump(&binary);
    let mut all = HashMap::new();
    assert!(functions.len() > 20, "{}", functions.len());
    for (name, f) in &functions {
        let parts = parts_of(&data, f, (text_addr, text_off));
        let sites = return_sites_of(&parts);
        let inside = |a: u64| f.parts.iter().any(|&(s, n)| s <= a && a < s + n);
        let mut rets = BTreeSet::new();
        let mut tails = BTreeSet::new();
        let mut indirect = BTreeSet::new();
        for (&addr, (mnemonic, operands)) in &listing {
            if !inside(addr) {
                continue;
            }
            let target = operands
                .split_whitespace()
                .next()
                .and_then(|t| u64::from_str_radix(t, 16).ok());
            if mnemonic.starts_with("ret") {
                rets.insert(addr);
            } else if mnemonic.starts_with('j') && operands.starts_with('*') {
                indirect.insert(addr);
            } else if mnemonic.starts_with('j')
                && let Some(t) = target
                && !inside(t)
            {
                tails.insert(addr);
            }
        }
        let ours = |pick: fn(&ReturnKind) -> bool| -> BTreeSet<u64> {
            sites
                .iter()
                .filter(|s| pick(&s.kind))
                .map(|s| s.address)
                .collect()
        };
        assert_eq!(ours(|k| *k == ReturnKind::Ret), rets, "rets of {name}");
        assert_eq!(
            ours(|k| matches!(
                k,
                ReturnKind::TailCall { .. } | ReturnKind::ConditionalTailCall { .. }
            )),
            tails,
            "tail calls of {name}"
        );
        assert!(
            ours(|k| *k == ReturnKind::IndirectTailCall).is_subset(&indirect),
            "indirect tail calls of {name}"
        );
        all.insert(name.clone(), sites);
    }
    all
}

#[test]
fn return_sites_at_o0_agree_with_objdump() {
    let sites = check_against_objdump(&["-O0"]);
    // -O0: one `ret` per function, no tail calls; the switch's table jump is no return.
    for name in [
        "_ZN4shop7forwardEl",
        "_ZN4shop8classifyEil",
        "_ZN4shop7harvestEl",
    ] {
        let kinds: Vec<ReturnKind> = sites[name].iter().map(|s| s.kind).collect();
        assert_eq!(kinds, [ReturnKind::Ret], "{name}");
    }
}

#[test]
fn return_sites_at_o2_agree_with_objdump() {
    let sites = check_against_objdump(&["-O2", "-fomit-frame-pointer"]);
    let kinds = |name: &str| -> Vec<ReturnKind> { sites[name].iter().map(|s| s.kind).collect() };
    // forward: `ret` for even x, `jmp helper` for odd x.
    let forward = kinds("_ZN4shop7forwardEl");
    assert_eq!(forward.len(), 2, "{forward:?}");
    assert!(forward.contains(&ReturnKind::Ret));
    assert!(
        forward
            .iter()
            .any(|k| matches!(k, ReturnKind::TailCall { .. })),
        "{forward:?}"
    );
    // dispatch: `jmp *%rax`, a tail call through a pointer.
    assert_eq!(
        kinds("_ZN4shop8dispatchEPFllEl"),
        [ReturnKind::IndirectTailCall]
    );
    // classify: its table jump is no return; its cases return or tail-call helper.
    let classify = kinds("_ZN4shop8classifyEil");
    assert!(
        !classify.contains(&ReturnKind::IndirectTailCall),
        "{classify:?}"
    );
    assert!(classify.contains(&ReturnKind::Ret), "{classify:?}");
    // The isra clone of inspect ends in a tail call to record.
    let isra = kinds("_ZNK4shop12_GLOBAL__N_16Ledger7inspectEl.isra.0");
    assert!(
        matches!(isra.as_slice(), [ReturnKind::TailCall { .. }]),
        "{isra:?}"
    );
    // Every return site of the fixture's own code can carry a uprobe.
    for (name, s) in &sites {
        if name.starts_with("_ZN4shop") {
            assert!(s.iter().all(|s| s.refusal.is_none()), "{name}: {s:?}");
        }
    }
}

/// A jump into a function's own cold part stays inside it when the part is given.
#[test]
fn jumps_into_the_cold_part_are_no_tail_calls() {
    let binary = build_fixture("real_binaries", &["-O2", "-fomit-frame-pointer"]);
    let (data, functions, text_addr, text_off) = read_functions(&binary);
    let deeper = &functions["_ZN4shop6deeperERKSt6vectorIlSaIlEEl"];
    assert_eq!(
        deeper.parts.len(),
        2,
        "g++ made no .cold part of shop::deeper"
    );
    let parts = parts_of(&data, deeper, (text_addr, text_off));
    let whole = return_sites_of(&parts);
    assert!(
        whole
            .iter()
            .all(|s| !matches!(s.kind, ReturnKind::ConditionalTailCall { .. })),
        "{whole:?}"
    );
    // Alone, the hot part's jump to the cold part looks like a way out.
    let hot = return_sites_of(&parts[..1]);
    assert!(
        hot.iter()
            .any(|s| matches!(s.kind, ReturnKind::ConditionalTailCall { target } if target == deeper.parts[1].0)),
        "{hot:?}"
    );
}

#[test]
fn entry_probe_moves_past_a_lock_prefix() {
    let binary = build_fixture("real_binaries", &["-O2", "-fomit-frame-pointer"]);
    let (data, functions, text_addr, text_off) = read_functions(&binary);
    let isra = &functions["_ZNK4shop12_GLOBAL__N_16Ledger7inspectEl.isra.0"];
    let part = parts_of(&data, isra, (text_addr, text_off))[0];
    assert_eq!(
        refusal(part.bytes),
        Some(Refusal::Prefix(0xf0)),
        "g++ did not start the .isra clone with a lock prefix"
    );
    let probe = entry_probe(part.bytes, part.address).unwrap();
    assert_eq!(probe.skipped, ["lock add"]);
    let len = Decoder::new(64, part.bytes, DecoderOptions::NONE)
        .decode()
        .len() as u64;
    assert_eq!(probe.address, part.address + len);

    // -O0: the entry itself.
    let binary = build_fixture("real_binaries", &["-O0"]);
    let (data, functions, text_addr, text_off) = read_functions(&binary);
    let inspect = &functions["_ZNK4shop12_GLOBAL__N_16Ledger7inspectEl"];
    let part = parts_of(&data, inspect, (text_addr, text_off))[0];
    let probe = entry_probe(part.bytes, part.address).unwrap();
    assert_eq!((probe.address, probe.skipped.len()), (part.address, 0));
}

#[test]
fn entry_probe_refuses_to_move_past_what_changes_arguments() {
    // lock addq $1,(%rdi); mov %rsi,%rdi; ret: the probe fires before the mov runs.
    let before = [0xf0, 0x48, 0x83, 0x07, 0x01, 0x48, 0x89, 0xf7, 0xc3];
    assert_eq!(entry_probe(&before, 0x1000).unwrap().address, 0x1005);
    // lock xadd %rdi,(%rax): it writes rdi, and the probe would fire after it.
    let xadd = [0xf0, 0x48, 0x0f, 0xc1, 0x38, 0xc3];
    let err = entry_probe(&xadd, 0x1000).unwrap_err();
    assert_eq!(err.insn, "lock xadd");
    assert_eq!(err.refusal, Refusal::Prefix(0xf0));
    assert_eq!(err.bytes, "f0 48 0f c1 38");
    assert!(err.why.contains("RDI"), "{err}");
    // lock addq $1,(%rdi); ret; jmp back to the ret: the ret is a jump target.
    let target = [0xf0, 0x48, 0x83, 0x07, 0x01, 0xc3, 0xeb, 0xfd];
    assert!(
        entry_probe(&target, 0x1000)
            .unwrap_err()
            .why
            .contains("jump target")
    );
    // lock addq $1,(%rsp): a stack store.
    let stack = [0xf0, 0x48, 0x83, 0x04, 0x24, 0x01, 0xc3];
    assert!(
        entry_probe(&stack, 0x1000)
            .unwrap_err()
            .why
            .contains("stack")
    );
    // lock incq (%rdi); lock decq (%rsi); mov $1,%eax: two skipped, eax is no argument.
    let two = [
        0xf0, 0x48, 0xff, 0x07, 0xf0, 0x48, 0xff, 0x0e, 0xb8, 1, 0, 0, 0, 0xc3,
    ];
    let probe = entry_probe(&two, 0x1000).unwrap();
    assert_eq!((probe.address, probe.skipped.len()), (0x1008, 2));
}

#[test]
fn vector_registers_a_first_instruction_overwrites() {
    // mulsd %xmm0,%xmm1 (xmm1 written), the first instruction of an -O1 `place(Tagged, double)`.
    let (mask, name) = xmm_written(&[0xf2, 0x0f, 0x59, 0xc8, 0xc3], 0x1000).unwrap();
    assert_eq!(mask, 1 << 1, "{name}");
    // vaddsd %xmm2,%xmm9,%xmm10: VEX, three operands, the destination is xmm10.
    let (mask, _) = xmm_written(&[0xc4, 0x41, 0x33, 0x58, 0xd2], 0x1000).unwrap();
    assert_eq!(mask, 1 << 10);
    // ucomisd %xmm1,%xmm0 only reads; push %rbp and endbr64 touch no vector register.
    assert!(xmm_written(&[0x66, 0x0f, 0x2e, 0xc1], 0x1000).is_none());
    assert!(xmm_written(&[0x55], 0x1000).is_none());
    assert!(xmm_written(&[0xf3, 0x0f, 0x1e, 0xfa], 0x1000).is_none());
    // movsd %xmm0,(%rdi): a store, xmm0 intact.
    assert!(xmm_written(&[0xf2, 0x0f, 0x11, 0x07], 0x1000).is_none());
    // vzeroall clears every vector register.
    assert_eq!(
        xmm_written(&[0xc5, 0xfc, 0x77], 0x1000).unwrap().0,
        u16::MAX
    );
}

#[test]
fn what_the_kernel_emulates() {
    // Emulated (6.18 x86-64, measured: one exception a hit): push of a general register,
    // direct jumps, conditional jumps, call rel32, the nops.
    for bytes in [
        &[0x53][..],                           // push %rbx
        &[0x41, 0x54],                         // push %r12
        &[0xeb, 0x00],                         // jmp rel8
        &[0xe9, 0, 0, 0, 0],                   // jmp rel32
        &[0x74, 0x00],                         // je rel8
        &[0x0f, 0x85, 0, 0, 0, 0],             // jne rel32
        &[0xe8, 0, 0, 0, 0],                   // call rel32
        &[0x90],                               // nop
        &[0x66, 0x90],                         // xchg %ax,%ax
        &[0x0f, 0x1f, 0x40, 0x00],             // nopl 0(%rax)
        &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00], // nopw 0(%rax,%rax)
    ] {
        assert!(kernel_emulates(bytes), "{bytes:02x?}");
    }
    // Stepped out of line (two exceptions), or refused.
    for bytes in [
        &[0xf3, 0x0f, 0x1e, 0xfa][..], // endbr64
        &[0x48, 0x85, 0xff],           // test %rdi,%rdi
        &[0x48, 0x89, 0xf8],           // mov %rdi,%rax
        &[0xc3],                       // ret
        &[0x48, 0x53],                 // rex.w push %rbx: the kernel takes REX 0x41 only
        &[0x41, 0x90],                 // xchg %eax,%r8d, no nop
        &[0xff, 0xe0],                 // jmp *%rax
        &[0x66, 0xe8, 0, 0],           // call with an operand-size prefix: refused
        &[0xf0, 0x48, 0xff, 0x07],     // lock incq (%rdi): refused
    ] {
        assert!(!kernel_emulates(bytes), "{bytes:02x?}");
    }
}

#[test]
fn entry_probe_moves_on_to_an_emulated_instruction() {
    use iced_x86::Register::{RDI, RDX, RSI};
    let moved = |bytes: &[u8], keep: &[Register], elsewhere: &[Part<'_>]| {
        let probe = entry_probe(bytes, 0x1000).unwrap();
        emulated_entry_probe(probe, bytes, 0x1000, keep, elsewhere).address - 0x1000
    };
    // glibc's free: test %rdi,%rdi; je …: the probe goes on the je.
    let free = [0x48, 0x85, 0xff, 0x74, 0x01, 0xc3, 0xc3];
    assert_eq!(moved(&free, &[RDI], &[]), 3);
    // libstdc++'s operator new: endbr64; test %rdi,%rdi; mov $1,%eax; push %rbx.
    let new = [
        0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x85, 0xff, 0xb8, 1, 0, 0, 0, 0x53, 0x5b, 0xc3,
    ];
    let probe = emulated_entry_probe(
        entry_probe(&new, 0x1000).unwrap(),
        &new,
        0x1000,
        &[RDI, RSI, RDX],
        &[],
    );
    assert_eq!(probe.address, 0x100c);
    assert_eq!(probe.skipped, ["endbr64", "test", "mov"]);
    // Already emulated: push %r12 stays.
    assert_eq!(moved(&[0x41, 0x54, 0x41, 0x5c, 0xc3], &[RDI], &[]), 0);
    // mov %rsi,%rdi changes an argument the probe reads: the entry stays…
    let changes = [0x48, 0x89, 0xf7, 0x53, 0x5b, 0xc3];
    assert_eq!(moved(&changes, &[RDI], &[]), 0);
    // … but not one it does not read (a free reads rdi only).
    let other = [0x48, 0x89, 0xf2, 0x53, 0x5b, 0xc3]; // mov %rsi,%rdx; push %rbx
    assert_eq!(moved(&other, &[RDI], &[]), 3);
    assert_eq!(moved(&other, &[RDI, RSI, RDX], &[]), 0);
    // rbp (a stack walk's frame pointer) and rsp stores keep it too.
    assert_eq!(moved(&[0x48, 0x89, 0xfd, 0x53, 0x5b, 0xc3], &[RDI], &[]), 0);
    assert_eq!(
        moved(
            &[0x48, 0x89, 0x7c, 0x24, 0xf8, 0x53, 0x5b, 0xc3],
            &[RDI],
            &[]
        ),
        0
    );
    // A branch of the function, or of its cold part, lands on the je: it stays.
    let looped = [0x48, 0x85, 0xff, 0x74, 0x01, 0xc3, 0xeb, 0xfb];
    assert_eq!(moved(&looped, &[RDI], &[]), 0);
    let cold_bytes = [0xe9, 0xfe, 0xef, 0xff, 0xff]; // at 0x2000: jmp 0x1003
    let cold = Part {
        address: 0x2000,
        bytes: &cold_bytes,
    };
    assert_eq!(moved(&free, &[RDI], &[cold]), 0);
}

#[test]
fn condition_codes_of_short_and_near_jumps() {
    assert_eq!(condition_code(&[0x75, 0x10]), Some(0x5)); // jne rel8
    assert_eq!(condition_code(&[0x0f, 0x84, 0, 0, 0, 0]), Some(0x4)); // je rel32
    assert_eq!(condition_code(&[0xf2, 0x0f, 0x8f, 0, 0, 0, 0]), Some(0xf)); // bnd jg
    assert_eq!(condition_code(&[0xe9, 0, 0, 0, 0]), None); // jmp
}
