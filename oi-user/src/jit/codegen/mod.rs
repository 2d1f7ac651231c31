//! Plan → Cranelift IR: one IR function per (plan node, object length) that needs a native
//! frame of its own (roots, recursion through pointers and containers, or a function grown
//! past its inlining budget), plus the entry function and the visited-set insertion.
//!
//! Every function mirrors `interp::walk` statement by statement: the same words in the same
//! order, the same bound checks, the same depth accounting (`depth` counts the dynamic nodes
//! walked, like `Walker::depth`). Checks the interpreter makes on object bytes it has in hand
//! (a field outside its object) depend only on the plan, so they are decided here at compile
//! time; checks on values read from the target become branches to a cold error exit.
//!
//! Loads from target memory use trapping memory flags (never hoisted above the checks that
//! guard them); the walker context, the output buffer and the scratch table use trusted ones.
//!
//! Node functions use Cranelift's `tail` convention: a call that is the last thing a walk
//! does (a linked list's `next`) is a `return_call`, so chains run in constant stack.
//!
//! With `sizes` (OIL's walkers), every node also adds its part of the inclusive size to a
//! running total, as `report` would add it up from the stream (exclusive sizes from the
//! same words, static totals of the subtrees that read nothing), and the entry leaves the
//! total in `WalkFrame::total`: `oil::size` needs no decoding. Values the decoder would
//! refuse (a string capacity or a bucket count beyond any allocation) make such a walk
//! fail as corrupt, so that its caller asks the interpreter and the decoder instead.
//!
//! A walker with sizes and no stream (OIL's `size`) walks the roots inline in its entry, and
//! may be optimistic about the visited set (`generate_totals_optimistic`): a few compiled
//! shortcuts that only hold for intact objects end such a walk as corrupt otherwise, and
//! its caller then runs the exact walker. Its entry keeps the constant part of the total
//! apart (`Gen::consts`) and skips an `optional`'s flag read where the root's own loads
//! fault wherever it would (`Gen::covered_by_root_loads`).
//!
//! Never emits a call outside the functions generated here, and never a syscall. One of
//! them is not Cranelift's: `FN_PREFETCH`, a `prefetcht0` (`nodes`), which `link` and the
//! in-process backend put in place as bytes.
//!
//! This module holds the generator (`Gen`) and what every node uses: loads, checks, the
//! running total, calls and inlining. `body` dispatches a node to the module of its kind
//! (`strings`, `vectors`, `nodes`, `swiss`, `chains`, `btree`, `pointers`, `expr` for
//! described containers);
//! `stream` writes the words, `visited` keeps the visited set, `entry` builds the entry.

use std::collections::HashMap;
use std::mem::offset_of;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I8, I16, I32, I64};
use cranelift_codegen::ir::{
    AbiParam, Block, BlockArg, ExtFuncData, ExternalName, FuncRef, Function, InstBuilder,
    MemFlagsData, Signature, StackSlotData, StackSlotKind, UserExternalName, UserFuncName, Value,
};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};

use super::{
    DEFAULT_STACK, ErrorCode, JitError, MAX_DEPTH, SCRATCH_BYTES, STATUS_BAD_FRAME, STATUS_CORRUPT,
    STATUS_DONE, STATUS_FULL, STATUS_REVISIT, STATUS_STACK, VISITED_SLOTS, WalkFrame,
};
use crate::containers::rbtree;
use crate::containers::string::StringLayout;
use crate::describe::compile::{Chains, DescribedArray, Swiss};
use crate::describe::expr::{BinOp, Expr, UnOp};
use crate::interp::heap::MAX_HEAPS;
use crate::interp::walk::{MAX_CAPTURED_KEY, MAX_DESCRIBED_HEAP, MAX_ELEMENTS, VISITED_CAPACITY};
use crate::plan::stream::{MAX_WORD_BYTES, RUN_MARKER};
use crate::plan::{BLOCK_TAG, Capture, NodeId, Op, Plan};
use crate::plan::{ControlBlock, Sizing};

mod body;
mod btree;
mod chains;
mod entry;
mod expr;
mod nodes;
mod pointers;
mod stream;
mod strings;
mod swiss;
mod vectors;
mod visited;

use entry::gen_entry;
pub(super) use nodes::PREFETCH_CODE;
use visited::{gen_block, gen_visit};

