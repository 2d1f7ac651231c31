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
//! its caller then runs the exact walker.
//!
//! Never emits a call outside the functions generated here, and never a syscall.

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
use crate::plan::stream::MAX_WORD_BYTES;
use crate::plan::{BLOCK_TAG, Capture, NodeId, Op, Plan};

/// Largest single read the interpreter agrees to make (its `MAX_ARRAY_BYTES`).
const MAX_READ: u64 = 1 << 30;
/// Strings an iteration of `vector<string>`'s unchecked loop (2 or 4).
const STRING_GROUP: u64 = 4;
/// Most node walks inlined into one function before children become calls (code size).
const INLINE_BUDGET: u32 = 48;
/// Most red-black descent stacks (1 KiB each) in one function's frame.
const MAX_RB_STACKS: u32 = 4;
/// Entries of the red-black descent stack: the interpreter refuses a push beyond 129.
const RB_STACK: u64 = 129;
/// Stack kept free below the limit for the last frame's own spills (frames are far smaller).
const STACK_MARGIN: u64 = 32 << 10;

/// Function ids (the `index` of their `UserExternalName`); node functions follow.
pub(super) const FN_ENTRY: u32 = 0;
pub(super) const FN_VISIT: u32 = 1;
pub(super) const FN_BLOCK: u32 = 2;
/// Fixed functions before the node functions.
const FIXED_FNS: u32 = 3;

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
const CTX_SIZE: u32 = 96;
/// An optimistic walker's recorded visits (`generate_totals_optimistic`): how many, then the
/// keys themselves.
const CTX_NKEYS: i32 = 96;
const CTX_KEYS: i32 = 104;
/// Most visits an optimistic walker records before it gives up (`STATUS_REVISIT`): its
/// end-of-walk check compares every pair, and objects with more pointers are better served
/// by the visited-set table.
const OPTIMISTIC_KEYS: u64 = 32;
/// Largest byte count the decoder accepts (`report`'s `MAX_BYTES`).
const MAX_BYTES: u64 = 1 << 47;

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
    /// `report::static_total` of each node, memoised.
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
/// tracer's stub) and the visited-set insertion use System V.
fn conv(id: u32) -> CallConv {
    if id == FN_ENTRY || id == FN_VISIT || id == FN_BLOCK {
        CallConv::SystemV
    } else {
        CallConv::Tail
    }
}

