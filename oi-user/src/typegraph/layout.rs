//! Struct layout per docs/semantics.md, "Structs, bases, padding, unions": base flattening (a
//! recognised-container base becomes the member `__oi_parent`), member removal (unions, incomplete
//! types), and padding.

use super::{Kind, TypeGraph, TypeId};

/// A member after flattening, at its offset inside the outermost struct.
#[derive(Debug, Clone)]
pub struct FlatMember {
    pub name: Option<String>,
    pub ty: TypeId,
    pub bit_offset: u64,
    pub bit_size: Option<u64>,
}

impl FlatMember {
    /// Bits the member occupies.
    pub fn bits(&self, tg: &TypeGraph) -> u64 {
        self.bit_size.unwrap_or_else(|| tg.size(self.ty) * 8)
    }
}

/// Members of struct `id` with bases inlined, sorted by offset (base members first on a tie).
/// Unions and non-structs have none; members of incomplete type are dropped.
pub fn flatten(tg: &TypeGraph, id: TypeId) -> Vec<FlatMember> {
    let mut out = Vec::new();
    flatten_into(tg, id, 0, &mut out, 0);
    out.sort_by_key(|m| m.bit_offset); // stable: bases were pushed first
    out
}

fn flatten_into(tg: &TypeGraph, id: TypeId, base_bits: u64, out: &mut Vec<FlatMember>, depth: u32) {
    let Some(st) = tg.as_struct(id) else { return };
    if st.is_union || depth > 32 {
        return;
    }
    for b in &st.bases {
        if b.is_virtual {
            continue; // no constant offset (docs/semantics.md, "Left open": virtual bases)
        }
        let bits = base_bits + b.offset * 8;
        if tg.as_struct(b.ty).is_some_and(|s| s.container.is_some()) {
            out.push(FlatMember {
                name: Some("__oi_parent".into()),
                ty: b.ty,
                bit_offset: bits,
                bit_size: None,
            });
        } else {
            flatten_into(tg, b.ty, bits, out, depth + 1);
        }
    }
    for m in &st.members {
        if !tg.is_complete(m.ty) {
            continue;
        }
        out.push(FlatMember {
            name: m.name.clone(),
            ty: m.ty,
            bit_offset: base_bits + m.bit_offset,
            bit_size: m.bit_size,
        });
    }
}

/// Padding of a struct and, for each flattened member, its index in the member list with
/// padding slots inserted (used for the names of unnamed members, `__oi_anon_I`).
pub struct Padding {
    pub bytes: u64,
    pub indices: Vec<usize>,
}

fn gap_bytes(bits: u64) -> u64 {
    bits / 8 + u64::from(!bits.is_multiple_of(8))
}

pub fn padding(tg: &TypeGraph, size: u64, members: &[FlatMember]) -> Padding {
    let mut bytes = 0;
    let mut indices = Vec::with_capacity(members.len());
    let mut end = 0u64;
    let mut slot = 0usize;
    for m in members {
        if m.bit_offset > end {
            bytes += gap_bytes(m.bit_offset - end);
            slot += 1;
        }
        indices.push(slot);
        slot += 1;
        end = end.max(m.bit_offset + m.bits(tg));
    }
    let total = size * 8;
    if total > end {
        bytes += gap_bytes(total - end);
    }
    Padding { bytes, indices }
}

/// Whether struct `id` contains nothing but padding (no members after removal).
pub fn is_empty_struct(tg: &TypeGraph, id: TypeId) -> bool {
    matches!(tg.get(tg.resolve(id)).kind, Kind::Struct(_)) && flatten(tg, id).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typegraph::{Member, PrimKind, StructType, Type};

    fn prim(tg: &mut TypeGraph, size: u64) -> TypeId {
        tg.add(Type {
            size,
            align: size,
            kind: Kind::Primitive {
                name: format!("int{}_t", size * 8),
                prim: PrimKind::Signed,
                dwarf_name: String::new(),
            },
        })
    }

    fn strukt(tg: &mut TypeGraph, size: u64, members: Vec<Member>) -> TypeId {
        tg.add(Type {
            size,
            align: 8,
            kind: Kind::Struct(Box::new(StructType {
                name: Some("S".into()),
                bare_name: Some("S".into()),
                is_union: false,
                members,
                bases: vec![],
                template_args: vec![],
                container: None,
                dynamic: false,
                nontrivial_for_calls: false,
            })),
        })
    }

    fn m(ty: TypeId, bit_offset: u64, bit_size: Option<u64>) -> Member {
        Member {
            name: None,
            ty,
            bit_offset,
            bit_size,
        }
    }

    #[test]
    fn int_char_longlong_has_three_padding_bytes() {
        let mut tg = TypeGraph::default();
        let (i, c, l) = (prim(&mut tg, 4), prim(&mut tg, 1), prim(&mut tg, 8));
        let s = strukt(
            &mut tg,
            16,
            vec![m(i, 0, None), m(c, 32, None), m(l, 64, None)],
        );
        let p = padding(&tg, 16, &flatten(&tg, s));
        assert_eq!(p.bytes, 3);
        assert_eq!(p.indices, vec![0, 1, 3]);
    }

    #[test]
    fn bitfield_gaps_round_up_per_gap() {
        let mut tg = TypeGraph::default();
        let c = prim(&mut tg, 1);
        let s = strukt(
            &mut tg,
            2,
            vec![m(c, 0, Some(3)), m(c, 3, Some(5)), m(c, 8, Some(7))],
        );
        assert_eq!(padding(&tg, 2, &flatten(&tg, s)).bytes, 1);
        let i = prim(&mut tg, 4);
        let s = strukt(&mut tg, 4, vec![m(i, 0, Some(3))]);
        assert_eq!(padding(&tg, 4, &flatten(&tg, s)).bytes, 4);
    }
}
