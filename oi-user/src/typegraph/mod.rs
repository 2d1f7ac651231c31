//! The type graph: the DWARF types reachable from the probed arguments, as an owned arena of
//! nodes (primitive, enum, pointer, array, struct/class/union, typedef, function, void,
//! incomplete). Built lazily from DWARF by [`build`]; cycles (a struct pointing to itself) are
//! handled because every DWARF type gets its id before its contents are built.
//!
//! Pure data: no DWARF handles, no process access. [`layout`] flattens bases and computes
//! padding; [`names`] spells type names per docs/semantics.md, "Type names".

pub mod abi;
pub mod build;
pub mod kinds;
pub mod layout;
pub mod names;
pub mod readable;

pub use build::{BuildError, Builder};

use kinds::ContainerKind;

/// Index of a type in a [`TypeGraph`].
pub type TypeId = usize;

#[derive(Debug, Clone, Default)]
pub struct TypeGraph {
    pub types: Vec<Type>,
    /// How each pointer type that is not a plain `T*` refers to its target (see
    /// [`Indirection`]); absent: a plain pointer to an unqualified target.
    pub indirections: std::collections::HashMap<TypeId, Indirection>,
}

/// How a [`Kind::Pointer`] refers to its target: only names need it (`const char*`,
/// `const std::string&`), since the plan measures every pointer and reference alike, so it
/// lives beside the kind rather than in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Indirection {
    pub sigil: Sigil,
    /// The qualifiers of the pointed-to type, which the graph's target id leaves out.
    pub target: Qualifiers,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sigil {
    #[default]
    Pointer,
    Reference,
    RvalueReference,
}

/// `const` and `volatile`, which the graph strips from types (they change no layout).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Qualifiers {
    pub is_const: bool,
    pub is_volatile: bool,
}

#[derive(Debug, Clone)]
pub struct Type {
    /// DWARF byte size (0 for void, functions and incomplete types).
    pub size: u64,
    /// Alignment in bytes, computed from the members (DWARF rarely states it).
    pub align: u64,
    pub kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrimKind {
    Signed,
    Unsigned,
    Bool,
    Float,
}

#[derive(Debug, Clone)]
pub enum Kind {
    /// Integer, floating or bool; `name` is already the spelling of docs/semantics.md,
    /// "Type names" (`int32_t`), `dwarf_name` the compiler's (`long unsigned int`), for names
    /// people read.
    Primitive {
        name: String,
        prim: PrimKind,
        dwarf_name: String,
    },
    /// `name` None for anonymous enums; `enumerators` in declaration order, for values.
    Enum {
        name: Option<String>,
        enumerators: Vec<(i128, String)>,
    },
    /// Pointer or reference (lvalue, rvalue). `target` None means `void`.
    Pointer {
        target: Option<TypeId>,
    },
    Array {
        elem: TypeId,
        count: u64,
    },
    Struct(Box<StructType>),
    Typedef {
        name: String,
        target: TypeId,
    },
    /// A function type (only ever the target of a function pointer).
    Function,
    Void,
    /// Declared but never defined anywhere we could see.
    Incomplete {
        name: String,
    },
}

#[derive(Debug, Clone)]
pub struct StructType {
    /// Qualified name; `None` for anonymous types (spelled `__oi_anon_N`).
    pub name: Option<String>,
    /// Unqualified DWARF name (used for comparators, hashers... and capture-keys matching).
    pub bare_name: Option<String>,
    pub is_union: bool,
    pub members: Vec<Member>,
    pub bases: Vec<Base>,
    pub template_args: Vec<TemplateArg>,
    /// Set when the qualified name is a recognised std container.
    pub container: Option<ContainerKind>,
    /// Has a vtable pointer somewhere (own `_vptr.X` or via a base).
    pub dynamic: bool,
    /// Copying it is not trivial, so the ABI passes it by invisible reference.
    pub nontrivial_for_calls: bool,
}

#[derive(Debug, Clone)]
pub struct Member {
    /// `None` for unnamed members (anonymous struct/union members).
    pub name: Option<String>,
    /// Declared type: may be a typedef (typeNames lists the chain).
    pub ty: TypeId,
    pub bit_offset: u64,
    /// `Some(width)` for bitfields.
    pub bit_size: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Base {
    pub ty: TypeId,
    pub offset: u64,
    /// Virtual bases have no constant offset; their members are not flattened.
    pub is_virtual: bool,
}

#[derive(Debug, Clone)]
pub enum TemplateArg {
    /// `is_default`: DWARF 5 says the argument is the parameter's default
    /// (`DW_AT_default_value`), which readable names leave out.
    Type {
        ty: TypeId,
        qualifiers: Qualifiers,
        is_default: bool,
    },
    Value(i128),
}

impl TypeGraph {
    pub fn get(&self, id: TypeId) -> &Type {
        &self.types[id]
    }

    /// Follows typedefs (cv-qualifiers are already stripped by the builder).
    pub fn resolve(&self, mut id: TypeId) -> TypeId {
        for _ in 0..64 {
            match &self.types[id].kind {
                Kind::Typedef { target, .. } => id = *target,
                _ => return id,
            }
        }
        id
    }

    /// Typedef names met while resolving `id`, outermost first.
    pub fn typedef_chain(&self, mut id: TypeId) -> Vec<String> {
        let mut out = Vec::new();
        for _ in 0..64 {
            match &self.types[id].kind {
                Kind::Typedef { name, target } => {
                    out.push(name.clone());
                    id = *target;
                }
                _ => break,
            }
        }
        out
    }

    pub fn as_struct(&self, id: TypeId) -> Option<&StructType> {
        match &self.types[self.resolve(id)].kind {
            Kind::Struct(s) => Some(s),
            _ => None,
        }
    }

    /// Integer, floating or bool after resolving typedefs.
    pub fn is_fundamental(&self, id: TypeId) -> bool {
        matches!(self.types[self.resolve(id)].kind, Kind::Primitive { .. })
    }

    pub fn size(&self, id: TypeId) -> u64 {
        self.types[self.resolve(id)].size
    }

    pub fn align(&self, id: TypeId) -> u64 {
        self.types[self.resolve(id)].align.max(1)
    }

    /// The i-th type template argument of a struct.
    pub fn type_arg(&self, id: TypeId, i: usize) -> Option<TypeId> {
        self.as_struct(id)?
            .template_args
            .iter()
            .filter_map(|a| match a {
                TemplateArg::Type { ty, .. } => Some(*ty),
                TemplateArg::Value(_) => None,
            })
            .nth(i)
    }

    /// Whether the type is complete enough to be measured (void, functions and incomplete
    /// types are not).
    pub fn is_complete(&self, id: TypeId) -> bool {
        !matches!(
            self.types[self.resolve(id)].kind,
            Kind::Incomplete { .. } | Kind::Void | Kind::Function
        )
    }

    /// How pointer type `id` refers to its target (a plain `T*` when nothing was recorded).
    pub fn indirection(&self, id: TypeId) -> Indirection {
        self.indirections.get(&id).copied().unwrap_or_default()
    }

    pub fn add(&mut self, t: Type) -> TypeId {
        self.types.push(t);
        self.types.len() - 1
    }
}
