//! DWARF → type graph. Lazy: [`Builder::type_of`] builds a DIE's type and whatever it reaches
//! (members, bases, template arguments, pointees), each DWARF type once. A declaration is
//! completed from its definition in another unit when one exists; otherwise it stays
//! [`Kind::Incomplete`].

use std::collections::HashMap;

use gimli::constants as dw;

use super::kinds;
use super::{
    Base, Indirection, Kind, Member, Qualifiers, Sigil, StructType, TemplateArg, Type, TypeGraph,
    TypeId,
};
use crate::debuginfo::dwarf::{Attr, DebugInfo, DieRef, DwarfError};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Dwarf(#[from] DwarfError),
    #[error("unsupported DWARF type: {0}")]
    Unsupported(String),
}

/// Builds types from one binary's DWARF into a graph it owns.
pub struct Builder<'d, 'a> {
    di: &'d DebugInfo<'a>,
    pub graph: TypeGraph,
    memo: HashMap<DieRef, TypeId>,
    dies: HashMap<TypeId, DieRef>,
    void: Option<TypeId>,
}

/// A type with top-level cv-qualifiers removed; `is_const` remembers a `const`.
struct Stripped {
    die: Option<DieRef>,
    qualifiers: Qualifiers,
}

impl<'d, 'a> Builder<'d, 'a> {
    pub fn new(di: &'d DebugInfo<'a>) -> Self {
        Self {
            di,
            graph: TypeGraph::default(),
            memo: HashMap::new(),
            dies: HashMap::new(),
            void: None,
        }
    }

    /// The DWARF DIE a type was built from (declarations: the DIE first met).
    pub fn die_of(&self, id: TypeId) -> Option<DieRef> {
        self.dies.get(&id).copied()
    }

    pub fn void(&mut self) -> TypeId {
        if let Some(v) = self.void {
            return v;
        }
        let v = self.graph.add(Type {
            size: 0,
            align: 1,
            kind: Kind::Void,
        });
        self.void = Some(v);
        v
    }

    fn strip(&self, mut die: Option<DieRef>) -> Result<Stripped, BuildError> {
        let mut qualifiers = Qualifiers::default();
        for _ in 0..16 {
            let Some(d) = die else { break };
            let tag = self.di.tag(d)?;
            if matches!(
                tag,
                dw::DW_TAG_const_type
                    | dw::DW_TAG_volatile_type
                    | dw::DW_TAG_restrict_type
                    | dw::DW_TAG_atomic_type
            ) {
                qualifiers.is_const |= tag == dw::DW_TAG_const_type;
                qualifiers.is_volatile |= tag == dw::DW_TAG_volatile_type;
                die = self.di.reference(d, dw::DW_AT_type)?;
            } else {
                break;
            }
        }
        Ok(Stripped { die, qualifiers })
    }

    /// The type a DIE's `DW_AT_type` names (void when absent).
    pub fn type_attr(&mut self, die: DieRef) -> Result<TypeId, BuildError> {
        let t = self.di.reference(die, dw::DW_AT_type)?;
        self.type_of(t)
    }

    /// Builds (or returns the already built) type of a type DIE; `None` is void.
    pub fn type_of(&mut self, die: Option<DieRef>) -> Result<TypeId, BuildError> {
        let s = self.strip(die)?;
        let Some(die) = s.die else {
            return Ok(self.void());
        };
        if let Some(&id) = self.memo.get(&die) {
            return Ok(id);
        }
        // Reserve the id first so that cycles (through pointers) find it.
        let id = self.graph.add(Type {
            size: 0,
            align: 1,
            kind: Kind::Void,
        });
        self.memo.insert(die, id);
        self.dies.insert(id, die);
        let t = self.build(die)?;
        self.graph.types[id] = t;
        Ok(id)
    }