fn sig(id: u32, params: usize) -> Signature {
    let mut s = Signature::new(conv(id));
    s.params.extend((0..params).map(|_| AbiParam::new(I64)));
    s.returns.push(AbiParam::new(I64));
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
    /// Running total of a walker compiled with sizes; in the context across calls.
    total: Variable,
    /// Error / full exit: one i64 parameter, the status.
    ret: Block,
    inline: Vec<(NodeId, u64)>,
    budget: u32,
    rb_stacks: u32,
    /// What is being emitted is the last thing the function does (then it returns 0): a
    /// call there becomes a tail call.
    tail: bool,
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
        crate::report::static_total(self.plan, id, &mut self.reg.statics)
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
        if self.reg.sizes && c != 0 {
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
        }
        if self.reg.sizes {
            let t = self.b.use_var(self.total);
            self.st_ctx(t, CTX_TOTAL);
        }
    }

    /// Takes the cursor (and the total) back from the context after a call.
    fn sync_in(&mut self) {
        if self.reg.stream {
            let cur = self.ld_ctx(CTX_CUR);
            self.b.def_var(self.cur, cur);
        }
        if self.reg.sizes {
            let t = self.ld_ctx(CTX_TOTAL);
            self.b.def_var(self.total, t);
        }
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
            self.b.ins().iadd_imm_s(base, off as i64)
        }
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
        let code = self.c(code as u64);
        self.st_ctx(code, CTX_ERR_CODE);
        self.st_ctx(addr, CTX_ERR_ADDR);
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

    /// Returns `status` when it is not zero.
    fn exit_if_nonzero(&mut self, status: Value) {
        let ok = self.b.create_block();
        self.b
            .ins()
            .brif(status, self.ret, &[BlockArg::Value(status)], ok, &[]);
        self.b.switch_to_block(ok);
    }

    /// Appends words to the output, each in LEB128 (`plan::stream`). Bytes that do not fit
    /// are not stored, but the cursor advances anyway: the walk goes on counting, and the
    /// entry reports [`STATUS_FULL`] with the size the output needs, so the tracer grows the
    /// buffer once.
    fn emit(&mut self, words: &[Value]) {
        for &w in words {
            self.varint(w);
        }
    }

    /// One LEB128 word at the cursor; a byte is stored only when it lies before `end`.
    fn varint(&mut self, w: Value) {
        if !self.reg.stream {
            return;
        }
        let cur = self.b.use_var(self.cur);
        let join = self.b.create_block();
        let joined = self.b.append_block_param(join, I64);
        // Nearly every word is a byte (a length, a count, a flag).
        let small = self.icmp_imm(IntCC::UnsignedLessThan, w, 0x80);
        let room = self.b.ins().icmp(IntCC::UnsignedLessThan, cur, self.end);
        let fast = self.b.ins().band(small, room);
        let one = self.b.create_block();
        let many = self.b.create_block();
        self.b.ins().brif(fast, one, &[], many, &[]);
        self.b.switch_to_block(one);
        self.b.ins().istore8(trusted(), w, cur, 0);
        let next = self.b.ins().iadd_imm_s(cur, 1);
        self.b.ins().jump(join, &[BlockArg::Value(next)]);

        self.b.switch_to_block(many);
        let lp = self.b.create_block();
        let v = self.b.append_block_param(lp, I64);
        let c = self.b.append_block_param(lp, I64);
        self.b
            .ins()
            .jump(lp, &[BlockArg::Value(w), BlockArg::Value(cur)]);
        self.b.switch_to_block(lp);
        let (byte, rest, more) = self.leb_byte(v);
        let room = self.b.ins().icmp(IntCC::UnsignedLessThan, c, self.end);
        let store = self.b.create_block();
        let advance = self.b.create_block();
        self.b.ins().brif(room, store, &[], advance, &[]);
        self.b.switch_to_block(store);
        self.b.ins().istore8(trusted(), byte, c, 0);
        self.b.ins().jump(advance, &[]);
        self.b.switch_to_block(advance);
        let c1 = self.b.ins().iadd_imm_s(c, 1);
        self.b.ins().brif(
            more,
            lp,
            &[BlockArg::Value(rest), BlockArg::Value(c1)],
            join,
            &[BlockArg::Value(c1)],
        );
        self.b.switch_to_block(join);
        self.b.def_var(self.cur, joined);
    }

    /// The next LEB128 byte of `v`: (byte, the bits left, whether bytes follow).
    fn leb_byte(&mut self, v: Value) -> (Value, Value, Value) {
        let low = self.b.ins().band_imm_s(v, 0x7f);
        let rest = self.b.ins().ushr_imm_s(v, 7);
        let more = self.icmp_imm(IntCC::NotEqual, rest, 0);
        let flagged = self.b.ins().bor_imm_s(low, 0x80);
        let byte = self.b.ins().select(more, flagged, low);
        (byte, rest, more)
    }

    /// One LEB128 word at `q`, known to have room: returns the address after it.
    fn varint_unchecked(&mut self, w: Value, q: Value) -> Value {
        if !self.reg.stream {
            return q;
        }
        let lp = self.b.create_block();
        let v = self.b.append_block_param(lp, I64);
        let c = self.b.append_block_param(lp, I64);
        let done = self.b.create_block();
        let after = self.b.append_block_param(done, I64);
        self.b
            .ins()
            .jump(lp, &[BlockArg::Value(w), BlockArg::Value(q)]);
        self.b.switch_to_block(lp);
        let (byte, rest, more) = self.leb_byte(v);
        self.b.ins().istore8(trusted(), byte, c, 0);
        let c1 = self.b.ins().iadd_imm_s(c, 1);
        self.b.ins().brif(
            more,
            lp,
            &[BlockArg::Value(rest), BlockArg::Value(c1)],
            done,
            &[BlockArg::Value(c1)],
        );
        self.b.switch_to_block(done);
        after
    }

    /// A whole little-endian `u64` at the cursor (the per-root header), stored if it fits.
    fn emit_raw_word(&mut self, w: Value) {
        if !self.reg.stream {
            return;
        }
        let cur = self.b.use_var(self.cur);
        let next = self.b.ins().iadd_imm_s(cur, 8);
        // User-space addresses: `next` does not wrap.
        let fits = self
            .b
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, next, self.end);
        let store = self.b.create_block();
        let join = self.b.create_block();
        self.b.ins().brif(fits, store, &[], join, &[]);
        self.b.switch_to_block(store);
        self.b.ins().store(trusted(), w, cur, 0);
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(join);
        self.b.def_var(self.cur, next);
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
        match body(self, iv) {
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

    /// Inserts the key of `addr` seen as `tag` (`Plan::visit_tag`) into the visited set:
    /// 1 if newly inserted, else 0.
    fn visit_as(&mut self, addr: Value, tag: u64) -> Value {
        let t = self.c(tag);
        let key = self.b.ins().bxor(addr, t);
        if self.reg.optimistic {
            return self.record_visit(key);
        }
        self.visit(key)
    }

    /// An optimistic walker's visit: the key recorded for the entry's final check, and 1
    /// ("newly inserted"); [`STATUS_REVISIT`] when the record is full.
    fn record_visit(&mut self, key: Value) -> Value {
        let n = self.ld_ctx(CTX_NKEYS);
        let full = self.icmp_imm(IntCC::UnsignedGreaterThanOrEqual, n, OPTIMISTIC_KEYS);
        let s = self.c(STATUS_REVISIT);
        let ok = self.b.create_block();
        self.b
            .ins()
            .brif(full, self.ret, &[BlockArg::Value(s)], ok, &[]);
        self.b.switch_to_block(ok);
        let off = self.b.ins().ishl_imm_s(n, 3);
        let slot = self.b.ins().iadd(self.ctx, off);
        self.b.ins().store(trusted(), key, slot, CTX_KEYS);
        let n1 = self.b.ins().iadd_imm_s(n, 1);
        self.st_ctx(n1, CTX_NKEYS);
        self.c(1)
    }

    /// The optimistic entry's final check: [`STATUS_REVISIT`] if two recorded keys are
    /// equal (the exact walker would not have descended the second time).
    fn check_recorded(&mut self) -> G {
        let n = self.ld_ctx(CTX_NKEYS);
        self.loop_n(n, |g, i| {
            let off = g.b.ins().ishl_imm_s(i, 3);
            let slot = g.b.ins().iadd(g.ctx, off);
            let ki = g.b.ins().load(I64, trusted(), slot, CTX_KEYS);
            g.loop_n(i, |g, j| {
                let off = g.b.ins().ishl_imm_s(j, 3);
                let slot = g.b.ins().iadd(g.ctx, off);
                let kj = g.b.ins().load(I64, trusted(), slot, CTX_KEYS);
                let same = g.b.ins().icmp(IntCC::Equal, ki, kj);
                let s = g.c(STATUS_REVISIT);
                let ok = g.b.create_block();
                g.b.ins().brif(same, g.ret, &[BlockArg::Value(s)], ok, &[]);
                g.b.switch_to_block(ok);
                Ok(())
            })
        })
    }

    /// Inserts `addr` into the visited set: 1 if newly inserted, else 0.
    fn visit(&mut self, addr: Value) -> Value {
        let f = self.func_ref(FN_VISIT, 2);
        let call = self.b.ins().call(f, &[self.ctx, addr]);
        self.b.inst_results(call)[0]
    }

    /// `Walker::walk` of a child: inlined, or a call when recursive or over budget.
    /// `k`: nesting below `self.depth` at which the child's walk starts.
    fn child(&mut self, id: NodeId, addr: Value, len: u64, k: u64) -> G {
        if !self.dynamic(id) {
            return Ok(());
        }
        let is_rb = matches!(self.plan.nodes[id].op, Op::RbTree { .. });
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

    /// A description's expression (`describe::expr`), as `Expr::eval` computes it: fields
    /// of the object (checked against its length here, at compile time, as the interpreter
    /// checks them against the bytes it holds), `load`s from the target (0 at address 0).
    fn expr(&mut self, e: &Expr, addr: Value, len: u64) -> Result<Value, Stop> {
        self.expr_arg(e, addr, len, None)
    }

    /// [`Gen::expr`] with `arg` as [`Expr::Arg`] (0 when None, as `Expr::eval`).
    fn expr_arg(
        &mut self,
        e: &Expr,
        addr: Value,
        len: u64,
        arg: Option<Value>,
    ) -> Result<Value, Stop> {
        Ok(match e {
            Expr::Const(c) => self.c(*c),
            Expr::Arg => match arg {
                Some(v) => v,
                None => self.c(0),
            },
            Expr::This => addr,
            Expr::Field { off, width } => {
                let w = u64::from(*width);
                match off.checked_add(w) {
                    Some(end) if end <= len => self.ld_uint(addr, *off, w),
                    _ => return Err(self.dead(ErrorCode::FieldOutside, addr)),
                }
            }
            Expr::Load(a, w) => {
                let a = self.expr_arg(a, addr, len, arg)?;
                let v = self.b.declare_var(I64);
                let zero = self.c(0);
                self.b.def_var(v, zero);
                let w = u64::from(*w);
                self.if_then(a, |g| {
                    let x = g.ld_uint(a, 0, w);
                    g.b.def_var(v, x);
                    Ok(())
                })?;
                self.b.use_var(v)
            }
            Expr::Un(op, a) => {
                let a = self.expr_arg(a, addr, len, arg)?;
                let ins = self.b.ins();
                match op {
                    UnOp::Neg => ins.ineg(a),
                    UnOp::Not => ins.bnot(a),
                    UnOp::LogNot => {
                        let z = ins.icmp_imm_s(IntCC::Equal, a, 0);
                        self.b.ins().uextend(I64, z)
                    }
                    UnOp::Sext(bits) => {
                        let ty = match bits {
                            8 => I8,
                            16 => I16,
                            _ => I32,
                        };
                        let r = ins.ireduce(ty, a);
                        self.b.ins().sextend(I64, r)
                    }
                }
            }
            Expr::Bin(op, a, b) => {
                let a = self.expr_arg(a, addr, len, arg)?;
                let b = self.expr_arg(b, addr, len, arg)?;
                self.bin(*op, a, b)
            }
        })
    }

    fn bin(&mut self, op: BinOp, a: Value, b: Value) -> Value {
        let cmp = |g: &mut Self, cc: IntCC| {
            let c = g.b.ins().icmp(cc, a, b);
            g.b.ins().uextend(I64, c)
        };
        // Division by zero is 0: divide by 1 instead, then choose 0.
        let nz = self.b.ins().icmp_imm_s(IntCC::NotEqual, b, 0);
        let one = self.c(1);
        let zero = self.c(0);
        let ins = self.b.ins();
        match op {
            BinOp::Add => ins.iadd(a, b),
            BinOp::Sub => ins.isub(a, b),
            BinOp::Mul => ins.imul(a, b),
            BinOp::Div | BinOp::Rem => {
                let d = ins.select(nz, b, one);
                let q = if op == BinOp::Div {
                    self.b.ins().udiv(a, d)
                } else {
                    self.b.ins().urem(a, d)
                };
                self.b.ins().select(nz, q, zero)
            }
            // Cranelift takes shift counts modulo 64, as `BinOp::apply` does.
            BinOp::Shl => ins.ishl(a, b),
            BinOp::Shr => ins.ushr(a, b),
            BinOp::And => ins.band(a, b),
            BinOp::Or => ins.bor(a, b),
            BinOp::Xor => ins.bxor(a, b),
            BinOp::Eq => cmp(self, IntCC::Equal),
            BinOp::Ne => cmp(self, IntCC::NotEqual),
            BinOp::Lt => cmp(self, IntCC::SignedLessThan),
            BinOp::Le => cmp(self, IntCC::SignedLessThanOrEqual),
            BinOp::Gt => cmp(self, IntCC::SignedGreaterThan),
            BinOp::Ge => cmp(self, IntCC::SignedGreaterThanOrEqual),
            BinOp::LogAnd | BinOp::LogOr => {
                let x = ins.icmp_imm_s(IntCC::NotEqual, a, 0);
                let both = if op == BinOp::LogAnd {
                    self.b.ins().band(x, nz)
                } else {
                    self.b.ins().bor(x, nz)
                };
                self.b.ins().uextend(I64, both)
            }
            BinOp::Align => {
                let d = ins.select(nz, b, one);
                let t = self.b.ins().iadd(a, d);
                let t = self.b.ins().iadd_imm_s(t, -1);
                let q = self.b.ins().udiv(t, d);
                let r = self.b.ins().imul(q, d);
                self.b.ins().select(nz, r, a)
            }
        }
    }

    /// Fails with `ElementCount` when a count read from the target is implausible.
    fn check_count(&mut self, n: Value, addr: Value) {
        let big = self.icmp_imm(IntCC::UnsignedGreaterThan, n, MAX_ELEMENTS);
        self.fail_if(big, ErrorCode::ElementCount, addr);
    }

    /// `a - b`, failing with `code` when it would go below zero (`checked_sub`).
    fn checked_sub(&mut self, a: Value, b: Value, code: ErrorCode, addr: Value) -> Value {
        let under = self.b.ins().icmp(IntCC::UnsignedLessThan, a, b);
        self.fail_if(under, code, addr);
        self.b.ins().isub(a, b)
    }

    fn div(&mut self, v: Value, by: u64) -> Value {
        if by == 1 {
            v
        } else {
            self.b.ins().udiv_imm_s(v, by as i64)
        }
    }

    /// Node `id`'s own walk; its children start at nesting `k`. Only the children after
    /// which the node emits nothing more may inherit tail position ([`Self::last`]).
    fn body(&mut self, id: NodeId, addr: Value, len: u64, k: u64) -> G {
        let tail = std::mem::replace(&mut self.tail, false);
        let r = self.body_inner(id, addr, len, k, tail);
        self.tail = tail;
        r
    }

    /// Runs `f` in tail position if the node is.
    fn last(&mut self, tail: bool, f: impl FnOnce(&mut Self) -> G) -> G {
        self.tail = tail;
        let r = f(self);
        self.tail = false;
        r
    }

    fn body_inner(&mut self, id: NodeId, addr: Value, len: u64, k: u64, tail: bool) -> G {
        let plan = self.plan;
        if let Some(v) = &plan.nodes[id].value {
            // `--values`: as the interpreter, a word at a time, checked to lie in the object.
            for w in 0..v.words() {
                let n = v.size.saturating_sub(8 * w).min(8);
                if (8 * w).checked_add(n).is_none_or(|e| e > len) {
                    return self.fail(ErrorCode::FieldOutside, addr);
                }
                let word = self.ld_uint(addr, 8 * w, n);
                self.emit(&[word]);
            }
        }
        let s = plan.nodes[id].static_size;
        match &plan.nodes[id].op {
            Op::Leaf => {
                self.tally_const(s);
                Ok(())
            }
            Op::Bitfield => Ok(()),
            Op::Struct {
                members, padding, ..
            } => {
                let ids: Vec<NodeId> = members.iter().map(|m| m.1).collect();
                let part = padding.wrapping_add(self.static_children(&ids));
                self.tally_const(part);
                let last = members.iter().rposition(|m| self.dynamic(m.1));
                for (i, &(off, m)) in members.iter().enumerate() {
                    if self.dynamic(m) {
                        let size = self.size(m);
                        let a = self.member(addr, len, off, size)?;
                        self.last(tail && Some(i) == last, |g| g.child(m, a, size, k))?;
                    }
                }
                Ok(())
            }
            Op::Array {
                elem,
                offset,
                count,
                stride,
                exclusive,
            } => {
                let part = if self.dynamic(*elem) {
                    *exclusive
                } else {
                    let each = self.st(*elem);
                    exclusive.wrapping_add(count.wrapping_mul(each))
                };
                self.tally_const(part);
                self.c_array(*elem, addr, len, *offset, *count, *stride, k)
            }
            Op::Pair { first, second }
            | Op::Entry {
                key: first,
                value: second,
                capture: None,
            } => {
                self.tally_pair(s, first.1, second.1);
                self.two(addr, len, *first, *second, k, tail)
            }
            Op::Entry {
                key,
                value,
                capture: Some(c),
            } => {
                self.tally_pair(s, key.1, value.1);
                let ks = self.size(key.1);
                let ka = self.member(addr, len, key.0, ks)?;
                self.capture(*c, ka, ks)?;
                self.two(addr, len, *key, *value, k, tail)
            }
            Op::String(l) => self.string(l, addr, len),
            Op::Vector { layout, elem }
                if self.reg.optimistic
                    && !self.dynamic(*elem)
                    && layout.elem_size > 0
                    && self.st(*elem) == layout.elem_size =>
            {
                self.optimistic_flat_vector(layout, addr, len)
            }
            Op::Vector { layout, elem } => {
                let l = *layout;
                let code = ErrorCode::Vector;
                let start = self.field(addr, len, l.start_off, code)?;
                let finish = self.field(addr, len, l.finish_off, code)?;
                let eos = self.field(addr, len, l.eos_off, code)?;
                let es = l.elem_size.max(1);
                let used = self.checked_sub(finish, start, code, addr);
                let n = self.div(used, es);
                let all = self.checked_sub(eos, start, code, addr);
                let cap = self.div(all, es);
                let cap = self.b.ins().umax(cap, n);
                self.check_count(n, addr);
                self.check_count(cap, addr);
                self.emit(&[addr, n, cap]);
                if self.reg.sizes {
                    let spare = self.b.ins().isub(cap, n);
                    let spare = self.b.ins().imul_imm_s(spare, l.elem_size as i64);
                    let e = self.b.ins().iadd_imm_s(spare, l.size as i64);
                    self.tally(e);
                    self.tally_static(*elem, n);
                }
                self.vector_elements(*elem, start, n, l.elem_size, k)
            }
            Op::VectorBool { layout, elem } => {
                let l = *layout;
                let code = ErrorCode::VectorBool;
                let sp = self.field(addr, len, l.start_p, code)?;
                let so = self.field(addr, len, l.start_bit, code)?;
                let so = self.b.ins().band_imm_s(so, 0xffff_ffff);
                let fp = self.field(addr, len, l.finish_p, code)?;
                let fo = self.field(addr, len, l.finish_bit, code)?;
                let fo = self.b.ins().band_imm_s(fo, 0xffff_ffff);
                let eos = self.field(addr, len, l.eos_off, code)?;
                let d = self.checked_sub(fp, sp, code, addr);
                let d = self.b.ins().ushr_imm_s(d, 3);
                let d = self.b.ins().imul_imm_s(d, 64);
                let bits = self.b.ins().iadd(d, fo);
                let n = self.checked_sub(bits, so, code, addr);
                let c = self.checked_sub(eos, sp, code, addr);
                let c = self.b.ins().ushr_imm_s(c, 3);
                let c = self.b.ins().imul_imm_s(c, 64);
                let cap = self.b.ins().umax(c, n);
                self.check_count(n, addr);
                self.check_count(cap, addr);
                self.emit(&[addr, n, cap]);
                if self.reg.sizes {
                    if self.dynamic(*elem) {
                        // The decoder would read elements nobody wrote (no real plan).
                        self.decoder_bound(n, 0, code, addr);
                    }
                    let spare = self.b.ins().isub(cap, n);
                    let e = self.b.ins().iadd_imm_s(spare, l.size as i64);
                    self.tally(e);
                    self.tally_static(*elem, n);
                }
                Ok(())
            }
            Op::Deque { layout, elem } => self.deque(layout, *elem, addr, len, k),
            Op::List { layout, elem } => {
                let l = *layout;
                let n = self.field(addr, len, l.size_off, ErrorCode::FieldOutside)?;
                self.check_count(n, addr);
                self.emit(&[addr, n]);
                self.tally_nodes(l.size, l.node_size.wrapping_sub(l.elem_size), n, *elem);
                if !self.dynamic(*elem) {
                    return Ok(());
                }
                let head = self.add(addr, l.head_off);
                let first = self.field(addr, len, l.head_off, ErrorCode::FieldOutside)?;
                let node = self.b.declare_var(I64);
                self.b.def_var(node, first);
                let elem = *elem;
                self.loop_n(n, |g, _| {
                    let cur = g.b.use_var(node);
                    let at_head = g.b.ins().icmp(IntCC::Equal, cur, head);
                    let null = g.icmp_imm(IntCC::Equal, cur, 0);
                    let short = g.b.ins().bor(at_head, null);
                    g.fail_if(short, ErrorCode::ListShort, addr);
                    let v = g.member(cur, l.node_size, l.value_off, l.elem_size)?;
                    g.child(elem, v, l.elem_size, k)?;
                    let next = g.field(cur, l.node_size, 0, ErrorCode::FieldOutside)?;
                    g.b.def_var(node, next);
                    Ok(())
                })
            }
            Op::RbTree {
                layout,
                elem,
                is_map,
            } => {
                let l = *layout;
                let n = self.field(addr, len, l.count_off, ErrorCode::FieldOutside)?;
                self.check_count(n, addr);
                self.emit(&[addr, n]);
                let per_node = if *is_map {
                    0
                } else {
                    l.node_size.wrapping_sub(l.value_size)
                };
                self.tally_nodes(l.size, per_node, n, *elem);
                if !self.dynamic(*elem) {
                    return Ok(());
                }
                let root = self.field(
                    addr,
                    len,
                    l.header_off + rbtree::PARENT,
                    ErrorCode::FieldOutside,
                )?;
                self.rb_elements(*elem, &l, root, n, addr, k)
            }
            Op::Hashtable {
                layout,
                elem,
                is_map,
            } => {
                let l = *layout;
                let n = self.field(addr, len, l.count_off, ErrorCode::FieldOutside)?;
                let buckets = self.field(addr, len, l.bucket_count_off, ErrorCode::FieldOutside)?;
                self.check_count(n, addr);
                self.emit(&[addr, n, buckets]);
                if self.reg.sizes {
                    self.decoder_bound(buckets, MAX_BYTES / 8, ErrorCode::FieldOutside, addr);
                    let key_size = match &plan.nodes[*elem].op {
                        Op::Entry { key, .. } if *is_map => self.size(key.1),
                        _ => l.value_size,
                    };
                    let table = self.b.ins().imul_imm_s(buckets, 8);
                    self.tally(table);
                    self.tally_nodes(l.size, l.node_size.wrapping_sub(key_size), n, *elem);
                }
                if !self.dynamic(*elem) {
                    return Ok(());
                }
                let first = self.field(addr, len, l.before_begin_off, ErrorCode::FieldOutside)?;
                let node = self.b.declare_var(I64);
                self.b.def_var(node, first);
                let elem = *elem;
                let node_len = l.value_off + l.value_size;
                self.loop_n(n, |g, _| {
                    let cur = g.b.use_var(node);
                    let null = g.icmp_imm(IntCC::Equal, cur, 0);
                    g.fail_if(null, ErrorCode::HashShort, addr);
                    let v = g.member(cur, node_len, l.value_off, l.value_size)?;
                    g.child(elem, v, l.value_size, k)?;
                    let next = g.field(cur, node_len, 0, ErrorCode::FieldOutside)?;
                    g.b.def_var(node, next);
                    Ok(())
                })
            }
            Op::Optional { layout, elem } => {
                let l = *layout;
                if l.engaged_off.checked_add(1).is_none_or(|e| e > len) {
                    return self.fail(ErrorCode::Optional, addr);
                }
                let flag = self.ld_uint(addr, l.engaged_off, 1);
                let engaged = self.icmp_imm(IntCC::NotEqual, flag, 0);
                let word = self.b.ins().uextend(I64, engaged);
                self.emit(&[word]);
                let elem = *elem;
                let size = self.size(elem);
                if self.reg.sizes {
                    let with = s
                        .saturating_sub(size)
                        .wrapping_add(self.static_children(&[elem]));
                    let with = self.c(with);
                    let without = self.c(s);
                    let part = self.b.ins().select(engaged, with, without);
                    self.tally(part);
                }
                self.if_then(engaged, |g| {
                    let v = g.member(addr, len, l.value_off, size)?;
                    g.last(tail, |g| g.child(elem, v, size, k))
                })
            }
            Op::Variant {
                layout,
                alternatives,
            } => {
                let l = *layout;
                if l.index_off
                    .checked_add(l.index_size)
                    .is_none_or(|e| e > len)
                {
                    return self.fail(ErrorCode::Variant, addr);
                }
                let index = self.ld_uint(addr, l.index_off, l.index_size);
                let done = self.b.create_block();
                for (i, &alt) in alternatives.iter().enumerate() {
                    let is = self.icmp_imm(IntCC::Equal, index, i as u64);
                    let then = self.b.create_block();
                    let next = self.b.create_block();
                    self.b.ins().brif(is, then, &[], next, &[]);
                    self.b.switch_to_block(then);
                    self.then_join(done, |g| {
                        let iw = g.c(i as u64);
                        g.emit(&[iw]);
                        let size = g.size(alt);
                        let part = s
                            .saturating_sub(size)
                            .wrapping_add(g.static_children(&[alt]));
                        g.tally_const(part);
                        let v = g.member(addr, len, l.storage_off, size)?;
                        g.last(tail, |g| g.child(alt, v, size, k))
                    })?;
                    self.b.switch_to_block(next);
                }
                // Valueless, or an index without an alternative.
                let none = self.c(u64::MAX);
                self.emit(&[none]);
                self.tally_const(s);
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(done);
                Ok(())
            }
            Op::SmartPtr { offset, target } | Op::RefWrap { offset, target } => {
                let ptr = self.field(addr, len, *offset, ErrorCode::FieldOutside)?;
                self.pointer(s, ptr, *target, target.is_some(), k, tail)
            }
            Op::RawPointer { target } => {
                let ptr = self.field(addr, len, 0, ErrorCode::FieldOutside)?;
                self.pointer(s, ptr, *target, true, k, tail)
            }
            Op::HeapPointer { target, lone } => {
                let ptr = self.field(addr, len, 0, ErrorCode::FieldOutside)?;
                self.heap_pointer(s, ptr, *target, *lone, k, tail)
            }
            Op::Described { layout: l, elem } => {
                // As the interpreter: every value, then `inline` zeroes the heap.
                let data = self.expr(&l.data, addr, len)?;
                let n = self.expr(&l.len, addr, len)?;
                let cap = self.expr(&l.cap, addr, len)?;
                let heap = self.expr(&l.heap, addr, len)?;
                let heap = match &l.inline {
                    Some(c) => {
                        let c = self.expr(c, addr, len)?;
                        let zero = self.c(0);
                        self.b.ins().select(c, zero, heap)
                    }
                    None => heap,
                };
                if let Some(sw) = &l.swiss {
                    return self.swiss(l, sw, *elem, [addr, data, n, cap, heap], len, k);
                }
                if let Some(ch) = &l.chains {
                    return self.chains(l, ch, *elem, [addr, data, n, cap, heap], k);
                }
                self.check_count(n, addr);
                self.check_count(cap, addr);
                let big = self.icmp_imm(IntCC::UnsignedGreaterThan, heap, MAX_DESCRIBED_HEAP);
                self.fail_if(big, ErrorCode::Described, addr);
                self.emit(&[addr, n, cap, heap]);
                if self.reg.sizes {
                    // size + heap − len · sizeof(elem), at least 0, as the decoder adds it.
                    let t = self.b.ins().iadd_imm_s(heap, l.size as i64);
                    let m = self.b.ins().imul_imm_s(n, l.elem_size as i64);
                    let d = self.b.ins().isub(t, m);
                    let ge = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, t, m);
                    let zero = self.c(0);
                    let e = self.b.ins().select(ge, d, zero);
                    self.tally(e);
                    self.tally_static(*elem, n);
                }
                self.vector_elements(*elem, data, n, l.elem_size, k)
            }
            Op::Poly {
                candidates,
                fallback,
            } => {
                let vptr = self.field(addr, len, 0, ErrorCode::FieldOutside)?;
                let bias = self.ld_ctx(CTX_BIAS);
                let elf = self.b.ins().isub(vptr, bias);
                let done = self.b.create_block();
                for (i, &(lo, hi, cand)) in candidates.iter().enumerate() {
                    let ge = self.icmp_imm(IntCC::UnsignedGreaterThanOrEqual, elf, lo);
                    let lt = self.icmp_imm(IntCC::UnsignedLessThan, elf, hi);
                    let is = self.b.ins().band(ge, lt);
                    let then = self.b.create_block();
                    let next = self.b.create_block();
                    self.b.ins().brif(is, then, &[], next, &[]);
                    self.b.switch_to_block(then);
                    self.then_join(done, |g| {
                        let iw = g.c(i as u64);
                        g.emit(&[iw]);
                        // The chosen class stands in this node's place.
                        let part = g.static_children(&[cand]);
                        g.tally_const(part);
                        // offset-to-top sits two words before the address point.
                        let top_at = g.b.ins().iadd_imm_s(vptr, -16);
                        let top = g.ld(top_at, 0);
                        let obj = g.b.ins().iadd(addr, top);
                        g.last(tail, |g| g.walk_at(cand, obj, k))
                    })?;
                    self.b.switch_to_block(next);
                }
                let none = self.c(u64::MAX);
                self.emit(&[none]);
                let fallback = *fallback;
                let part = self.static_children(&[fallback]);
                self.tally_const(part);
                self.then_join(done, |g| g.last(tail, |g| g.child(fallback, addr, len, k)))?;
                self.b.switch_to_block(done);
                Ok(())
            }
        }
    }

    /// An optimistic walker's vector of elements that read nothing and count their own
    /// size (ints, doubles, plain structs): `size + capacity · sizeof(T)`, which is what the
    /// exact walk adds up (`size + (cap − len)·sizeof T + len·sizeof T`) when
    /// `start ≤ finish ≤ end_of_storage` and the capacity is within `MAX_ELEMENTS`. Anything
    /// else (a corrupt vector, or a `finish` past the storage, which the exact walk takes as
    /// the capacity) ends the walk as corrupt: its caller then asks the exact walker. Five
    /// instructions beside the loads, where the exact arm needs four checks and two
    /// divisions.
    fn optimistic_flat_vector(
        &mut self,
        l: &crate::containers::vector::VectorLayout,
        addr: Value,
        len: u64,
    ) -> G {
        let code = ErrorCode::Vector;
        let start = self.field(addr, len, l.start_off, code)?;
        let finish = self.field(addr, len, l.finish_off, code)?;
        let eos = self.field(addr, len, l.eos_off, code)?;
        let es = l.elem_size;
        let used = self.b.ins().isub(finish, start);
        let all = self.b.ins().isub(eos, start);
        // `eos < start` wraps `all` above the bound; then `finish < start` wraps `used`
        // above `all`.
        let over = self.b.ins().icmp(IntCC::UnsignedGreaterThan, used, all);
        let most = MAX_ELEMENTS.saturating_add(1).saturating_mul(es) - 1;
        let big = self.icmp_imm(IntCC::UnsignedGreaterThan, all, most);
        let bad = self.b.ins().bor(over, big);
        self.fail_if(bad, code, addr);
        let cap_bytes = if es.is_power_of_two() {
            self.b.ins().band_imm_s(all, !(es as i64 - 1))
        } else {
            let cap = self.div(all, es);
            self.b.ins().imul_imm_s(cap, es as i64)
        };
        let part = self.b.ins().iadd_imm_s(cap_bytes, l.size as i64);
        self.tally(part);
        Ok(())
    }

    /// A pair's or map entry's part: its own bytes beside the two children, and the
    /// children that read nothing.
    fn tally_pair(&mut self, s: u64, a: NodeId, b: NodeId) {
        if self.reg.sizes {
            let own = s.saturating_sub(self.size(a).saturating_add(self.size(b)));
            let part = own.wrapping_add(self.static_children(&[a, b]));
            self.tally_const(part);
        }
    }

    /// A node-based container's part: `size + n × per_node`, and `n` elements that read
    /// nothing.
    fn tally_nodes(&mut self, size: u64, per_node: u64, n: Value, elem: NodeId) {
        if self.reg.sizes {
            let nodes = self.b.ins().imul_imm_s(n, per_node as i64);
            let e = self.b.ins().iadd_imm_s(nodes, size as i64);
            self.tally(e);
            self.tally_static(elem, n);
        }
    }

    /// Pair and map entry: both children, each checked to lie inside the object.
    fn two(
        &mut self,
        addr: Value,
        len: u64,
        a: (u64, NodeId),
        b: (u64, NodeId),
        k: u64,
        tail: bool,
    ) -> G {
        // `a` is last only if `b` reads nothing and its bounds check cannot fail.
        let b_fits = b.0.checked_add(self.size(b.1)).is_some_and(|e| e <= len);
        for (i, (off, m)) in [a, b].into_iter().enumerate() {
            let size = self.size(m);
            let v = self.member(addr, len, off, size)?;
            let last = i == 1 || (!self.dynamic(b.1) && b_fits);
            self.last(tail && last, |g| g.child(m, v, size, k))?;
        }
        Ok(())
    }

    /// `StringLayout::words`: `len, heap_capacity`.
    fn string(&mut self, l: &StringLayout, addr: Value, len: u64) -> G {
        let in_obj = |off: u64| off.checked_add(8).is_some_and(|e| e <= len);
        if !in_obj(l.ptr_off) || !in_obj(l.len_off) {
            return self.fail(ErrorCode::String, addr);
        }
        let ptr = self.ld(addr, l.ptr_off);
        // A walker without a stream never uses the length (and the word lies between the two
        // it does read: it cannot fault alone).
        let n = if self.reg.stream {
            self.ld(addr, l.len_off)
        } else {
            self.c(0)
        };
        // Inline iff `addr <= ptr < addr + size`: one unsigned comparison of `ptr - addr`
        // (a pointer below the object wraps far above `size`).
        let from = self.b.ins().isub(ptr, addr);
        let inline = self.icmp_imm(IntCC::UnsignedLessThan, from, l.size);
        let zero = self.c(0);
        let cap = if in_obj(l.cap_off) {
            // Inside the object either way, so reading it when inline is harmless.
            let c = self.ld(addr, l.cap_off);
            let one = self.c(1);
            let c = self.b.ins().umax(c, one);
            self.b.ins().select(inline, zero, c)
        } else {
            let heap = self.icmp_imm(IntCC::Equal, inline, 0);
            self.fail_if(heap, ErrorCode::String, addr);
            zero
        };
        self.emit(&[n, cap]);
        if self.reg.sizes {
            self.decoder_bound(cap, MAX_BYTES, ErrorCode::String, addr);
            let heap = self.b.ins().imul_imm_s(cap, l.char_size as i64);
            let e = self.b.ins().iadd_imm_s(heap, l.size as i64);
            self.tally(e);
        }
        Ok(())
    }

    /// A Swiss table (`control_bytes`), as the interpreter: the capacity checked, the full
    /// slots counted and checked against `len`, the heap checked, then the full slots
    /// walked in a second scan of the control bytes.
    #[allow(clippy::too_many_arguments)]
    fn swiss(
        &mut self,
        l: &DescribedArray,
        sw: &Swiss,
        elem: NodeId,
        [addr, slots, n, cap, heap]: [Value; 5],
        len: u64,
        k: u64,
    ) -> G {
        self.check_count(cap, addr);
        let count = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(count, zero);
        self.loop_n(cap, |g, i| {
            let f = g.swiss_full(sw, addr, len, i)?;
            let c = g.b.use_var(count);
            let c = g.b.ins().iadd(c, f);
            g.b.def_var(count, c);
            Ok(())
        })?;
        let full = self.b.use_var(count);
        let differ = self.b.ins().icmp(IntCC::NotEqual, full, n);
        self.fail_if(differ, ErrorCode::SwissCount, addr);
        let big = self.icmp_imm(IntCC::UnsignedGreaterThan, heap, MAX_DESCRIBED_HEAP);
        self.fail_if(big, ErrorCode::Described, addr);
        self.emit(&[addr, n, cap, heap]);
        if self.reg.sizes {
            let t = self.b.ins().iadd_imm_s(heap, l.size as i64);
            let m = self.b.ins().imul_imm_s(n, l.elem_size as i64);
            let d = self.b.ins().isub(t, m);
            let ge = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, t, m);
            let zero = self.c(0);
            let e = self.b.ins().select(ge, d, zero);
            self.tally(e);
            self.tally_static(elem, n);
        }
        if !self.dynamic(elem) {
            return Ok(());
        }
        let stride = l.elem_size;
        self.loop_n(cap, |g, i| {
            let f = g.swiss_full(sw, addr, len, i)?;
            g.if_then(f, |g| {
                let off = g.b.ins().imul_imm_s(i, stride as i64);
                let at = g.b.ins().iadd(slots, off);
                g.walk_at(elem, at, k)
            })
        })
    }

    /// A node-chain map (`node_chains`), as the interpreter: both counts checked, the
    /// chains counted (at most `n` nodes, so a cycle ends) and checked against `n`, the heap
    /// plus `n` nodes checked, then the nodes' values walked in a second pass.
    fn chains(
        &mut self,
        l: &DescribedArray,
        ch: &Chains,
        elem: NodeId,
        [addr, buckets, n, cap, heap]: [Value; 5],
        k: u64,
    ) -> G {
        self.check_count(cap, addr);
        self.check_count(n, addr);
        let count = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(count, zero);
        // One more node than `n` is corrupt; so is one fewer at the end.
        let tick = |g: &mut Self| {
            let c = g.b.use_var(count);
            let full = g.b.ins().icmp(IntCC::Equal, c, n);
            g.fail_if(full, ErrorCode::ChainCount, addr);
            let c = g.b.ins().iadd_imm_s(c, 1);
            g.b.def_var(count, c);
        };
        self.chain_nodes(ch, buckets, cap, &mut |g, _| {
            tick(g);
            Ok(())
        })?;
        let found = self.b.use_var(count);
        let differ = self.b.ins().icmp(IntCC::NotEqual, found, n);
        self.fail_if(differ, ErrorCode::ChainCount, addr);
        let nodes = self.b.ins().imul_imm_s(n, ch.node_size as i64);
        let heap = self.b.ins().iadd(heap, nodes);
        let big = self.icmp_imm(IntCC::UnsignedGreaterThan, heap, MAX_DESCRIBED_HEAP);
        self.fail_if(big, ErrorCode::Described, addr);
        self.emit(&[addr, n, cap, heap]);
        if self.reg.sizes {
            let t = self.b.ins().iadd_imm_s(heap, l.size as i64);
            let m = self.b.ins().imul_imm_s(n, l.elem_size as i64);
            let d = self.b.ins().isub(t, m);
            let ge = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, t, m);
            let zero = self.c(0);
            let e = self.b.ins().select(ge, d, zero);
            self.tally(e);
            self.tally_static(elem, n);
        }
        if !self.dynamic(elem) {
            return Ok(());
        }
        let zero = self.c(0);
        self.b.def_var(count, zero);
        let value_off = ch.value_off;
        self.chain_nodes(ch, buckets, cap, &mut |g, node| {
            tick(g);
            let at = g.add(node, value_off);
            g.walk_at(elem, at, k)
        })
    }

    /// `for b in 0..cap { for node in chain(buckets[b]) { body(node) } }`.
    fn chain_nodes(
        &mut self,
        ch: &Chains,
        buckets: Value,
        cap: Value,
        body: &mut dyn FnMut(&mut Self, Value) -> G,
    ) -> G {
        let next_off = ch.next_off;
        self.loop_n(cap, |g, b| {
            let off = g.b.ins().imul_imm_s(b, 8);
            let slot = g.b.ins().iadd(buckets, off);
            let first = g.ld(slot, 0);
            let node = g.b.declare_var(I64);
            g.b.def_var(node, first);
            let head = g.b.create_block();
            let body_b = g.b.create_block();
            let exit = g.b.create_block();
            g.b.ins().jump(head, &[]);
            g.b.switch_to_block(head);
            let p = g.b.use_var(node);
            g.b.ins().brif(p, body_b, &[], exit, &[]);
            g.b.switch_to_block(body_b);
            match body(g, p) {
                Ok(()) => {
                    let next = g.ld(p, next_off);
                    g.b.def_var(node, next);
                    g.b.ins().jump(head, &[]);
                }
                Err(Stop::Dead) => {}
                Err(e) => return Err(e),
            }
            g.b.switch_to_block(exit);
            Ok(())
        })
    }

    /// 1 when slot `i`'s control byte passes `full`, else 0.
    fn swiss_full(&mut self, sw: &Swiss, addr: Value, len: u64, i: Value) -> Result<Value, Stop> {
        let at = self.expr_arg(&sw.ctrl_at, addr, len, Some(i))?;
        let c = self.ld_uint(at, 0, 1);
        let f = self.expr_arg(&sw.full, addr, len, Some(c))?;
        let nz = self.b.ins().icmp_imm_s(IntCC::NotEqual, f, 0);
        Ok(self.b.ins().uextend(I64, nz))
    }

    /// `Walker::walk_array` for a vector's elements (strings take the interpreter's fast
    /// path, which skips the per-element depth accounting).
    fn vector_elements(&mut self, elem: NodeId, start: Value, n: Value, stride: u64, k: u64) -> G {
        if !self.dynamic(elem) {
            return Ok(());
        }
        if stride == 0 {
            return Err(unsupported(self.plan, elem, "dynamic elements of size 0"));
        }
        let big = self.icmp_imm(IntCC::UnsignedGreaterThan, n, MAX_READ / stride);
        self.fail_if(big, ErrorCode::ElementCount, start);
        let string = match &self.plan.nodes[elem].op {
            Op::String(l) => Some(*l),
            _ => None,
        };
        if let Some(l) = &string {
            let in_obj = |off: u64| off.checked_add(8).is_some_and(|e| e <= stride);
            if in_obj(l.ptr_off) && in_obj(l.len_off) && in_obj(l.cap_off) {
                return self.string_array(l, start, n, stride);
            }
        }
        self.loop_n(n, |g, i| {
            let off = g.b.ins().imul_imm_s(i, stride as i64);
            let at = g.b.ins().iadd(start, off);
            match &string {
                Some(l) => g.string(l, at, stride),
                None => g.child(elem, at, stride, k),
            }
        })
    }

    /// The string at `p + off` as the stream has it: (length, heap capacity or 0).
    fn load_string(&mut self, l: &StringLayout, p: Value, off: u64) -> (Value, Value) {
        let ptr = self.ld(p, off + l.ptr_off);
        let len = self.ld(p, off + l.len_off);
        let cap = self.ld(p, off + l.cap_off);
        // ptr in [obj, obj + size) ⟺ ptr − obj < size (the object does not wrap around).
        let obj = self.add(p, off);
        let rel = self.b.ins().isub(ptr, obj);
        let inline = self.icmp_imm(IntCC::UnsignedLessThan, rel, l.size);
        let one = self.c(1);
        let cap = self.b.ins().umax(cap, one);
        let zero = self.c(0);
        let cap = self.b.ins().select(inline, zero, cap);
        (len, cap)
    }

    /// The running sum and largest of heap capacities, with sizes.
    fn sum_max(&mut self, sum: Value, max: Value, caps: &[Value]) -> (Value, Value) {
        let (mut sum, mut max) = (sum, max);
        if self.reg.sizes {
            for &c in caps {
                sum = self.b.ins().iadd(sum, c);
                max = self.b.ins().umax(max, c);
            }
        }
        (sum, max)
    }

    /// The hot loop of `vector<string>` (the interpreter's fast path too): while the output
    /// has room for the elements at their longest (two ten-byte words each), stores need no
    /// check. [`STRING_GROUP`] strings an iteration: their loads, two compares (elements
    /// left, room left) and, when every length and capacity is below 128, one store of all
    /// their bytes (eight for four strings); then one string an iteration for the last. With sizes, the heap
    /// capacities are summed in registers and added once. The last elements, once the room
    /// is short, are emitted checked.
    fn string_array(&mut self, l: &StringLayout, start: Value, n: Value, stride: u64) -> G {
        const K: u64 = STRING_GROUP;
        let bytes = self.b.ins().imul_imm_s(n, stride as i64);
        let stop = self.b.ins().iadd(start, bytes);
        // A group starts below `stop - (K-1)·stride`. Saturated at 0: the empty vector that
        // never allocated has start = stop = 0, where the subtraction would wrap around and
        // send the loop to read at address 0.
        let tail = (K - 1) * stride;
        let tail_v = self.c(tail);
        let floor = self.b.ins().umax(stop, tail_v);
        let last_group = self.b.ins().iadd_imm_s(floor, -(tail as i64));
        let w = 2 * MAX_WORD_BYTES as i64;
        // Room limits for one and for a group of elements; an `end` below a group's longest
        // (no real buffer) has none.
        let end = self.end;
        let zero = self.c(0);
        let (lim1, limk) = if self.reg.stream {
            let big = self.icmp_imm(IntCC::UnsignedGreaterThanOrEqual, end, K * w as u64);
            let l1 = self.b.ins().iadd_imm_s(end, -w);
            let lim1 = self.b.ins().select(big, l1, zero);
            let lk = self.b.ins().iadd_imm_s(end, -(K as i64) * w);
            let limk = self.b.ins().select(big, lk, zero);
            (lim1, limk)
        } else {
            // Nothing is written: always room.
            let all = self.c(u64::MAX);
            (all, all)
        };
        let cur = self.b.use_var(self.cur);
        let args = |vs: [Value; 4]| vs.map(BlockArg::Value);

        // (element, cursor, sum of heap capacities, largest capacity)
        let head_k = self.b.create_block();
        let room_k = self.b.create_block();
        let body_k = self.b.create_block();
        let store_k = self.b.create_block();
        let long_k = self.b.create_block();
        let next_k = self.b.create_block();
        let head = self.b.create_block();
        let check = self.b.create_block();
        let body = self.b.create_block();
        let two = self.b.create_block();
        let long = self.b.create_block();
        let next = self.b.create_block();
        let done = self.b.create_block();
        let spill = self.b.create_block();
        let join = self.b.create_block();
        let [pk, qk, sumk, maxk] = [(); 4].map(|()| self.b.append_block_param(head_k, I64));
        let [p, q, sum, max] = [(); 4].map(|()| self.b.append_block_param(head, I64));
        let qnk = self.b.append_block_param(next_k, I64);
        let qn = self.b.append_block_param(next, I64);
        self.b.ins().jump(head_k, &args([start, cur, zero, zero]));

        // Groups: two compare-and-branches, no flags combined.
        self.b.switch_to_block(head_k);
        let group = self.b.ins().icmp(IntCC::UnsignedLessThan, pk, last_group);
        self.b
            .ins()
            .brif(group, room_k, &[], head, &args([pk, qk, sumk, maxk]));
        self.b.switch_to_block(room_k);
        let room = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, qk, limk);
        self.b
            .ins()
            .brif(room, body_k, &[], head, &args([pk, qk, sumk, maxk]));
        self.b.switch_to_block(body_k);
        // Each string folded in as it is loaded (few values live at once, so nothing spills):
        // `packed` has every word as a byte, right for the store when `all` is below 128.
        let mut caps = Vec::with_capacity(K as usize);
        let mut all = None;
        let mut packed = None;
        for i in 0..K {
            let (len, cap) = self.load_string(l, pk, i * stride);
            caps.push(cap);
            let either = self.b.ins().bor(len, cap);
            all = Some(match all {
                Some(a) => self.b.ins().bor(a, either),
                None => either,
            });
            let c = self.b.ins().ishl_imm_s(cap, 16 * i as i64 + 8);
            let lc = if i == 0 {
                self.b.ins().bor(len, c)
            } else {
                let ls = self.b.ins().ishl_imm_s(len, 16 * i as i64);
                self.b.ins().bor(ls, c)
            };
            packed = Some(match packed {
                Some(v) => self.b.ins().bor(v, lc),
                None => lc,
            });
        }
        let (all, packed) = (all.expect("K > 0"), packed.expect("K > 0"));
        let (sumkb, maxkb) = self.sum_max(sumk, maxk, &caps);
        let small = self.icmp_imm(IntCC::UnsignedLessThan, all, 0x80);
        self.b.ins().brif(small, store_k, &[], long_k, &[]);
        // Every word one byte: all of them one store.
        self.b.switch_to_block(store_k);
        let at = if self.reg.stream {
            match K {
                4 => self.b.ins().store(trusted(), packed, qk, 0),
                2 => self.b.ins().istore32(trusted(), packed, qk, 0),
                _ => unreachable!("groups of 2 or 4 strings"),
            };
            self.b.ins().iadd_imm_s(qk, 2 * K as i64)
        } else {
            qk
        };
        self.b.ins().jump(next_k, &[BlockArg::Value(at)]);
        // A word of two bytes or more (rare): the strings loaded again, word by word.
        self.b.switch_to_block(long_k);
        let mut at = qk;
        for i in 0..K {
            let (len, cap) = self.load_string(l, pk, i * stride);
            at = self.varint_unchecked(len, at);
            at = self.varint_unchecked(cap, at);
        }
        self.b.ins().jump(next_k, &[BlockArg::Value(at)]);
        self.b.switch_to_block(next_k);
        let pn = self.b.ins().iadd_imm_s(pk, (K * stride) as i64);
        self.b.ins().jump(head_k, &args([pn, qnk, sumkb, maxkb]));

        // One at a time.
        self.b.switch_to_block(head);
        let more = self.b.ins().icmp(IntCC::NotEqual, p, stop);
        self.b.ins().brif(more, check, &[], done, &[]);
        self.b.switch_to_block(check);
        let room = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, q, lim1);
        self.b.ins().brif(room, body, &[], spill, &[]);
        self.b.switch_to_block(body);
        let (len, cap) = self.load_string(l, p, 0);
        let (sum1, max1) = self.sum_max(sum, max, &[cap]);
        let both = self.b.ins().bor(len, cap);
        let small = self.icmp_imm(IntCC::UnsignedLessThan, both, 0x80);
        self.b.ins().brif(small, two, &[], long, &[]);
        self.b.switch_to_block(two);
        let hi = self.b.ins().ishl_imm_s(cap, 8);
        let v = self.b.ins().bor(len, hi);
        let q2b = if self.reg.stream {
            self.b.ins().istore16(trusted(), v, q, 0);
            self.b.ins().iadd_imm_s(q, 2)
        } else {
            q
        };
        self.b.ins().jump(next, &[BlockArg::Value(q2b)]);
        self.b.switch_to_block(long);
        let q1 = self.varint_unchecked(len, q);
        let q2b = self.varint_unchecked(cap, q1);
        self.b.ins().jump(next, &[BlockArg::Value(q2b)]);
        self.b.switch_to_block(next);
        let p1 = self.b.ins().iadd_imm_s(p, stride as i64);
        self.b.ins().jump(head, &args([p1, qn, sum1, max1]));

        // Every element done unchecked.
        self.b.switch_to_block(done);
        self.b.def_var(self.cur, q);
        self.tally_strings(l, n, sum, max, start);
        self.b.ins().jump(join, &[]);

        // The room ran short at element `p`: the rest, checked.
        self.b.switch_to_block(spill);
        self.b.def_var(self.cur, q);
        if self.reg.sizes {
            let walked = self.b.ins().isub(p, start);
            let walked = self.div(walked, stride);
            self.tally_strings(l, walked, sum, max, start);
        }
        let left = self.b.ins().isub(stop, p);
        let left = self.div(left, stride);
        let layout = *l;
        self.loop_n(left, |g, i| {
            let off = g.b.ins().imul_imm_s(i, stride as i64);
            let at = g.b.ins().iadd(p, off);
            g.string(&layout, at, stride)
        })?;
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(join);
        Ok(())
    }

    /// `count` strings of the unchecked loop: their objects and heap capacities (`sum`), after
    /// the decoder's check of the largest capacity.
    fn tally_strings(&mut self, l: &StringLayout, count: Value, sum: Value, max: Value, at: Value) {
        if self.reg.sizes {
            self.decoder_bound(max, MAX_BYTES, ErrorCode::String, at);
            let heap = self.b.ins().imul_imm_s(sum, l.char_size as i64);
            let objects = self.b.ins().imul_imm_s(count, l.size as i64);
            let part = self.b.ins().iadd(heap, objects);
            self.tally(part);
        }
    }

    /// C array / std::array: elements inside the object; the first one that does not fit
    /// is the interpreter's `sub` error after the ones that do.
    #[allow(clippy::too_many_arguments)]
    fn c_array(
        &mut self,
        elem: NodeId,
        addr: Value,
        len: u64,
        offset: u64,
        count: u64,
        stride: u64,
        k: u64,
    ) -> G {
        if !self.dynamic(elem) || count == 0 {
            return Ok(());
        }
        let fits = |i: u64| {
            i.checked_mul(stride)
                .and_then(|o| o.checked_add(offset))
                .and_then(|o| o.checked_add(stride))
                .is_some_and(|e| e <= len)
        };
        // Elements that fit form a prefix: find its length.
        let ok = if fits(count - 1) {
            count
        } else if !fits(0) {
            0
        } else {
            // fits(lo) && !fits(hi)
            let (mut lo, mut hi) = (0u64, count - 1);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if fits(mid) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            lo + 1
        };
        if ok <= 4 {
            for i in 0..ok {
                let a = self.add(addr, offset + i * stride);
                self.child(elem, a, stride, k)?;
            }
        } else {
            let n = self.c(ok);
            self.loop_n(n, |g, i| {
                let off = g.b.ins().imul_imm_s(i, stride as i64);
                let base = g.add(addr, offset);
                let at = g.b.ins().iadd(base, off);
                g.child(elem, at, stride, k)
            })?;
        }
        if ok < count {
            return self.fail(ErrorCode::MemberOutside, addr);
        }
        Ok(())
    }

    /// SmartPtr / RefWrap / RawPointer: `pointer, descended`, then the target.
    /// `visits`: whether a non-null pointer is looked up in the visited set at all.
    fn pointer(
        &mut self,
        s: u64,
        ptr: Value,
        target: Option<NodeId>,
        visits: bool,
        k: u64,
        tail: bool,
    ) -> G {
        let descend = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(descend, zero);
        if visits {
            let tag = self.plan.visit_tag(target);
            let nonnull = self.icmp_imm(IntCC::NotEqual, ptr, 0);
            self.if_then(nonnull, |g| {
                let v = g.visit_as(ptr, tag);
                g.b.def_var(descend, v);
                Ok(())
            })?;
        }
        let d = self.b.use_var(descend);
        self.emit(&[ptr, d]);
        self.tally_const(s);
        if let Some(t) = target {
            self.tally_static(t, d);
        }
        if let Some(t) = target
            && self.dynamic(t)
        {
            self.if_then(d, |g| g.last(tail, |g| g.walk_at(t, ptr, k)))?;
        }
        Ok(())
    }

    /// HeapPointer: `pointer, descended, block`, then the target (`Walker::heap_block`).
    fn heap_pointer(
        &mut self,
        s: u64,
        ptr: Value,
        target: Option<NodeId>,
        lone: u64,
        k: u64,
        tail: bool,
    ) -> G {
        let descend = self.b.declare_var(I64);
        let block = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(descend, zero);
        self.b.def_var(block, zero);
        let tag = self.plan.visit_tag(target);
        let nonnull = self.icmp_imm(IntCC::NotEqual, ptr, 0);
        self.if_then(nonnull, |g| {
            let v = g.visit_as(ptr, tag);
            g.b.def_var(descend, v);
            g.if_then(v, |g| {
                let f = g.func_ref(FN_BLOCK, 2);
                let call = g.b.ins().call(f, &[g.ctx, ptr]);
                let usable = g.b.inst_results(call)[0];
                let big = g.icmp_imm(IntCC::UnsignedGreaterThan, usable, lone);
                g.if_then(big, |g| {
                    let fresh = g.visit_as(ptr, BLOCK_TAG << 48);
                    let zero = g.c(0);
                    let b = g.b.ins().select(fresh, usable, zero);
                    g.b.def_var(block, b);
                    Ok(())
                })
            })
        })?;
        let d = self.b.use_var(descend);
        let bl = self.b.use_var(block);
        self.emit(&[ptr, d, bl]);
        // Sized walkers add what the decoder charges: the pointer, the block less the pointee
        // it holds (a block is only ever found for a pointer that descends), the pointee.
        if self.reg.sizes {
            self.tally_const(s);
            let inside = target.map_or(0, |t| self.plan.nodes[t].static_size);
            let over = self.icmp_imm(IntCC::UnsignedGreaterThan, bl, inside);
            let rest = self.b.ins().iadd_imm_s(bl, -(inside as i64));
            let zero = self.c(0);
            let extra = self.b.ins().select(over, rest, zero);
            self.tally(extra);
            if let Some(t) = target {
                self.tally_static(t, d);
            }
        }
        if let Some(t) = target
            && self.dynamic(t)
        {
            self.if_then(d, |g| g.last(tail, |g| g.walk_at(t, ptr, k)))?;
        }
        Ok(())
    }

    fn deque(
        &mut self,
        l: &crate::containers::deque::DequeLayout,
        elem: NodeId,
        addr: Value,
        len: u64,
        k: u64,
    ) -> G {
        let code = ErrorCode::Deque;
        let mut s = [addr; 4];
        let mut f = [addr; 4];
        for (v, &off) in s.iter_mut().zip(&l.start) {
            *v = self.field(addr, len, off, code)?;
        }
        for (v, &off) in f.iter_mut().zip(&l.finish) {
            *v = self.field(addr, len, off, code)?;
        }
        let map = self.field(addr, len, l.map_off, code)?;
        let n_v = self.b.declare_var(I64);
        let slots_v = self.b.declare_var(I64);
        let blocks_v = self.b.declare_var(I64);
        let zero = self.c(0);
        for v in [n_v, slots_v, blocks_v] {
            self.b.def_var(v, zero);
        }
        let es = l.elem_size.max(1);
        let block_elems = l.block_elems();
        let has_map = self.icmp_imm(IntCC::NotEqual, map, 0);
        self.if_then(has_map, |g| {
            let d = g.checked_sub(f[3], s[3], code, addr);
            let nodes = g.b.ins().ushr_imm_s(d, 3);
            let d = g.checked_sub(f[0], f[1], code, addr);
            let tail = g.div(d, es);
            let full = g.b.ins().imul_imm_s(nodes, block_elems as i64);
            let total = g.b.ins().iadd(full, tail);
            let d = g.checked_sub(s[0], s[1], code, addr);
            let head = g.div(d, es);
            let n = g.checked_sub(total, head, code, addr);
            let slots = g.field(addr, len, l.map_size_off, code)?;
            let blocks = g.b.ins().iadd_imm_s(nodes, 1);
            g.b.def_var(n_v, n);
            g.b.def_var(slots_v, slots);
            g.b.def_var(blocks_v, blocks);
            Ok(())
        })?;
        let n = self.b.use_var(n_v);
        let slots = self.b.use_var(slots_v);
        let blocks = self.b.use_var(blocks_v);
        let one = self.c(1);
        let min_slots = self.b.ins().umax(slots, one);
        let over = self
            .b
            .ins()
            .icmp(IntCC::UnsignedGreaterThan, blocks, min_slots);
        let huge = self.icmp_imm(IntCC::UnsignedGreaterThan, slots, MAX_ELEMENTS);
        let bad = self.b.ins().bor(over, huge);
        self.fail_if(bad, ErrorCode::DequeMap, addr);
        self.check_count(n, addr);
        self.emit(&[addr, n, slots, blocks]);
        if self.reg.sizes {
            // `DequeLayout::account`: the map and the blocks, less the elements' bytes.
            let map_bytes = self.b.ins().imul_imm_s(slots, 8);
            let block_bytes = self.b.ins().imul_imm_s(blocks, l.block_bytes() as i64);
            let all = self.b.ins().iadd(map_bytes, block_bytes);
            let all = self.b.ins().iadd_imm_s(all, l.size as i64);
            let used = self.b.ins().imul_imm_s(n, l.elem_size as i64);
            let under = self.b.ins().icmp(IntCC::UnsignedLessThan, all, used);
            let e = self.b.ins().isub(all, used);
            let zero = self.c(0);
            let e = self.b.ins().select(under, zero, e);
            self.tally(e);
            self.tally_static(elem, n);
        }
        if !self.dynamic(elem) {
            return Ok(());
        }
        let nonempty = self.icmp_imm(IntCC::NotEqual, n, 0);
        self.if_then(nonempty, |g| {
            let big = g.icmp_imm(IntCC::UnsignedGreaterThan, blocks, MAX_READ / 8);
            g.fail_if(big, ErrorCode::ReadSize, s[3]);
            let block_bytes = l.block_bytes();
            // The element range of block `b` (`Walker::deque_elements`).
            let range = |g: &mut Self, b: Value| -> (Value, Value) {
                let off = g.b.ins().imul_imm_s(b, 8);
                let slot = g.b.ins().iadd(s[3], off);
                let block = g.ld(slot, 0);
                let is_first = g.icmp_imm(IntCC::Equal, b, 0);
                let b1 = g.b.ins().iadd_imm_s(b, 1);
                let is_last = g.b.ins().icmp(IntCC::Equal, b1, blocks);
                let first = g.b.ins().select(is_first, s[0], block);
                let block_end = g.b.ins().iadd_imm_s(block, block_bytes as i64);
                let mid_end = g.b.ins().select(is_first, s[2], block_end);
                let end = g.b.ins().select(is_last, f[0], mid_end);
                (first, end)
            };
            // All ranges are checked before any element is walked, as the interpreter does.
            g.loop_n(blocks, |g, b| {
                let (first, end) = range(g, b);
                let back = g.b.ins().icmp(IntCC::UnsignedLessThan, end, first);
                g.fail_if(back, ErrorCode::DequeBlock, addr);
                Ok(())
            })?;
            let walked = g.b.declare_var(I64);
            let zero = g.c(0);
            g.b.def_var(walked, zero);
            g.loop_n(blocks, |g, b| {
                let (first, end) = range(g, b);
                let d = g.b.ins().isub(end, first);
                let count = g.div(d, es);
                let w = g.b.use_var(walked);
                let w = g.b.ins().iadd(w, count);
                g.b.def_var(walked, w);
                g.loop_n(count, |g, j| {
                    let off = g.b.ins().imul_imm_s(j, es as i64);
                    let at = g.b.ins().iadd(first, off);
                    g.child(elem, at, es, k)
                })
            })?;
            if g.reg.sizes {
                // Other than `n` elements in the blocks: the decoder finds the stream short
                // (or longer than the plan).
                let w = g.b.use_var(walked);
                let other = g.b.ins().icmp(IntCC::NotEqual, w, n);
                g.fail_if(other, ErrorCode::DequeBlock, addr);
            }
            Ok(())
        })
    }

    /// `Walker::rb_elements`: in-order walk with an explicit stack of node addresses.
    fn rb_elements(
        &mut self,
        elem: NodeId,
        l: &rbtree::RbLayout,
        root: Value,
        len: Value,
        addr: Value,
        k: u64,
    ) -> G {
        self.rb_stacks += 1;
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (RB_STACK * 8) as u32,
            3,
        ));
        let base = self.b.ins().stack_addr(I64, slot, 0);
        let sp = self.b.declare_var(I64);
        let cur = self.b.declare_var(I64);
        let seen = self.b.declare_var(I64);
        let zero = self.c(0);
        self.b.def_var(sp, zero);
        self.b.def_var(cur, root);
        self.b.def_var(seen, zero);
        let descend = self.b.create_block();
        let push = self.b.create_block();
        let after = self.b.create_block();
        let pop = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(descend, &[]);

        self.b.switch_to_block(descend);
        let c = self.b.use_var(cur);
        self.b.ins().brif(c, push, &[], after, &[]);

        self.b.switch_to_block(push);
        self.then_join(descend, |g| {
            let s = g.b.use_var(sp);
            let deep = g.icmp_imm(IntCC::UnsignedGreaterThan, s, RB_STACK - 1);
            g.fail_if(deep, ErrorCode::RbDeep, addr);
            let left = g.field(c, l.node_size, rbtree::LEFT, ErrorCode::FieldOutside)?;
            let off = g.b.ins().imul_imm_s(s, 8);
            let p = g.b.ins().iadd(base, off);
            g.b.ins().store(trusted(), c, p, 0);
            let s1 = g.b.ins().iadd_imm_s(s, 1);
            g.b.def_var(sp, s1);
            g.b.def_var(cur, left);
            Ok(())
        })?;

        self.b.switch_to_block(after);
        let s = self.b.use_var(sp);
        self.b.ins().brif(s, pop, &[], exit, &[]);

        self.b.switch_to_block(pop);
        self.then_join(descend, |g| {
            let s1 = g.b.ins().iadd_imm_s(s, -1);
            g.b.def_var(sp, s1);
            let off = g.b.ins().imul_imm_s(s1, 8);
            let p = g.b.ins().iadd(base, off);
            let node = g.b.ins().load(I64, trusted(), p, 0);
            let seen_v = g.b.use_var(seen);
            let seen1 = g.b.ins().iadd_imm_s(seen_v, 1);
            g.b.def_var(seen, seen1);
            let large = g.b.ins().icmp(IntCC::UnsignedGreaterThan, seen1, len);
            g.fail_if(large, ErrorCode::RbLarge, addr);
            let v = g.member(node, l.node_size, l.value_off, l.value_size)?;
            g.child(elem, v, l.value_size, k)?;
            let right = g.field(node, l.node_size, rbtree::RIGHT, ErrorCode::FieldOutside)?;
            g.b.def_var(cur, right);
            Ok(())
        })?;
        self.b.switch_to_block(exit);
        if self.reg.sizes {
            // Fewer nodes than the count: the decoder finds the stream short.
            let seen_v = self.b.use_var(seen);
            let short = self.b.ins().icmp(IntCC::NotEqual, seen_v, len);
            self.fail_if(short, ErrorCode::RbLarge, addr);
        }
        Ok(())
    }

    /// `Walker::capture` of a map key `ks` bytes long at `ka`.
    fn capture(&mut self, c: Capture, ka: Value, ks: u64) -> G {
        match c {
            Capture::Scalar { size, signed } => {
                let n = size.min(8);
                if n > ks {
                    return self.fail(ErrorCode::Key, ka);
                }
                let mut v = self.ld_uint(ka, 0, n);
                if signed && (1..8).contains(&size) {
                    let sh = (64 - 8 * size) as i64;
                    let up = self.b.ins().ishl_imm_s(v, sh);
                    v = self.b.ins().sshr_imm_s(up, sh);
                }
                self.emit(&[v]);
                Ok(())
            }
            Capture::Address => {
                self.emit(&[ka]);
                Ok(())
            }
            Capture::String(l) => {
                let ptr = self.field(ka, ks, l.ptr_off, ErrorCode::FieldOutside)?;
                let chars = self.field(ka, ks, l.len_off, ErrorCode::FieldOutside)?;
                let cs = l.char_size.max(1);
                let over = self.icmp_imm(IntCC::UnsignedGreaterThan, chars, MAX_CAPTURED_KEY / cs);
                let bytes = self.b.ins().imul_imm_s(chars, cs as i64);
                let max = self.c(MAX_CAPTURED_KEY);
                let n = self.b.ins().select(over, max, bytes);
                self.emit(&[n]);
                let whole = self.b.ins().ushr_imm_s(n, 3);
                self.loop_n(whole, |g, i| {
                    let off = g.b.ins().ishl_imm_s(i, 3);
                    let p = g.b.ins().iadd(ptr, off);
                    let w = g.ld(p, 0);
                    g.emit(&[w]);
                    Ok(())
                })?;
                let rest = self.b.ins().band_imm_s(n, 7);
                self.if_then(rest, |g| {
                    let acc = g.b.declare_var(I64);
                    let zero = g.c(0);
                    g.b.def_var(acc, zero);
                    let off = g.b.ins().ishl_imm_s(whole, 3);
                    let tail = g.b.ins().iadd(ptr, off);
                    g.loop_n(rest, |g, j| {
                        let p = g.b.ins().iadd(tail, j);
                        let byte = g.b.ins().uload8(I64, target(), p, 0);
                        let sh = g.b.ins().ishl_imm_s(j, 3);
                        let byte = g.b.ins().ishl(byte, sh);
                        let a = g.b.use_var(acc);
                        let a = g.b.ins().bor(a, byte);
                        g.b.def_var(acc, a);
                        Ok(())
                    })?;
                    let w = g.b.use_var(acc);
                    g.emit(&[w]);
                    Ok(())
                })
            }
        }
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
        let mut g = Gen {
            plan,
            b,
            reg,
            refs: HashMap::new(),
            ctx: args[0],
            depth: zero,
            end: zero,
            cur,
            total,
            ret,
            inline: Vec::new(),
            budget: INLINE_BUDGET,
            rb_stacks: 0,
            tail: false,
        };
        match body(&mut g, &args) {
            Ok(()) | Err(Stop::Dead) => {}
            Err(Stop::Err(e)) => return Err(e),
        }
        g.b.switch_to_block(ret);
        g.b.ins().return_(&[status]);
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

/// `fn(frame) -> status`: sets up the context, then walks each root into its own
/// counted section of the output.
fn gen_entry(
    plan: &Plan,
    roots: &[NodeId],
    reg: &mut Registry,
    fctx: &mut FunctionBuilderContext,
    fc: TargetFrontendConfig,
) -> Result<Function, JitError> {
    build(plan, FN_ENTRY, 1, reg, fctx, fc, |g, args| {
        let frame = args[0];
        let fl =
            |g: &mut Gen<'_, '_>, off: usize| g.b.ins().load(I64, trusted(), frame, frame_off(off));
        let stream = g.reg.stream;
        let optimistic = g.reg.optimistic;
        // Validate the frame first: nothing is written to `out` or `scratch` otherwise (an
        // optimistic walker uses no scratch).
        let nargs = fl(g, offset_of!(WalkFrame, nargs));
        let wrong_n = g.icmp_imm(IntCC::NotEqual, nargs, roots.len() as u64);
        let bad = if optimistic {
            wrong_n
        } else {
            let scratch_len = fl(g, offset_of!(WalkFrame, scratch_len));
            let small = g.icmp_imm(IntCC::UnsignedLessThan, scratch_len, SCRATCH_BYTES);
            g.b.ins().bor(wrong_n, small)
        };
        let bad_b = g.b.create_block();
        let ok = g.b.create_block();
        g.b.ins().brif(bad, bad_b, &[], ok, &[]);
        g.b.switch_to_block(bad_b);
        let s = g.c(STATUS_BAD_FRAME);
        g.b.ins().store(
            trusted(),
            s,
            frame,
            frame_off(offset_of!(WalkFrame, status)),
        );
        g.b.ins().return_(&[s]);
        g.b.switch_to_block(ok);

        let ctx_size = if optimistic {
            CTX_KEYS as u32 + 8 * OPTIMISTIC_KEYS as u32
        } else {
            CTX_SIZE
        };
        let slot = g.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            ctx_size,
            3,
        ));
        g.ctx = g.b.ins().stack_addr(I64, slot, 0);
        let zero = g.c(0);
        // A walker without a stream never reads `out` (its cursor stays at 0).
        let out = if stream {
            fl(g, offset_of!(WalkFrame, out))
        } else {
            zero
        };
        if stream {
            let out_len = fl(g, offset_of!(WalkFrame, out_len));
            g.end = g.b.ins().iadd(out, out_len);
            g.st_ctx(out, CTX_CUR);
            let end = g.end;
            g.st_ctx(end, CTX_END);
        }
        g.b.def_var(g.cur, out);
        if !optimistic {
            let scratch = fl(g, offset_of!(WalkFrame, scratch));
            g.st_ctx(scratch, CTX_TABLE);
            let heaps =
                g.b.ins()
                    .iadd_imm_s(frame, offset_of!(WalkFrame, heaps) as i64);
            g.st_ctx(heaps, CTX_HEAPS);
            let nheaps = fl(g, offset_of!(WalkFrame, heaps_len));
            let most = g.c(MAX_HEAPS as u64);
            let nheaps = g.b.ins().umin(nheaps, most);
            g.st_ctx(nheaps, CTX_NHEAPS);
            g.st_ctx(zero, CTX_COUNT);
        } else {
            g.st_ctx(zero, CTX_NKEYS);
        }
        let bias = fl(g, offset_of!(WalkFrame, bias));
        g.st_ctx(bias, CTX_BIAS);
        g.st_ctx(zero, CTX_ERR_CODE);
        g.st_ctx(zero, CTX_ERR_ADDR);
        g.st_ctx(zero, CTX_TOTAL);
        // Stack limit: `stack_len` below the entry stack pointer, less a margin.
        let sp = g.b.ins().get_stack_pointer(I64);
        let stack_len = fl(g, offset_of!(WalkFrame, stack_len));
        let is_default = g.icmp_imm(IntCC::Equal, stack_len, 0);
        let default = g.c(DEFAULT_STACK);
        let stack_len = g.b.ins().select(is_default, default, stack_len);
        let margin = g.c(STACK_MARGIN);
        let stack_len = g.b.ins().umax(stack_len, margin);
        let usable = g.b.ins().iadd_imm_s(stack_len, -(STACK_MARGIN as i64));
        let limit = g.b.ins().isub(sp, usable);
        g.st_ctx(limit, CTX_LIMIT);

        let gen_v = g.b.declare_var(I64);
        let generation = if optimistic {
            zero
        } else {
            fl(g, offset_of!(WalkFrame, generation))
        };
        g.b.def_var(gen_v, generation);
        let root_v = g.b.declare_var(I64);
        g.b.def_var(root_v, zero);
        let unseeded = fl(g, offset_of!(WalkFrame, unseeded));
        // A stream walker's entry only calls (node functions check the stack; the entry does
        // not recurse). A walker without a stream walks the roots inline, as a node function
        // would (depth 0 is a constant here, so its depth checks fold away): the calls, the
        // context round trips and the frame of a node function are what a small object's walk
        // would otherwise spend most of its time on.
        g.budget = if stream { 0 } else { INLINE_BUDGET };

        // Error exits of the entry record the frame's out fields before returning.
        let real_ret = g.ret;
        let fail_ret = g.b.create_block();
        let status = g.b.append_block_param(fail_ret, I64);
        g.b.set_cold_block(fail_ret);
        g.ret = fail_ret;

        let mut walk_roots = || -> G {
            for (i, &root) in roots.iter().enumerate() {
                let ri = g.c(i as u64);
                g.b.def_var(root_v, ri);
                // Left in the frame if the walk faults: the tracer names the argument.
                g.b.ins().store(
                    trusted(),
                    ri,
                    frame,
                    frame_off(offset_of!(WalkFrame, err_root)),
                );
                if !optimistic {
                    let gv = g.b.use_var(gen_v);
                    let next = g.b.ins().iadd_imm_s(gv, 1);
                    g.b.def_var(gen_v, next);
                    g.st_ctx(next, CTX_GEN);
                    let zero = g.c(0);
                    g.st_ctx(zero, CTX_COUNT);
                }
                let header = g.b.use_var(g.cur);
                g.emit_raw_word(zero);
                let addr = fl(g, offset_of!(WalkFrame, args) + 8 * i);
                let bit = g.b.ins().ushr_imm_s(unseeded, i as i64);
                let bit = g.b.ins().band_imm_s(bit, 1);
                let seed = g.icmp_imm(IntCC::Equal, bit, 0);
                let tag = g.plan.visit_tag(Some(root));
                g.if_then(seed, |g| {
                    g.visit_as(addr, tag);
                    Ok(())
                })?;
                if !g.dynamic(root) {
                    let part = g.st(root);
                    g.tally_const(part);
                }
                g.walk_at(root, addr, 0)?;
                if !stream {
                    continue;
                }
                let cur = g.b.use_var(g.cur);
                let bytes = g.b.ins().isub(cur, header);
                let bytes = g.b.ins().iadd_imm_s(bytes, -8);
                let end = g.end;
                let fits = g.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, cur, end);
                g.if_then(fits, |g| {
                    g.b.ins().store(trusted(), bytes, header, 0);
                    Ok(())
                })?;
            }
            Ok(())
        };
        let walked = walk_roots();
        let record = |g: &mut Gen<'_, '_>, status: Value| {
            g.b.ins().store(
                trusted(),
                status,
                frame,
                frame_off(offset_of!(WalkFrame, status)),
            );
            let cur = g.b.use_var(g.cur);
            let used = g.b.ins().isub(cur, out);
            g.b.ins().store(
                trusted(),
                used,
                frame,
                frame_off(offset_of!(WalkFrame, out_used)),
            );
            if !optimistic {
                let gv = g.b.use_var(gen_v);
                g.b.ins().store(
                    trusted(),
                    gv,
                    frame,
                    frame_off(offset_of!(WalkFrame, generation)),
                );
            }
        };
        let walked = walked.and_then(|()| {
            if optimistic {
                g.check_recorded()?;
            }
            Ok(())
        });
        match walked {
            Ok(()) => {
                if stream {
                    // Past the end: the output did not fit; `out_used` says what it needs.
                    let cur = g.b.use_var(g.cur);
                    let over = g.b.ins().icmp(IntCC::UnsignedGreaterThan, cur, g.end);
                    let full = g.c(STATUS_FULL);
                    let ok = g.b.create_block();
                    g.b.ins()
                        .brif(over, g.ret, &[BlockArg::Value(full)], ok, &[]);
                    g.b.switch_to_block(ok);
                }
                let done = g.c(STATUS_DONE);
                record(g, done);
                let total = g.b.use_var(g.total);
                g.b.ins().store(
                    trusted(),
                    total,
                    frame,
                    frame_off(offset_of!(WalkFrame, total)),
                );
                let e = g.c(0);
                for off in [
                    offset_of!(WalkFrame, err_root),
                    offset_of!(WalkFrame, err_code),
                    offset_of!(WalkFrame, err_addr),
                ] {
                    g.b.ins().store(trusted(), e, frame, frame_off(off));
                }
                g.b.ins().return_(&[done]);
            }
            Err(Stop::Dead) => {}
            Err(e) => return Err(e),
        }

        g.b.switch_to_block(fail_ret);
        record(g, status);
        let r = g.b.use_var(root_v);
        g.b.ins().store(
            trusted(),
            r,
            frame,
            frame_off(offset_of!(WalkFrame, err_root)),
        );
        let code = g.ld_ctx(CTX_ERR_CODE);
        g.b.ins().store(
            trusted(),
            code,
            frame,
            frame_off(offset_of!(WalkFrame, err_code)),
        );
        let a = g.ld_ctx(CTX_ERR_ADDR);
        g.b.ins().store(
            trusted(),
            a,
            frame,
            frame_off(offset_of!(WalkFrame, err_addr)),
        );
        g.b.ins().jump(real_ret, &[BlockArg::Value(status)]);
        g.ret = real_ret;
        Err(Stop::Dead)
    })
}

