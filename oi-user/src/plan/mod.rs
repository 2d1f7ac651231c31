//! The walk plan: the single description of how each argument is walked, shared by the
//! interpreter and the JIT, and replayed by `report` to decode the data stream.
//!
//! A plan is a graph of [`Node`]s, one per *use site* (a root, a member, a container's element
//! kind...) with everything static already decided: output name, `typeNames`, staticSize,
//! `is_primitive`, and an [`Op`] saying which runtime values to read. Cycles (a `Node*` inside
//! `Node`) close through memoised pointee / element nodes.
//!
//! ## The data stream
//! Walking a node appends words, each encoded as an unsigned LEB128 number ([`stream`]:
//! the small ones, nearly all of them, take a byte); nodes whose subtree reads nothing at
//! runtime (`dynamic == false`) append nothing and are not even visited. Per [`Op`]:
//! - `Leaf`, `Bitfield`: nothing. `Struct`, `Array`, `Pair`: their dynamic children, in order.
//! - `String`: `len, heap_capacity` (0 when inline / SSO).
//! - `Vector`, `VectorBool`: `address, len, cap`, then each element if the element is dynamic.
//! - `Deque`: `address, len, map_slots, blocks`, then the elements.
//! - `List`, `RbTree`: `address, len`, then the elements (in iteration order).
//! - `Hashtable`: `address, len, bucket_count`, then the elements.
//! - `Optional`: `engaged`, then the value if engaged. `Variant`: `index` (u64::MAX when
//!   valueless), then the active alternative.
//! - `SmartPtr`, `RefWrap`, `RawPointer`: `pointer, descended`, then (a `SmartPtr` with a
//!   `control` block only) the block's kind (`ControlBlock::kind`), then the target if
//!   descended.
//! - `HeapPointer` (a raw pointer with chase-raw-pointers): `pointer, descended, block`,
//!   then the target if descended. `block` is the usable size of the glibc heap block the
//!   pointer starts, charged here (0: not the start of a block, a block no larger than a
//!   lone allocation of the target, or a block already charged in this sample).
//! - `Described` (a container described in a TOML file, `describe`): `address, len, cap,
//!   heap` (heap 0 when the description's `inline` condition holds), then each element; a
//!   Swiss table (`control_bytes`): len is the count of full slots, then those elements; node
//!   chains (`node_chains`): cap is the bucket count, heap includes `len · node_size` (and,
//!   with a `tree`, each shared tree's object and nodes), then the nodes' values in bucket,
//!   chain order (a bucket pair's tree where its even bucket stands, in tree order); a b-tree (`btree`): heap is the nodes'
//!   bytes, then the values in key order. (`tagged_pointer` is an array of 0 or 1.)
//! - `Union` (a union whose active member a `[[union]]` description names): the index of
//!   the case the discriminator matched (u64::MAX: none), then that case's member, if any.
//! - `Poly`: the index of the matching vtable (u64::MAX: none, the declared type), then the
//!   chosen node's words.
//! - `Leaf` with a [`Scalar`] (`--values` only): the value's bytes, zero-extended, in one
//!   word (two for 16-byte values, low word first).
//! - `Entry` (map element): the captured key (`Capture`), then key and value.
//!   Captured keys: scalar → 1 word; string → `len` then the bytes padded to words; other →
//!   the key's address.
//!
//! The JIT writes the same bytes into its data segment; the stream is the contract.

pub mod build;
pub mod limits;
pub mod stream;
pub mod totals;

pub use build::{PlanBuilder, PlanError};

use crate::containers::{
    deque::DequeLayout, hashtable::HashLayout, list::ListLayout, optional::OptionalLayout,
    rbtree::RbLayout, string::StringLayout, variant::VariantLayout, vector::VectorBoolLayout,
    vector::VectorLayout,
};

pub type NodeId = usize;

/// Which rules charge a container's bytes (docs/semantics.md, "Two sizings"): `Real`, the
/// bytes its library really obtained from the allocator for it; `Oi`, Object Introspection's
/// rules, byte for byte. Decided when the plan is built (a hash node's size is static) and
/// read by the decoder and the walkers that add up sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Sizing {
    Real,
    #[default]
    Oi,
}

impl Sizing {
    /// As `--sizes` and the summary spell it.
    pub fn name(self) -> &'static str {
        match self {
            Sizing::Real => "real",
            Sizing::Oi => "oi",
        }
    }

    /// Bytes a heap string allocated beyond its capacity, in characters: the terminator,
    /// which OI's rules do not count.
    pub fn terminator(self) -> u64 {
        u64::from(self == Sizing::Real)
    }
}

