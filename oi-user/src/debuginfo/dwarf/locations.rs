//! Where the parameters of one copy of a function are at one instruction: a clone's own
//! `DW_AT_location`s (its calling convention differs from the source's when g++ dropped or
//! split a parameter) or an inlined copy's, evaluated at the probed address.
//!
//! Pure: reads DWARF only. Location lists are read raw: g++ marks the locations valid at an
//! instruction's start with empty ranges (`[pc, pc)`, told apart by location views), which
//! gimli's cooked iterator skips as empty; a probe fires before the instruction at `pc` runs,
//! which is what every view at `pc` describes. Expressions are understood in the shapes
//! compilers give parameters; anything else is reported as unavailable, never guessed.

use gimli::{AttributeValue, Operation, RawLocListEntry, constants as dw};

use super::{Attr, DebugInfo, DieRef, DwarfError, R};

/// Where one parameter's value is (DWARF register numbers: 0 rax, 1 rdx, 2 rcx, 3 rbx,
/// 4 rsi, 5 rdi, 6 rbp, 7 rsp, 8-15 r8-r15, 17-32 xmm0-15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamLocation {
    /// In these registers, the low eightbyte first.
    Registers(Vec<u16>),
    /// In memory at register + offset.
    Memory { register: u16, offset: i64 },
    /// In memory at the canonical frame address + offset (the caller finds the CFA through
    /// the call frame information).
    FrameBase { offset: i64 },
    /// Nowhere: the value is register + offset (a pointer to a local object).
    Computed { register: u16, offset: i64 },
    /// Nowhere: the value is this ELF address (a pointer to a global: add the load bias).
    Address(u64),
    /// Nowhere: the value is this constant.
    Constant(u64),
    /// No location at this instruction; why, for the user.
    Unavailable(String),
}

/// One parameter of one copy.
#[derive(Debug, Clone)]
pub struct CopyParam {
    /// Source name (`this` for the object parameter).
    pub name: Option<String>,
    pub ty: Option<DieRef>,
    /// Compiler-generated (the `this` pointer).
    pub artificial: bool,
    pub location: ParamLocation,
}

