//! Call frame information from the binary's `.eh_frame` (what the C++ unwinder reads too):
//! - the canonical frame address at one instruction ([`cfa_at`]): a parameter that DWARF
//!   places relative to its function's frame base (`DW_OP_fbreg`, over
//!   `DW_OP_call_frame_cfa`) is found from the registers a probe captured;
//! - the whole file compiled into the kernel unwinder's compact rows ([`unwind_rows`],
//!   `oi_common::stack::Row`): for each address range, CFA = rsp+off or rbp+off, where the
//!   caller's rbp was saved, and where the stack ends.
//!
//! Pure: reads the mapped file. gimli's unwinder evaluates the CFI programs; only the rules an
//! x86-64 stack walk needs are kept (CFA, return address, rbp).

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, EndianSlice, LittleEndian, Register, RegisterRule,
    UnwindContext, UnwindSection as _, UnwindTableRow,
};
use object::{Object as _, ObjectSection as _};
use oi_common::stack::{Row, rule};

use super::Binary;

/// CFA = value of DWARF register `register` + `offset`, at one instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cfa {
    pub register: u16,
    pub offset: i64,
}

/// DWARF register numbers of x86-64 (System V psABI, figure 3.36).
const RBP: Register = Register(6);
const RSP: Register = Register(7);
const RA: Register = Register(16);

type Section<'a> = EhFrame<EndianSlice<'a, LittleEndian>>;

/// The file's `.eh_frame` and the base addresses its pointers are relative to.
fn eh_frame(binary: &Binary) -> Option<(Section<'_>, BaseAddresses)> {
    let obj = binary.object().ok()?;
    let eh_frame = obj.section_by_name(".eh_frame")?;
    let data = eh_frame.data().ok()?;
    let section = EhFrame::new(data, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(eh_frame.address());
    if let Some(text) = obj.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = obj.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    Some((section, bases))
}

/// The CFA rule at ELF address `pc`; `None` without call frame information for it, or when
/// the rule is an expression.
pub fn cfa_at(binary: &Binary, pc: u64) -> Option<Cfa> {
    let (section, bases) = eh_frame(binary)?;
    let mut ctx = Box::new(UnwindContext::new());
    let row = section
        .unwind_info_for_address(&bases, &mut ctx, pc, EhFrame::cie_from_offset)
        .ok()?;
    match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => Some(Cfa {
            register: register.0,
            offset: *offset,
        }),
        CfaRule::Expression(_) => None,
    }
}

/// The function (its FDE's range: start address and length) that the instruction at ELF
/// address `pc` belongs to, by `.eh_frame`; what names a local function a stripped library
/// jumps to (glibc's `memalign` → its static `_mid_memalign`).
pub fn function_range(binary: &Binary, pc: u64) -> Option<(u64, u64)> {
    let (section, bases) = eh_frame(binary)?;
    let fde = section
        .fde_for_address(&bases, pc, EhFrame::cie_from_offset)
        .ok()?;
    Some((fde.initial_address(), fde.len()))
}

/// One file's unwind table for the kernel: rows sorted by `pc`, which is an offset from
/// `base` (the lowest address any FDE covers), each rule holding up to the next row.
#[derive(Debug, Default, Clone)]
pub struct UnwindRows {
    pub base: u64,
    pub rows: Vec<Row>,
    /// Address ranges whose rules the kernel cannot follow (compiled as `rule::UNSUPPORTED`).
    pub unsupported: u64,
}