/// The control block of a `shared_ptr` under real sizes (`containers::smart_ptr`): where
/// the pointer to it sits in the `shared_ptr`, and what each kind of block costs beyond the
/// object it manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ControlBlock {
    /// Offset of the control block pointer in the `shared_ptr` object.
    pub offset: u64,
    /// `make_shared`'s combined block holds the object at this offset from its start.
    pub inplace_at: u64,
    /// The combined block's bytes beyond the object (its counts, vptr and padding).
    pub inplace_extra: u64,
    /// A block of its own (`shared_ptr<T>(new T)`): its bytes.
    pub separate: u64,
}

impl ControlBlock {
    /// The stream's word for a control block pointer `cb` beside object pointer `ptr`: 0 no
    /// block, 1 combined with the object, 2 a block of its own.
    pub fn kind(&self, ptr: u64, cb: u64) -> u64 {
        if cb == 0 {
            0
        } else if cb.wrapping_add(self.inplace_at) == ptr {
            1
        } else {
            2
        }
    }

    /// Bytes charged for a block of `kind` whose object was `descended` into (a block
    /// reached again, with its object, is charged once).
    pub fn charge(&self, kind: u64, descended: bool) -> u64 {
        match (descended, kind) {
            (true, 1) => self.inplace_extra,
            (true, 2) => self.separate,
            _ => 0,
        }
    }
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    pub nodes: Vec<Node>,
    /// One line per shipped description that did not fit this program (its types were
    /// planned as plain classes), printed once by whoever reports; stored with the plan so
    /// that a cached plan says it too.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The rules the plan's sizes follow.
    #[serde(default)]
    pub sizing: Sizing,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Node {
    pub name: String,
    pub type_names: Vec<String>,
    pub static_size: u64,
    pub is_primitive: bool,
    pub op: Op,
    /// The walk of this subtree appends to the stream (computed when the plan is finished).
    pub dynamic: bool,
    /// The type as people write it (`std::map<int, std::string>`), for the outputs people
    /// read; `typeNames` keep OI's spelling. Empty: use OI's.
    #[serde(default)]
    pub readable: String,
    /// With `--values`: the scalar this `Leaf` reads (and appends to the stream).
    #[serde(default)]
    pub value: Option<Scalar>,
    /// A union that is not walked (not one member, no description names its active one):
    /// opaque, E = S; the report says how many bytes sat in such unions.
    #[serde(default)]
    pub opaque_union: bool,
    /// A container of a standard library oi-trace does not know (`typegraph::kinds::
    /// unknown_standard`): not walked, E = S, JSON `notWalked`; never a plain-struct total.
    #[serde(default)]
    pub foreign: bool,
}

/// A scalar read for `--values`: its size in bytes (1, 2, 4, 8 or 16) and how to show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Scalar {
    pub size: u64,
    pub kind: ScalarKind,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScalarKind {
    Signed,
    Unsigned,
    /// `char`, `signed char`, `unsigned char`, `char8_t`: a character and its code.
    Char {
        signed: bool,
    },
    Bool,
    Float,
    /// Raw pointers (not chased), vptrs: the address.
    Pointer,
    /// An enum: its enumerators, values as the `size` bytes they are stored in.
    Enum {
        signed: bool,
        enumerators: Vec<(u64, String)>,
    },
}

impl Scalar {
    /// Stream words the value takes.
    pub fn words(&self) -> u64 {
        self.size.div_ceil(8).max(1)
    }
}

/// How a map key is captured into `data` (docs/semantics.md, "Captured keys").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Capture {
    /// Integral / enum / other scalar key of this byte size, as an unsigned number.
    /// `signed` keys are sign-extended, as a C++ cast to `uint64_t` would.
    Scalar { size: u64, signed: bool },
    /// A `std::string` key: its characters.
    String(StringLayout),
    /// Any other key: its address.
    Address,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Op {
    /// Primitive, enum, union, stubbed pointer, weak_ptr, empty class: E = S.
    Leaf,
    /// Bitfield member: S = E = 0.
    Bitfield,
    /// Members at byte offsets; E = padding.
    Struct {
        members: Vec<(u64, NodeId)>,
        padding: u64,
        /// A container adapter (`containers::adapter`): the single member is the underlying
        /// container, whose length, capacity and pointer the report shows on this node too.
        /// Walkers treat it as any struct; the stream is the member's.
        #[serde(default)]
        adapter: bool,
    },
    /// C array or std::array: `count` elements of `stride` bytes at `offset`; E = `exclusive`.
    Array {
        elem: NodeId,
        offset: u64,
        count: u64,
        stride: u64,
        exclusive: u64,
    },
    /// std::pair (and other two-child nodes): E = S − sizes of the children.
    Pair {
        first: (u64, NodeId),
        second: (u64, NodeId),
    },
    String(StringLayout),
    Vector {
        layout: VectorLayout,
        elem: NodeId,
    },
    VectorBool {
        layout: VectorBoolLayout,
        elem: NodeId,
    },
    Deque {
        layout: DequeLayout,
        elem: NodeId,
    },
    List {
        layout: ListLayout,
        elem: NodeId,
    },
    RbTree {
        layout: RbLayout,
        elem: NodeId,
        is_map: bool,
    },
    Hashtable {
        layout: HashLayout,
        elem: NodeId,
        is_map: bool,
    },
    /// Synthetic map entry: key and value at offsets inside the stored pair; S = node size.
    Entry {
        key: (u64, NodeId),
        value: (u64, NodeId),
        capture: Option<Capture>,
    },
    Optional {
        layout: OptionalLayout,
        elem: NodeId,
    },
    Variant {
        layout: VariantLayout,
        alternatives: Vec<NodeId>,
    },
    /// A union whose active member a discriminator names (`[[union]]`, `describe::unions`).
    /// The discriminator (`width` bytes, unsigned) is read from the target at the union's
    /// address + `disc` (it lives in the class around the union, before or after it). The
    /// first case whose value it equals is walked: its member at an offset in the union
    /// (E = S − its size), or nothing (None: a case of "none", E = S). No case matches:
    /// nothing walked, E = S, and the report counts the union as not walked.
    Union {
        disc: i64,
        width: u8,
        cases: Vec<(u64, Option<(u64, NodeId)>)>,
    },
    /// unique_ptr / shared_ptr: pointer at `offset`; `target` None for incomplete types.
    /// `control`: a shared_ptr's control block, charged under real sizes.
    SmartPtr {
        offset: u64,
        target: Option<NodeId>,
        #[serde(default)]
        control: Option<ControlBlock>,
    },
    /// std::reference_wrapper (child `ref_val`).
    RefWrap {
        offset: u64,
        target: Option<NodeId>,
    },
    /// A raw pointer chased with chase-raw-pointers (child `*`; none for void/incomplete).
    /// Plans are built with [`Op::HeapPointer`] instead; this one stays for the walkers' tests.
    RawPointer {
        target: Option<NodeId>,
    },
    /// A raw pointer chased with chase-raw-pointers that also charges the heap block it
    /// points at the start of (`heapBlock`): `lone` is the usable size glibc gives a lone
    /// allocation of the target (`malloc_usable_size(malloc(sizeof T))`, T = 0 bytes for
    /// void/incomplete targets); a block no larger is a single object, measured as OI does.
    HeapPointer {
        target: Option<NodeId>,
        lone: u64,
    },
    /// A container described as data (`describe`): values are expressions over its fields.
    Described {
        layout: crate::describe::compile::DescribedArray,
        elem: NodeId,
    },
    /// polymorphic-inheritance: a dynamic class measured as its most-derived class. The
    /// vptr (offset 0) is looked up in `candidates` (vtable ELF address ranges); the chosen
    /// node replaces this one in the output, at the object's address + offset-to-top.
    Poly {
        candidates: Vec<(u64, u64, NodeId)>,
        fallback: NodeId,
    },
}

impl Op {
    /// Every node this one refers to, in order: members, elements, alternatives, cases,
    /// pointees, candidates and the fallback. The one list the plan, the JIT and the checks
    /// share, so a new `Op` cannot be missed by one of them.
    pub fn children(&self) -> Vec<NodeId> {
        match self {
            Op::Leaf | Op::Bitfield | Op::String(_) => vec![],
            Op::Struct { members, .. } => members.iter().map(|m| m.1).collect(),
            Op::Array { elem, .. }
            | Op::Vector { elem, .. }
            | Op::VectorBool { elem, .. }
            | Op::Deque { elem, .. }
            | Op::List { elem, .. }
            | Op::RbTree { elem, .. }
            | Op::Hashtable { elem, .. }
            | Op::Described { elem, .. }
            | Op::Optional { elem, .. } => vec![*elem],
            Op::Pair { first, second } => vec![first.1, second.1],
            Op::Entry { key, value, .. } => vec![key.1, value.1],
            Op::Variant { alternatives, .. } => alternatives.clone(),
            Op::Union { cases, .. } => cases.iter().filter_map(|c| c.1.map(|m| m.1)).collect(),
            Op::SmartPtr { target, .. }
            | Op::RefWrap { target, .. }
            | Op::RawPointer { target }
            | Op::HeapPointer { target, .. } => target.iter().copied().collect(),
            Op::Poly {
                candidates,
                fallback,
            } => candidates
                .iter()
                .map(|c| c.2)
                .chain(std::iter::once(*fallback))
                .collect(),
        }
    }
}

impl Plan {
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// Marks every node whose walk appends to the stream.
    pub fn compute_dynamic(&mut self) {
        let mut state = vec![0u8; self.nodes.len()]; // 0 unknown, 1 in progress, 2 done
        for id in 0..self.nodes.len() {
            self.dynamic_of(id, &mut state);
        }
    }

