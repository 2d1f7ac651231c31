//! Unit tests of `dwarf`.

use object::{Object as _, ObjectSymbol as _};

use super::lookup::name_suffixes;
use super::*;
use crate::interp::live_tests::build_fixture;

#[test]
fn names_a_qualified_name_can_end_with() {
    let tails: Vec<&str> = name_suffixes("a::b<c::d>").collect();
    assert_eq!(tails, ["a::b<c::d>", "b<c::d>", "d>"]);
    assert_eq!(name_suffixes("T").collect::<Vec<_>>(), ["T"]);
}

/// What a plain walk of every DIE finds, to check the lookups that jump along sibling
/// links and through indexes against.
#[derive(Default)]
struct Walked {
    /// The first definition of each qualified class name.
    first_definitions: HashMap<String, DieRef>,
    /// The first subprogram whose code starts at each address.
    code_at: HashMap<u64, DieRef>,
}

/// Walks every DIE of `di`, checking [`DebugInfo::parent`] on each.
fn walk_checking_parents(di: &DebugInfo<'_>) -> Walked {
    let mut walked = Walked::default();
    for unit in 0..di.units.len() {
        let mut path: Vec<DieRef> = Vec::new();
        let mut cursor = di.units[unit].entries();
        while let Some(entry) = cursor.next_dfs().unwrap() {
            let die = DieRef {
                unit,
                offset: entry.offset(),
            };
            path.truncate(entry.depth() as usize);
            assert_eq!(di.parent(die).unwrap(), path.last().copied());
            path.push(die);
            let tag = entry.tag();
            if matches!(
                tag,
                dw::DW_TAG_structure_type | dw::DW_TAG_class_type | dw::DW_TAG_union_type
            ) && !entry.has_attr(dw::DW_AT_declaration)
                && let Some(name) = di.qualified_name(die).unwrap()
            {
                walked.first_definitions.entry(name).or_insert(die);
            }
            if tag == dw::DW_TAG_subprogram
                && let Some(Attr::Uint(low)) = di.attr(die, dw::DW_AT_low_pc).unwrap()
            {
                walked.code_at.entry(low).or_insert(die);
            }
        }
    }
    walked
}

fn check_definitions(di: &DebugInfo<'_>, walked: &Walked) {
    assert!(walked.first_definitions.len() > 500);
    for (name, die) in &walked.first_definitions {
        assert_eq!(di.find_definition(name).unwrap(), Some(*die), "{name}");
    }
    assert_eq!(di.find_definition("no::such<a::b>").unwrap(), None);
}

fn check_functions(di: &DebugInfo<'_>, walked: &Walked, symbols: &[(String, u64)]) {
    let mut found = 0;
    // Each lookup scans the unit up to the function: every tenth keeps the test quick.
    let with_code = symbols
        .iter()
        .filter(|(_, address)| walked.code_at.contains_key(address));
    for (mangled, address) in with_code.step_by(10) {
        let die = walked.code_at[address];
        let function = FunctionSymbol {
            mangled: mangled.clone(),
            demangled: String::new(),
            address: *address,
            size: 0,
            file_offset: 0,
        };
        assert_eq!(di.find_function(&function).unwrap(), die, "{mangled}");
        found += 1;
    }
    assert!(found > 100, "{found}");
}

/// The lookups find what a plain walk of every DIE finds (parents, first definitions by
/// qualified name, concrete functions), whichever fills the definitions index first.
#[test]
fn lookups_agree_with_a_walk_of_every_die() {
    let binary = Binary::open(build_fixture("footprint_containers", &[])).unwrap();
    let symbols: Vec<(String, u64)> = binary
        .object()
        .unwrap()
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.address())))
        .collect();
    with_debug_info(&binary, |di| {
        let walked = walk_checking_parents(di);
        check_functions(di, &walked, &symbols);
        check_definitions(di, &walked);
    })
    .unwrap();
    with_debug_info(&binary, |di| {
        let walked = walk_checking_parents(di);
        check_definitions(di, &walked);
        check_functions(di, &walked, &symbols);
    })
    .unwrap();
}
