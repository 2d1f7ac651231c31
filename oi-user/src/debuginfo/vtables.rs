//! What `polymorphic-inheritance` needs to know about a binary: which classes derive from
//! which (from DWARF, by qualified name, across units) and where each class's vtable lies
//! (from the `_ZTV…` symbols, ELF addresses).

use std::collections::{HashMap, HashSet};

use gimli::constants as dw;
use object::{Object as _, ObjectSymbol as _};

use super::Binary;
use super::dwarf::{DebugInfo, DieRef, DwarfError};
use super::symbols::demangle;

/// Vtable address ranges by demangled class name.
pub fn vtable_ranges(binary: &Binary) -> HashMap<String, (u64, u64)> {
    let mut out = HashMap::new();
    let Ok(obj) = binary.object() else {
        return out;
    };
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        let Ok(name) = sym.name() else { continue };
        if !name.starts_with("_ZTV") || sym.is_undefined() || sym.size() == 0 {
            continue;
        }
        // cpp_demangle spells it `{vtable(X)}`; c++filt `vtable for X`.
        let d = demangle(name);
        let class = d
            .strip_prefix("{vtable(")
            .and_then(|c| c.strip_suffix(")}"))
            .or_else(|| d.strip_prefix("vtable for "));
        // A size that overflows the address space (a damaged file) is no vtable.
        if let (Some(class), Some(end)) = (class, sym.address().checked_add(sym.size())) {
            out.insert(class.to_string(), (sym.address(), end));
        }
    }
    out
}

/// base qualified name → (derived qualified name, derived DIE).
pub type InheritanceIndex = HashMap<String, Vec<(String, DieRef)>>;

/// Every class definition deriving (directly or not) from the class named `base`.
pub fn derived_classes(direct: &InheritanceIndex, base: &str) -> Vec<DieRef> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut todo = vec![base.to_string()];
    while let Some(b) = todo.pop() {
        for (name, die) in direct.get(&b).into_iter().flatten() {
            if seen.insert(name.clone()) {
                out.push(*die);
                todo.push(name.clone());
            }
        }
    }
    out
}

impl DebugInfo<'_> {
    /// Who derives from whom, by one scan of every class definition.
    pub fn inheritance_index(&self) -> Result<InheritanceIndex, DwarfError> {
        let mut index: HashMap<String, Vec<(String, DieRef)>> = HashMap::new();
        for die in self.class_definitions()? {
            let Some(name) = self.qualified_name(die)? else {
                continue;
            };
            for child in self.children(die)? {
                if self.tag(child)? != dw::DW_TAG_inheritance {
                    continue;
                }
                let Some(base) = self.reference(child, dw::DW_AT_type)? else {
                    continue;
                };
                if let Some(bn) = self.qualified_name(base)?
                    && !index
                        .get(&bn)
                        .is_some_and(|v| v.iter().any(|(n, _)| *n == name))
                {
                    index.entry(bn).or_default().push((name.clone(), die));
                }
            }
        }
        Ok(index)
    }
}
