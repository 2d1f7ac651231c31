//! The canonical frame address at one instruction, from the binary's `.eh_frame` (what the
//! C++ unwinder reads too): a parameter that DWARF places relative to its function's frame
//! base (`DW_OP_fbreg`, over `DW_OP_call_frame_cfa`) is found from the registers a probe
//! captured.
//!
//! Pure: reads the mapped file. gimli's unwinder does the work; only the CFA rule is taken.

use gimli::{BaseAddresses, CfaRule, EhFrame, UnwindContext, UnwindSection as _};
use object::{Object as _, ObjectSection as _};

use super::Binary;

/// CFA = value of DWARF register `register` + `offset`, at one instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cfa {
    pub register: u16,
    pub offset: i64,
}

/// The CFA rule at ELF address `pc`; `None` without call frame information for it, or when
/// the rule is an expression.
pub fn cfa_at(binary: &Binary, pc: u64) -> Option<Cfa> {
    let obj = binary.object().ok()?;
    let eh_frame = obj.section_by_name(".eh_frame")?;
    let data = eh_frame.data().ok()?;
    let section = EhFrame::new(data, gimli::LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(eh_frame.address());
    if let Some(text) = obj.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
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
    let obj = binary.object().ok()?;
    let eh_frame = obj.section_by_name(".eh_frame")?;
    let data = eh_frame.data().ok()?;
    let section = EhFrame::new(data, gimli::LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(eh_frame.address());
    if let Some(text) = obj.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    let fde = section
        .fde_for_address(&bases, pc, EhFrame::cie_from_offset)
        .ok()?;
    Some((fde.initial_address(), fde.len()))
}
