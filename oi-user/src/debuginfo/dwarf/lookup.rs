//! Finding DIEs in the whole of the debug info: class definitions by qualified name (through
//! an index by unqualified name, built once), global variables, and a probed function's
//! concrete DIE by its symbol, with raw scans of each unit's DIEs that decode only the
//! abbreviations they look for.

use super::*;

impl<'a> DebugInfo<'a> {
    /// Every named class/struct/union definition (not declarations), in all units.
    pub fn class_definitions(&self) -> Result<Vec<DieRef>, DwarfError> {
        let mut out = Vec::new();
        for unit in 0..self.units.len() {
            self.scan_unit(unit, is_named_class_definition, |offset, _, _| {
                out.push(DieRef { unit, offset });
                Ok(ControlFlow::Continue(()))
            })?;
        }
        Ok(out)
    }

    /// The complete definition of a declared (incomplete) class: the first in unit and DIE
    /// order whose qualified name is `qualified`. Only definitions whose own name could end
    /// `qualified` are looked at, through the index by unqualified name.
    pub fn find_definition(&self, qualified: &str) -> Result<Option<DieRef>, DwarfError> {
        self.index_definitions()?;
        let mut candidates: Vec<DieRef> = {
            let index = self.definitions.borrow();
            name_suffixes(qualified)
                .filter_map(|name| index.by_name.get(name))
                .flatten()
                .copied()
                .collect()
        };
        candidates.sort_unstable();
        for die in candidates {
            if self.qualified_name(die)?.as_deref() == Some(qualified) {
                return Ok(Some(die));
            }
        }
        Ok(None)
    }

