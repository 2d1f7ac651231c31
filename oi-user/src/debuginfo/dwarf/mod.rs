//! DWARF access: load the debug sections of a binary (or of its separate debug file, found by
//! `.gnu_debuglink` or `/usr/lib/debug/.build-id/…`; compressed sections are inflated), find a
//! function's concrete DIE, and give the type builder a small, owned-result view of DIEs.
//!
//! Pure: reads files only. Sections are borrowed from the mapped file when they are not
//! compressed; nothing here outlives the [`with_debug_info`] callback, so the type graph built
//! inside it must own its data.
//!
//! Built for programs with millions of DIEs: whole units are only ever scanned raw (attributes
//! decoded for the few DIEs whose abbreviation can matter, the rest skipped by size), and the
//! tree is navigated by sibling links, listing the children of only the scopes a lookup
//! passes through.

use std::{
    borrow::Cow,
    cell::RefCell,
    collections::HashMap,
    ops::ControlFlow,
    path::{Path, PathBuf},
    rc::Rc,
    sync::atomic::{AtomicU64, Ordering},
};

use gimli::{
    Abbreviation, Attribute, AttributeValue, DwAt, DwTag, EndianSlice, RunTimeEndian, UnitOffset,
    constants as dw,
};
use object::{Object as _, ObjectSection as _};

use super::{Binary, FunctionSymbol};

mod inlined;
mod locations;
mod lookup;
pub use inlined::{Inlined, InlinedCopy};
pub use locations::{CopyParam, ParamLocation};
use lookup::{attr_value, has_attr};

pub type R<'a> = EndianSlice<'a, RunTimeEndian>;

#[derive(Debug, thiserror::Error)]
pub enum DwarfError {
    #[error("{path} has no debug information (no .debug_info); {hint}")]
    NoDebugInfo { path: PathBuf, hint: String },
    #[error("cannot read the debug information of {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("no debug information for function {name} (at {address:#x}) in {path}")]
    NoFunction {
        name: String,
        address: u64,
        path: PathBuf,
    },
    #[error(
        "the debug information of {path} is {mb} MB (uncompressed), over the limit of \
         {limit} MB (--max-debuginfo-mb)"
    )]
    TooLarge { path: PathBuf, mb: u64, limit: u64 },
}

/// Most debug information read from one file, in MiB of uncompressed sections: a crafted or
/// absurd file is an error, not an exhausted machine. Set once from the command line.
static MAX_DEBUGINFO_MB: AtomicU64 = AtomicU64::new(DEFAULT_MAX_DEBUGINFO_MB);
pub const DEFAULT_MAX_DEBUGINFO_MB: u64 = 4096;

pub fn set_max_debuginfo_mb(mb: u64) {
    MAX_DEBUGINFO_MB.store(mb, Ordering::Relaxed);
}

/// The uncompressed size of every `.debug_*` section of `obj`, read from the section headers
/// (and compression headers): nothing is decompressed to learn it.
fn debug_sections_size(obj: &object::File<'_>) -> u64 {
    obj.sections()
        .filter(|s| {
            s.name()
                .is_ok_and(|n| n.starts_with(".debug_") || n.starts_with(".zdebug_"))
        })
        .map(|s| {
            s.compressed_file_range()
                .map_or(s.size(), |r| r.uncompressed_size)
        })
        .fold(0u64, u64::saturating_add)
}

/// A DIE anywhere in `.debug_info`: unit index plus offset inside that unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DieRef {
    pub unit: usize,
    pub offset: UnitOffset<usize>,
}

/// The parsed DWARF of one binary, with what lookups learn kept for the next ones: the
/// children of the scopes looked into (for parents, hence qualified names) and an index of
/// class definitions (to complete declarations).
pub struct DebugInfo<'a> {
    dwarf: gimli::Dwarf<R<'a>>,
    units: Vec<gimli::Unit<R<'a>>>,
    /// Start offset of each unit in `.debug_info`, ascending (to resolve `DW_FORM_ref_addr`).
    unit_starts: Vec<usize>,
    scopes: RefCell<ScopeChildren>,
    definitions: RefCell<DefinitionIndex<'a>>,
    path: PathBuf,
}

