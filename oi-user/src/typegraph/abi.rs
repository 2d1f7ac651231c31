//! Where each argument is at function entry (and the return value at return), by the System V
//! x86-64 ABI with the Itanium C++ rules: classes that are not trivially copyable travel by
//! invisible reference; other aggregates are classified per eightbyte (INTEGER, SSE, MEMORY).
//! An SSE eightbyte is the low half of the next xmm register; the eBPF side captures only
//! integer registers, so the tracer reads the xmm ones from the stopped thread (ptrace), once
//! per sample that needs them. x87 values (`long double`) go in memory as arguments and are
//! reported unavailable as results.

use super::{Kind, PrimKind, TypeGraph, TypeId, layout};

/// Where an argument's value lives at entry, in terms of the captured registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The value itself is in these registers (0 = rdi … 5 = r9; 6 = rax; xmm0 … xmm15 are
    /// [`XMM0`] + n, their low eightbyte), low eightbyte first.
    Regs(Vec<usize>),
    /// The object is in memory at rsp + offset (rsp as captured at entry).
    Stack(u64),
    /// Integer register `n` holds the object's address (invisible reference, hidden return
    /// pointer).
    Indirect(usize),
    /// Passed in registers we do not capture (SSE / x87) or not passed at all (empty class).
    Unavailable(&'static str),
    /// The value is in memory at register `reg` + `offset` (from DWARF: a clone's or an
    /// inlined copy's parameter kept in the stack frame).
    At { reg: usize, offset: i64 },
    /// The value is register `reg` + `offset` itself (a pointer to a local object).
    Computed { reg: usize, offset: i64 },
    /// The value is this ELF address plus the load bias (a pointer to a global).
    Address(u64),
    /// The value is this constant.
    Constant(u64),
}

/// Register number of rax in [`Location`].
pub const RAX: usize = 6;
/// Register numbers, in [`Location`], of the registers that only DWARF locations use.
pub const RBX: usize = 7;
pub const RBP: usize = 8;
/// r10 … r15 are `R10 + 0` … `R10 + 5`.
pub const R10: usize = 9;
pub const RSP: usize = 15;
/// xmm0 … xmm15 are `XMM0 + 0` … `XMM0 + 15` (their low eightbyte).
pub const XMM0: usize = 16;