/// Largest single read the interpreter agrees to make (its `MAX_ARRAY_BYTES`).
const MAX_READ: u64 = 1 << 30;
/// Strings an iteration of `vector<string>`'s loops: a group of the stream's runs (its
/// eight short words are one 64-bit word).
const STRING_GROUP: u64 = crate::plan::stream::STRING_GROUP as u64;
/// Most node walks inlined into one function before children become calls (code size).
const INLINE_BUDGET: u32 = 48;
/// Most red-black (1 KiB) and b-tree (640 B) descent stacks in one function's frame.
const MAX_RB_STACKS: u32 = 4;
/// Entries of the red-black descent stack: the interpreter refuses a push beyond 129.
const RB_STACK: u64 = 129;
/// Stack kept free below the limit for the last frame's own spills (frames are far smaller).
const STACK_MARGIN: u64 = 32 << 10;

/// Function ids (the `index` of their `UserExternalName`); node functions follow.
pub(super) const FN_ENTRY: u32 = 0;
pub(super) const FN_VISIT: u32 = 1;
pub(super) const FN_BLOCK: u32 = 2;
/// `prefetcht0 [rdi]; ret` (`nodes::PREFETCH_CODE`, put in place by `link`).
pub(super) const FN_PREFETCH: u32 = 3;
/// Fixed functions before the node functions.
const FIXED_FNS: u32 = 4;

// The walker context, a stack slot of the entry function shared by pointer with every
// function: the output cursor lives in a register inside a function and here across calls.
const CTX_CUR: i32 = 0;
const CTX_END: i32 = 8;
const CTX_TABLE: i32 = 16;
const CTX_GEN: i32 = 24;
const CTX_COUNT: i32 = 32;
const CTX_BIAS: i32 = 40;
const CTX_LIMIT: i32 = 48;
const CTX_ERR_CODE: i32 = 56;
const CTX_ERR_ADDR: i32 = 64;
const CTX_HEAPS: i32 = 72;
const CTX_NHEAPS: i32 = 80;
/// The running total of a walker compiled with sizes.
const CTX_TOTAL: i32 = 88;
/// The last pointer of a pointer node (`plan::stream::PointerDelta`) across calls.
const CTX_LAST_POINTER: i32 = 96;
const CTX_SIZE: u32 = 104;
/// An optimistic walker's recorded visits (`generate_totals_optimistic`): how many, then the
/// keys themselves.
const CTX_NKEYS: i32 = 104;
const CTX_KEYS: i32 = 112;
/// Most visits an optimistic walker records before it gives up (`STATUS_REVISIT`): its
/// end-of-walk check compares every pair, and objects with more pointers are better served
/// by the visited-set table.
const OPTIMISTIC_KEYS: u64 = 32;
/// Largest byte count the decoder accepts (`report`'s `MAX_BYTES`).
const MAX_BYTES: u64 = 1 << 47;
/// The optimistic entry's suspicion (`Gen::suspect`) is below `1 << SUSPECT_BITS` for an
/// intact walk: below the decoder's byte bound, and below the visit tags' bits (48 and up).
const SUSPECT_BITS: i64 = 47;
const _: () = assert!(MAX_BYTES == 1 << SUSPECT_BITS);

fn frame_off(off: usize) -> i32 {
    // WalkFrame is a few hundred bytes: every offset fits.
    off as i32
}

/// Generated IR functions, indexed by function id.
pub(super) fn generate(
    plan: &Plan,
    roots: &[NodeId],
    fc: TargetFrontendConfig,
    sizes: bool,
) -> Result<Vec<Function>, JitError> {
    generate_with(plan, roots, fc, sizes, true, false)
}

/// A walker with sizes that writes no stream: the same loads, checks and total, for a caller
/// that wants the inclusive size only (OIL's `size`). `out_used` stays 0.
pub(super) fn generate_totals(
    plan: &Plan,
    roots: &[NodeId],
    fc: TargetFrontendConfig,
) -> Result<Vec<Function>, JitError> {
    generate_with(plan, roots, fc, true, false, false)
}