    fn build(&mut self, die: DieRef) -> Result<Type, BuildError> {
        let di = self.di;
        let tag = di.tag(die)?;
        let byte_size = di.uint(die, dw::DW_AT_byte_size)?;
        Ok(match tag {
            dw::DW_TAG_base_type => {
                let size = byte_size.unwrap_or(0);
                let enc = di.uint(die, dw::DW_AT_encoding)?.unwrap_or(0);
                let (name, prim) = super::names::primitive(enc, size);
                Type {
                    size,
                    align: if size == 0 { 1 } else { size.min(16) },
                    kind: Kind::Primitive {
                        name,
                        prim,
                        dwarf_name: di.name(die)?.unwrap_or_default(),
                    },
                }
            }
            dw::DW_TAG_unspecified_type => Type {
                // decltype(nullptr)
                size: byte_size.unwrap_or(8),
                align: 8,
                kind: Kind::Pointer { target: None },
            },
            dw::DW_TAG_pointer_type
            | dw::DW_TAG_reference_type
            | dw::DW_TAG_rvalue_reference_type => {
                let target = di.reference(die, dw::DW_AT_type)?;
                let stripped = self.strip(target)?;
                let target = match stripped.die {
                    None => None,
                    Some(_) => Some(self.type_of(target)?),
                };
                let indirection = Indirection {
                    sigil: match tag {
                        dw::DW_TAG_reference_type => Sigil::Reference,
                        dw::DW_TAG_rvalue_reference_type => Sigil::RvalueReference,
                        _ => Sigil::Pointer,
                    },
                    target: stripped.qualifiers,
                };
                if indirection != Indirection::default()
                    && let Some(&id) = self.memo.get(&die)
                {
                    self.graph.indirections.insert(id, indirection);
                }
                Type {
                    size: byte_size.unwrap_or(8),
                    align: 8,
                    kind: Kind::Pointer { target },
                }
            }
            dw::DW_TAG_ptr_to_member_type => {
                let f = self.graph.add(Type {
                    size: 0,
                    align: 1,
                    kind: Kind::Function,
                });
                Type {
                    size: byte_size.unwrap_or(8),
                    align: 8,
                    kind: Kind::Pointer { target: Some(f) },
                }
            }
            dw::DW_TAG_subroutine_type => Type {
                size: 0,
                align: 1,
                kind: Kind::Function,
            },
            dw::DW_TAG_typedef => {
                let name = di.name(die)?.unwrap_or_default();
                let target = self.type_attr(die)?;
                let t = self.graph.get(target);
                Type {
                    size: t.size,
                    align: t.align,
                    kind: Kind::Typedef { name, target },
                }
            }
            dw::DW_TAG_enumeration_type => {
                let name = di.qualified_name(die)?;
                let size = match byte_size {
                    Some(s) => s,
                    None => {
                        let t = self.type_attr(die)?;
                        self.graph.size(t)
                    }
                };
                if di.flag(die, dw::DW_AT_declaration)? && byte_size.is_none() {
                    return Ok(Type {
                        size: 0,
                        align: 1,
                        kind: Kind::Incomplete {
                            name: name.unwrap_or_default(),
                        },
                    });
                }
                Type {
                    size,
                    align: size.max(1),
                    kind: Kind::Enum {
                        name,
                        enumerators: self.enumerators(die)?,
                    },
                }
            }
            dw::DW_TAG_array_type => self.array(die)?,
            dw::DW_TAG_structure_type | dw::DW_TAG_class_type | dw::DW_TAG_union_type => {
                self.structure(die, tag == dw::DW_TAG_union_type)?
            }
            other => return Err(BuildError::Unsupported(format!("{other}"))),
        })
    }

    fn array(&mut self, die: DieRef) -> Result<Type, BuildError> {
        let elem = self.type_attr(die)?;
        let mut dims = Vec::new();
        for c in self.di.children(die)? {
            if self.di.tag(c)? != dw::DW_TAG_subrange_type {
                continue;
            }
            let n = if let Some(n) = self.di.uint(c, dw::DW_AT_count)? {
                n
            } else if let Some(ub) = self.di.int(c, dw::DW_AT_upper_bound)? {
                (ub + 1).max(0) as u64
            } else {
                0 // flexible array member: contributes nothing
            };
            dims.push(n);
        }
        if dims.is_empty() {
            dims.push(0);
        }
        // int[2][3]: the outer array has 2 elements of int[3].
        let mut cur = elem;
        for (i, &n) in dims.iter().enumerate().rev() {
            let es = self.graph.size(cur);
            let align = self.graph.align(cur);
            let t = Type {
                size: es * n,
                align,
                kind: Kind::Array {
                    elem: cur,
                    count: n,
                },
            };
            if i == 0 {
                return Ok(t);
            }
            cur = self.graph.add(t);
        }
        Err(BuildError::Unsupported("array without dimensions".into()))
    }

