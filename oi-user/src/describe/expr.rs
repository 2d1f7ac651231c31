//! The expression language of descriptions: parsed to an [`Ast`] (names unresolved), then,
//! against one instantiation, compiled to an [`Expr`] (fields as offset/width reads of the
//! object, `sizeof`/`alignof`/`offsetof`/template values folded to constants).
//!
//! Semantics (docs/containers.md, "Expressions"): unsigned 64-bit wrapping arithmetic, `x / 0` and
//! `x % 0` are 0, `>>` is logical, shifts use the low 6 bits of the count, comparisons are
//! signed 64-bit and give 1 or 0. [`Expr::eval`] is the reference the JIT must match
//! bit for bit. Never panics on any input: parse errors are values.

/// Binary operators, in the plan (and the JIT) as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Shl,
    Shr,
    And,
    Or,
    Xor,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LogAnd,
    LogOr,
    /// `align(x, a)`: x rounded up to a multiple of a (a = 0: x).
    Align,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum UnOp {
    Neg,
    Not,
    LogNot,
    /// Sign-extend the low 8, 16 or 32 bits.
    Sext(u8),
}

/// A parsed expression; names are resolved by `compile`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ast {
    Num(u64),
    /// A field or a value template argument.
    Name(String),
    This,
    SizeOf(String),
    AlignOf(String),
    OffsetOf(String),
    Load(Box<Ast>, u8),
    Un(UnOp, Box<Ast>),
    Bin(BinOp, Box<Ast>, Box<Ast>),
}

impl Ast {
    /// Appends the types `sizeof` and `alignof` name.
    pub fn type_names(&self, out: &mut Vec<String>) {
        match self {
            Ast::SizeOf(t) | Ast::AlignOf(t) => out.push(t.clone()),
            Ast::Load(a, _) | Ast::Un(_, a) => a.type_names(out),
            Ast::Bin(_, a, b) => {
                a.type_names(out);
                b.type_names(out);
            }
            Ast::Num(_) | Ast::Name(_) | Ast::This | Ast::OffsetOf(_) => {}
        }
    }
}

/// A compiled expression: what the walkers evaluate.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Expr {
    Const(u64),
    /// Unsigned little-endian integer of `width` (1, 2, 4, 8) bytes at `off` in the object.
    Field {
        off: u64,
        width: u8,
    },
    /// The object's address.
    This,
    /// The argument of a per-slot expression of `control_bytes`: the control byte `c` in
    /// `full`, the slot index `i` in `ctrl_at` (0 elsewhere).
    Arg,
    /// Unsigned integer of `width` bytes read from the target at the address.
    Load(Box<Expr>, u8),
    Un(UnOp, Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
}

impl BinOp {
    /// The reference meaning of each operator.
    pub fn apply(self, a: u64, b: u64) -> u64 {
        use BinOp::*;
        match self {
            Add => a.wrapping_add(b),
            Sub => a.wrapping_sub(b),
            Mul => a.wrapping_mul(b),
            Div => a.checked_div(b).unwrap_or(0),
            Rem => a.checked_rem(b).unwrap_or(0),
            Shl => a.wrapping_shl((b & 63) as u32),
            Shr => a.wrapping_shr((b & 63) as u32),
            And => a & b,
            Or => a | b,
            Xor => a ^ b,
            Eq => u64::from(a == b),
            Ne => u64::from(a != b),
            Lt => u64::from((a as i64) < (b as i64)),
            Le => u64::from((a as i64) <= (b as i64)),
            Gt => u64::from((a as i64) > (b as i64)),
            Ge => u64::from((a as i64) >= (b as i64)),
            LogAnd => u64::from(a != 0 && b != 0),
            LogOr => u64::from(a != 0 || b != 0),
            Align => {
                if b == 0 {
                    a
                } else {
                    a.wrapping_add(b - 1)
                        .checked_div(b)
                        .unwrap_or(0)
                        .wrapping_mul(b)
                }
            }
        }
    }
}

impl UnOp {
    pub fn apply(self, a: u64) -> u64 {
        match self {
            UnOp::Neg => a.wrapping_neg(),
            UnOp::Not => !a,
            UnOp::LogNot => u64::from(a == 0),
            UnOp::Sext(8) => a as u8 as i8 as i64 as u64,
            UnOp::Sext(16) => a as u16 as i16 as i64 as u64,
            UnOp::Sext(_) => a as u32 as i32 as i64 as u64,
        }
    }
}

