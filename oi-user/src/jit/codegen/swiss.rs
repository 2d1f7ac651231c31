//! Swiss tables (Abseil `flat_hash_map`, Boost `unordered_flat_map`): the control bytes
//! that say which slots are full.

use super::*;

impl Gen<'_, '_> {
    /// A Swiss table (`control_bytes`), as the interpreter: the capacity checked, the full
    /// slots counted and checked against `len`, the heap checked, then the full slots
    /// walked in a second scan of the control bytes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn swiss(
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
        self.described_words(l, elem, [addr, n, cap, heap]);
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

    /// 1 when slot `i`'s control byte passes `full`, else 0.
    pub(super) fn swiss_full(
        &mut self,
        sw: &Swiss,
        addr: Value,
        len: u64,
        i: Value,
    ) -> Result<Value, Stop> {
        let at = self.expr_arg(&sw.ctrl_at, addr, len, Some(i))?;
        let c = self.ld_uint(at, 0, 1);
        let f = self.expr_arg(&sw.full, addr, len, Some(c))?;
        let nz = self.b.ins().icmp_imm_s(IntCC::NotEqual, f, 0);
        Ok(self.b.ins().uextend(I64, nz))
    }
}