    fn structure(&mut self, mut die: DieRef, is_union: bool) -> Result<Type, BuildError> {
        let di = self.di;
        let mut name = di.qualified_name(die)?;
        if di.flag(die, dw::DW_AT_declaration)? {
            match name
                .as_deref()
                .map(|n| di.find_definition(n))
                .transpose()?
                .flatten()
            {
                Some(def) => die = def,
                None => {
                    return Ok(Type {
                        size: 0,
                        align: 1,
                        kind: Kind::Incomplete {
                            name: name.unwrap_or_default(),
                        },
                    });
                }
            }
            name = di.qualified_name(die)?;
        }
        let size = di.uint(die, dw::DW_AT_byte_size)?.unwrap_or(0);
        let bare_name = di.name(die)?;
        let class_name = bare_name
            .as_deref()
            .map(|n| n.split('<').next().unwrap_or(n).to_string());
        let mut st = StructType {
            container: name.as_deref().and_then(kinds::recognise),
            name,
            bare_name,
            is_union,
            members: Vec::new(),
            bases: Vec::new(),
            template_args: Vec::new(),
            dynamic: false,
            nontrivial_for_calls: false,
        };
        let mut align = 1;
        for c in di.children(die)? {
            let tag = di.tag(c)?;
            match tag {
                dw::DW_TAG_member => {
                    // Static data members (DWARF 4 style) are declarations.
                    if di.flag(c, dw::DW_AT_external)? || di.flag(c, dw::DW_AT_declaration)? {
                        continue;
                    }
                    let ty = self.type_attr(c)?;
                    let mname = di.name(c)?;
                    if mname.as_deref().is_some_and(|n| n.starts_with("_vptr.")) {
                        st.dynamic = true;
                    }
                    let bit_size = di.uint(c, dw::DW_AT_bit_size)?;
                    let bit_offset = if let Some(b) = di.uint(c, dw::DW_AT_data_bit_offset)? {
                        b
                    } else {
                        let byte = match di.attr(c, dw::DW_AT_data_member_location)? {
                            Some(Attr::Uint(v)) => v,
                            Some(Attr::Int(v)) => v as u64,
                            _ => 0,
                        };
                        match (bit_size, di.uint(c, dw::DW_AT_bit_offset)?) {
                            // DWARF 2-4 big-endian-style bit offset from the storage unit.
                            (Some(bs), Some(bo)) => {
                                let storage = di
                                    .uint(c, dw::DW_AT_byte_size)?
                                    .unwrap_or_else(|| self.graph.size(ty));
                                byte * 8 + storage * 8 - bo - bs
                            }
                            _ => byte * 8,
                        }
                    };
                    align = align.max(self.graph.align(ty));
                    if self.struct_nontrivial(ty) {
                        st.nontrivial_for_calls = true;
                    }
                    st.members.push(Member {
                        name: mname,
                        ty,
                        bit_offset,
                        bit_size,
                    });
                }
                dw::DW_TAG_inheritance => {
                    let ty = self.type_attr(c)?;
                    let (offset, is_virtual) = match di.attr(c, dw::DW_AT_data_member_location)? {
                        Some(Attr::Uint(v)) => (v, false),
                        Some(Attr::Int(v)) => (v as u64, false),
                        None => (0, false),
                        _ => (0, true),
                    };
                    let is_virtual = is_virtual
                        || matches!(di.uint(c, dw::DW_AT_virtuality)?, Some(v) if v != 0);
                    align = align.max(self.graph.align(ty));
                    if let Some(b) = self.graph.as_struct(ty) {
                        st.dynamic |= b.dynamic;
                        st.nontrivial_for_calls |= b.nontrivial_for_calls;
                    }
                    st.nontrivial_for_calls |= is_virtual;
                    st.bases.push(Base {
                        ty,
                        offset,
                        is_virtual,
                    });
                }
                dw::DW_TAG_template_type_parameter | dw::DW_TAG_template_value_parameter => {
                    self.template_arg(c, &mut st.template_args)?;
                }
                dw::DW_TAG_GNU_template_parameter_pack => {
                    for p in di.children(c)? {
                        self.template_arg(p, &mut st.template_args)?;
                    }
                }
                dw::DW_TAG_subprogram => {
                    if di.uint(c, dw::DW_AT_virtuality)?.is_some_and(|v| v != 0) {
                        st.dynamic = true;
                    }
                    if self.special_member_not_trivial(c, class_name.as_deref())? {
                        st.nontrivial_for_calls = true;
                    }
                }
                _ => {}
            }
        }
        st.nontrivial_for_calls |= st.dynamic;
        Ok(Type {
            size,
            align,
            kind: Kind::Struct(Box::new(st)),
        })
    }