/// [`generate_totals`] without the visited-set table: each pointer the walk would insert
/// into the set (the roots' seeds, smart pointers, reference_wrappers, raw pointers) is
/// assumed new, descended, and its key recorded in the walker's context; at the end the
/// entry compares the recorded keys pairwise. If every key is distinct (and there were at
/// most [`OPTIMISTIC_KEYS`]), every insertion of the exact walker would have succeeded too,
/// so both walked the same objects and the total is the same; otherwise the walk ends with
/// [`STATUS_REVISIT`] (at once when the record is full: shared or cyclic pointees cannot
/// make it run long) and the caller runs the exact walker. Reads no `scratch`, `out` or
/// `generation`. Plans that charge heap blocks (chase-raw-pointers) are not compiled so.
pub(super) fn generate_totals_optimistic(
    plan: &Plan,
    roots: &[NodeId],
    fc: TargetFrontendConfig,
) -> Result<Vec<Function>, JitError> {
    if plan.charges_heap_blocks() {
        return Err(JitError::Codegen(
            "an optimistic walker cannot charge heap blocks".into(),
        ));
    }
    generate_with(plan, roots, fc, true, false, true)
}

fn generate_with(
    plan: &Plan,
    roots: &[NodeId],
    fc: TargetFrontendConfig,
    sizes: bool,
    stream: bool,
    optimistic: bool,
) -> Result<Vec<Function>, JitError> {
    let mut reg = Registry {
        sizes,
        stream,
        optimistic,
        statics: vec![None; plan.nodes.len()],
        ..Registry::default()
    };
    let mut fctx = FunctionBuilderContext::new();
    let mut funcs: Vec<Option<Function>> = vec![None; FIXED_FNS as usize];
    funcs[FN_ENTRY as usize] = Some(gen_entry(plan, roots, &mut reg, &mut fctx, fc)?);
    funcs[FN_VISIT as usize] = Some(gen_visit(&mut fctx, fc));
    funcs[FN_BLOCK as usize] = Some(gen_block(&mut fctx, fc));
    funcs[FN_PREFETCH as usize] = Some(nodes::gen_prefetch(&mut fctx, fc));
    while let Some((id, node, len)) = reg.pending.pop() {
        let f = gen_node_fn(plan, id, node, len, &mut reg, &mut fctx, fc)?;
        let i = id as usize;
        if funcs.len() <= i {
            funcs.resize_with(i + 1, || None);
        }
        funcs[i] = Some(f);
    }
    funcs
        .into_iter()
        .enumerate()
        .map(|(i, f)| f.ok_or_else(|| JitError::Codegen(format!("function {i} never generated"))))
        .collect()
}

/// Node functions requested so far: (node, object length) → function id.
#[derive(Default)]
struct Registry {
    ids: HashMap<(NodeId, u64), u32>,
    pending: Vec<(u32, NodeId, u64)>,
    /// Add up the inclusive size while walking.
    sizes: bool,
    /// Write the stream (false: the total only, `generate_totals`).
    stream: bool,
    /// Record visits instead of inserting them (`generate_totals_optimistic`).
    optimistic: bool,
    /// While an optimistic entry is generated as a leaf (it walks everything inline and
    /// calls no node function, `entry::gen_optimistic_entry`): the variable that counts the
    /// recorded keys, in a register instead of the context.
    leaf_keys: Option<Variable>,
    /// While a leaf optimistic entry is generated with its visits in registers
    /// (`visited::record_site`): one variable and visit tag per place that records, in order.
    sites: Option<visited::Sites>,
    /// A visit could not take a register of its own (inside a loop, or too many places):
    /// the entry is generated again with the recorded keys in the context.
    sites_overflow: bool,
    /// `plan::totals::static_total` of each node, memoised.
    statics: Vec<Option<u64>>,
}

impl Registry {
    fn id(&mut self, node: NodeId, len: u64) -> u32 {
        let next = self.ids.len() as u32 + FIXED_FNS;
        *self.ids.entry((node, len)).or_insert_with(|| {
            self.pending.push((next, node, len));
            next
        })
    }
}

/// Node functions use the `tail` convention so that a walk ending in a call (the `next` of
/// a linked list) is a tail call and chains need no stack; the entry (called by the
/// tracer's stub) and the heap block check use System V. The prefetch changes no register,
/// and the visited-set insertion saves what it uses, so their callers keep all theirs
/// (`preserve_all`: no spills around the call; the insertion's call sits on the cold path
/// of every pointer, and a loop of owned pointers would otherwise keep its counters on the
/// stack).
fn conv(id: u32) -> CallConv {
    if id == FN_ENTRY || id == FN_BLOCK {
        CallConv::SystemV
    } else if id == FN_PREFETCH || id == FN_VISIT {
        CallConv::PreserveAll
    } else {
        CallConv::Tail
    }
}

fn sig(id: u32, params: usize) -> Signature {
    let mut s = Signature::new(conv(id));
    s.params.extend((0..params).map(|_| AbiParam::new(I64)));
    if id != FN_PREFETCH && id != FN_VISIT {
        s.returns.push(AbiParam::new(I64));
    }
    s
}