/// `fn(ctx, p) -> usable size of the glibc heap block starting at p, or 0`: the checks of
/// `interp::heap::block_usable`, in its order, over the context's heap ranges (the first
/// range holding the chunk decides). Target memory is read only inside that range.
fn gen_block(fctx: &mut FunctionBuilderContext, fc: TargetFrontendConfig) -> Function {
    let mut func = new_function(FN_BLOCK, 2);
    {
        let mut b = FunctionBuilder::new(&mut func, fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let (ctx, p) = (b.block_params(entry)[0], b.block_params(entry)[1]);
        let no = b.create_block();
        let low = b.ins().band_imm_s(p, 15);
        let small = b.ins().icmp_imm_s(IntCC::UnsignedLessThan, p, 16);
        let small = b.ins().uextend(I64, small);
        let bad = b.ins().bor(low, small);
        let search = b.create_block();
        b.ins().brif(bad, no, &[], search, &[]);

        b.switch_to_block(no);
        let zero = b.ins().iconst(I64, 0);
        b.ins().return_(&[zero]);

        // Linear search of the ranges: (start, end) pairs.
        b.switch_to_block(search);
        let chunk = b.ins().iadd_imm_s(p, -16);
        let heaps = b.ins().load(I64, trusted(), ctx, CTX_HEAPS);
        let n = b.ins().load(I64, trusted(), ctx, CTX_NHEAPS);
        let probe = b.create_block();
        let i = b.append_block_param(probe, I64);
        let zero = b.ins().iconst(I64, 0);
        b.ins().jump(probe, &[BlockArg::Value(zero)]);

        b.switch_to_block(probe);
        let more = b.ins().icmp(IntCC::UnsignedLessThan, i, n);
        let look = b.create_block();
        b.ins().brif(more, look, &[], no, &[]);

        b.switch_to_block(look);
        let off = b.ins().ishl_imm_s(i, 4);
        let slot = b.ins().iadd(heaps, off);
        let start = b.ins().load(I64, trusted(), slot, 0);
        let end = b.ins().load(I64, trusted(), slot, 8);
        let ge = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, start, chunk);
        let le = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, p, end);
        let inside = b.ins().band(ge, le);
        let found = b.create_block();
        let end_v = b.append_block_param(found, I64);
        let next = b.create_block();
        b.ins()
            .brif(inside, found, &[BlockArg::Value(end)], next, &[]);

        b.switch_to_block(next);
        let i1 = b.ins().iadd_imm_s(i, 1);
        b.ins().jump(probe, &[BlockArg::Value(i1)]);

        b.switch_to_block(found);
        let head = b.ins().load(I64, target(), p, -8);
        let size = b.ins().band_imm_s(head, !7i64);
        let room = b.ins().isub(end_v, chunk);
        let mmapped = b.ins().band_imm_s(head, 2);
        let mm = b.create_block();
        let arena = b.create_block();
        b.ins().brif(mmapped, mm, &[], arena, &[]);

        // An mmapped chunk: page-aligned, page-multiple size inside the range, prev_size 0.
        b.switch_to_block(mm);
        let a = b.ins().band_imm_s(chunk, 4095);
        let c = b.ins().band_imm_s(size, 4095);
        let z = b.ins().icmp_imm_s(IntCC::Equal, size, 0);
        let big = b.ins().icmp(IntCC::UnsignedGreaterThan, size, room);
        let bad = b.ins().bor(a, c);
        let z = b.ins().uextend(I64, z);
        let big = b.ins().uextend(I64, big);
        let bad = b.ins().bor(bad, z);
        let bad = b.ins().bor(bad, big);
        let prev_b = b.create_block();
        b.ins().brif(bad, no, &[], prev_b, &[]);
        b.switch_to_block(prev_b);
        let prev = b.ins().load(I64, target(), chunk, 0);
        let yes_mm = b.create_block();
        b.ins().brif(prev, no, &[], yes_mm, &[]);
        b.switch_to_block(yes_mm);
        let u = b.ins().iadd_imm_s(size, -16);
        b.ins().return_(&[u]);

        // An arena chunk: size ≥ 32, a multiple of 16, its successor's size word inside the
        // range with PREV_INUSE set.
        b.switch_to_block(arena);
        let lt = b.ins().icmp_imm_s(IntCC::UnsignedLessThan, size, 32);
        let odd = b.ins().band_imm_s(size, 15);
        let tight = b.ins().icmp_imm_s(IntCC::UnsignedLessThan, room, 16);
        let room16 = b.ins().iadd_imm_s(room, -16);
        let over = b.ins().icmp(IntCC::UnsignedGreaterThan, size, room16);
        let lt = b.ins().uextend(I64, lt);
        let tight = b.ins().uextend(I64, tight);
        let over = b.ins().uextend(I64, over);
        let bad = b.ins().bor(lt, odd);
        let bad = b.ins().bor(bad, tight);
        let bad = b.ins().bor(bad, over);
        let next_b = b.create_block();
        b.ins().brif(bad, no, &[], next_b, &[]);
        b.switch_to_block(next_b);
        let nextp = b.ins().iadd(chunk, size);
        let nhead = b.ins().load(I64, target(), nextp, 8);
        let inuse = b.ins().band_imm_s(nhead, 1);
        let yes = b.create_block();
        b.ins().brif(inuse, yes, &[], no, &[]);
        b.switch_to_block(yes);
        let u = b.ins().iadd_imm_s(size, -8);
        b.ins().return_(&[u]);

        b.seal_all_blocks();
        b.finalize(fc);
    }
    func
}

