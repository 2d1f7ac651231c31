//! Machine code of a function, read in one pass: where it returns to its caller (each `ret`,
//! each tail call), whether an instruction can carry a uprobe on x86-64, and where an entry
//! probe goes when the first instruction cannot carry one.
//!
//! Pure: bytes in, facts out; nothing here reads a file or touches a process. The callers
//! (footprint return probes, the call-tree profiler) run it on thousands of functions, so a
//! function is decoded once, front to back, with one reused `Instruction` and no allocation
//! beyond the result.
//!
//! Decoding is iced-x86's (decoder feature only: lengths, mnemonics, operands, branch
//! targets). What no crate knows is the kernel's own rule for which instructions a uprobe may
//! replace; [`refusal`] restates `arch/x86/kernel/uprobes.c` (Linux 6.x: `is_prefix_bad`,
//! `insn_masking_exception`, `good_insns_64`, and `branch_setup_xol_ops` refusing 0x66 on
//! branches) over the instruction's raw bytes, as the kernel reads them.
//!
//! Never guesses silently: an indirect `jmp` is a return site unless it is recognisably the
//! dispatch of a jump table the function itself loads (a table entry loaded through an index
//! register, possibly rebased, then jumped through).

use std::fmt;

use iced_x86::{Code, Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

/// How a function hands control back to its caller at a [`ReturnSite`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnKind {
    /// `ret` (or `ret imm16`): the result is in rax / xmm0 (rdx / xmm1 for a second part).
    Ret,
    /// `jmp` to code outside the function: that function returns to our caller in our place,
    /// so our result is never in a register we can see here.
    TailCall { target: u64 },
    /// A conditional jump to code outside the function: a tail call only when taken (a probe
    /// here fires either way).
    ConditionalTailCall { target: u64 },
    /// `jmp` through a register or memory that is no jump table of this function.
    IndirectTailCall,
}

/// One place where control leaves the function for its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReturnSite {
    /// Address of the instruction (in the numbering the function's bytes were given with).
    pub address: u64,
    pub len: u8,
    pub kind: ReturnKind,
    /// Why the kernel would refuse a uprobe on this instruction; `None`: it accepts one.
    pub refusal: Option<Refusal>,
}

/// Why the kernel refuses a uprobe on an instruction (`perf_event_open` fails with ENOTSUPP,
/// 524, or ENOEXEC for bytes it cannot decode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a complete instruction.
    Undecodable,
    /// A `lock` prefix or a segment override of es, cs, ss or ds (which is also how `notrack`
    /// and branch hints are spelled).
    Prefix(u8),
    /// An opcode outside the kernel's table of instructions it can single-step out of line.
    Opcode(u8),
    /// `mov ss` / `pop ss`: they delay interrupts, so single-stepping them is refused.
    MasksInterrupts,
    /// A branch with an operand-size prefix (0x66), which Intel and AMD execute differently.
    BranchOperandSize,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Undecodable => write!(f, "the kernel cannot decode it"),
            Self::Prefix(0xf0) => write!(f, "uprobes refuse the lock prefix"),
            Self::Prefix(0x3e) => write!(f, "uprobes refuse the 0x3e (ds / notrack) prefix"),
            Self::Prefix(p) => write!(f, "uprobes refuse the segment prefix {p:#04x}"),
            Self::Opcode(op) => write!(f, "uprobes refuse opcode {op:#04x}"),
            Self::MasksInterrupts => write!(f, "uprobes refuse instructions that load ss"),
            Self::BranchOperandSize => {
                write!(f, "uprobes refuse branches with an operand-size prefix")
            }
        }
    }
}

/// One contiguous piece of a function's code: the whole function, or its hot or cold part.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    pub address: u64,
    pub bytes: &'a [u8],
}

impl Part<'_> {
    fn contains(&self, address: u64) -> bool {
        address
            .checked_sub(self.address)
            .is_some_and(|off| off < self.bytes.len() as u64)
    }
}

/// Every return site of the function whose code is `bytes` at `address`.
pub fn return_sites(bytes: &[u8], address: u64) -> Vec<ReturnSite> {
    return_sites_of(&[Part { address, bytes }])
}

