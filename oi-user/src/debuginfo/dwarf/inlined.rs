//! The copies of a function that only DWARF knows: every place it was inlined
//! (`DW_TAG_inlined_subroutine`), found through its linkage name, for functions with an
//! out-of-line copy in the symbol table and for functions that have none.
//!
//! Two raw scans of `.debug_info`: one over subprograms (declarations carry the linkage name;
//! abstract instances and concrete copies point at them through `DW_AT_specification` /
//! `DW_AT_abstract_origin`), one over inlined subroutines, whose attributes are decoded only
//! for the abbreviations that can matter.

use std::{collections::HashMap, ops::ControlFlow};

use gimli::{Abbreviation, AttributeValue, UnitOffset, constants as dw};

use super::{Attr, DebugInfo, DieRef, DwarfError, attr_value, has_attr};
use crate::debuginfo::symbols::{self, Fit, Query};

/// One place where the function was inlined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlinedCopy {
    /// The `DW_TAG_inlined_subroutine`.
    pub die: DieRef,
    /// The linkage name of the function inlined here.
    pub linkage_name: String,
    /// Where its code begins (`DW_AT_entry_pc`, else its lowest address).
    pub entry: u64,
    /// The end of the address range that holds `entry`.
    pub end: u64,
}

/// What DWARF knows of the functions a query names.
#[derive(Debug, Clone, Default)]
pub struct Inlined {
    /// Linkage names of the functions DWARF declares that match the query, with how well.
    pub functions: Vec<(String, Fit)>,
    pub copies: Vec<InlinedCopy>,
}

fn is_subprogram(abbrev: &Abbreviation) -> bool {
    abbrev.tag() == dw::DW_TAG_subprogram
        && (has_attr(abbrev, dw::DW_AT_linkage_name)
            || has_attr(abbrev, dw::DW_AT_MIPS_linkage_name)
            || has_attr(abbrev, dw::DW_AT_specification)
            || has_attr(abbrev, dw::DW_AT_abstract_origin))
}

fn is_inlined(abbrev: &Abbreviation) -> bool {
    abbrev.tag() == dw::DW_TAG_inlined_subroutine && has_attr(abbrev, dw::DW_AT_abstract_origin)
}