fn new_function(id: u32, params: usize) -> Function {
    Function::with_name_signature(UserFuncName::user(0, id), sig(id, params))
}

/// Why emission of the current path stopped: it ended in an unconditional error exit (the
/// rest of the path is unreachable and not emitted), or compilation failed.
enum Stop {
    Dead,
    Err(JitError),
}

type G = Result<(), Stop>;

fn unsupported(plan: &Plan, id: NodeId, what: &str) -> Stop {
    Stop::Err(JitError::Unsupported {
        node: plan.nodes[id].name.clone(),
        what: what.to_string(),
    })
}

/// Emission state of one function.
struct Gen<'a, 'b> {
    plan: &'a Plan,
    b: FunctionBuilder<'b>,
    reg: &'a mut Registry,
    refs: HashMap<u32, FuncRef>,
    ctx: Value,
    /// The interpreter's `depth` when this function's walk began.
    depth: Value,
    /// End of the output buffer.
    end: Value,
    /// Output cursor.
    cur: Variable,
    /// The last non-null pointer a pointer node wrote (`plan::stream::PointerDelta`); in the
    /// context across calls, as the cursor.
    last_pointer: Variable,
    /// Running total of a walker compiled with sizes; in the context across calls.
    total: Variable,
    /// The optimistic entry's constant part of the total outside loops, apart from `total`
    /// (`Gen::tally_const`): constants fold together at compile time, and the dynamic
    /// parts add up in a chain of one-cycle adds rather than three-operand `lea`s.
    consts: Option<Variable>,
    /// Error / full exit: one i64 parameter, the status.
    ret: Block,
    inline: Vec<(NodeId, u64)>,
    budget: u32,
    rb_stacks: u32,
    /// What is being emitted is the last thing the function does (then it returns 0): a
    /// call there becomes a tail call.
    tail: bool,
    /// The optimistic entry's suspicion (`entry::optimistic_entry`): values ORed together
    /// that are all below 2^47 when the walk's shortcuts hold (heap string capacities less
    /// one, recorded addresses); the entry checks it once at the end, with no branch per
    /// member, and ends the walk as corrupt otherwise.
    suspect: Option<Variable>,
    /// Loops open around what is being emitted: code emitted here may run many times.
    loops: u32,
    /// The optimistic entry's addresses that are its root plus a constant (`Gen::add`),
    /// with that constant: where an `optional`'s flag lies among the root's own loads.
    root_rel: HashMap<Value, u64>,
    /// The offsets from the root of the words the optimistic entry always loads
    /// (`entry::root_loads`).
    root_loads: Vec<u64>,
}

fn trusted() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// Target memory: may fault, must not be moved above its guards.
fn target() -> MemFlagsData {
    MemFlagsData::new()
}

impl Gen<'_, '_> {
    fn dynamic(&self, id: NodeId) -> bool {
        self.plan.nodes[id].dynamic
    }

    fn size(&self, id: NodeId) -> u64 {
        self.plan.nodes[id].static_size
    }

    fn c(&mut self, v: u64) -> Value {
        self.b.ins().iconst(I64, v as i64)
    }

    /// The inclusive size of node `id` when it reads nothing at runtime.
    fn st(&mut self, id: NodeId) -> u64 {
        crate::plan::totals::static_total(self.plan, id, &mut self.reg.statics)
    }

    /// Adds `v` to the running total (walkers compiled with sizes only).
    fn tally(&mut self, v: Value) {
        if self.reg.sizes {
            let t = self.b.use_var(self.total);
            let t = self.b.ins().iadd(t, v);
            self.b.def_var(self.total, t);
        }
    }

    fn tally_const(&mut self, c: u64) {
        // Inside a loop, the constant goes with the running total (one `lea` an element,
        // not a second variable carried around the loop).
        if self.reg.sizes
            && c != 0
            && self.loops == 0
            && let Some(v) = self.consts
        {
            let t = self.b.use_var(v);
            let t = self.b.ins().iadd_imm_s(t, c as i64);
            self.b.def_var(v, t);
        } else if self.reg.sizes && c != 0 {
            let t = self.b.use_var(self.total);
            let t = self.b.ins().iadd_imm_s(t, c as i64);
            self.b.def_var(self.total, t);
        }
    }