/// Every return site of a function split into `parts` (hot and `.cold`): jumps between its
/// parts stay inside it; jumps anywhere else return to the caller.
pub fn return_sites_of(parts: &[Part<'_>]) -> Vec<ReturnSite> {
    let inside = |target: u64| parts.iter().any(|p| p.contains(target));
    let mut sites = Vec::new();
    let mut insn = Instruction::default();
    for part in parts {
        let mut tables = TableRegisters::default();
        let mut decoder = Decoder::with_ip(64, part.bytes, part.address, DecoderOptions::NONE);
        while decoder.can_decode() {
            let offset = decoder.position();
            decoder.decode_out(&mut insn);
            let kind = match insn.mnemonic() {
                Mnemonic::Ret => Some(ReturnKind::Ret),
                Mnemonic::Jmp => match insn.op0_kind() {
                    OpKind::NearBranch64 if !inside(insn.near_branch_target()) => {
                        Some(ReturnKind::TailCall {
                            target: insn.near_branch_target(),
                        })
                    }
                    OpKind::NearBranch64 => None,
                    _ if insn.code() == Code::Jmp_rm64 && !tables.dispatches(&insn) => {
                        Some(ReturnKind::IndirectTailCall)
                    }
                    _ => None,
                },
                m if is_jcc(m)
                    && insn.op0_kind() == OpKind::NearBranch64
                    && !inside(insn.near_branch_target()) =>
                {
                    Some(ReturnKind::ConditionalTailCall {
                        target: insn.near_branch_target(),
                    })
                }
                _ => None,
            };
            tables.update(&insn);
            if let Some(kind) = kind {
                let bytes = &part.bytes[offset..offset + insn.len()];
                sites.push(ReturnSite {
                    address: insn.ip(),
                    len: insn.len() as u8,
                    kind,
                    refusal: refusal(bytes),
                });
            }
        }
    }
    sites
}

/// Why the kernel would refuse a uprobe on the instruction that `bytes` start with; `None`
/// if it accepts one. Only the instruction's own bytes are read (at most 15).
pub fn refusal(bytes: &[u8]) -> Option<Refusal> {
    let bytes = &bytes[..bytes.len().min(15)];
    let mut decoder = Decoder::new(64, bytes, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        return Some(Refusal::Undecodable);
    }
    kernel_refusal(&bytes[..insn.len()])
}

/// The kernel's checks on one decoded instruction's bytes (see the module doc).
fn kernel_refusal(insn: &[u8]) -> Option<Refusal> {
    let mut i = 0;
    let mut operand_size = false;
    while let Some(&b) = insn.get(i) {
        match b {
            0x26 | 0x2e | 0x36 | 0x3e | 0xf0 => return Some(Refusal::Prefix(b)),
            0x66 => operand_size = true,
            0x64 | 0x65 | 0x67 | 0xf2 | 0xf3 => {}
            _ => break,
        }
        i += 1;
    }
    if matches!(insn.get(i), Some(0x40..=0x4f)) {
        i += 1;
    }
    let at = |k: usize| insn.get(i + k).copied().unwrap_or(0);
    // The kernel's decoder takes the byte after a VEX / EVEX / XOP prefix as the opcode and
    // tests it against the same one-byte table (so `vmovdqu`, 0x6f there, is refused).
    let opcode = match at(0) {
        0xc5 => at(2),
        0xc4 => at(3),
        0x62 => at(4),
        0x8f if at(1) & 0x38 != 0 => at(3),
        op => op,
    };
    let legacy = opcode == at(0);
    if legacy && (opcode == 0x17 || (opcode == 0x8e && (at(1) >> 3) & 7 == 2)) {
        return Some(Refusal::MasksInterrupts);
    }
    if !good_opcode(opcode) {
        return Some(Refusal::Opcode(opcode));
    }
    let branch = matches!(opcode, 0xe8 | 0xe9 | 0xeb | 0x70..=0x7f)
        || (opcode == 0x0f && matches!(at(1), 0x80..=0x8f));
    if legacy && branch && operand_size {
        return Some(Refusal::BranchOperandSize);
    }
    None
}

/// `good_insns_64` of `arch/x86/kernel/uprobes.c`, a row per high nibble, bit n = low nibble
/// n. 0x0f is good: every two- and three-byte opcode passes (checked on 6.18: `syscall` and
/// `ud2` are accepted).
const GOOD_INSNS_64: [u16; 16] = [
    row(b"1111110011111101"), // 00
    row(b"1111110011111100"), // 10
    row(b"1111111011111110"), // 20
    row(b"1111111011111110"), // 30
    row(b"1111111111111111"), // 40
    row(b"1111111111111111"), // 50
    row(b"0001111111110000"), // 60
    row(b"1111111111111111"), // 70
    row(b"1101111111111111"), // 80
    row(b"1111111111011111"), // 90
    row(b"1111111111111111"), // a0
    row(b"1111111111111111"), // b0
    row(b"1111111111110000"), // c0
    row(b"1111000111111111"), // d0
    row(b"1111000011010000"), // e0
    row(b"1011011111001111"), // f0
];

const fn row(bits: &[u8; 16]) -> u16 {
    let mut out = 0;
    let mut i = 0;
    while i < 16 {
        if bits[i] == b'1' {
            out |= 1 << i;
        }
        i += 1;
    }
    out
}

fn good_opcode(op: u8) -> bool {
    GOOD_INSNS_64[usize::from(op >> 4)] & (1 << (op & 15)) != 0
}

fn is_jcc(m: Mnemonic) -> bool {
    use Mnemonic::*;
    matches!(
        m,
        Jo | Jno | Jb | Jae | Je | Jne | Jbe | Ja | Js | Jns | Jp | Jnp | Jl | Jge | Jle | Jg
    )
}

/// Which general registers hold a value loaded from a jump table (through an index register)
/// and at most rebased since: a `jmp` through one of them dispatches a switch. A linear view
/// of the code, which is how compilers lay a dispatch out (load, rebase, jump in a row).
#[derive(Default)]
struct TableRegisters(u32);

impl TableRegisters {
    fn bit(reg: Register) -> u32 {
        gpr_number(reg).map_or(0, |n| 1 << n)
    }

    fn holds(&self, reg: Register) -> bool {
        self.0 & Self::bit(reg) != 0
    }

    /// Whether `insn`, an indirect `jmp`, dispatches a table: through a register holding a
    /// table entry, or straight through a table of absolute addresses (`jmp [table + i*8]`).
    fn dispatches(&self, insn: &Instruction) -> bool {
        match insn.op0_kind() {
            OpKind::Register => self.holds(insn.op0_register()),
            OpKind::Memory => {
                insn.memory_index() != Register::None
                    && insn.memory_base() != Register::RIP
                    && insn.memory_index_scale() == 8
            }
            _ => false,
        }
    }

    fn update(&mut self, insn: &Instruction) {
        if insn.mnemonic() == Mnemonic::Call {
            self.0 = 0; // the callee may change any of them
            return;
        }
        if insn.op_count() == 0 || insn.op0_kind() != OpKind::Register {
            return;
        }
        let dst = insn.op0_register();
        let src_holds = insn.op_count() > 1
            && insn.op1_kind() == OpKind::Register
            && self.holds(insn.op1_register());
        let table_load = insn.op_count() > 1
            && insn.op1_kind() == OpKind::Memory
            && insn.memory_index() != Register::None;
        let holds = match insn.mnemonic() {
            Mnemonic::Mov | Mnemonic::Movsxd | Mnemonic::Movzx | Mnemonic::Movsx => {
                table_load || src_holds
            }
            Mnemonic::Add => self.holds(dst) || src_holds,
            Mnemonic::Cdqe => self.holds(dst),
            _ => false,
        };
        if holds {
            self.0 |= Self::bit(dst);
        } else {
            self.0 &= !Self::bit(dst);
        }
    }
}

/// Where an entry probe goes: the entry itself, or the first instruction after it that the
/// kernel accepts, reached from the entry only through `skipped`, which leave the argument
/// registers and `rsp` as they were at the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryProbe {
    pub address: u64,
    /// The instructions run before the probe fires, described for the user (`lock add`).
    pub skipped: Vec<String>,
}