impl DebugInfo<'_> {
    /// The functions matching `query` that DWARF declares, and every inlined copy of them
    /// or of the functions named `also` (linkage names the symbol table matched).
    pub fn inlined_copies(&self, query: &Query, also: &[String]) -> Result<Inlined, DwarfError> {
        let required = query.required_identifier();
        let mut out = Inlined::default();
        // DIEs that are the function: declarations with its linkage name, and every
        // abstract or concrete DIE that specifies one of them or originates from one.
        // Which function each DIE is (an index into `out.functions`): declarations with its
        // linkage name, then every abstract or concrete DIE that specifies one of them or
        // originates from one (`links`, closed over below: a chain is a few links long).
        let mut function_of: HashMap<DieRef, usize> = HashMap::new();
        let mut links: Vec<(DieRef, DieRef)> = Vec::new();
        for unit in 0..self.units.len() {
            self.scan_unit(unit, is_subprogram, |offset, _, attrs| {
                let die = DieRef { unit, offset };
                let linkage = self
                    .string_attr(unit, attrs, dw::DW_AT_linkage_name)
                    .or_else(|| self.string_attr(unit, attrs, dw::DW_AT_MIPS_linkage_name));
                if let Some(linkage) = linkage {
                    let linkage = String::from_utf8_lossy(linkage);
                    let named = also.iter().any(|a| *a == linkage);
                    let fit = if !named && required.is_some_and(|id| !linkage.contains(id)) {
                        None
                    } else {
                        // Named by the symbol table: as well as the symbol matched.
                        query
                            .fit(&linkage)
                            .map(|(fit, _)| fit)
                            .or(named.then_some(Fit::Exact))
                    };
                    if let Some(fit) = fit {
                        let index = match out.functions.iter().position(|(n, _)| *n == linkage) {
                            Some(i) => i,
                            None => {
                                out.functions.push((linkage.into_owned(), fit));
                                out.functions.len() - 1
                            }
                        };
                        function_of.insert(die, index);
                    }
                    return Ok(ControlFlow::Continue(()));
                }
                for at in [dw::DW_AT_specification, dw::DW_AT_abstract_origin] {
                    if let Some(to) = attr_value(attrs, at).and_then(|v| self.reference_in(unit, v))
                    {
                        links.push((die, to));
                    }
                }
                Ok(ControlFlow::Continue(()))
            })?;
        }
        if function_of.is_empty() {
            return Ok(out);
        }
        loop {
            let before = function_of.len();
            for &(die, to) in &links {
                if !function_of.contains_key(&die)
                    && let Some(&n) = function_of.get(&to)
                {
                    function_of.insert(die, n);
                }
            }
            if function_of.len() == before {
                break;
            }
        }
        for unit in 0..self.units.len() {
            self.scan_unit(unit, is_inlined, |offset, _, attrs| {
                let Some(origin) = attr_value(attrs, dw::DW_AT_abstract_origin)
                    .and_then(|v| self.reference_in(unit, v))
                else {
                    return Ok(ControlFlow::Continue(()));
                };
                let Some(&n) = function_of.get(&origin) else {
                    return Ok(ControlFlow::Continue(()));
                };
                let die = DieRef { unit, offset };
                if let Some((entry, end)) = self.entry_of(die, attrs)? {
                    out.copies.push(InlinedCopy {
                        die,
                        linkage_name: out.functions[n].0.clone(),
                        entry,
                        end,
                    });
                }
                Ok(ControlFlow::Continue(()))
            })?;
        }
        Ok(out)
    }

    /// A reference attribute of a DIE of `unit`, as a [`DieRef`].
    fn reference_in(&self, unit: usize, value: AttributeValue<super::R<'_>>) -> Option<DieRef> {
        match value {
            AttributeValue::UnitRef(o) => Some(DieRef {
                unit,
                offset: UnitOffset(o.0),
            }),
            AttributeValue::DebugInfoRef(o) => self.resolve_info_offset(o.0),
            _ => None,
        }
    }

    /// Where the code of inlined copy `die` begins, and the end of the range holding that
    /// address; `None` for a copy without code.
    fn entry_of(
        &self,
        die: DieRef,
        attrs: &[gimli::Attribute<super::R<'_>>],
    ) -> Result<Option<(u64, u64)>, DwarfError> {
        let unit = &self.units[die.unit];
        let low = attr_value(attrs, dw::DW_AT_low_pc)
            .and_then(|v| self.dwarf.attr_address(unit, v).ok().flatten());
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        if let Some(low) = low {
            let end = match attr_value(attrs, dw::DW_AT_high_pc) {
                Some(AttributeValue::Addr(a)) => a,
                Some(v) => v.udata_value().map_or(low, |len| low + len),
                None => low,
            };
            ranges.push((low, end));
        } else if attr_value(attrs, dw::DW_AT_ranges).is_some() {
            let entry = self.entry(die)?;
            let corrupt = |e| self.corrupt(e);
            let mut iter = self.dwarf.die_ranges(unit, &entry).map_err(corrupt)?;
            while let Some(r) = iter.next().map_err(corrupt)? {
                ranges.push((r.begin, r.end));
            }
        }
        let first = ranges.iter().map(|r| r.0).min();
        let entry = match attr_value(attrs, dw::DW_AT_entry_pc) {
            Some(v @ (AttributeValue::Addr(_) | AttributeValue::DebugAddrIndex(_))) => {
                self.dwarf.attr_address(unit, v).ok().flatten()
            }
            // DWARF 5: a constant is an offset from the lowest address.
            Some(v) => v.udata_value().and_then(|off| first.map(|f| f + off)),
            None => first,
        };
        let Some(entry) = entry else {
            return Ok(None);
        };
        let end = ranges
            .iter()
            .find(|r| r.0 <= entry && entry < r.1)
            .map_or(entry, |r| r.1);
        Ok(Some((entry, end)))
    }

    /// The name of the out-of-line function whose code holds `die` (an inlined copy):
    /// demangled, without parameters; `None` if there is none.
    pub fn enclosing_function(&self, die: DieRef) -> Result<Option<String>, DwarfError> {
        let mut cur = self.parent(die)?;
        while let Some(p) = cur {
            if self.tag(p)? == dw::DW_TAG_subprogram {
                if let Some(Attr::Str(linkage)) = self.attr_inherited(p, dw::DW_AT_linkage_name)? {
                    return Ok(Some(symbols::bare_name(&symbols::demangle(&linkage))));
                }
                return self.attr_inherited(p, dw::DW_AT_name).map(|a| match a {
                    Some(Attr::Str(name)) => Some(name),
                    _ => None,
                });
            }
            cur = self.parent(p)?;
        }
        Ok(None)
    }
}