    /// Leaves the cursor (and the total) in the context, for a callee or the caller.
    fn sync_out(&mut self) {
        if self.reg.stream {
            let cur = self.b.use_var(self.cur);
            self.st_ctx(cur, CTX_CUR);
            let last = self.b.use_var(self.last_pointer);
            self.st_ctx(last, CTX_LAST_POINTER);
        }
        if self.reg.sizes {
            let t = self.whole_total();
            self.st_ctx(t, CTX_TOTAL);
        }
    }

    /// The running total with its constant part (`Gen::consts`) folded in, which then
    /// starts again at 0.
    fn whole_total(&mut self) -> Value {
        let t = self.b.use_var(self.total);
        let Some(v) = self.consts else {
            return t;
        };
        let k = self.b.use_var(v);
        let t = self.b.ins().iadd(t, k);
        self.b.def_var(self.total, t);
        let zero = self.c(0);
        self.b.def_var(v, zero);
        t
    }

    /// Takes the cursor (and the total) back from the context after a call.
    fn sync_in(&mut self) {
        if self.reg.stream {
            let cur = self.ld_ctx(CTX_CUR);
            self.b.def_var(self.cur, cur);
            let last = self.ld_ctx(CTX_LAST_POINTER);
            self.b.def_var(self.last_pointer, last);
        }
        if self.reg.sizes {
            let t = self.ld_ctx(CTX_TOTAL);
            self.b.def_var(self.total, t);
        }
    }

    /// ORs `v` into the optimistic entry's suspicion (`Gen::suspect`) when there is one
    /// (true), else returns false and the caller checks `v` itself.
    fn suspect(&mut self, v: Value) -> bool {
        let Some(s) = self.suspect else {
            return false;
        };
        let acc = self.b.use_var(s);
        let acc = self.b.ins().bor(acc, v);
        self.b.def_var(s, acc);
        true
    }

    /// `times` copies of node `id` if it reads nothing (a dynamic one adds its own part
    /// when it is walked).
    fn tally_static(&mut self, id: NodeId, times: Value) {
        if self.reg.sizes && !self.dynamic(id) {
            let each = self.st(id);
            if each != 0 {
                let v = self.b.ins().imul_imm_s(times, each as i64);
                self.tally(v);
            }
        }
    }

    /// The static totals of the children of a node that reads nothing of them.
    fn static_children(&mut self, ids: &[NodeId]) -> u64 {
        let mut t = 0u64;
        for &m in ids {
            if !self.dynamic(m) {
                t = t.wrapping_add(self.st(m));
            }
        }
        t
    }

    /// Fails as corrupt when `v > max` (only walkers with sizes check what the decoder
    /// checks: the others leave it to the decoder).
    fn decoder_bound(&mut self, v: Value, max: u64, code: ErrorCode, addr: Value) {
        if self.reg.sizes {
            let over = self.icmp_imm(IntCC::UnsignedGreaterThan, v, max);
            self.fail_if(over, code, addr);
        }
    }

    /// `base + off` as a (base, 32-bit displacement) pair for a memory access.
    fn at(&mut self, base: Value, off: u64) -> (Value, i32) {
        match i32::try_from(off) {
            Ok(o) => (base, o),
            Err(_) => {
                let o = self.c(off);
                (self.b.ins().iadd(base, o), 0)
            }
        }
    }

    fn add(&mut self, base: Value, off: u64) -> Value {
        if off == 0 {
            base
        } else {
            let v = self.b.ins().iadd_imm_s(base, off as i64);
            if let Some(&r) = self.root_rel.get(&base) {
                self.root_rel.insert(v, r.wrapping_add(off));
            }
            v
        }
    }

    /// Whether the byte at `addr + off` lies between two words that the optimistic entry
    /// always loads from its root, at most a page apart (`entry::root_loads`): then those
    /// loads touch every page the byte may be on, and a load of it can fault only where
    /// they do.
    fn covered_by_root_loads(&self, addr: Value, off: u64) -> bool {
        let Some(&r) = self.root_rel.get(&addr) else {
            return false;
        };
        covered(&self.root_loads, r.wrapping_add(off))
    }

    /// A target word.
    fn ld(&mut self, base: Value, off: u64) -> Value {
        let (p, o) = self.at(base, off);
        self.b.ins().load(I64, target(), p, o)
    }