/// Why no instruction near the entry can carry the probe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("its first instruction, `{insn}` ({bytes}), cannot carry a uprobe ({refusal}), and {why}")]
pub struct Unprobeable {
    pub insn: String,
    pub bytes: String,
    pub refusal: Refusal,
    /// Why the probe cannot move past it.
    pub why: String,
}

/// The instruction at `address` (its first bytes are `bytes`), if it overwrites the low
/// eightbyte of any of xmm0–xmm15: a bit per register, and the instruction as people read it.
///
/// A uprobe's instruction runs before the thread can be stopped (the kernel steps over it,
/// then delivers our SIGSTOP), and the eBPF side cannot see vector registers: so where the
/// probed instruction writes an xmm register that holds an argument, that argument's value is
/// gone by the time it can be read, and must be reported as unavailable, not read wrong.
pub fn xmm_written(bytes: &[u8], address: u64) -> Option<(u16, String)> {
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        return None;
    }
    let reads_only = matches!(
        insn.mnemonic(),
        Mnemonic::Ucomisd
            | Mnemonic::Ucomiss
            | Mnemonic::Comisd
            | Mnemonic::Comiss
            | Mnemonic::Vucomisd
            | Mnemonic::Vucomiss
            | Mnemonic::Vcomisd
            | Mnemonic::Vcomiss
            | Mnemonic::Ptest
            | Mnemonic::Vptest
            | Mnemonic::Vtestps
            | Mnemonic::Vtestpd
            | Mnemonic::Vzeroupper
    );
    let mask = if insn.mnemonic() == Mnemonic::Vzeroall {
        u16::MAX
    } else if reads_only || insn.op_count() == 0 || insn.op0_kind() != OpKind::Register {
        0
    } else {
        // XMM0…31, YMM0…31 and ZMM0…31 are consecutive in iced's Register (its register
        // classes need the instr_info feature; this is all we ask of them).
        let reg = insn.op0_register() as u32;
        [Register::XMM0, Register::YMM0, Register::ZMM0]
            .iter()
            .find_map(|base| reg.checked_sub(*base as u32).filter(|n| *n < 32))
            .filter(|n| *n < 16)
            .map_or(0, |n| 1u16 << n)
    };
    let raw = bytes.get(..insn.len()).unwrap_or(bytes);
    (mask != 0).then(|| (mask, describe(&insn, raw)))
}