/// The [`Location`] register number of DWARF x86-64 register `dwarf`; `None` for the
/// vector and other registers a probe does not capture.
pub fn register_of_dwarf(dwarf: u16) -> Option<usize> {
    Some(match dwarf {
        0 => RAX,
        1 => 2, // rdx
        2 => 3, // rcx
        3 => RBX,
        4 => 1, // rsi
        5 => 0, // rdi
        6 => RBP,
        7 => RSP,
        8 => 4, // r8
        9 => 5, // r9
        10..=15 => R10 + usize::from(dwarf - 10),
        17..=32 => XMM0 + usize::from(dwarf - 17),
        _ => return None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    None,
    Integer,
    Sse,
    Memory,
}

fn merge(a: Class, b: Class) -> Class {
    match (a, b) {
        (x, y) if x == y => x,
        (Class::None, x) | (x, Class::None) => x,
        (Class::Memory, _) | (_, Class::Memory) => Class::Memory,
        (Class::Integer, _) | (_, Class::Integer) => Class::Integer,
        _ => Class::Sse,
    }
}

/// Classes of the (at most two) eightbytes of a value, or MEMORY.
fn classify(tg: &TypeGraph, id: TypeId) -> Vec<Class> {
    let r = tg.resolve(id);
    let size = tg.size(r);
    if let Some(st) = tg.as_struct(r)
        && st.nontrivial_for_calls
    {
        return vec![Class::Memory];
    }
    if size > 16 {
        return vec![Class::Memory];
    }
    let n = size.div_ceil(8).max(1) as usize;
    let mut classes = vec![Class::None; n];
    fill(tg, r, 0, &mut classes, 0);
    if classes.contains(&Class::Memory) {
        return vec![Class::Memory];
    }
    classes
}

fn fill(tg: &TypeGraph, id: TypeId, off: u64, classes: &mut [Class], depth: u32) {
    if depth > 16 {
        return;
    }
    let r = tg.resolve(id);
    let t = tg.get(r);
    let slot = (off / 8) as usize;
    let mut set = |c: Class| {
        if let Some(s) = classes.get_mut(slot) {
            *s = merge(*s, c);
        }
    };
    match &t.kind {
        Kind::Primitive { prim, .. } => set(match prim {
            PrimKind::Float if t.size > 8 => Class::Memory,
            PrimKind::Float => Class::Sse,
            _ => Class::Integer,
        }),
        Kind::Enum { .. } | Kind::Pointer { .. } => set(Class::Integer),
        Kind::Array { elem, count } => {
            let es = tg.size(*elem);
            for i in 0..*count {
                fill(tg, *elem, off + i * es, classes, depth + 1);
            }
        }
        Kind::Struct(st) if st.is_union => {
            // Approximation: a union is as integer as its storage.
            for i in 0..t.size.div_ceil(8) {
                if let Some(s) = classes.get_mut(slot + i as usize) {
                    *s = merge(*s, Class::Integer);
                }
            }
        }
        Kind::Struct(_) => {
            for m in layout::flatten(tg, r) {
                fill(tg, m.ty, off + m.bit_offset / 8, classes, depth + 1);
            }
        }
        _ => {}
    }
}

/// Locations of every parameter (in declaration order, `this` included) at entry, given
/// their types (`None`: unknown, treated as one integer register) and the return type.
pub fn parameter_locations(
    tg: &TypeGraph,
    params: &[Option<TypeId>],
    ret: Option<TypeId>,
) -> Vec<Location> {
    let mut int = 0usize;
    let mut sse = 0usize;
    let mut stack = 8u64; // rsp points at the return address at entry
    if let Some(r) = ret
        && returns_in_memory(tg, r)
    {
        int = 1; // hidden pointer in rdi
    }
    let mut out = Vec::new();
    for p in params {
        let Some(ty) = *p else {
            out.push(next_int(&mut int, &mut stack));
            continue;
        };
        let r = tg.resolve(ty);
        let size = tg.size(r);
        if let Some(st) = tg.as_struct(r) {
            if st.nontrivial_for_calls {
                out.push(match next_int(&mut int, &mut stack) {
                    Location::Regs(v) => Location::Indirect(v[0]),
                    other => other,
                });
                continue;
            }
            if !st.is_union && layout::is_empty_struct(tg, r) {
                out.push(Location::Unavailable("an empty class is not passed"));
                continue;
            }
        }
        let classes = classify(tg, r);
        let n_int = classes.iter().filter(|c| **c == Class::Integer).count();
        let n_sse = classes.iter().filter(|c| **c == Class::Sse).count();
        let on_stack = classes.contains(&Class::Memory) || int + n_int > 6 || sse + n_sse > 8;
        if on_stack {
            let align = tg.align(r).max(8);
            stack = stack.div_ceil(align) * align;
            out.push(Location::Stack(stack));
            stack += size.div_ceil(8).max(1) * 8;
            continue;
        }
        // One register per eightbyte, in order: the next integer or the next xmm register.
        let regs: Vec<usize> = classes
            .iter()
            .map(|c| match c {
                Class::Sse => {
                    sse += 1;
                    XMM0 + sse - 1
                }
                _ => {
                    int += 1;
                    int - 1
                }
            })
            .collect();
        out.push(Location::Regs(regs));
    }
    out
}

fn next_int(int: &mut usize, stack: &mut u64) -> Location {
    if *int < 6 {
        *int += 1;
        Location::Regs(vec![*int - 1])
    } else {
        let l = Location::Stack(*stack);
        *stack += 8;
        l
    }
}

/// Whether a function returning `ty` gets a hidden result pointer (and returns it in rax).
pub fn returns_in_memory(tg: &TypeGraph, ty: TypeId) -> bool {
    let r = tg.resolve(ty);
    matches!(tg.get(r).kind, Kind::Struct(_) | Kind::Array { .. })
        && classify(tg, r).contains(&Class::Memory)
}

/// Where the return value is at a return probe.
pub fn return_location(tg: &TypeGraph, ty: TypeId) -> Location {
    if returns_in_memory(tg, ty) {
        return Location::Indirect(RAX);
    }
    let classes = classify(tg, ty);
    if classes.contains(&Class::Memory) {
        return Location::Unavailable("returned on the x87 stack, which is not captured");
    }
    if classes == [Class::None] {
        return Location::Unavailable("an empty class is not returned");
    }
    // INTEGER eightbytes come back in rax then rdx (register 2 of the argument order), SSE
    // ones in xmm0 then xmm1.
    let (mut int, mut sse) = ([RAX, 2].into_iter(), [XMM0, XMM0 + 1].into_iter());
    Location::Regs(
        classes
            .iter()
            .filter_map(|c| match c {
                Class::Sse => sse.next(),
                _ => int.next(),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typegraph::{Member, StructType, Type};

    fn prim(tg: &mut TypeGraph, size: u64, prim: PrimKind) -> TypeId {
        tg.add(Type {
            size,
            align: size,
            kind: Kind::Primitive {
                name: String::new(),
                prim,
                dwarf_name: String::new(),
            },
        })
    }

    fn strukt(
        tg: &mut TypeGraph,
        members: &[(TypeId, u64)],
        size: u64,
        nontrivial: bool,
    ) -> TypeId {
        tg.add(Type {
            size,
            align: 8,
            kind: Kind::Struct(Box::new(StructType {
                name: Some("S".into()),
                bare_name: Some("S".into()),
                is_union: false,
                members: members
                    .iter()
                    .map(|&(ty, off)| Member {
                        name: Some("m".into()),
                        ty,
                        bit_offset: off * 8,
                        bit_size: None,
                    })
                    .collect(),
                bases: vec![],
                template_args: vec![],
                container: None,
                dynamic: false,
                nontrivial_for_calls: nontrivial,
            })),
        })
    }

    #[test]
    fn classification_of_the_usual_arguments() {
        let mut tg = TypeGraph::default();
        let long = prim(&mut tg, 8, PrimKind::Signed);
        let int = prim(&mut tg, 4, PrimKind::Signed);
        let dbl = prim(&mut tg, 8, PrimKind::Float);
        let ptr = tg.add(Type {
            size: 8,
            align: 8,
            kind: Kind::Pointer { target: Some(long) },
        });
        let big = strukt(
            &mut tg,
            &[(long, 0), (long, 8), (long, 16), (int, 24)],
            32,
            false,
        );
        let small = strukt(&mut tg, &[(long, 0), (int, 8)], 16, false);
        let owning = strukt(&mut tg, &[(ptr, 0)], 8, true);
        let locs = parameter_locations(
            &tg,
            &[
                Some(int),
                Some(big),
                Some(small),
                Some(dbl),
                Some(owning),
                Some(ptr),
            ],
            None,
        );
        assert_eq!(
            locs,
            vec![
                Location::Regs(vec![0]),
                Location::Stack(8),
                Location::Regs(vec![1, 2]),
                Location::Regs(vec![XMM0]),
                Location::Indirect(3),
                Location::Regs(vec![4]),
            ]
        );
        // Mixed eightbytes take the next register of their own class; results likewise.
        let mixed = strukt(&mut tg, &[(dbl, 0), (long, 8)], 16, false);
        let two = strukt(&mut tg, &[(dbl, 0), (dbl, 8)], 16, false);
        let locs = parameter_locations(&tg, &[Some(dbl), Some(mixed), Some(int)], None);
        assert_eq!(
            locs,
            vec![
                Location::Regs(vec![XMM0]),
                Location::Regs(vec![XMM0 + 1, 0]),
                Location::Regs(vec![1]),
            ]
        );
        assert_eq!(return_location(&tg, dbl), Location::Regs(vec![XMM0]));
        assert_eq!(
            return_location(&tg, two),
            Location::Regs(vec![XMM0, XMM0 + 1])
        );
        assert_eq!(return_location(&tg, mixed), Location::Regs(vec![XMM0, RAX]));
        // A class returned in memory takes rdi for its hidden pointer; rax holds it at return.
        let locs = parameter_locations(&tg, &[Some(int)], Some(owning));
        assert_eq!(locs, vec![Location::Regs(vec![1])]);
        assert_eq!(return_location(&tg, owning), Location::Indirect(RAX));
        assert_eq!(return_location(&tg, long), Location::Regs(vec![RAX]));
        // Integer registers run out: the seventh integer goes on the stack.
        let locs = parameter_locations(&tg, &[Some(long); 8], None);
        assert_eq!(locs[6], Location::Stack(8));
        assert_eq!(locs[7], Location::Stack(16));
    }
}
