//! Where each argument is at a sample: its DWARF location turned into registers, stack slots
//! or an address (for clones and inlined copies through the call frame rule at the probed
//! instruction), then resolved against the captured registers. Never reads beyond the
//! registers and the stack words the location names.

use super::*;

impl Measurer {
    /// Where each argument's object is at this sample, for a walker running in the target.
    /// `load_bias`: of the probed file (arguments that point at globals are ELF addresses).
    /// The first argument that lives in one of the xmm registers of `mask` (bit n: xmmN), and
    /// that register's number.
    pub fn arg_in_vector_registers(&self, mask: u16) -> Option<(&str, usize)> {
        self.args.iter().find_map(|a| {
            let regs: &[usize] = match &a.location {
                Location::Regs(r) => r,
                Location::Indirect(r)
                | Location::At { reg: r, .. }
                | Location::Computed { reg: r, .. } => std::slice::from_ref(r),
                _ => &[],
            };
            regs.iter()
                .filter_map(|r| r.checked_sub(abi::XMM0))
                .find(|n| *n < 16 && mask & (1 << n) != 0)
                .map(|n| (a.name.as_str(), n))
        })
    }

    /// Whether an argument lives in an xmm register: the caller then fills
    /// [`EntryRegs::xmm`] from the stopped thread before [`Self::locate`].
    pub fn needs_vector_registers(&self) -> bool {
        let vector = |r: &usize| *r >= abi::XMM0;
        self.args.iter().any(|a| match &a.location {
            Location::Regs(r) => r.iter().any(vector),
            Location::Indirect(r)
            | Location::At { reg: r, .. }
            | Location::Computed { reg: r, .. } => vector(r),
            _ => false,
        })
    }

    pub fn locate(
        &self,
        regs: &EntryRegs,
        load_bias: u64,
        mem: &dyn MemoryReader,
    ) -> Result<Vec<Located>, MeasureError> {
        self.args
            .iter()
            .map(|a| self.locate_arg(a, regs, load_bias, mem))
            .collect()
    }

    pub(super) fn locate_arg(
        &self,
        a: &ArgPlan,
        regs: &EntryRegs,
        bias: u64,
        mem: &dyn MemoryReader,
    ) -> Result<Located, MeasureError> {
        let reg = |n: usize| match n {
            abi::RAX => regs.rax,
            abi::RBX => regs.rbx,
            abi::RBP => regs.rbp,
            abi::RSP => regs.rsp,
            n if (abi::R10..abi::R10 + 6).contains(&n) => {
                [regs.r10, regs.r11, regs.r12, regs.r13, regs.r14, regs.r15][n - abi::R10]
            }
            n if (abi::XMM0..abi::XMM0 + 16).contains(&n) => regs.xmm[n - abi::XMM0],
            n => regs.int_args().get(n).copied().unwrap_or(0),
        };
        let value_bytes = |v: u64| {
            let mut b = v.to_le_bytes().to_vec();
            b.resize(a.size as usize, 0);
            Located::Registers(b)
        };
        let read_word = |addr: u64| -> Result<u64, MeasureError> {
            let mut b = [0u8; 8];
            mem.read(addr, &mut b).map_err(|e| MeasureError::Walk {
                arg: a.name.clone(),
                source: e.into(),
            })?;
            Ok(u64::from_le_bytes(b))
        };
        Ok(match (&a.location, a.deref) {
            (Location::Regs(r), true) => Located::Memory(reg(r[0])),
            (Location::Stack(off), true) => Located::Memory(read_word(regs.rsp + off)?),
            (Location::Stack(off), false) => Located::Memory(regs.rsp + off),
            (Location::Indirect(r), false) => Located::Memory(reg(*r)),
            (Location::Indirect(r), true) => Located::Memory(read_word(reg(*r))?),
            (Location::Regs(r), false) => {
                let mut b: Vec<u8> = r.iter().flat_map(|&n| reg(n).to_le_bytes()).collect();
                b.resize(a.size as usize, 0);
                Located::Registers(b)
            }
            (Location::At { reg: r, offset }, true) => {
                Located::Memory(read_word(reg(*r).wrapping_add(*offset as u64))?)
            }
            (Location::At { reg: r, offset }, false) => {
                Located::Memory(reg(*r).wrapping_add(*offset as u64))
            }
            (Location::Computed { reg: r, offset }, true) => {
                Located::Memory(reg(*r).wrapping_add(*offset as u64))
            }
            (Location::Computed { reg: r, offset }, false) => {
                value_bytes(reg(*r).wrapping_add(*offset as u64))
            }
            (Location::Address(addr), true) => Located::Memory(addr.wrapping_add(bias)),
            (Location::Address(addr), false) => value_bytes(addr.wrapping_add(bias)),
            (Location::Constant(c), true) => Located::Memory(*c),
            (Location::Constant(c), false) => value_bytes(*c),
            (Location::Unavailable(_), _) => Located::Unavailable,
        })
    }
}

/// A [`CopyAt`] with the call frame rule at its `pc`.
pub(super) struct Placed {
    pub(super) at: CopyAt,
    pub(super) cfa: Option<cfi::Cfa>,
}

impl Placed {
    /// The [`Location`] of a parameter DWARF places at `location`; else why it has none.
    pub(super) fn location(&self, location: &ParamLocation) -> Result<Location, String> {
        let register = |dwarf: u16| {
            abi::register_of_dwarf(dwarf).ok_or_else(|| {
                format!(
                    "it is in DWARF register {dwarf} (an x87, MMX or upper vector register), \
                     which is not captured"
                )
            })
        };
        Ok(match location {
            ParamLocation::Registers(regs) => Location::Regs(
                regs.iter()
                    .map(|&r| register(r))
                    .collect::<Result<_, _>>()?,
            ),
            ParamLocation::Memory {
                register: r,
                offset,
            } => Location::At {
                reg: register(*r)?,
                offset: *offset,
            },
            ParamLocation::FrameBase { offset } => {
                let cfa = self.cfa.ok_or_else(|| {
                    format!(
                        "it lives in the stack frame, and no call frame information covers {:#x}",
                        self.at.pc
                    )
                })?;
                Location::At {
                    reg: register(cfa.register)?,
                    offset: cfa.offset + offset,
                }
            }
            ParamLocation::Computed {
                register: r,
                offset,
            } => Location::Computed {
                reg: register(*r)?,
                offset: *offset,
            },
            ParamLocation::Address(a) => Location::Address(*a),
            ParamLocation::Constant(c) => Location::Constant(*c),
            ParamLocation::Unavailable(why) => return Err(why.clone()),
        })
    }
}