    /// Every class/struct/union definition whose unqualified DWARF name satisfies `wanted`,
    /// in unit and DIE order (for lookups by a name spelled differently from the compiler's,
    /// such as a demangled type name).
    pub fn definitions_where(
        &self,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<DieRef>, DwarfError> {
        self.index_definitions()?;
        let mut found: Vec<DieRef> = {
            let index = self.definitions.borrow();
            index
                .by_name
                .iter()
                .filter(|(name, _)| wanted(name))
                .flat_map(|(_, dies)| dies.iter().copied())
                .collect()
        };
        found.sort_unstable();
        Ok(found)
    }

    /// Every definition of a variable with a fixed address (`DW_OP_addr`, or `DW_OP_addrx`
    /// into `.debug_addr` as clang writes DWARF 5) whose qualified name
    /// is `qualified`: a global, a namespace-scope variable or a class's static member. Each
    /// as its type DIE and its ELF address.
    pub fn global_variables(&self, qualified: &str) -> Result<Vec<(DieRef, u64)>, DwarfError> {
        let last = qualified.rsplit("::").next().unwrap_or(qualified);
        let mut found = Vec::new();
        for unit in 0..self.units.len() {
            let mut candidates = Vec::new();
            let wanted = |a: &Abbreviation| {
                a.tag() == dw::DW_TAG_variable && has_attr(a, dw::DW_AT_location)
            };
            self.scan_unit(unit, wanted, |offset, _, attrs| {
                // A definition out of its class or namespace names nothing itself: its
                // DW_AT_specification does.
                if let Some((name, _)) = self.named(unit, offset, attrs)
                    && name != last
                {
                    return Ok(ControlFlow::Continue(()));
                }
                let address = attrs
                    .iter()
                    .find(|a| a.name() == dw::DW_AT_location)
                    .and_then(|a| match a.value() {
                        AttributeValue::Exprloc(e) => {
                            let b = e.0.slice();
                            match b.first()? {
                                // DW_OP_addr: the address itself.
                                0x03 => {
                                    let addr = b.get(1..9).filter(|_| b.len() == 9)?;
                                    Some(u64::from_le_bytes(addr.try_into().ok()?))
                                }
                                // DW_OP_addrx (clang's DWARF 5), DW_OP_GNU_addr_index: an
                                // index into the unit's `.debug_addr` entries.
                                0xa1 | 0xfb => {
                                    let index = uleb_whole(b.get(1..)?)?;
                                    let index = gimli::DebugAddrIndex(usize::try_from(index).ok()?);
                                    self.dwarf.address(&self.units[unit], index).ok()
                                }
                                _ => None,
                            }
                        }
                        _ => None,
                    });
                if let Some(address) = address {
                    candidates.push((DieRef { unit, offset }, address));
                }
                Ok(ControlFlow::Continue(()))
            })?;
            for (die, address) in candidates {
                let named = self.reference(die, dw::DW_AT_specification)?.unwrap_or(die);
                if self.qualified_name(named)?.as_deref() != Some(qualified) {
                    continue;
                }
                let ty = match self.reference(die, dw::DW_AT_type)? {
                    Some(t) => Some(t),
                    None => self.reference(named, dw::DW_AT_type)?,
                };
                if let Some(ty) = ty {
                    found.push((ty, address));
                }
            }
        }
        Ok(found)
    }

    /// Puts the class definitions of every unit not yet indexed into the index.
    pub(super) fn index_definitions(&self) -> Result<(), DwarfError> {
        for unit in 0..self.units.len() {
            if self.definitions.borrow().indexed[unit] {
                continue;
            }
            let mut found = Vec::new();
            self.scan_unit(unit, is_named_class_definition, |offset, _, attrs| {
                found.extend(self.named(unit, offset, attrs));
                Ok(ControlFlow::Continue(()))
            })?;
            self.definitions.borrow_mut().add(unit, found);
        }
        Ok(())
    }

    /// A DIE of `unit` with its `DW_AT_name` (among its `attrs`), if that is a string.
    pub(super) fn named(
        &self,
        unit: usize,
        offset: UnitOffset<usize>,
        attrs: &[Attribute<R<'a>>],
    ) -> Option<(Cow<'a, str>, DieRef)> {
        let name = self.string_attr(unit, attrs, dw::DW_AT_name)?;
        Some((String::from_utf8_lossy(name), DieRef { unit, offset }))
    }

    /// A string attribute among `attrs` (of a DIE of `unit`), as stored.
    pub(super) fn string_attr(
        &self,
        unit: usize,
        attrs: &[Attribute<R<'a>>],
        at: DwAt,
    ) -> Option<&'a [u8]> {
        let value = attr_value(attrs, at)?;
        let s = self.dwarf.attr_string(&self.units[unit], value).ok()?;
        Some(s.slice())
    }

    /// Visits the DIEs of `unit` in DFS order whose abbreviation `wanted` accepts, with their
    /// attributes, until `visit` breaks. Every other DIE costs an abbreviation lookup and a
    /// skip over its attributes' bytes, so a whole unit of millions of DIEs is cheap to scan.
    pub(super) fn scan_unit(
        &self,
        unit: usize,
        wanted: impl Fn(&Abbreviation) -> bool,
        mut visit: impl FnMut(
            UnitOffset<usize>,
            DwTag,
            &[Attribute<R<'a>>],
        ) -> Result<ControlFlow<DieRef>, DwarfError>,
    ) -> Result<Option<DieRef>, DwarfError> {
        let corrupt = |e| self.corrupt(e);
        let mut entries = self.units[unit].entries_raw(None).map_err(corrupt)?;
        let mut attrs = Vec::new();
        while !entries.is_empty() {
            let offset = entries.next_offset();
            let Some(abbrev) = entries.read_abbreviation().map_err(corrupt)? else {
                continue; // the end of a list of children
            };
            if !wanted(abbrev) {
                entries
                    .skip_attributes(abbrev.attributes())
                    .map_err(corrupt)?;
                continue;
            }
            entries
                .read_attributes(abbrev.attributes(), &mut attrs)
                .map_err(corrupt)?;
            if let ControlFlow::Break(die) = visit(offset, abbrev.tag(), &attrs)? {
                return Ok(Some(die));
            }
        }
        Ok(None)
    }

    /// The out-of-line (concrete) DIE of `function`: a `DW_TAG_subprogram` whose `low_pc` is
    /// the symbol's address, else one whose linkage name equals the mangled name and has code.
    /// Inlined copies (`DW_TAG_inlined_subroutine`) are never considered.
    pub fn find_function(&self, function: &FunctionSymbol) -> Result<DieRef, DwarfError> {
        let mut by_name = None;
        // The unit that .debug_aranges says covers the address first, then all of them.
        let first = self.unit_covering(function.address);
        let order = first
            .into_iter()
            .chain((0..self.units.len()).filter(|u| Some(*u) != first));
        for unit in order {
            if let Some(die) = self.find_code_in_unit(unit, function, &mut by_name)? {
                return Ok(die);
            }
        }
        // The linkage name may also sit on the declaration that the concrete DIE specifies.
        if by_name.is_none() {
            by_name = self.find_by_origin_linkage(function)?;
        }
        by_name.ok_or_else(|| DwarfError::NoFunction {
            name: function.demangled.clone(),
            address: function.address,
            path: self.path.clone(),
        })
    }

    /// The first subprogram of `unit` whose code starts at `function`'s address; notes in
    /// `by_name` the first whose linkage name is `function`'s. A unit not yet in the
    /// definitions index is read to its end and indexed on the way: the types of the
    /// function's arguments nearly always need it, and it would cost a second scan.
    pub(super) fn find_code_in_unit(
        &self,
        unit: usize,
        function: &FunctionSymbol,
        by_name: &mut Option<DieRef>,
    ) -> Result<Option<DieRef>, DwarfError> {
        let index_too = !self.definitions.borrow().indexed[unit];
        let wanted = |abbrev: &Abbreviation| {
            is_subprogram_with_code(abbrev) || (index_too && is_named_class_definition(abbrev))
        };
        let mut found = None;
        let mut definitions = Vec::new();
        self.scan_unit(unit, wanted, |offset, tag, attrs| {
            let die = DieRef { unit, offset };
            if tag != dw::DW_TAG_subprogram {
                definitions.extend(self.named(unit, offset, attrs));
            } else if found.is_none() {
                if self.code_starts_at(die, attrs, function.address)? {
                    found = Some(die);
                    if !index_too {
                        return Ok(ControlFlow::Break(die));
                    }
                } else if by_name.is_none()
                    && self.string_attr(unit, attrs, dw::DW_AT_linkage_name)
                        == Some(function.mangled.as_bytes())
                {
                    *by_name = Some(die);
                }
            }
            Ok(ControlFlow::Continue(()))
        })?;
        if index_too {
            self.definitions.borrow_mut().add(unit, definitions);
        }
        Ok(found)
    }

    /// Whether the code of subprogram `die` (with attributes `attrs`) starts at `address`: code
    /// in one piece (`low_pc`) or split hot/cold (`DW_AT_ranges`).
    pub(super) fn code_starts_at(
        &self,
        die: DieRef,
        attrs: &[Attribute<R<'a>>],
        address: u64,
    ) -> Result<bool, DwarfError> {
        let unit = &self.units[die.unit];
        if let Some(low) = attr_value(attrs, dw::DW_AT_low_pc) {
            return Ok(matches!(self.dwarf.attr_address(unit, low), Ok(Some(a)) if a == address));
        }
        // Split code is rare: the entry is parsed again for gimli's range reader.
        let entry = self.entry(die)?;
        let corrupt = |e| self.corrupt(e);
        let mut ranges = self.dwarf.die_ranges(unit, &entry).map_err(corrupt)?;
        while let Some(r) = ranges.next().map_err(corrupt)? {
            if r.begin == address {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The unit whose `.debug_aranges` entry covers `address`, if the section is there.
    pub(super) fn unit_covering(&self, address: u64) -> Option<usize> {
        let mut headers = self.dwarf.debug_aranges.headers();
        while let Ok(Some(h)) = headers.next() {
            let mut entries = h.entries();
            while let Ok(Some(e)) = entries.next() {
                let r = e.range();
                if r.begin <= address && address < r.end {
                    return self
                        .unit_starts
                        .binary_search(&h.debug_info_offset().0)
                        .ok();
                }
            }
        }
        None
    }

    pub(super) fn find_by_origin_linkage(
        &self,
        function: &FunctionSymbol,
    ) -> Result<Option<DieRef>, DwarfError> {
        for unit in 0..self.units.len() {
            let mut candidates = Vec::new();
            self.scan_unit(unit, is_subprogram_with_code, |offset, _, _| {
                candidates.push(DieRef { unit, offset });
                Ok(ControlFlow::Continue(()))
            })?;
            for c in candidates {
                if let Some(Attr::Str(s)) = self.attr_inherited(c, dw::DW_AT_linkage_name)?
                    && s == function.mangled
                {
                    return Ok(Some(c));
                }
            }
        }
        Ok(None)
    }
}

/// The value of attribute `at` among `attrs`, as `DebuggingInformationEntry::attr_value`.
pub(super) fn attr_value<'a>(
    attrs: &[Attribute<R<'a>>],
    at: DwAt,
) -> Option<AttributeValue<R<'a>>> {
    attrs.iter().find(|a| a.name() == at).map(|a| a.value())
}

pub(super) fn has_attr(abbrev: &Abbreviation, at: DwAt) -> bool {
    abbrev.attributes().iter().any(|spec| spec.name() == at)
}

/// A subprogram with code (`low_pc` or `DW_AT_ranges`): what a probed function's concrete
/// DIE is; the declarations inside classes, far more numerous, are not.
pub(super) fn is_subprogram_with_code(abbrev: &Abbreviation) -> bool {
    abbrev.tag() == dw::DW_TAG_subprogram
        && (has_attr(abbrev, dw::DW_AT_low_pc) || has_attr(abbrev, dw::DW_AT_ranges))
}

/// A class, struct or union with a name that is not a declaration.
pub(super) fn is_named_class_definition(abbrev: &Abbreviation) -> bool {
    matches!(
        abbrev.tag(),
        dw::DW_TAG_structure_type | dw::DW_TAG_class_type | dw::DW_TAG_union_type
    ) && has_attr(abbrev, dw::DW_AT_name)
        && !has_attr(abbrev, dw::DW_AT_declaration)
}

/// The unqualified names a class whose qualified name is `qualified` could have: `qualified`
/// itself and every tail of it that follows a `::` (`a::b<c::d>` gives `a::b<c::d>`, `b<c::d>`,
/// `d>`), since a qualified name is its scopes and its own name joined by `::`.
pub(super) fn name_suffixes(qualified: &str) -> impl Iterator<Item = &str> {
    (0..=qualified.len())
        .filter(|&at| at == 0 || qualified.as_bytes()[..at].ends_with(b"::"))
        .map(|at| &qualified[at..])
}

/// An unsigned LEB128 number that takes all of `bytes` (an operation's one operand), or None.
fn uleb_whole(bytes: &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, b) in bytes.iter().enumerate() {
        if i >= 10 {
            return None;
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return (i + 1 == bytes.len()).then_some(value);
        }
    }
    None
}