impl DebugInfo<'_> {
    /// The parameters of the function `copy` is a copy of (a clone's concrete DIE, or an
    /// inlined subroutine), in declaration order, each with where it is at `pc`. `at_entry`:
    /// `pc` is the copy's own entry, where a parameter's entry value is its register.
    pub fn copy_params(
        &self,
        copy: DieRef,
        pc: u64,
        at_entry: bool,
    ) -> Result<Vec<CopyParam>, DwarfError> {
        // The declaration order and the types live on the abstract DIE the copy comes from.
        let mut abstract_die = copy;
        for _ in 0..4 {
            match self.reference(abstract_die, dw::DW_AT_abstract_origin)? {
                Some(o) => abstract_die = o,
                None => break,
            }
        }
        let mut own: Vec<(DieRef, DieRef)> = Vec::new(); // (abstract param, copy param)
        for child in self.children(copy)? {
            if self.tag(child)? == dw::DW_TAG_formal_parameter {
                let origin = self.reference(child, dw::DW_AT_abstract_origin)?;
                own.push((origin.unwrap_or(child), child));
            }
        }
        let frame_base = self.frame_base_of(copy)?;
        let mut params = Vec::new();
        let declared: Vec<DieRef> = self
            .children(abstract_die)?
            .into_iter()
            .filter(|&c| self.tag(c).is_ok_and(|t| t == dw::DW_TAG_formal_parameter))
            .collect();
        let list = if declared.is_empty() {
            own.iter().map(|&(a, _)| a).collect()
        } else {
            declared
        };
        for param in list {
            let name = match self.attr_inherited(param, dw::DW_AT_name)? {
                Some(Attr::Str(s)) => Some(s),
                _ => None,
            };
            let ty = match self.attr_inherited(param, dw::DW_AT_type)? {
                Some(Attr::Ref(r)) => Some(r),
                _ => None,
            };
            let artificial = matches!(
                self.attr_inherited(param, dw::DW_AT_artificial)?,
                Some(Attr::Flag(true))
            );
            let location = match own.iter().find(|(a, _)| *a == param) {
                Some(&(_, die)) => self.location_at(die, pc, at_entry, frame_base)?,
                None => ParamLocation::Unavailable(
                    "the compiler dropped it from this copy of the function".into(),
                ),
            };
            params.push(CopyParam {
                name,
                ty,
                artificial,
                location,
            });
        }
        Ok(params)
    }

    /// The frame base of the out-of-line function holding `die`: `Some(register)` for a
    /// register-based one, `None` for the CFA (`DW_OP_call_frame_cfa`, what g++ writes).
    fn frame_base_of(&self, die: DieRef) -> Result<Option<u16>, DwarfError> {
        let mut cur = Some(die);
        while let Some(d) = cur {
            if self.tag(d)? == dw::DW_TAG_subprogram {
                let entry = self.entry(d)?;
                if let Some(AttributeValue::Exprloc(e)) = entry.attr_value(dw::DW_AT_frame_base) {
                    let unit = &self.units[d.unit];
                    let mut ops = e.operations(unit.encoding());
                    if let Ok(Some(Operation::Register { register })) = ops.next() {
                        return Ok(Some(register.0));
                    }
                }
                return Ok(None);
            }
            cur = self.parent(d)?;
        }
        Ok(None)
    }

    /// Where the parameter `die` is at `pc`.
    fn location_at(
        &self,
        die: DieRef,
        pc: u64,
        at_entry: bool,
        frame_base: Option<u16>,
    ) -> Result<ParamLocation, DwarfError> {
        let entry = self.entry(die)?;
        if let Some(value) = entry.attr_value(dw::DW_AT_const_value) {
            let shown = match value {
                AttributeValue::Sdata(v) => v.to_string(),
                v => v
                    .udata_value()
                    .map_or("a constant".into(), |v| v.to_string()),
            };
            return Ok(ParamLocation::Unavailable(format!(
                "the compiler dropped it from this copy of the function: it is {shown} at \
                 every call"
            )));
        }
        let Some(value) = entry.attr_value(dw::DW_AT_location) else {
            return Ok(ParamLocation::Unavailable(
                "it has no location in this copy (optimized out)".into(),
            ));
        };
        let unit = &self.units[die.unit];
        let expression = match value {
            AttributeValue::Exprloc(e) => Some(e),
            v => {
                let corrupt = |e| self.corrupt(e);
                let Some(offset) = self.dwarf.attr_locations_offset(unit, v).map_err(corrupt)?
                else {
                    return Ok(ParamLocation::Unavailable(
                        "its location is in a form not read here".into(),
                    ));
                };
                self.list_entry_at(die.unit, offset, pc)?
            }
        };
        let Some(expression) = expression else {
            return Ok(ParamLocation::Unavailable(format!(
                "it has no location at {pc:#x} (optimized out there)"
            )));
        };
        Ok(evaluate(
            expression.0,
            unit.encoding(),
            at_entry,
            frame_base,
        ))
    }

    /// The expression of the location list at `offset` that holds at `pc`.
    fn list_entry_at(
        &self,
        unit_index: usize,
        offset: gimli::LocationListsOffset<usize>,
        pc: u64,
    ) -> Result<Option<gimli::Expression<R<'_>>>, DwarfError> {
        let unit = &self.units[unit_index];
        let corrupt = |e| self.corrupt(e);
        let mut raw = self.dwarf.raw_locations(unit, offset).map_err(corrupt)?;
        let mut base = unit.low_pc;
        let address = |i| self.dwarf.address(unit, i).map_err(corrupt);
        // An empty range at `pc` (a location view) holds at `pc`, as a range around it does.
        let holds =
            |begin: u64, end: u64| begin <= pc && (pc < end || (begin == end && begin == pc));
        while let Some(entry) = raw.next().map_err(corrupt)? {
            let (begin, end, data) = match entry {
                RawLocListEntry::BaseAddress { addr } => {
                    base = addr;
                    continue;
                }
                RawLocListEntry::BaseAddressx { addr } => {
                    base = address(addr)?;
                    continue;
                }
                RawLocListEntry::AddressOrOffsetPair { begin, end, data }
                | RawLocListEntry::OffsetPair { begin, end, data } => {
                    (base.wrapping_add(begin), base.wrapping_add(end), data)
                }
                RawLocListEntry::StartEnd { begin, end, data } => (begin, end, data),
                RawLocListEntry::StartLength {
                    begin,
                    length,
                    data,
                } => (begin, begin.wrapping_add(length), data),
                RawLocListEntry::StartxEndx { begin, end, data } => {
                    (address(begin)?, address(end)?, data)
                }
                RawLocListEntry::StartxLength {
                    begin,
                    length,
                    data,
                } => {
                    let b = address(begin)?;
                    (b, b.wrapping_add(length), data)
                }
                RawLocListEntry::DefaultLocation { data } => (0, u64::MAX, data),
            };
            if holds(begin, end) {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }
}