/// Compiles the whole `.eh_frame` of `binary` into rows; an empty table when it has none.
/// Ranges between functions (no FDE) become `rule::NONE` rows, so a pc there is not
/// mistaken for the end of the function before it.
pub fn unwind_rows(binary: &Binary) -> Result<UnwindRows, gimli::Error> {
    let Some((section, bases)) = eh_frame(binary) else {
        return Ok(UnwindRows::default());
    };
    // (start, end, row without pc) of every row of every FDE, in the section's order.
    let mut ranges: Vec<(u64, u64, Row)> = Vec::new();
    let mut unsupported = 0;
    let mut ctx = Box::new(UnwindContext::new());
    let mut entries = section.entries(&bases);
    while let Some(entry) = entries.next()? {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        // A damaged FDE costs its own function's rows, not the file's.
        let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else {
            continue;
        };
        let Ok(mut table) = fde.rows(&section, &bases, &mut ctx) else {
            continue;
        };
        while let Ok(Some(r)) = table.next_row() {
            if r.start_address() >= r.end_address() {
                continue;
            }
            let row = compile(r, &section);
            if row.rule == rule::UNSUPPORTED {
                unsupported += 1;
            }
            ranges.push((r.start_address(), r.end_address(), row));
        }
    }
    ranges.sort_by_key(|&(start, end, _)| (start, end));
    let Some(&(base, _, _)) = ranges.first() else {
        return Ok(UnwindRows::default());
    };
    let mut rows: Vec<Row> = Vec::with_capacity(ranges.len());
    let mut covered_to = base;
    for (start, end, mut row) in ranges {
        // Beyond 4 GiB of code from the base: not representable (never seen in practice).
        let Ok(pc) = u32::try_from(start - base) else {
            break;
        };
        if start > covered_to {
            // covered_to < start, whose offset fits.
            push_merged(&mut rows, gap_at((covered_to - base) as u32));
        }
        row.pc = pc;
        push_merged(&mut rows, row);
        covered_to = covered_to.max(end);
    }
    if let Ok(end) = u32::try_from(covered_to - base) {
        push_merged(&mut rows, gap_at(end));
    }
    Ok(UnwindRows {
        base,
        rows,
        unsupported,
    })
}

fn gap_at(pc: u32) -> Row {
    Row {
        pc,
        rule: rule::NONE,
        ..Row::default()
    }
}

/// Appends `row` unless the last row already says the same (then it covers `row`'s range
/// too); a row at the same pc as the last replaces it (the later FDE wins an overlap).
fn push_merged(rows: &mut Vec<Row>, row: Row) {
    if let Some(last) = rows.last_mut() {
        let same =
            (last.rule, last.cfa_offset, last.rbp_slot) == (row.rule, row.cfa_offset, row.rbp_slot);
        if same {
            return;
        }
        if last.pc == row.pc {
            *last = row;
            if rows.len() >= 2 {
                let prev = rows[rows.len() - 2];
                if (prev.rule, prev.cfa_offset, prev.rbp_slot)
                    == (row.rule, row.cfa_offset, row.rbp_slot)
                {
                    rows.pop();
                }
            }
            return;
        }
    }
    rows.push(row);
}

/// The kernel's form of one gimli row (its `pc` is set by the caller).
fn compile(r: &UnwindTableRow<usize>, section: &Section<'_>) -> Row {
    let unsupported = Row {
        rule: rule::UNSUPPORTED,
        ..Row::default()
    };
    // The return address: at CFA − 8 (pushed by `call`), or undefined in the outermost frame.
    match r.register(RA) {
        Some(RegisterRule::Offset(-8)) => {}
        None | Some(RegisterRule::Undefined) => {
            return Row {
                rule: rule::END,
                ..Row::default()
            };
        }
        Some(_) => return unsupported,
    }
    let rbp_slot = match r.register(RBP) {
        None | Some(RegisterRule::SameValue) | Some(RegisterRule::Undefined) => 0,
        Some(RegisterRule::Offset(off)) if off % 8 == 0 && off != 0 => {
            match i8::try_from(off / 8) {
                Ok(slot) => slot,
                Err(_) => return unsupported,
            }
        }
        Some(_) => return unsupported,
    };
    let (cfa_rule, offset) = match r.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if *register == RSP => {
            (rule::CFA_RSP, *offset)
        }
        CfaRule::RegisterAndOffset { register, offset } if *register == RBP => {
            (rule::CFA_RBP, *offset)
        }
        CfaRule::RegisterAndOffset { .. } => return unsupported,
        CfaRule::Expression(e) => {
            match e.get(section).ok().and_then(|e| plt_threshold(e.0.slice())) {
                Some(threshold) => (rule::CFA_PLT, i64::from(threshold)),
                None => return unsupported,
            }
        }
    };
    let Ok(cfa_offset) = u16::try_from(offset) else {
        return unsupported;
    };
    Row {
        pc: 0,
        cfa_offset,
        rule: cfa_rule,
        rbp_slot,
    }
}

