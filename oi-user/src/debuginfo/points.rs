//! Where the probes of one out-of-line function copy go: its entry (moved past a first
//! instruction the kernel refuses, see [`code::entry_probe`]), or every instruction that
//! returns from it (each `ret` and each tail call, its `.cold` part included, see
//! [`code::return_sites_of`]), as the file offsets the kernel's uprobes want.
//!
//! Pure: reads the mapped file only. Never places a point the kernel would refuse: such a
//! point is left out and said so in a note, or the whole function is an error.

use super::{
    Binary, FunctionSymbol,
    code::{self, Part, ReturnKind},
};

/// What a probe at a [`ProbePoint`] sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointKind {
    /// The function's entry: its arguments are where the calling convention put them.
    Entry,
    /// A `ret`: the result is in rax / xmm0 (rdx / xmm1).
    Return,
    /// A return through a tail call: the function we jump to returns in our place, so our
    /// result is in no register yet. A probe here counts the return; it can measure nothing.
    TailCall,
    /// A `ret` of a copy whose result may not be there (a clone g++ may have removed it
    /// from): counted, not measured.
    NoResult,
}

impl PointKind {
    /// Whether a sample here could see what it would measure.
    pub fn can_sample(self) -> bool {
        matches!(self, Self::Entry | Self::Return)
    }
}

/// One instruction to put a uprobe on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbePoint {
    /// Its ELF virtual address.
    pub address: u64,
    /// Its offset in the file: what the kernel's uprobe wants.
    pub file_offset: u64,
    pub kind: PointKind,
}

/// The points of one copy, with what the user should know about how they were chosen.
#[derive(Debug, Clone, Default)]
pub struct Points {
    pub points: Vec<ProbePoint>,
    /// One line each (without the `oi-trace: note:` prefix).
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PointError {
    #[error("{function}: its code ({size} bytes at {address:#x}) lies outside {path}")]
    OutsideFile {
        function: String,
        address: u64,
        size: u64,
        path: std::path::PathBuf,
    },
    #[error("{function} cannot be probed: {source}")]
    Unprobeable {
        function: String,
        source: code::Unprobeable,
    },
    #[error(
        "{function} never returns to its caller (no return instruction, no tail call): a return \
         probe there would never fire"
    )]
    NoReturn { function: String },
    #[error("no return instruction of {function} can carry a uprobe: {reasons}")]
    NoProbeableReturn { function: String, reasons: String },
}

/// The bytes of `sym`'s code in `binary`.
fn code_of<'a>(binary: &'a Binary, sym: &FunctionSymbol) -> Result<Part<'a>, PointError> {
    let outside = || PointError::OutsideFile {
        function: sym.demangled.clone(),
        address: sym.address,
        size: sym.size,
        path: binary.path().to_path_buf(),
    };
    let start = usize::try_from(sym.file_offset).map_err(|_| outside())?;
    let end = start
        .checked_add(usize::try_from(sym.size).map_err(|_| outside())?)
        .ok_or_else(outside)?;
    let bytes = binary.bytes().get(start..end).ok_or_else(outside)?;
    Ok(Part {
        address: sym.address,
        bytes,
    })
}

/// The entry point of `sym`: its first instruction, or the first one after it the kernel
/// accepts that the instructions before it leave the arguments untouched for.
pub fn entry(binary: &Binary, sym: &FunctionSymbol) -> Result<Points, PointError> {
    // A symbol without a size (hand-written assembly) is probed where it starts.
    let part = code_of(binary, sym)?;
    let mut out = Points::default();
    let address = if part.bytes.is_empty() {
        sym.address
    } else {
        let probe = code::entry_probe(part.bytes, part.address).map_err(|source| {
            PointError::Unprobeable {
                function: sym.demangled.clone(),
                source,
            }
        })?;
        if !probe.skipped.is_empty() {
            let skipped = probe
                .skipped
                .iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ");
            let refusal = code::refusal(part.bytes).map_or(String::new(), |r| format!(" ({r})"));
            out.notes.push(format!(
                "{}: its first instruction cannot carry a uprobe{refusal}; probing at +{:#x}, \
                 after {skipped}, which leave{} the arguments and the stack pointer as they were",
                sym.demangled,
                probe.address - sym.address,
                if probe.skipped.len() == 1 { "s" } else { "" },
            ));
        }
        probe.address
    };
    out.points.push(ProbePoint {
        address,
        file_offset: sym.file_offset + (address - sym.address),
        kind: PointKind::Entry,
    });
    Ok(out)
}

/// Every return point of `sym`, whose `.cold` part is `cold` if it has one.
pub fn returns(
    binary: &Binary,
    sym: &FunctionSymbol,
    cold: Option<&FunctionSymbol>,
) -> Result<Points, PointError> {
    let mut parts = vec![(code_of(binary, sym)?, sym)];
    if let Some(cold) = cold {
        parts.push((code_of(binary, cold)?, cold));
    }
    let code: Vec<Part<'_>> = parts.iter().map(|(p, _)| *p).collect();
    let sites = code::return_sites_of(&code);
    if sites.is_empty() {
        return Err(PointError::NoReturn {
            function: sym.demangled.clone(),
        });
    }
    let mut out = Points::default();
    let mut refused = Vec::new();
    let mut conditional = 0;
    for site in &sites {
        let Some((_, owner)) = parts.iter().find(|(p, _)| {
            site.address >= p.address && site.address < p.address + p.bytes.len() as u64
        }) else {
            continue;
        };
        let kind = match site.kind {
            ReturnKind::Ret => PointKind::Return,
            ReturnKind::TailCall { .. } | ReturnKind::IndirectTailCall => PointKind::TailCall,
            // A probe there fires whether or not the jump is taken: it would count returns
            // that do not happen.
            ReturnKind::ConditionalTailCall { .. } => {
                conditional += 1;
                continue;
            }
        };
        if let Some(r) = site.refusal {
            refused.push(format!("{:#x} ({r})", site.address));
            continue;
        }
        out.points.push(ProbePoint {
            address: site.address,
            file_offset: owner.file_offset + (site.address - owner.address),
            kind,
        });
    }
    if out.points.is_empty() && !refused.is_empty() {
        return Err(PointError::NoProbeableReturn {
            function: sym.demangled.clone(),
            reasons: refused.join(", "),
        });
    }
    if !refused.is_empty() {
        out.notes.push(format!(
            "{}: {} return instruction(s) cannot carry a uprobe and are not probed, so returns \
             through them are not counted: {}",
            sym.demangled,
            refused.len(),
            refused.join(", ")
        ));
    }
    if conditional > 0 {
        out.notes.push(format!(
            "{}: {conditional} conditional tail call(s) are not probed (a probe there fires \
             whether or not the jump is taken), so returns through them are not counted",
            sym.demangled
        ));
    }
    let tails = out
        .points
        .iter()
        .filter(|p| p.kind == PointKind::TailCall)
        .count();
    if tails > 0 {
        out.notes.push(format!(
            "{}: {tails} of its {} return points are tail calls: returns there are counted, \
             but hold no result to measure (summary: `unseen`)",
            sym.demangled,
            out.points.len()
        ));
    }
    Ok(out)
}