/// Bits of the granule of the address that picks a key's home slot inside its group: 32
/// bytes, glibc's smallest chunk, so that two heap objects never share a home slot.
const VISIT_GRANULE_BITS: i64 = 5;
/// Bits of a group's slot count: 256 slots of 16 bytes, one page of the table, for the
/// home slots of one 8 KiB block of addresses.
const VISIT_GROUP_BITS: i64 = 8;
/// Bits of the address block whose keys share a group.
const VISIT_BLOCK_BITS: i64 = VISIT_GRANULE_BITS + VISIT_GROUP_BITS;

/// `fn(ctx, addr) -> 1 if newly inserted, 0 if present or the set is full`, over
/// `VISITED_SLOTS` slots of (key, generation); a slot of another generation is empty.
///
/// A key is first tried at its home slot: its 8 KiB block picks a group of slots (Fibonacci
/// hashing of the block number), its 32-byte granule the slot in the group. Objects
/// allocated one after another then land in slots one after another, in one page of the
/// table, where a hash of the whole key costs a cache and TLB miss per key (issue 18: 35 ms
/// for 100,000 owned pointers). A key whose home slot holds another key goes on by linear
/// probing from the Fibonacci hash of the whole key, so that keys closer than a granule
/// (pointers into one array) spread out instead of piling up in one run. Slots are never
/// emptied within a generation, so a key is present iff it is in its home slot or on its
/// probe sequence. Which slots a key takes only decides the speed: the set holds the same
/// keys as the interpreter's.
fn gen_visit(fctx: &mut FunctionBuilderContext, fc: TargetFrontendConfig) -> Function {
    let mut func = new_function(FN_VISIT, 2);
    {
        let mut b = FunctionBuilder::new(&mut func, fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let (ctx, addr) = (b.block_params(entry)[0], b.block_params(entry)[1]);
        let count = b.ins().load(I64, trusted(), ctx, CTX_COUNT);
        let full = b.ins().icmp_imm_s(
            IntCC::UnsignedGreaterThanOrEqual,
            count,
            VISITED_CAPACITY as i64,
        );
        let no = b.create_block();
        let go = b.create_block();
        b.ins().brif(full, no, &[], go, &[]);

        b.switch_to_block(no);
        let zero = b.ins().iconst(I64, 0);
        b.ins().return_(&[zero]);

        b.switch_to_block(go);
        let table = b.ins().load(I64, trusted(), ctx, CTX_TABLE);
        let generation = b.ins().load(I64, trusted(), ctx, CTX_GEN);
        let slot_bits = VISITED_SLOTS.trailing_zeros() as i64;
        let block = b.ins().ushr_imm_s(addr, VISIT_BLOCK_BITS);
        let g = b.ins().imul_imm_s(block, 0x9E37_79B9_7F4A_7C15u64 as i64);
        let g = b.ins().ushr_imm_s(g, 64 - (slot_bits - VISIT_GROUP_BITS));
        let g = b.ins().ishl_imm_s(g, VISIT_GROUP_BITS);
        let granule = b.ins().ushr_imm_s(addr, VISIT_GRANULE_BITS);
        let granule = b.ins().band_imm_s(granule, (1 << VISIT_GROUP_BITS) - 1);
        let home = b.ins().bor(g, granule);
        let off = b.ins().ishl_imm_s(home, 4);
        let home_slot = b.ins().iadd(table, off);

        let insert = b.create_block();
        let at = b.append_block_param(insert, I64);
        let tag = b.ins().load(I64, trusted(), home_slot, 8);
        let home_empty = b.ins().icmp(IntCC::NotEqual, tag, generation);
        let home_taken = b.create_block();
        b.ins().brif(
            home_empty,
            insert,
            &[BlockArg::Value(home_slot)],
            home_taken,
            &[],
        );

        b.switch_to_block(home_taken);
        let stored = b.ins().load(I64, trusted(), home_slot, 0);
        let same = b.ins().icmp(IntCC::Equal, stored, addr);
        let away = b.create_block();
        b.ins().brif(same, no, &[], away, &[]);

        // Fibonacci hashing of the whole key: the top bits of key * 2^64/φ.
        b.switch_to_block(away);
        let h = b.ins().imul_imm_s(addr, 0x9E37_79B9_7F4A_7C15u64 as i64);
        let h = b.ins().ushr_imm_s(h, 64 - slot_bits);
        let probe = b.create_block();
        let idx = b.append_block_param(probe, I64);
        b.ins().jump(probe, &[BlockArg::Value(h)]);

        b.switch_to_block(probe);
        let off = b.ins().ishl_imm_s(idx, 4);
        let slot = b.ins().iadd(table, off);
        let tag = b.ins().load(I64, trusted(), slot, 8);
        let empty = b.ins().icmp(IntCC::NotEqual, tag, generation);
        let check = b.create_block();
        b.ins()
            .brif(empty, insert, &[BlockArg::Value(slot)], check, &[]);

        b.switch_to_block(insert);
        b.ins().store(trusted(), addr, at, 0);
        b.ins().store(trusted(), generation, at, 8);
        let c1 = b.ins().iadd_imm_s(count, 1);
        b.ins().store(trusted(), c1, ctx, CTX_COUNT);
        let one = b.ins().iconst(I64, 1);
        b.ins().return_(&[one]);

        b.switch_to_block(check);
        let stored = b.ins().load(I64, trusted(), slot, 0);
        let same = b.ins().icmp(IntCC::Equal, stored, addr);
        let next_b = b.create_block();
        b.ins().brif(same, no, &[], next_b, &[]);

        b.switch_to_block(next_b);
        let n = b.ins().iadd_imm_s(idx, 1);
        let n = b.ins().band_imm_s(n, (VISITED_SLOTS - 1) as i64);
        b.ins().jump(probe, &[BlockArg::Value(n)]);

        b.seal_all_blocks();
        b.finalize(fc);
    }
    func
}
