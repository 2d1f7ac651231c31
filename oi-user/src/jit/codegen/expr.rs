//! Described containers' expressions (`describe::expr`) compiled to IR, with the
//! interpreter's checks: reads inside the object, checked subtraction and division.

use super::*;

impl Gen<'_, '_> {
    /// A description's expression (`describe::expr`), as `Expr::eval` computes it: fields
    /// of the object (checked against its length here, at compile time, as the interpreter
    /// checks them against the bytes it holds), `load`s from the target (0 at address 0).
    pub(super) fn expr(&mut self, e: &Expr, addr: Value, len: u64) -> Result<Value, Stop> {
        self.expr_arg(e, addr, len, None)
    }

    /// [`Gen::expr`] with `arg` as [`Expr::Arg`] (0 when None, as `Expr::eval`).
    pub(super) fn expr_arg(
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

    pub(super) fn bin(&mut self, op: BinOp, a: Value, b: Value) -> Value {
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
    pub(super) fn check_count(&mut self, n: Value, addr: Value) {
        let big = self.icmp_imm(IntCC::UnsignedGreaterThan, n, MAX_ELEMENTS);
        self.fail_if(big, ErrorCode::ElementCount, addr);
    }

    /// `a - b`, failing with `code` when it would go below zero (`checked_sub`).
    pub(super) fn checked_sub(
        &mut self,
        a: Value,
        b: Value,
        code: ErrorCode,
        addr: Value,
    ) -> Value {
        let under = self.b.ins().icmp(IntCC::UnsignedLessThan, a, b);
        self.fail_if(under, code, addr);
        self.b.ins().isub(a, b)
    }

    pub(super) fn div(&mut self, v: Value, by: u64) -> Value {
        if by == 1 {
            v
        } else {
            self.b.ins().udiv_imm_s(v, by as i64)
        }
    }
}