    fn dynamic_of(&mut self, id: NodeId, state: &mut [u8]) -> bool {
        match state[id] {
            // A cycle always passes through a pointer or container, which is dynamic itself.
            1 => return true,
            2 => return self.nodes[id].dynamic,
            _ => {}
        }
        state[id] = 1;
        let children: Vec<NodeId> = match &self.nodes[id].op {
            Op::Leaf | Op::Bitfield => vec![],
            Op::Struct { members, .. } => members.iter().map(|m| m.1).collect(),
            Op::Array { elem, .. } => vec![*elem],
            Op::Pair { first, second } => vec![first.1, second.1],
            Op::Entry {
                key,
                value,
                capture,
            } => {
                let v = vec![key.1, value.1];
                if capture.is_some() {
                    self.nodes[id].dynamic = true;
                }
                v
            }
            // Everything else reads runtime values itself.
            Op::String(_)
            | Op::Vector { .. }
            | Op::VectorBool { .. }
            | Op::Deque { .. }
            | Op::List { .. }
            | Op::RbTree { .. }
            | Op::Hashtable { .. }
            | Op::Optional { .. }
            | Op::Variant { .. }
            | Op::Union { .. }
            | Op::SmartPtr { .. }
            | Op::RefWrap { .. }
            | Op::RawPointer { .. }
            | Op::HeapPointer { .. }
            | Op::Described { .. }
            | Op::Poly { .. } => Vec::new(),
        };
        let own = !matches!(
            self.nodes[id].op,
            Op::Leaf
                | Op::Bitfield
                | Op::Struct { .. }
                | Op::Array { .. }
                | Op::Pair { .. }
                | Op::Entry { .. }
        );
        // A value read (`--values`) makes a leaf read the target itself.
        let own = own || self.nodes[id].value.is_some();
        let mut dynamic = self.nodes[id].dynamic || own;
        for c in children {
            dynamic |= self.dynamic_of(c, state);
        }
        // Children of dynamic containers must still be classified.
        for c in self.children_of_container(id) {
            self.dynamic_of(c, state);
        }
        self.nodes[id].dynamic = dynamic;
        state[id] = 2;
        dynamic
    }