/// The most instructions an entry probe is moved past.
const MAX_SKIPPED: usize = 8;

/// Where a probe on the entry of the function whose code is `bytes` at `address` goes (see
/// [`EntryProbe`]). The probe moves only past instructions whose register writes are known
/// and miss the argument registers (rdi, rsi, rdx, rcx, r8, r9, xmm0-7) and `rsp`, that
/// store nothing relative to `rsp` (stack arguments live there), and that fall through; and
/// only to an instruction no branch of the function jumps to (it would fire again there).
pub fn entry_probe(bytes: &[u8], address: u64) -> Result<EntryProbe, Unprobeable> {
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let mut skipped: Vec<String> = Vec::new();
    let mut first: Option<(String, String, Refusal)> = None;
    let fail = |first: Option<(String, String, Refusal)>, why: String| {
        let (insn, bytes, refusal) =
            first.unwrap_or_else(|| ("(none)".into(), String::new(), Refusal::Undecodable));
        Unprobeable {
            insn,
            bytes,
            refusal,
            why,
        }
    };
    let candidate = loop {
        if !decoder.can_decode() {
            return Err(fail(
                first,
                "the function ends before any instruction that can".into(),
            ));
        }
        let offset = decoder.position();
        decoder.decode_out(&mut insn);
        let raw = &bytes[offset..offset + insn.len()];
        let refused = if insn.is_invalid() {
            Some(Refusal::Undecodable)
        } else {
            kernel_refusal(raw)
        };
        let Some(refused) = refused else {
            break insn.ip();
        };
        let name = describe(&insn, raw);
        if first.is_none() {
            first = Some((name.clone(), hex(raw), refused));
        }
        if let Err(why) = skippable(&insn) {
            let why = if skipped.is_empty() {
                why
            } else {
                format!("after it `{name}` {why}")
            };
            return Err(fail(first, why));
        }
        skipped.push(name);
        if skipped.len() > MAX_SKIPPED {
            return Err(fail(
                first,
                format!("no instruction in the first {MAX_SKIPPED} can carry one"),
            ));
        }
    };
    if candidate != address
        && let Some(from) = branch_into(&Part { address, bytes }, address, candidate)
    {
        return Err(fail(
            first,
            format!(
                "the next probeable instruction ({candidate:#x}) is a jump target (from {from:#x})"
            ),
        ));
    }
    Ok(EntryProbe {
        address: candidate,
        skipped,
    })
}