impl Expr {
    /// Evaluates against the object's bytes at `this`; `load` reads the target (None: a
    /// field outside the object, or a failed read, which the caller reports as corrupt).
    pub fn eval<E>(
        &self,
        this: u64,
        obj: &[u8],
        load: &mut dyn FnMut(u64, u8) -> Result<u64, E>,
    ) -> Result<Option<u64>, E> {
        self.eval_arg(this, obj, 0, load)
    }

    /// [`Expr::eval`] with `arg` as the value of [`Expr::Arg`].
    pub fn eval_arg<E>(
        &self,
        this: u64,
        obj: &[u8],
        arg: u64,
        load: &mut dyn FnMut(u64, u8) -> Result<u64, E>,
    ) -> Result<Option<u64>, E> {
        Ok(Some(match self {
            Expr::Const(c) => *c,
            Expr::Arg => arg,
            Expr::This => this,
            Expr::Field { off, width } => {
                match crate::containers::uint(obj, *off, u64::from(*width)) {
                    Some(v) => v,
                    None => return Ok(None),
                }
            }
            Expr::Load(a, w) => {
                let Some(a) = a.eval_arg(this, obj, arg, load)? else {
                    return Ok(None);
                };
                load(a, *w)?
            }
            Expr::Un(op, a) => {
                let Some(a) = a.eval_arg(this, obj, arg, load)? else {
                    return Ok(None);
                };
                op.apply(a)
            }
            Expr::Bin(op, a, b) => {
                let Some(a) = a.eval_arg(this, obj, arg, load)? else {
                    return Ok(None);
                };
                let Some(b) = b.eval_arg(this, obj, arg, load)? else {
                    return Ok(None);
                };
                op.apply(a, b)
            }
        }))
    }

    /// The value, when it reads nothing (no field, `this`, load or per-slot argument).
    pub fn constant(&self) -> Option<u64> {
        match self {
            Expr::Const(c) => Some(*c),
            Expr::Un(op, a) => Some(op.apply(a.constant()?)),
            Expr::Bin(op, a, b) => Some(op.apply(a.constant()?, b.constant()?)),
            _ => None,
        }
    }

    /// Whether evaluating reads the target beyond the object (`load`).
    pub fn loads(&self) -> bool {
        match self {
            Expr::Load(..) => true,
            Expr::Un(_, a) => a.loads(),
            Expr::Bin(_, a, b) => a.loads() || b.loads(),
            _ => false,
        }
    }
}

/// Parses an expression; the error says what was expected where.
pub fn parse(text: &str) -> Result<Ast, String> {
    let toks = lex(text)?;
    let mut p = Parser { toks, pos: 0 };
    let e = p.expr(0)?;
    if p.pos != p.toks.len() {
        return Err(format!("unexpected `{}`", p.toks[p.pos]));
    }
    Ok(e)
}

fn lex(s: &str) -> Result<Vec<String>, String> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            let st = i;
            // Member paths (`m_holder.m_start`, `member:rep_`) are one token.
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.' || b[i] == b':')
            {
                i += 1;
            }
            out.push(s[st..i].to_string());
        } else {
            let two = s.get(i..i + 2).unwrap_or("");
            if ["<<", ">>", "<=", ">=", "==", "!=", "&&", "||"].contains(&two) {
                out.push(two.to_string());
                i += 2;
            } else if b"+-*/%&|^~!<>(),".contains(&c) {
                out.push((c as char).to_string());
                i += 1;
            } else {
                return Err(format!(
                    "unexpected character `{}`",
                    &s[i..].chars().next().unwrap_or('?')
                ));
            }
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<String>,
    pos: usize,
}