    /// A little-endian unsigned target integer of `size` (0..=8) bytes (`containers::uint`).
    fn ld_uint(&mut self, base: Value, off: u64, size: u64) -> Value {
        let (p, o) = self.at(base, off);
        match size {
            0 => self.c(0),
            1 => self.b.ins().uload8(I64, target(), p, o),
            2 => self.b.ins().uload16(I64, target(), p, o),
            4 => self.b.ins().uload32(target(), p, o),
            8 => self.b.ins().load(I64, target(), p, o),
            n => {
                let mut acc = self.c(0);
                for i in 0..n.min(8) {
                    let (p, o) = self.at(base, off + i);
                    let byte = self.b.ins().uload8(I64, target(), p, o);
                    let byte = self.b.ins().ishl_imm_s(byte, (8 * i) as i64);
                    acc = self.b.ins().bor(acc, byte);
                }
                acc
            }
        }
    }

    fn ld_ctx(&mut self, off: i32) -> Value {
        self.b.ins().load(I64, trusted(), self.ctx, off)
    }

    fn st_ctx(&mut self, v: Value, off: i32) {
        self.b.ins().store(trusted(), v, self.ctx, off);
    }

    fn icmp_imm(&mut self, cc: IntCC, v: Value, imm: u64) -> Value {
        self.b.ins().icmp_imm_s(cc, v, imm as i64)
    }

    /// Unconditional error exit; the current path ends here.
    fn dead(&mut self, code: ErrorCode, addr: Value) -> Stop {
        // An optimistic walker's caller reads its status only (the exact walker then says why).
        if !self.reg.optimistic {
            let code = self.c(code as u64);
            self.st_ctx(code, CTX_ERR_CODE);
            self.st_ctx(addr, CTX_ERR_ADDR);
        }
        let s = self.c(STATUS_CORRUPT);
        self.b.ins().jump(self.ret, &[BlockArg::Value(s)]);
        Stop::Dead
    }

    fn fail(&mut self, code: ErrorCode, addr: Value) -> G {
        Err(self.dead(code, addr))
    }

    /// Error exit taken when `cond` holds; emission continues on the other path.
    fn fail_if(&mut self, cond: Value, code: ErrorCode, addr: Value) {
        let bad = self.b.create_block();
        let ok = self.b.create_block();
        self.b.ins().brif(cond, bad, &[], ok, &[]);
        self.b.set_cold_block(bad);
        self.b.switch_to_block(bad);
        let _ = self.fail(code, addr);
        self.b.switch_to_block(ok);
    }

    /// One more in the counter `var`; above `limit` (what the object says it holds) the walk
    /// fails with `code` at `addr`, so a cycle or a corrupt shape ends.
    fn count_within(&mut self, var: Variable, limit: Value, code: ErrorCode, addr: Value) {
        let c = self.b.use_var(var);
        let c = self.b.ins().iadd_imm_s(c, 1);
        self.b.def_var(var, c);
        let many = self.b.ins().icmp(IntCC::UnsignedGreaterThan, c, limit);
        self.fail_if(many, code, addr);
    }

    /// Returns `status` when it is not zero.
    fn exit_if_nonzero(&mut self, status: Value) {
        let ok = self.b.create_block();
        self.b
            .ins()
            .brif(status, self.ret, &[BlockArg::Value(status)], ok, &[]);
        self.b.switch_to_block(ok);
    }

    /// Emits `body` under `cond`; a dead body simply does not rejoin.
    fn if_then(&mut self, cond: Value, body: impl FnOnce(&mut Self) -> G) -> G {
        let then = self.b.create_block();
        let merge = self.b.create_block();
        self.b.ins().brif(cond, then, &[], merge, &[]);
        self.b.switch_to_block(then);
        match body(self) {
            Ok(()) => {
                self.b.ins().jump(merge, &[]);
            }
            Err(Stop::Dead) => {}
            Err(e) => return Err(e),
        }
        self.b.switch_to_block(merge);
        Ok(())
    }