/// Whether an entry probe may move past `insn` (see [`entry_probe`]); else why not.
fn skippable(insn: &Instruction) -> Result<(), String> {
    let writes = register_writes(insn).ok_or_else(|| {
        format!(
            "the probe cannot be moved past `{}` (its effect on the registers is not known here)",
            mnemonic(insn)
        )
    })?;
    if let Some(reg) = writes.into_iter().flatten().find(|&r| is_protected(r)) {
        return Err(format!(
            "it changes {reg:?}, which holds an argument at the entry"
        ));
    }
    if insn.op_count() > 0
        && insn.op0_kind() == OpKind::Memory
        && insn.memory_base() == Register::RSP
    {
        return Err("it writes to the stack, where arguments may be".into());
    }
    Ok(())
}

/// Whether the kernel runs the instruction that `bytes` start with inside the uprobe's trap
/// (it emulates it) rather than by single-stepping a copy of it out of line, which is a second
/// exception: on a VM (Linux 6.18), 15–19 µs a hit against 1–2 µs for an emulated one.
/// Linux 6.18 x86-64 emulates (`branch_setup_xol_ops`, `push_setup_xol_ops`) direct `jmp`,
/// `jcc` and `call rel32`, the nops (`nop`, `xchg %ax,%ax`, `nopl`/`nopw`), and `push` of a
/// general register (a REX prefix only for r8–r15); `endbr64` is stepped like any other.
pub fn kernel_emulates(bytes: &[u8]) -> bool {
    let bytes = &bytes[..bytes.len().min(15)];
    let insn = Decoder::new(64, bytes, DecoderOptions::NONE).decode();
    if insn.is_invalid() || kernel_refusal(&bytes[..insn.len()]).is_some() {
        return false;
    }
    match insn.code() {
        Code::Jmp_rel8_64 | Code::Jmp_rel32_64 | Code::Call_rel32_64 => true,
        Code::Nopw | Code::Nopd | Code::Nop_rm16 | Code::Nop_rm32 => true,
        // One byte, or 0x41 and one byte (push %r8 … %r15).
        Code::Push_r64 => insn.len() == 1 || (insn.len() == 2 && bytes[0] == 0x41),
        _ => is_jcc(insn.mnemonic()) && insn.op0_kind() == OpKind::NearBranch64,
    }
}

/// The most instructions [`emulated_entry_probe`] moves a probe past.
const MAX_SKIPPED_TO_EMULATED: usize = 16;