/// Offsets of the children of each scope listed so far, by (unit, scope offset).
type ScopeChildren = HashMap<(usize, usize), Rc<[usize]>>;

/// Named class/struct/union definitions by unqualified name, filled a unit at a time: by the
/// first lookup of a definition, or on the way by the scan that finds the probed function.
struct DefinitionIndex<'a> {
    by_name: HashMap<Cow<'a, str>, Vec<DieRef>>,
    /// Which units' definitions are in `by_name`.
    indexed: Vec<bool>,
}

impl<'a> DefinitionIndex<'a> {
    fn add(&mut self, unit: usize, definitions: Vec<(Cow<'a, str>, DieRef)>) {
        // Growing step by step would hash every (long, templated) name again at each step.
        self.by_name.reserve(definitions.len());
        for (name, die) in definitions {
            self.by_name.entry(name).or_default().push(die);
        }
        self.indexed[unit] = true;
    }
}

/// An attribute value reduced to what the type builder needs.
#[derive(Debug, Clone)]
pub enum Attr {
    Int(i64),
    Uint(u64),
    Ref(DieRef),
    Str(String),
    Flag(bool),
    /// A location expression (e.g. a virtual base offset): not a constant.
    Expr,
}

/// Runs `f` with the DWARF of `binary` (or of its separate debug file).
pub fn with_debug_info<T>(
    binary: &Binary,
    f: impl FnOnce(&DebugInfo<'_>) -> T,
) -> Result<T, DwarfError> {
    with_debug_info_in(binary, &proc_root_of(binary.path()), f)
}

/// [`with_debug_info`], looking for separate debug files below `root` (the target's root
/// directory: `/`, or `/proc/PID/root` for a process in another mount namespace).
pub fn with_debug_info_in<T>(
    binary: &Binary,
    root: &Path,
    f: impl FnOnce(&DebugInfo<'_>) -> T,
) -> Result<T, DwarfError> {
    let path = binary.path().to_path_buf();
    let corrupt = |reason: String| DwarfError::Corrupt {
        path: path.clone(),
        reason,
    };
    let obj = binary.object().map_err(|e| corrupt(e.to_string()))?;
    if obj.section_by_name(".debug_info").is_some() {
        let di = DebugInfo::load(&obj, &path)?;
        return Ok(f(&di));
    }
    let Some(debug_path) = separate_debug_file(&obj, &path, root) else {
        let hint = debug_info_hint(&obj);
        return Err(DwarfError::NoDebugInfo { path, hint });
    };
    let debug = Binary::open(&debug_path).map_err(|e| corrupt(e.to_string()))?;
    let dobj = debug.object().map_err(|e| corrupt(e.to_string()))?;
    if dobj.section_by_name(".debug_info").is_none() {
        let hint = format!("its debug file {} has none either", debug_path.display());
        return Err(DwarfError::NoDebugInfo { path, hint });
    }
    let di = DebugInfo::load(&dobj, &debug_path)?;
    Ok(f(&di))
}

/// Where a stripped binary's debug info lives: `/usr/lib/debug/.build-id/xx/rest.debug`, then
/// the `.gnu_debuglink` name beside the binary, in its `.debug/` and under `/usr/lib/debug`.
/// Paths are resolved relative to the binary's own root (it may be `/proc/PID/root/...`).
fn separate_debug_file(obj: &object::File<'_>, path: &Path, root: &Path) -> Option<PathBuf> {
    if let Ok(Some(id)) = obj.build_id()
        && id.len() > 1
    {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let p = root.join(format!(
            "usr/lib/debug/.build-id/{}/{}.debug",
            &hex[..2],
            &hex[2..]
        ));
        if p.is_file() {
            return Some(p);
        }
    }
    if let Ok(Some((name, _crc))) = obj.gnu_debuglink() {
        let name = String::from_utf8_lossy(name).into_owned();
        let dir = path.parent().unwrap_or(Path::new("/"));
        let dir_in_target = dir.strip_prefix(root).unwrap_or(dir).to_path_buf();
        let candidates = [
            dir.join(&name),
            dir.join(".debug").join(&name),
            root.join("usr/lib/debug")
                .join(dir_in_target.strip_prefix("/").unwrap_or(&dir_in_target))
                .join(&name),
        ];
        return candidates.into_iter().find(|p| p.is_file() && p != path);
    }
    None
}

/// Where the debug information of a file without it would be looked for, and how to get it
/// there: for a user-facing message.
pub fn debug_info_hint(obj: &object::File<'_>) -> String {
    let mut places = Vec::new();
    if let Ok(Some(id)) = obj.build_id()
        && id.len() > 1
    {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        places.push(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug (by its build-id {hex})",
            &hex[..2],
            &hex[2..]
        ));
    }
    if let Ok(Some((name, _crc))) = obj.gnu_debuglink() {
        places.push(format!(
            "{} beside it or under /usr/lib/debug (by its .gnu_debuglink)",
            String::from_utf8_lossy(name)
        ));
    }
    let looked = if places.is_empty() {
        "it has no build-id and no .gnu_debuglink to find a separate debug file by".to_string()
    } else {
        format!("no separate debug file at {}", places.join(" or "))
    };
    format!(
        "{looked}; rebuild it with -g, or install its debug info (the -dbg, -dbgsym or \
         -debuginfo package of its distribution puts it under /usr/lib/debug)"
    )
}

/// `/proc/PID/root` if `path` lies below one, else `/`.
fn proc_root_of(path: &Path) -> PathBuf {
    let mut comps = path.components();
    let parts: Vec<_> = comps.by_ref().take(4).collect();
    if parts.len() == 4 && parts[1].as_os_str() == "proc" && parts[3].as_os_str() == "root" {
        return parts.iter().collect();
    }
    PathBuf::from("/")
}

impl<'a> DebugInfo<'a> {
    fn load(obj: &object::File<'a>, path: &Path) -> Result<Self, DwarfError> {
        let corrupt = |reason: String| DwarfError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        let limit = MAX_DEBUGINFO_MB.load(Ordering::Relaxed);
        let size = debug_sections_size(obj);
        if size > limit << 20 {
            return Err(DwarfError::TooLarge {
                path: path.to_path_buf(),
                mb: size >> 20,
                limit,
            });
        }
        let endian = if obj.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        // Decompressed sections must outlive the Dwarf, which borrows them: leak-free arena
        // would need self-reference, so compressed sections (rare, small) are leaked once
        // per Measurer construction.
        let load = |id: gimli::SectionId| -> Result<R<'a>, gimli::Error> {
            let data: &'a [u8] = match obj.section_by_name(id.name()) {
                Some(s) => match s.uncompressed_data() {
                    Ok(Cow::Borrowed(b)) => b,
                    Ok(Cow::Owned(v)) => Box::leak(v.into_boxed_slice()),
                    Err(_) => &[],
                },
                None => &[],
            };
            Ok(EndianSlice::new(data, endian))
        };
        let dwarf = gimli::Dwarf::load(load).map_err(|e| corrupt(e.to_string()))?;
        let mut units = Vec::new();
        let mut unit_starts = Vec::new();
        let mut headers = dwarf.units();
        while let Some(h) = headers.next().map_err(|e| corrupt(e.to_string()))? {
            let start = h.offset().0;
            let unit = dwarf.unit(h).map_err(|e| corrupt(e.to_string()))?;
            unit_starts.push(start);
            units.push(unit);
        }
        if units.is_empty() {
            return Err(DwarfError::NoDebugInfo {
                path: path.to_path_buf(),
                hint: "its .debug_info holds no unit".into(),
            });
        }
        let definitions = DefinitionIndex {
            by_name: HashMap::new(),
            indexed: vec![false; units.len()],
        };
        Ok(Self {
            dwarf,
            units,
            unit_starts,
            scopes: RefCell::new(HashMap::new()),
            definitions: RefCell::new(definitions),
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn corrupt(&self, e: impl std::fmt::Display) -> DwarfError {
        DwarfError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }

    fn entry(&self, die: DieRef) -> Result<gimli::DebuggingInformationEntry<R<'a>>, DwarfError> {
        let unit = self
            .units
            .get(die.unit)
            .ok_or_else(|| self.corrupt("bad unit index"))?;
        unit.entry(die.offset).map_err(|e| self.corrupt(e))
    }

    pub fn tag(&self, die: DieRef) -> Result<DwTag, DwarfError> {
        Ok(self.entry(die)?.tag())
    }

    /// One attribute of `die`, decoded.
    pub fn attr(&self, die: DieRef, at: DwAt) -> Result<Option<Attr>, DwarfError> {
        let entry = self.entry(die)?;
        let Some(value) = entry.attr_value(at) else {
            return Ok(None);
        };
        self.decode(die.unit, value)
    }

    fn decode(
        &self,
        unit_idx: usize,
        value: AttributeValue<R<'a>>,
    ) -> Result<Option<Attr>, DwarfError> {
        let unit = &self.units[unit_idx];
        Ok(Some(match value {
            AttributeValue::UnitRef(o) => Attr::Ref(DieRef {
                unit: unit_idx,
                offset: o,
            }),
            AttributeValue::DebugInfoRef(o) => match self.resolve_info_offset(o.0) {
                Some(r) => Attr::Ref(r),
                None => return Ok(None),
            },
            AttributeValue::Flag(b) => Attr::Flag(b),
            AttributeValue::Sdata(v) => Attr::Int(v),
            AttributeValue::Udata(v) => Attr::Uint(v),
            AttributeValue::Data1(v) => Attr::Uint(v.into()),
            AttributeValue::Data2(v) => Attr::Uint(v.into()),
            AttributeValue::Data4(v) => Attr::Uint(v.into()),
            AttributeValue::Data8(v) => Attr::Uint(v),
            AttributeValue::Exprloc(e) => {
                // g++ writes plain member offsets as constants; an expression of just
                // DW_OP_plus_uconst N is still a constant offset.
                let bytes = e.0.slice();
                if bytes.first() == Some(&0x23) {
                    let mut r = EndianSlice::new(&bytes[1..], RunTimeEndian::Little);
                    match gimli::Reader::read_uleb128(&mut r) {
                        Ok(v) if r.is_empty() => Attr::Uint(v),
                        _ => Attr::Expr,
                    }
                } else {
                    Attr::Expr
                }
            }
            AttributeValue::Addr(a) => Attr::Uint(a),
            v @ AttributeValue::DebugAddrIndex(_) => match self.dwarf.attr_address(unit, v) {
                Ok(Some(a)) => Attr::Uint(a),
                _ => return Ok(None),
            },
            v => match self.dwarf.attr_string(unit, v) {
                Ok(s) => Attr::Str(s.to_string_lossy().into_owned()),
                Err(_) => match v {
                    AttributeValue::Encoding(e) => Attr::Uint(e.0.into()),
                    AttributeValue::Virtuality(e) => Attr::Uint(e.0.into()),
                    AttributeValue::Language(_)
                    | AttributeValue::DecimalSign(_)
                    | AttributeValue::Endianity(_)
                    | AttributeValue::Accessibility(_)
                    | AttributeValue::Visibility(_) => Attr::Uint(0),
                    _ => return Ok(None),
                },
            },
        }))
    }

    fn resolve_info_offset(&self, off: usize) -> Option<DieRef> {
        let idx = match self.unit_starts.binary_search(&off) {
            Ok(i) => i,
            Err(0) => return None,
            Err(i) => i - 1,
        };
        let unit = &self.units[idx];
        let o = gimli::DebugInfoOffset(off).to_unit_offset(&unit.header)?;
        Some(DieRef {
            unit: idx,
            offset: o,
        })
    }

    pub fn name(&self, die: DieRef) -> Result<Option<String>, DwarfError> {
        Ok(match self.attr(die, dw::DW_AT_name)? {
            Some(Attr::Str(s)) => Some(s),
            _ => None,
        })
    }

    pub fn uint(&self, die: DieRef, at: DwAt) -> Result<Option<u64>, DwarfError> {
        Ok(match self.attr(die, at)? {
            Some(Attr::Uint(v)) => Some(v),
            Some(Attr::Int(v)) => Some(v as u64),
            _ => None,
        })
    }

    pub fn int(&self, die: DieRef, at: DwAt) -> Result<Option<i64>, DwarfError> {
        Ok(match self.attr(die, at)? {
            Some(Attr::Uint(v)) => Some(v as i64),
            Some(Attr::Int(v)) => Some(v),
            _ => None,
        })
    }

    pub fn flag(&self, die: DieRef, at: DwAt) -> Result<bool, DwarfError> {
        Ok(matches!(self.attr(die, at)?, Some(Attr::Flag(true))))
    }

    pub fn reference(&self, die: DieRef, at: DwAt) -> Result<Option<DieRef>, DwarfError> {
        Ok(match self.attr(die, at)? {
            Some(Attr::Ref(r)) => Some(r),
            _ => None,
        })
    }

    /// Direct children of `die`, in order.
    pub fn children(&self, die: DieRef) -> Result<Vec<DieRef>, DwarfError> {
        Ok(self
            .list_children(die.unit, die.offset.0)?
            .into_iter()
            .map(|offset| DieRef {
                unit: die.unit,
                offset: UnitOffset(offset),
            })
            .collect())
    }

    /// Offsets of the children of the DIE at `offset`, walking the sibling chain (subtrees are
    /// jumped over by `DW_AT_sibling` when the producer wrote it, as g++ and clang do).
    fn list_children(&self, unit: usize, offset: usize) -> Result<Vec<usize>, DwarfError> {
        let corrupt = |e| self.corrupt(e);
        let mut cursor = self.units[unit]
            .entries_at_offset(UnitOffset(offset))
            .map_err(corrupt)?;
        let mut out = Vec::new();
        if !cursor
            .next_dfs()
            .map_err(corrupt)?
            .is_some_and(|e| e.has_children())
        {
            return Ok(out);
        }
        cursor.next_entry().map_err(corrupt)?;
        while let Some(child) = cursor.current() {
            out.push(child.offset().0);
            cursor.next_sibling().map_err(corrupt)?;
        }
        Ok(out)
    }

    /// Follows `DW_AT_specification` / `DW_AT_abstract_origin` once, if present.
    pub fn origin(&self, die: DieRef) -> Result<Option<DieRef>, DwarfError> {
        if let Some(r) = self.reference(die, dw::DW_AT_specification)? {
            return Ok(Some(r));
        }
        self.reference(die, dw::DW_AT_abstract_origin)
    }

    /// An attribute of `die` or, failing that, of the DIEs it specifies / originates from.
    pub fn attr_inherited(&self, die: DieRef, at: DwAt) -> Result<Option<Attr>, DwarfError> {
        let mut cur = Some(die);
        for _ in 0..8 {
            let Some(d) = cur else { break };
            if let Some(a) = self.attr(d, at)? {
                return Ok(Some(a));
            }
            cur = self.origin(d)?;
        }
        Ok(None)
    }

    /// The DIE `die` is a child of; `None` for a unit's root. Descends from the root through
    /// the scopes that contain `die`, listing each one's children once: a lookup costs the
    /// siblings on its path the first time and a few binary searches after that.
    pub fn parent(&self, die: DieRef) -> Result<Option<DieRef>, DwarfError> {
        let target = die.offset.0;
        let mut scope = self.units[die.unit].header.root_offset().0;
        loop {
            let children = self.scope_children(die.unit, scope)?;
            // The last child at or before `die`: `die` itself or the subtree holding it.
            let Some(&child) = children[..children.partition_point(|&c| c <= target)].last() else {
                return Ok(None);
            };
            if child == target {
                return Ok(Some(DieRef {
                    unit: die.unit,
                    offset: UnitOffset(scope),
                }));
            }
            scope = child;
        }
    }

    /// [`Self::list_children`], remembered.
    fn scope_children(&self, unit: usize, scope: usize) -> Result<Rc<[usize]>, DwarfError> {
        if let Some(children) = self.scopes.borrow().get(&(unit, scope)) {
            return Ok(children.clone());
        }
        let children: Rc<[usize]> = self.list_children(unit, scope)?.into();
        self.scopes
            .borrow_mut()
            .insert((unit, scope), children.clone());
        Ok(children)
    }

    /// `ns::Outer::Name` for a type or function DIE: enclosing namespaces and classes, with
    /// `(anonymous namespace)` for unnamed namespaces. `None` if the DIE itself is unnamed.
    pub fn qualified_name(&self, die: DieRef) -> Result<Option<String>, DwarfError> {
        let Some(name) = self.name(die)? else {
            return Ok(None);
        };
        let mut parts = vec![name];
        let mut cur = self.parent(die)?;
        while let Some(p) = cur {
            let tag = self.tag(p)?;
            if tag == dw::DW_TAG_namespace {
                parts.push(
                    self.name(p)?
                        .unwrap_or_else(|| "(anonymous namespace)".to_string()),
                );
            } else if matches!(
                tag,
                dw::DW_TAG_structure_type | dw::DW_TAG_class_type | dw::DW_TAG_union_type
            ) {
                match self.name(p)? {
                    Some(n) => parts.push(n),
                    None => break,
                }
            } else {
                break;
            }
            cur = self.parent(p)?;
        }
        parts.reverse();
        Ok(Some(parts.join("::")))
    }
}

/// One formal parameter of a function, as declared.
#[derive(Debug, Clone)]
pub struct Param {
    /// Source name (`this` for the implicit object parameter); `None` if unnamed.
    pub name: Option<String>,
    pub ty: Option<DieRef>,
    /// Compiler-generated (the `this` pointer).
    pub artificial: bool,
}

/// The probed function's signature as far as argument lookup needs it.
#[derive(Debug, Clone)]
pub struct FunctionInfo {
    pub params: Vec<Param>,
    /// `None` for `void`.
    pub return_type: Option<DieRef>,
}

impl DebugInfo<'_> {
    /// Parameters (in declaration order, `this` first for methods) and return type.
    pub fn function_info(&self, die: DieRef) -> Result<FunctionInfo, DwarfError> {
        let mut params = Vec::new();
        let mut source = die;
        // The concrete DIE normally lists every parameter; if it lists none, its
        // declaration / abstract origin does.
        for _ in 0..4 {
            params.clear();
            for child in self.children(source)? {
                if self.tag(child)? != dw::DW_TAG_formal_parameter {
                    continue;
                }
                let name = match self.attr_inherited(child, dw::DW_AT_name)? {
                    Some(Attr::Str(s)) => Some(s),
                    _ => None,
                };
                let ty = match self.attr_inherited(child, dw::DW_AT_type)? {
                    Some(Attr::Ref(r)) => Some(r),
                    _ => None,
                };
                let artificial = matches!(
                    self.attr_inherited(child, dw::DW_AT_artificial)?,
                    Some(Attr::Flag(true))
                );
                params.push(Param {
                    name,
                    ty,
                    artificial,
                });
            }
            if !params.is_empty() {
                break;
            }
            match self.origin(source)? {
                Some(o) => source = o,
                None => break,
            }
        }
        let return_type = match self.attr_inherited(die, dw::DW_AT_type)? {
            Some(Attr::Ref(r)) => Some(r),
            _ => None,
        };
        Ok(FunctionInfo {
            params,
            return_type,
        })
    }
}

#[cfg(test)]
mod tests;