/// (token, precedence, op): higher binds tighter, as in C.
const BINARY: &[(&str, u8, BinOp)] = &[
    ("||", 1, BinOp::LogOr),
    ("&&", 2, BinOp::LogAnd),
    ("|", 3, BinOp::Or),
    ("^", 4, BinOp::Xor),
    ("&", 5, BinOp::And),
    ("==", 6, BinOp::Eq),
    ("!=", 6, BinOp::Ne),
    ("<", 7, BinOp::Lt),
    ("<=", 7, BinOp::Le),
    (">", 7, BinOp::Gt),
    (">=", 7, BinOp::Ge),
    ("<<", 8, BinOp::Shl),
    (">>", 8, BinOp::Shr),
    ("+", 9, BinOp::Add),
    ("-", 9, BinOp::Sub),
    ("*", 10, BinOp::Mul),
    ("/", 10, BinOp::Div),
    ("%", 10, BinOp::Rem),
];

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.toks.get(self.pos).map(String::as_str)
    }

    fn next(&mut self) -> Result<String, String> {
        let t = self
            .toks
            .get(self.pos)
            .cloned()
            .ok_or_else(|| "unexpected end of expression".to_string())?;
        self.pos += 1;
        Ok(t)
    }

    fn expect(&mut self, t: &str) -> Result<(), String> {
        let got = self.next()?;
        if got == t {
            Ok(())
        } else {
            Err(format!("expected `{t}`, found `{got}`"))
        }
    }

    fn expr(&mut self, min: u8) -> Result<Ast, String> {
        let mut lhs = self.unary()?;
        while let Some(&(_, prec, op)) = self
            .peek()
            .and_then(|t| BINARY.iter().find(|(s, ..)| *s == t))
        {
            if prec <= min {
                break;
            }
            self.pos += 1;
            let rhs = self.expr(prec)?;
            lhs = Ast::Bin(op, Box::new(lhs), Box::new(rhs));
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Ast, String> {
        let t = self.next()?;
        let un = |op, p: &mut Self| Ok(Ast::Un(op, Box::new(p.unary()?)));
        match t.as_str() {
            "-" => un(UnOp::Neg, self),
            "~" => un(UnOp::Not, self),
            "!" => un(UnOp::LogNot, self),
            "(" => {
                let e = self.expr(0)?;
                self.expect(")")?;
                Ok(e)
            }
            "this" => Ok(Ast::This),
            _ if t.as_bytes()[0].is_ascii_digit() => {
                let n = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => t.parse(),
                };
                n.map(Ast::Num).map_err(|_| format!("bad number `{t}`"))
            }
            _ if t.as_bytes()[0].is_ascii_alphabetic() || t.starts_with('_') => {
                if self.peek() != Some("(") {
                    return Ok(Ast::Name(t));
                }
                self.pos += 1;
                let call = match t.as_str() {
                    "sizeof" | "alignof" | "offsetof" => {
                        let arg = self.type_text()?;
                        match t.as_str() {
                            "sizeof" => Ast::SizeOf(arg),
                            "alignof" => Ast::AlignOf(arg),
                            _ => Ast::OffsetOf(arg),
                        }
                    }
                    "align" => {
                        let x = self.expr(0)?;
                        self.expect(",")?;
                        let a = self.expr(0)?;
                        Ast::Bin(BinOp::Align, Box::new(x), Box::new(a))
                    }
                    "i8" | "i16" | "i32" => {
                        let bits = t[1..].parse().unwrap_or(32);
                        Ast::Un(UnOp::Sext(bits), Box::new(self.expr(0)?))
                    }
                    "load" => {
                        let a = self.expr(0)?;
                        self.expect(",")?;
                        let w = match self.next()?.as_str() {
                            "1" => 1,
                            "2" => 2,
                            "4" => 4,
                            "8" => 8,
                            w => return Err(format!("load width must be 1, 2, 4 or 8, not `{w}`")),
                        };
                        Ast::Load(Box::new(a), w)
                    }
                    f => return Err(format!("unknown function `{f}`")),
                };
                self.expect(")")?;
                Ok(call)
            }
            t => Err(format!("unexpected `{t}`")),
        }
    }

    /// The name inside `sizeof( )`: a type argument name, `member:path`, a one-word type
    /// name, or a C base type of several words (`unsigned long`), spelled as g++ names it
    /// in DWARF (`long unsigned int`).
    fn type_text(&mut self) -> Result<String, String> {
        let mut words = vec![self.next()?];
        if words[0] == ")" {
            return Err("empty argument".into());
        }
        while self.peek().is_some_and(|t| t != ")") {
            words.push(self.next()?);
        }
        match gcc_base_type(&words) {
            Some(name) => Ok(name),
            None if words.len() == 1 => Ok(words.remove(0)),
            None => Err(format!(
                "`{}` is not a type name (several words: a C base type only)",
                words.join(" ")
            )),
        }
    }
}

