//! The generator's driver: which functions a walker is made of (`Registry`: one per plan
//! node and object length, requested as the walk reaches them, after the fixed ones), their
//! calling conventions and signatures, and building one function with a `Gen`.

use super::*;

/// Generated IR functions, indexed by function id.
pub(in crate::jit) fn generate(
    plan: &Plan,
    roots: &[NodeId],
    fc: TargetFrontendConfig,
    sizes: bool,
) -> Result<Vec<Function>, JitError> {
    generate_with(plan, roots, fc, sizes, true, false)
}

/// A walker with sizes that writes no stream: the same loads, checks and total, for a caller
/// that wants the inclusive size only (OIL's `size`). `out_used` stays 0.
pub(in crate::jit) fn generate_totals(
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
pub(in crate::jit) fn generate_totals_optimistic(
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

pub(super) fn generate_with(
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
pub(super) struct Registry {
    pub(super) ids: HashMap<(NodeId, u64), u32>,
    pub(super) pending: Vec<(u32, NodeId, u64)>,
    /// Add up the inclusive size while walking.
    pub(super) sizes: bool,
    /// Write the stream (false: the total only, `generate_totals`).
    pub(super) stream: bool,
    /// Record visits instead of inserting them (`generate_totals_optimistic`).
    pub(super) optimistic: bool,
    /// While an optimistic entry is generated as a leaf (it walks everything inline and
    /// calls no node function, `entry::gen_optimistic_entry`): the variable that counts the
    /// recorded keys, in a register instead of the context.
    pub(super) leaf_keys: Option<Variable>,
    /// While a leaf optimistic entry is generated with its visits in registers
    /// (`visited::record_site`): one variable and visit tag per place that records, in order.
    pub(super) sites: Option<visited::Sites>,
    /// A visit could not take a register of its own (inside a loop, or too many places):
    /// the entry is generated again with the recorded keys in the context.
    pub(super) sites_overflow: bool,
    /// `plan::totals::static_total` of each node, memoised.
    pub(super) statics: Vec<Option<u64>>,
}

impl Registry {
    pub(super) fn id(&mut self, node: NodeId, len: u64) -> u32 {
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
pub(super) fn conv(id: u32) -> CallConv {
    if id == FN_ENTRY || id == FN_BLOCK {
        CallConv::SystemV
    } else if id == FN_PREFETCH || id == FN_VISIT {
        CallConv::PreserveAll
    } else {
        CallConv::Tail
    }
}

pub(super) fn sig(id: u32, params: usize) -> Signature {
    let mut s = Signature::new(conv(id));
    s.params.extend((0..params).map(|_| AbiParam::new(I64)));
    if id != FN_PREFETCH && id != FN_VISIT {
        s.returns.push(AbiParam::new(I64));
    }
    s
}

pub(super) fn new_function(id: u32, params: usize) -> Function {
    Function::with_name_signature(UserFuncName::user(0, id), sig(id, params))
}

/// Builds one function with `Gen`: `prologue` runs in the entry block with the parameters.
pub(super) fn build(
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
pub(super) fn gen_node_fn(
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