/// The shapes of location expressions compilers give parameters (see [`ParamLocation`]).
fn evaluate(
    expression: R<'_>,
    encoding: gimli::Encoding,
    at_entry: bool,
    frame_base: Option<u16>,
) -> ParamLocation {
    let mut ops = Vec::new();
    let mut reader = gimli::Expression(expression).operations(encoding);
    loop {
        match reader.next() {
            Ok(Some(op)) => ops.push(op),
            Ok(None) => break,
            Err(e) => return ParamLocation::Unavailable(format!("unreadable location ({e})")),
        }
    }
    let unknown = || {
        ParamLocation::Unavailable(format!(
            "its location expression ({} operations) is not one read here",
            ops.len()
        ))
    };
    use Operation as Op;
    match ops.as_slice() {
        [] => ParamLocation::Unavailable("it has no location here (optimized out)".into()),
        [Op::Register { register }] => ParamLocation::Registers(vec![register.0]),
        [
            Op::RegisterOffset {
                register, offset, ..
            },
        ] => ParamLocation::Memory {
            register: register.0,
            offset: *offset,
        },
        [Op::FrameOffset { offset }] => match frame_base {
            Some(register) => ParamLocation::Memory {
                register,
                offset: *offset,
            },
            None => ParamLocation::FrameBase { offset: *offset },
        },
        [
            Op::RegisterOffset {
                register, offset, ..
            },
            Op::StackValue,
        ] => ParamLocation::Computed {
            register: register.0,
            offset: *offset,
        },
        [Op::Address { address }, Op::StackValue] => ParamLocation::Address(*address),
        [Op::UnsignedConstant { value }, Op::StackValue] => ParamLocation::Constant(*value),
        [Op::SignedConstant { value }, Op::StackValue] => ParamLocation::Constant(*value as u64),
        [Op::EntryValue { expression }, Op::StackValue] if at_entry => {
            // At the copy's own entry, a register's entry value is the register.
            let mut inner = gimli::Expression(*expression).operations(encoding);
            match (inner.next(), inner.next()) {
                (Ok(Some(Op::Register { register })), Ok(None)) => {
                    ParamLocation::Registers(vec![register.0])
                }
                _ => unknown(),
            }
        }
        [Op::EntryValue { .. }, ..] => ParamLocation::Unavailable(
            "only its value at the function's entry is known here, not where it is".into(),
        ),
        [Op::ImplicitPointer { .. }] => ParamLocation::Unavailable(
            "it points at an object the compiler keeps in registers only (no copy in memory)"
                .into(),
        ),
        pieces if pieces.len() % 2 == 0 && pieces.len() >= 4 => {
            // One register per eightbyte: `reg, piece 8, reg, piece 8`.
            let mut registers = Vec::new();
            for pair in pieces.chunks(2) {
                match pair {
                    [
                        Op::Register { register },
                        Op::Piece {
                            size_in_bits: 64,
                            bit_offset: None,
                        },
                    ] => registers.push(register.0),
                    [Op::Piece { .. }, ..] | [_, Op::Piece { .. }] => {
                        return ParamLocation::Unavailable(
                            "part of it is optimized out here".into(),
                        );
                    }
                    _ => return unknown(),
                }
            }
            ParamLocation::Registers(registers)
        }
        _ => unknown(),
    }
}