/// The CFA expression gcc and ld write for every PLT entry: rsp + 8 + ((rip & 15) >= N) << 3
/// (`DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_litN; DW_OP_ge;
/// DW_OP_lit3; DW_OP_shl; DW_OP_plus`), N being where the entry's `push` ends. Returns N.
fn plt_threshold(expr: &[u8]) -> Option<u8> {
    const LIT0: u8 = 0x30;
    match expr {
        [
            0x77,
            0x08,
            0x80,
            0x00,
            0x3f,
            0x1a,
            lit,
            0x2a,
            0x33,
            0x24,
            0x22,
        ] if (LIT0..LIT0 + 16).contains(lit) => Some(lit - LIT0),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use gimli::{EhFrameHdr, Encoding, EvaluationResult, Format, Location, Value};
    use object::SectionFlags;

    use super::*;

    /// What one unwind step finds at a pc, for given rsp and rbp.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Step {
        /// No call frame information covers the pc.
        NoCfi,
        /// The outermost frame.
        End,
        /// A rule the kernel does not follow.
        Unsupported,
        Frame {
            cfa: u64,
            ra_at: u64,
            rbp_at: Option<u64>,
        },
    }

    const SP: u64 = 0x7ffd_0000_1000;
    const BP: u64 = 0x7ffd_0000_8000;

    /// The kernel's algorithm (`oi-ebpf/src/stack.rs`: find the row, step) over the rows.
    fn by_rows(t: &UnwindRows, pc: u64) -> Step {
        let Some(offset) = pc.checked_sub(t.base).and_then(|o| u32::try_from(o).ok()) else {
            return Step::NoCfi;
        };
        let at = t.rows.partition_point(|r| r.pc <= offset);
        let Some(row) = at.checked_sub(1).map(|i| t.rows[i]) else {
            return Step::NoCfi;
        };
        let cfa = match row.rule {
            rule::NONE => return Step::NoCfi,
            rule::END => return Step::End,
            rule::CFA_RSP => SP + u64::from(row.cfa_offset),
            rule::CFA_RBP => BP + u64::from(row.cfa_offset),
            rule::CFA_PLT => {
                SP + 8
                    + if pc & 15 >= u64::from(row.cfa_offset) {
                        8
                    } else {
                        0
                    }
            }
            _ => return Step::Unsupported,
        };
        Step::Frame {
            cfa,
            ra_at: cfa - 8,
            rbp_at: (row.rbp_slot != 0)
                .then(|| cfa.wrapping_add((i64::from(row.rbp_slot) * 8) as u64)),
        }
    }

    /// The same step from gimli's own evaluation: its FDE lookup through `.eh_frame_hdr`, its
    /// CFI interpreter, its DWARF expression evaluator. Limited to what the kernel follows:
    /// the return address at CFA − 8, rbp saved in a slot, a CFA offset of 16 bits.
    fn by_gimli(
        table: &gimli::EhHdrTable<'_, EndianSlice<'_, LittleEndian>>,
        section: &Section<'_>,
        bases: &BaseAddresses,
        ctx: &mut UnwindContext<usize>,
        pc: u64,
    ) -> Step {
        let Ok(row) =
            table.unwind_info_for_address(section, bases, ctx, pc, EhFrame::cie_from_offset)
        else {
            return Step::NoCfi;
        };
        match row.register(RA) {
            None | Some(RegisterRule::Undefined) => return Step::End,
            Some(RegisterRule::Offset(-8)) => {}
            Some(_) => return Step::Unsupported,
        }
        let cfa = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => {
                if !(0..=i64::from(u16::MAX)).contains(offset) {
                    return Step::Unsupported;
                }
                match *register {
                    RSP => SP.wrapping_add(*offset as u64),
                    RBP => BP.wrapping_add(*offset as u64),
                    _ => return Step::Unsupported,
                }
            }
            CfaRule::Expression(e) => {
                let expr = e.get(section).expect("expression");
                let encoding = Encoding {
                    format: Format::Dwarf32,
                    version: 1,
                    address_size: 8,
                };
                let mut eval = expr.evaluation(encoding);
                let mut result = eval.evaluate();
                loop {
                    match result {
                        Ok(EvaluationResult::Complete) => break,
                        Ok(EvaluationResult::RequiresRegister { register, .. }) => {
                            let value = match register.0 {
                                7 => SP,
                                6 => BP,
                                16 => pc,
                                _ => return Step::Unsupported,
                            };
                            result = eval.resume_with_register(Value::Generic(value));
                        }
                        _ => return Step::Unsupported,
                    }
                }
                match eval.result().first().map(|p| &p.location) {
                    Some(Location::Address { address }) => *address,
                    _ => return Step::Unsupported,
                }
            }
        };
        let rbp_at = match row.register(RBP) {
            None | Some(RegisterRule::SameValue) | Some(RegisterRule::Undefined) => None,
            Some(RegisterRule::Offset(off)) if off % 8 == 0 && (-1024..1024).contains(&off) => {
                Some(cfa.wrapping_add(off as u64))
            }
            Some(_) => return Step::Unsupported,
        };
        Step::Frame {
            cfa,
            ra_at: cfa - 8,
            rbp_at,
        }
    }

    /// Compares the two at every `stride`th byte of every executable section of `path`;
    /// returns what the pcs found.
    struct Seen {
        frames: u64,
        pcs: u64,
        end: u64,
    }

    fn agrees_with_gimli(path: &std::path::Path, stride: u64) -> Seen {
        let binary = Binary::open(path).expect("open");
        let compiled = unwind_rows(&binary).expect("rows");
        assert!(!compiled.rows.is_empty(), "{}: no rows", path.display());
        let obj = binary.object().expect("elf");
        let (section, bases) = eh_frame(&binary).expect(".eh_frame");
        let hdr = obj.section_by_name(".eh_frame_hdr").expect(".eh_frame_hdr");
        let bases = bases.set_eh_frame_hdr(hdr.address());
        let parsed = EhFrameHdr::new(hdr.data().expect("hdr"), LittleEndian)
            .parse(&bases, 8)
            .expect("parse hdr");
        let table = parsed.table().expect("hdr table");
        let mut ctx = Box::new(UnwindContext::new());
        let (mut frames, mut pcs) = (0, 0);
        let mut ends = 0;
        for s in obj.sections() {
            let SectionFlags::Elf { sh_flags } = s.flags() else {
                continue;
            };
            if sh_flags & u64::from(object::elf::SHF_EXECINSTR) == 0 {
                continue;
            }
            let mut pc = s.address();
            while pc < s.address() + s.size() {
                let want = by_gimli(&table, &section, &bases, &mut ctx, pc);
                let got = by_rows(&compiled, pc);
                assert_eq!(got, want, "{} at pc {pc:#x}", path.display());
                if matches!(want, Step::Frame { .. }) {
                    frames += 1;
                }
                ends += u64::from(want == Step::End);
                pcs += 1;
                pc += stride;
            }
        }
        // Not a vacuous comparison: frames and gaps both occur.
        assert!(
            frames > 0 && frames < pcs,
            "{}: {frames} of {pcs}",
            path.display()
        );
        Seen {
            frames,
            pcs,
            end: ends,
        }
    }

    fn system_library(name: &str) -> std::path::PathBuf {
        ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"]
            .iter()
            .map(|d| std::path::Path::new(d).join(name))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{name} not found"))
    }

    #[test]
    fn rows_agree_with_gimli_on_an_o2_fixture() {
        let exe = crate::unwind::live_tests::build(&["-O2", "-fomit-frame-pointer"]);
        // `_start` marks its return address undefined: the end of every stack.
        assert!(agrees_with_gimli(&exe, 1).end > 0);
        agrees_with_gimli(&exe.with_file_name("libunwind_hop.so"), 1);
    }

    #[test]
    fn rows_agree_with_gimli_on_libc() {
        let seen = agrees_with_gimli(&system_library("libc.so.6"), 3);
        assert!(
            seen.frames * 2 > seen.pcs,
            "{} of {}",
            seen.frames,
            seen.pcs
        );
    }

    #[test]
    fn rows_agree_with_gimli_on_libstdcxx() {
        let seen = agrees_with_gimli(&system_library("libstdc++.so.6"), 3);
        assert!(
            seen.frames * 2 > seen.pcs,
            "{} of {}",
            seen.frames,
            seen.pcs
        );
    }

    /// The PLT's CFI is the one expression the kernel follows; gcc and ld write it so.
    #[test]
    fn recognises_the_plt_expression() {
        let lit = |n: u8| 0x30 + n;
        let plt = [
            0x77,
            0x08,
            0x80,
            0x00,
            lit(15),
            0x1a,
            lit(11),
            0x2a,
            lit(3),
            0x24,
            0x22,
        ];
        assert_eq!(plt_threshold(&plt), Some(11));
        assert_eq!(plt_threshold(&plt[..10]), None);
    }
}