/// `probe` (an [`entry_probe`] of the function whose code is `bytes` at `address`) moved on to
/// the first instruction the kernel emulates ([`kernel_emulates`]), where a hit costs one
/// exception instead of two; `probe` itself when there is none within reach. The probe moves
/// only past instructions that fall through, whose register writes are known and miss `keep`
/// (the registers the probe reads), `rsp` and `rbp` (where a stack walk starts), that store
/// nothing relative to `rsp`, and only to an instruction that no direct branch of the function
/// or of its `elsewhere` parts (a `.cold` part) lands on or before.
pub fn emulated_entry_probe(
    probe: EntryProbe,
    bytes: &[u8],
    address: u64,
    keep: &[Register],
    elsewhere: &[Part<'_>],
) -> EntryProbe {
    let Some(from) = probe
        .address
        .checked_sub(address)
        .and_then(|o| usize::try_from(o).ok())
        .filter(|o| *o < bytes.len())
    else {
        return probe;
    };
    let kept = keep
        .iter()
        .chain(&[Register::RSP, Register::RBP])
        .filter_map(|r| gpr_number(*r))
        .fold(0u32, |mask, n| mask | 1 << n);
    let mut decoder = Decoder::with_ip(64, &bytes[from..], probe.address, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let mut skipped = probe.skipped.clone();
    let candidate = loop {
        if !decoder.can_decode() || skipped.len() > MAX_SKIPPED_TO_EMULATED {
            return probe;
        }
        let offset = from + decoder.position();
        decoder.decode_out(&mut insn);
        let raw = &bytes[offset..offset + insn.len()];
        if insn.is_invalid() {
            return probe;
        }
        if kernel_emulates(raw) {
            break insn.ip();
        }
        let keeps = register_writes(&insn).is_some_and(|writes| {
            writes
                .into_iter()
                .flatten()
                .all(|r| gpr_number(r).is_none_or(|n| kept & 1 << n == 0))
        });
        let stack_store = insn.op_count() > 0
            && insn.op0_kind() == OpKind::Memory
            && insn.memory_base() == Register::RSP;
        if !keeps || stack_store {
            return probe;
        }
        skipped.push(describe(&insn, raw));
    };
    if candidate == probe.address {
        return probe;
    }
    let lands_between = std::iter::once(&Part { address, bytes })
        .chain(elsewhere)
        .any(|part| branch_into(part, address, candidate).is_some());
    if lands_between {
        return probe;
    }
    EntryProbe {
        address: candidate,
        skipped,
    }
}

/// A direct branch in `part` (the function itself, or a part of it elsewhere) that lands
/// after the function's `entry` and at or before `candidate`; its address.
fn branch_into(part: &Part<'_>, entry: u64, candidate: u64) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, part.bytes, part.address, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut insn);
        if insn.op_count() > 0 && insn.op0_kind() == OpKind::NearBranch64 {
            let target = insn.near_branch_target();
            if entry < target && target <= candidate {
                return Some(insn.ip());
            }
        }
    }
    None
}

/// The registers `insn` writes (besides flags), for the instructions whose writes are plain
/// (destination operand, and the few with a second one); `None` for anything else, including
/// every instruction that branches, calls, returns or moves `rsp` implicitly.
fn register_writes(insn: &Instruction) -> Option<[Option<Register>; 2]> {
    use Mnemonic::*;
    let reg = |n: u32| (insn.op_kind(n) == OpKind::Register).then(|| insn.op_register(n));
    let m = insn.mnemonic();
    Some(match m {
        Nop | Endbr64 | Cmp | Test | Bt | Pause | Lfence | Mfence | Sfence | Prefetchnta
        | Prefetcht0 | Prefetcht1 | Prefetcht2 | Prefetchw => [None, None],
        Add | Or | Adc | Sbb | And | Sub | Xor | Inc | Dec | Not | Neg | Mov | Movzx | Movsx
        | Movsxd | Lea | Bts | Btr | Btc | Shl | Shr | Sar | Rol | Ror | Imul | Movaps | Movups
        | Movdqa | Movdqu | Movq | Movd | Pxor | Xorps | Xorpd
            if insn.op_count() >= 2 =>
        {
            [reg(0), None]
        }
        Inc | Dec | Not | Neg => [reg(0), None],
        Xadd | Xchg => [reg(0), reg(1)],
        Cmpxchg => [reg(0), Some(Register::RAX)],
        _ if is_cmovcc(m) || is_setcc(m) => [reg(0), None],
        _ => return None,
    })
}

fn is_cmovcc(m: Mnemonic) -> bool {
    use Mnemonic::*;
    matches!(
        m,
        Cmovo
            | Cmovno
            | Cmovb
            | Cmovae
            | Cmove
            | Cmovne
            | Cmovbe
            | Cmova
            | Cmovs
            | Cmovns
            | Cmovp
            | Cmovnp
            | Cmovl
            | Cmovge
            | Cmovle
            | Cmovg
    )
}

fn is_setcc(m: Mnemonic) -> bool {
    use Mnemonic::*;
    matches!(
        m,
        Seto | Setno
            | Setb
            | Setae
            | Sete
            | Setne
            | Setbe
            | Seta
            | Sets
            | Setns
            | Setp
            | Setnp
            | Setl
            | Setge
            | Setle
            | Setg
    )
}

/// The argument registers of the System V ABI, `rsp`, and the vector argument registers.
fn is_protected(reg: Register) -> bool {
    // Hardware numbers: rcx 1, rdx 2, rsp 4, rsi 6, rdi 7, r8 8, r9 9.
    gpr_number(reg).is_some_and(|n| matches!(n, 1 | 2 | 4 | 6 | 7 | 8 | 9))
        || vector_number(reg).is_some_and(|n| n < 8)
}

/// The hardware number (rax 0 … r15 15) of the 64-bit register `reg` is part of. (iced's
/// own `full_register` needs its `instr_info` feature, a large table this reader does not
/// otherwise need.)
fn gpr_number(reg: Register) -> Option<u32> {
    let r = reg as u32;
    let from = |first: Register| r - first as u32;
    Some(match reg {
        _ if (Register::AL..=Register::R15L).contains(&reg) => {
            // al cl dl bl, then ah ch dh bh (of registers 0-3), then spl bpl sil dil r8l…
            let i = from(Register::AL);
            if i < 8 { i % 4 } else { i - 4 }
        }
        _ if (Register::AX..=Register::R15W).contains(&reg) => from(Register::AX),
        _ if (Register::EAX..=Register::R15D).contains(&reg) => from(Register::EAX),
        _ if (Register::RAX..=Register::R15).contains(&reg) => from(Register::RAX),
        _ => return None,
    })
}

/// The number of the vector register (xmm, ymm or zmm) `reg` is part of.
fn vector_number(reg: Register) -> Option<u32> {
    let r = reg as u32;
    [Register::XMM0, Register::YMM0, Register::ZMM0]
        .into_iter()
        .find_map(|first| r.checked_sub(first as u32).filter(|&i| i < 32))
}

fn mnemonic(insn: &Instruction) -> String {
    format!("{:?}", insn.mnemonic()).to_lowercase()
}

/// `lock add`, `notrack jmp`: the mnemonic with the prefixes a refusal is about.
fn describe(insn: &Instruction, raw: &[u8]) -> String {
    let mut out = String::new();
    for &b in raw {
        let prefix = match b {
            0xf0 => "lock ",
            0x3e if insn.mnemonic() == Mnemonic::Jmp || insn.mnemonic() == Mnemonic::Call => {
                "notrack "
            }
            0x2e => "cs ",
            0x3e => "ds ",
            0x26 => "es ",
            0x36 => "ss ",
            0x64 | 0x65 | 0x66 | 0x67 | 0xf2 | 0xf3 => continue,
            _ => break,
        };
        out.push_str(prefix);
    }
    out + &mnemonic(insn)
}

fn hex(raw: &[u8]) -> String {
    raw.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The condition code (0-15, the low nibble of `0x7X` / `0x0F 0x8X`) of a conditional jump,
/// after any prefixes.
pub fn condition_code(bytes: &[u8]) -> Option<u8> {
    let mut i = 0;
    while matches!(
        bytes.get(i),
        Some(0x2e | 0x3e | 0x66 | 0x67 | 0xf2 | 0xf3 | 0x40..=0x4f)
    ) {
        i += 1;
    }
    match (*bytes.get(i)?, bytes.get(i + 1)) {
        (op @ 0x70..=0x7f, _) => Some(op & 0xf),
        (0x0f, Some(&op @ 0x80..=0x8f)) => Some(op & 0xf),
        _ => None,
    }
}

#[cfg(test)]
mod tests;

/// The GOT slot a PLT stub at `address` jumps through (`jmp *slot(%rip)`, after an optional
/// `endbr64`, with or without the `bnd` prefix), or `None` when the code there is no such stub.
pub fn plt_slot(bytes: &[u8], address: u64) -> Option<u64> {
    let (bytes, address) = match bytes {
        [0xf3, 0x0f, 0x1e, 0xfa, rest @ ..] => (rest, address + 4),
        _ => (bytes, address),
    };
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    let insn = decoder.decode();
    (insn.code() == Code::Jmp_rm64 && insn.is_ip_rel_memory_operand())
        .then(|| insn.ip_rel_memory_address())
}