    fn children_of_container(&self, id: NodeId) -> Vec<NodeId> {
        match &self.nodes[id].op {
            // Held by value (classified through `dynamic_of`'s own recursion) or none.
            Op::Leaf
            | Op::Bitfield
            | Op::String(_)
            | Op::Struct { .. }
            | Op::Array { .. }
            | Op::Pair { .. }
            | Op::Entry { .. } => vec![],
            op => op.children(),
        }
    }
}

/// Tag of a heap block's key in the visited set (no type's [`Plan::visit_tag`]).
pub const BLOCK_TAG: u64 = 0xffff;

/// The usable size glibc (2.36, x86-64) gives `malloc(n)` from an arena: the request plus
/// the 8-byte size word, rounded up to 16, at least the 32-byte minimum chunk, less the size
/// word. What a lone object of `n` bytes occupies.
pub fn lone_usable(n: u64) -> u64 {
    (n.saturating_add(8 + 15) & !15).max(32) - 8
}

impl Plan {
    /// Whether some node charges heap blocks (the walk then needs the heap ranges).
    pub fn charges_heap_blocks(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| matches!(n.op, Op::HeapPointer { .. }))
    }

    /// The type part of a visited-set key for an object of node `target` (`None`: a
    /// void/incomplete pointee): a 16-bit hash of its resolved type name in bits 48–63, so
    /// that the same address seen as a different type (a struct and its first member) is
    /// not a revisit, and the same type through any path is. Never [`BLOCK_TAG`] or 0.
    pub fn visit_tag(&self, target: Option<NodeId>) -> u64 {
        let name = target
            .and_then(|t| self.nodes[t].type_names.last())
            .map_or("void", String::as_str);
        let mut h: u32 = 0x811c_9dc5;
        for b in name.bytes() {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
        let t = u64::from((h ^ (h >> 16)) & 0xffff);
        let t = if t == 0 || t == BLOCK_TAG { 1 } else { t };
        t << 48
    }
}

/// One measured argument: the plan node of its root and where its object is.
#[derive(Debug, Clone)]
pub struct Root {
    pub node: NodeId,
}