/// A C base type written with its keywords in any order (`unsigned long`, `long long`,
/// `short`), as g++ spells it in DWARF (`long unsigned int`, `long long int`,
/// `short int`); None when the words are not only such keywords (or are one word g++ spells
/// the same: `int`, `char`, `double`).
pub fn gcc_base_type(words: &[String]) -> Option<String> {
    let count = |k: &str| words.iter().filter(|w| *w == k).count();
    let known = [
        "signed", "unsigned", "short", "long", "int", "char", "double", "float", "bool",
    ];
    if words.is_empty() || !words.iter().all(|w| known.contains(&w.as_str())) {
        return None;
    }
    let (signed, unsigned) = (count("signed"), count("unsigned"));
    let (short, long, int) = (count("short"), count("long"), count("int"));
    let (char, double) = (count("char"), count("double"));
    let (float, bool) = (count("float"), count("bool"));
    if signed + unsigned > 1 || short + long > 2 || (short > 0 && long > 0) || int > 1 {
        return None;
    }
    let sized = short + long + signed + unsigned + int;
    let name = match (char, double, float, bool) {
        (1, 0, 0, 0) if short + long + int == 0 => match (signed, unsigned) {
            (1, _) => "signed char".to_string(),
            (_, 1) => "unsigned char".to_string(),
            _ => "char".to_string(),
        },
        (0, 1, 0, 0) if sized == long && long <= 1 => {
            if long == 1 { "long double" } else { "double" }.to_string()
        }
        (0, 0, 1, 0) if sized == 0 => "float".to_string(),
        (0, 0, 0, 1) if sized == 0 => "bool".to_string(),
        (0, 0, 0, 0) => {
            let base = match (short, long) {
                (1, _) => "short ",
                (_, 1) => "long ",
                (_, 2) => "long long ",
                _ => "",
            };
            let sign = if unsigned == 1 { "unsigned " } else { "" };
            format!("{base}{sign}int")
        }
        _ => return None,
    };
    (words.len() > 1 || name != words[0]).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(a: &Ast) -> u64 {
        match a {
            Ast::Num(n) => *n,
            Ast::Un(op, x) => op.apply(fold(x)),
            Ast::Bin(op, x, y) => op.apply(fold(x), fold(y)),
            _ => panic!("not constant"),
        }
    }

    #[test]
    fn base_types_of_several_words_as_gcc_spells_them() {
        let spell = |t: &str| match parse(&format!("sizeof({t})")).unwrap() {
            Ast::SizeOf(n) => n,
            other => panic!("{other:?}"),
        };
        assert_eq!(spell("unsigned long"), "long unsigned int");
        assert_eq!(spell("long unsigned int"), "long unsigned int");
        assert_eq!(spell("unsigned"), "unsigned int");
        assert_eq!(spell("long"), "long int");
        assert_eq!(spell("long long"), "long long int");
        assert_eq!(spell("unsigned long long int"), "long long unsigned int");
        assert_eq!(spell("short unsigned"), "short unsigned int");
        assert_eq!(spell("signed char"), "signed char");
        assert_eq!(spell("long double"), "long double");
        assert_eq!(spell("int"), "int");
        assert_eq!(spell("T"), "T");
        assert_eq!(spell("member:rep_"), "member:rep_");
        assert!(parse("sizeof(unsigned T)").is_err());
        assert!(parse("sizeof(long short)").is_err());
        assert!(parse("sizeof()").is_err());
    }

    #[test]
    fn precedence_as_in_c() {
        assert_eq!(fold(&parse("8 + 3 * 4").unwrap()), 20);
        assert_eq!(fold(&parse("(8 + 3) * 4").unwrap()), 44);
        assert_eq!(fold(&parse("0x17 & ~3").unwrap()), 0x14);
        assert_eq!(fold(&parse("6 >> 1 == 3").unwrap()), 1);
        assert_eq!(fold(&parse("1 + 2 == 3 && 4 > 5 || 1").unwrap()), 1);
        assert_eq!(fold(&parse("align(13, 8)").unwrap()), 16);
        assert_eq!(fold(&parse("i8(0x80) >= 0").unwrap()), 0);
        assert_eq!(fold(&parse("i8(0x7f) >= 0").unwrap()), 1);
        assert_eq!(fold(&parse("7 / 0 + 7 % 0").unwrap()), 0);
        assert_eq!(fold(&parse("10 - 3 - 2").unwrap()), 5);
    }

    #[test]
    fn names_and_calls() {
        assert_eq!(
            parse("cap * sizeof(T)").unwrap(),
            Ast::Bin(
                BinOp::Mul,
                Box::new(Ast::Name("cap".into())),
                Box::new(Ast::SizeOf("T".into()))
            )
        );
        assert_eq!(
            parse("this + offsetof(m_holder.storage)").unwrap(),
            Ast::Bin(
                BinOp::Add,
                Box::new(Ast::This),
                Box::new(Ast::OffsetOf("m_holder.storage".into()))
            )
        );
        assert!(matches!(parse("load(rep, 4)").unwrap(), Ast::Load(_, 4)));
    }

    #[test]
    fn bad_expressions_are_errors() {
        for bad in [
            "",
            "1 +",
            "(1",
            "1 2",
            "foo(1)",
            "load(x, 3)",
            "1 $ 2",
            "sizeof()",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