    /// Emits `body` in the current block and, if it is not dead, jumps to `join`.
    fn then_join(&mut self, join: Block, body: impl FnOnce(&mut Self) -> G) -> G {
        match body(self) {
            Ok(()) => {
                self.b.ins().jump(join, &[]);
                Ok(())
            }
            Err(Stop::Dead) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `for i in 0..n { body(i) }`.
    fn loop_n(&mut self, n: Value, mut body: impl FnMut(&mut Self, Value) -> G) -> G {
        let i = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(i, zero);
        let head = self.b.create_block();
        let body_b = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(head);
        let iv = self.b.use_var(i);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, iv, n);
        self.b.ins().brif(more, body_b, &[], exit, &[]);
        self.b.switch_to_block(body_b);
        self.loops += 1;
        let walked = body(self, iv);
        self.loops -= 1;
        match walked {
            Ok(()) => {
                let next = self.b.ins().iadd_imm_s(iv, 1);
                self.b.def_var(i, next);
                self.b.ins().jump(head, &[]);
            }
            Err(Stop::Dead) => {}
            Err(e) => return Err(e),
        }
        self.b.switch_to_block(exit);
        Ok(())
    }

    fn func_ref(&mut self, id: u32, params: usize) -> FuncRef {
        if let Some(r) = self.refs.get(&id) {
            return *r;
        }
        let signature = self.b.import_signature(sig(id, params));
        let name = self
            .b
            .func
            .declare_imported_user_function(UserExternalName::new(0, id));
        let r = self.b.import_function(ExtFuncData {
            name: ExternalName::user(name),
            signature,
            colocated: true,
            patchable: false,
        });
        self.refs.insert(id, r);
        r
    }

    /// Calls the node function of (`id`, `len`) with `depth`; propagates its status.
    fn call_node(&mut self, id: NodeId, len: u64, addr: Value, depth: Value) -> G {
        let fid = self.reg.id(id, len);
        let f = self.func_ref(fid, 3);
        self.sync_out();
        if self.tail {
            // The callee leaves the cursor in the context and returns the status, which is
            // all this function would do after the call.
            self.b.ins().return_call(f, &[self.ctx, addr, depth]);
            return Err(Stop::Dead);
        }
        let call = self.b.ins().call(f, &[self.ctx, addr, depth]);
        let status = self.b.inst_results(call)[0];
        self.exit_if_nonzero(status);
        self.sync_in();
        Ok(())
    }

    /// `Walker::walk` of a child: inlined, or a call when recursive or over budget.
    /// `k`: nesting below `self.depth` at which the child's walk starts.
    fn child(&mut self, id: NodeId, addr: Value, len: u64, k: u64) -> G {
        if !self.dynamic(id) {
            return Ok(());
        }
        // Red-black trees and b-trees keep a descent stack in the frame.
        let is_rb = match &self.plan.nodes[id].op {
            Op::RbTree { .. } => true,
            Op::Described { layout, .. } => {
                layout.btree.is_some() || layout.chains.is_some_and(|c| c.tree.is_some())
            }
            _ => false,
        };
        if self.inline.contains(&(id, len))
            || self.budget == 0
            || (is_rb && self.rb_stacks >= MAX_RB_STACKS)
        {
            let d = self.b.ins().iadd_imm_s(self.depth, k as i64);
            return self.call_node(id, len, addr, d);
        }
        self.budget -= 1;
        self.inline.push((id, len));
        let r = self.walk(id, addr, len, k);
        self.inline.pop();
        r
    }

    /// `Walker::walk_at`: the object is `static_size` bytes at `addr`.
    fn walk_at(&mut self, id: NodeId, addr: Value, k: u64) -> G {
        if !self.dynamic(id) {
            return Ok(());
        }
        let size = self.size(id);
        if size > MAX_READ {
            return self.fail(ErrorCode::ReadSize, addr);
        }
        self.child(id, addr, size, k)
    }

    /// `Walker::walk` inlined here: the depth check, then the node's own walk.
    fn walk(&mut self, id: NodeId, addr: Value, len: u64, k: u64) -> G {
        if !self.dynamic(id) {
            return Ok(());
        }
        if k >= MAX_DEPTH {
            return self.fail(ErrorCode::TooDeep, addr);
        }
        let deep = self.icmp_imm(IntCC::UnsignedGreaterThanOrEqual, self.depth, MAX_DEPTH - k);
        self.fail_if(deep, ErrorCode::TooDeep, addr);
        self.body(id, addr, len, k + 1)
    }

    /// A member `size` bytes long at `off`, or the interpreter's `sub` error.
    fn member(&mut self, addr: Value, len: u64, off: u64, size: u64) -> Result<Value, Stop> {
        match off.checked_add(size) {
            Some(e) if e <= len => Ok(self.add(addr, off)),
            _ => Err(self.dead(ErrorCode::MemberOutside, addr)),
        }
    }

    /// A word field at `off` of an object `len` bytes long, or error `code`.
    fn field(&mut self, addr: Value, len: u64, off: u64, code: ErrorCode) -> Result<Value, Stop> {
        match off.checked_add(8) {
            Some(e) if e <= len => Ok(self.ld(addr, off)),
            _ => Err(self.dead(code, addr)),
        }
    }
}

/// Whether byte `at` lies in one of the 8-byte words at offsets `loads`, or between two of
/// them that span at most a page (`a ≤ at < b + 8`, `b + 8 − a ≤ 4096`): then their loads
/// touch every page of `[a, b + 8)`.
fn covered(loads: &[u64], at: u64) -> bool {
    let before = loads.iter().copied().filter(|&o| o <= at).max();
    let after = loads
        .iter()
        .copied()
        .filter(|&o| o.saturating_add(8) > at)
        .min();
    match (before, after) {
        (_, Some(b)) if b <= at => true,
        (Some(a), Some(b)) => b.saturating_add(8) - a <= 4096,
        _ => false,
    }
}

/// Builds one function with `Gen`: `prologue` runs in the entry block with the parameters.
fn build(
    plan: &Plan,
    id: u32,
    params: usize,
    reg: &mut Registry,
    fctx: &mut FunctionBuilderContext,
    fc: TargetFrontendConfig,
    body: impl FnOnce(&mut Gen<'_, '_>, &[Value]) -> G,
) -> Result<Function, JitError> {
    let mut func = new_function(id, params);
    if id == FN_ENTRY && reg.optimistic {
        // The optimistic entry also returns the total (`entry::gen_entry`).
        func.signature.returns.push(AbiParam::new(I64));
    }
    let results = func.signature.returns.len();
    {
        let mut b = FunctionBuilder::new(&mut func, fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let args = b.block_params(entry).to_vec();
        let ret = b.create_block();
        let status = b.append_block_param(ret, I64);
        b.set_cold_block(ret);
        let cur = b.declare_var(I64);
        let total = b.declare_var(I64);
        let zero = b.ins().iconst(I64, 0);
        b.def_var(total, zero);
        // A walker without a stream keeps its cursor at 0 (the entry and `sync_in` of a
        // stream walker set it).
        b.def_var(cur, zero);
        let last_pointer = b.declare_var(I64);
        b.def_var(last_pointer, zero);
        let mut g = Gen {
            plan,
            b,
            reg,
            refs: HashMap::new(),
            ctx: args[0],
            depth: zero,
            end: zero,
            cur,
            last_pointer,
            total,
            consts: None,
            ret,
            inline: Vec::new(),
            budget: INLINE_BUDGET,
            rb_stacks: 0,
            tail: false,
            suspect: None,
            loops: 0,
            root_rel: HashMap::new(),
            root_loads: Vec::new(),
        };
        match body(&mut g, &args) {
            Ok(()) | Err(Stop::Dead) => {}
            Err(Stop::Err(e)) => return Err(e),
        }
        g.b.switch_to_block(ret);
        let mut out = vec![status];
        out.resize_with(results, || zero);
        g.b.ins().return_(&out);
        g.b.seal_all_blocks();
        g.b.finalize(fc);
    }
    Ok(func)
}

/// `fn(ctx, addr, depth) -> status`: the walk of `node` with an object of `len` bytes.
fn gen_node_fn(
    plan: &Plan,
    id: u32,
    node: NodeId,
    len: u64,
    reg: &mut Registry,
    fctx: &mut FunctionBuilderContext,
    fc: TargetFrontendConfig,
) -> Result<Function, JitError> {
    build(plan, id, 3, reg, fctx, fc, |g, args| {
        let (addr, depth) = (args[1], args[2]);
        g.depth = depth;
        // Deep recursion (a chased linked list) must end in a status, not a stack overflow.
        let sp = g.b.ins().get_stack_pointer(I64);
        let limit = g.ld_ctx(CTX_LIMIT);
        let low = g.b.ins().icmp(IntCC::UnsignedLessThan, sp, limit);
        let s = g.c(STATUS_STACK);
        let ok = g.b.create_block();
        g.b.ins().brif(low, g.ret, &[BlockArg::Value(s)], ok, &[]);
        g.b.switch_to_block(ok);
        if g.reg.stream {
            g.end = g.ld_ctx(CTX_END);
        }
        g.sync_in();
        g.inline.push((node, len));
        g.tail = true;
        g.walk(node, addr, len, 0)?;
        g.sync_out();
        let done = g.c(STATUS_DONE);
        g.b.ins().return_(&[done]);
        Err(Stop::Dead)
    })
}

#[cfg(test)]
mod tests;