    fn struct_nontrivial(&self, ty: TypeId) -> bool {
        let mut id = self.graph.resolve(ty);
        while let Kind::Array { elem, .. } = &self.graph.get(id).kind {
            id = self.graph.resolve(*elem);
        }
        self.graph
            .as_struct(id)
            .is_some_and(|s| s.nontrivial_for_calls)
    }

    /// A user-provided destructor or copy/move constructor makes a class non-trivial for the
    /// purpose of calls (Itanium C++ ABI), so it is passed by invisible reference.
    fn special_member_not_trivial(
        &self,
        sub: DieRef,
        class: Option<&str>,
    ) -> Result<bool, BuildError> {
        let di = self.di;
        let Some(class) = class else {
            return Ok(false);
        };
        let Some(name) = di.name(sub)? else {
            return Ok(false);
        };
        if di.flag(sub, dw::DW_AT_artificial)?
            || di.uint(sub, dw::DW_AT_defaulted)?.is_some_and(|d| d == 1)
        {
            return Ok(false);
        }
        if name == format!("~{class}") {
            return Ok(true);
        }
        if name != class {
            return Ok(false);
        }
        // A constructor taking exactly one (non-artificial) reference: copy or move.
        let mut params = Vec::new();
        for p in di.children(sub)? {
            if di.tag(p)? == dw::DW_TAG_formal_parameter && !di.flag(p, dw::DW_AT_artificial)? {
                params.push(p);
            }
        }
        if params.len() != 1 {
            return Ok(false);
        }
        let Some(t) = di.reference(params[0], dw::DW_AT_type)? else {
            return Ok(false);
        };
        let tag = di.tag(t)?;
        if !matches!(
            tag,
            dw::DW_TAG_reference_type | dw::DW_TAG_rvalue_reference_type
        ) {
            return Ok(false);
        }
        // Deleted copy constructors do not make a class non-trivial by themselves.
        Ok(!di.flag(sub, dw::DW_AT_deleted)?)
    }

    /// An enum's enumerators (name, value), in declaration order.
    fn enumerators(&self, die: DieRef) -> Result<Vec<(i128, String)>, BuildError> {
        let di = self.di;
        let mut out = Vec::new();
        for c in di.children(die)? {
            if di.tag(c)? != dw::DW_TAG_enumerator {
                continue;
            }
            let value = match di.attr(c, dw::DW_AT_const_value)? {
                Some(Attr::Uint(v)) => i128::from(v),
                Some(Attr::Int(v)) => i128::from(v),
                _ => continue,
            };
            if let Some(name) = di.name(c)? {
                out.push((value, name));
            }
        }
        Ok(out)
    }

    fn template_arg(&mut self, p: DieRef, out: &mut Vec<TemplateArg>) -> Result<(), BuildError> {
        let di = self.di;
        match di.tag(p)? {
            dw::DW_TAG_template_type_parameter => {
                let t = di.reference(p, dw::DW_AT_type)?;
                let qualifiers = self.strip(t)?.qualifiers;
                let ty = self.type_of(t)?;
                let is_default = di.flag(p, dw::DW_AT_default_value)?;
                out.push(TemplateArg::Type {
                    ty,
                    qualifiers,
                    is_default,
                });
            }
            dw::DW_TAG_template_value_parameter => {
                let v = match di.attr(p, dw::DW_AT_const_value)? {
                    Some(Attr::Uint(v)) => v as i128,
                    Some(Attr::Int(v)) => v as i128,
                    _ => 0,
                };
                out.push(TemplateArg::Value(v));
            }
            _ => {}
        }
        Ok(())
    }
}
