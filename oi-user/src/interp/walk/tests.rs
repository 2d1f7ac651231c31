//! Unit tests of `walk`.

use super::*;
use crate::containers::list::ListLayout;
use crate::containers::vector::VectorLayout;
use crate::interp::LocalReader;
use crate::plan::Node;

fn plan(op: Op, elem_dynamic: bool) -> Plan {
    let mut p = Plan::default();
    p.nodes.push(Node {
        name: "a0".into(),
        type_names: vec![],
        static_size: 24,
        is_primitive: false,
        op,
        dynamic: false,
        readable: String::new(),
        value: None,
        opaque_union: false,
        foreign: false,
    });
    // Element: a string when it must be walked, else an int.
    let elem_op = if elem_dynamic {
        Op::String(crate::containers::string::StringLayout {
            ptr_off: 0,
            len_off: 8,
            cap_off: 16,
            char_size: 1,
            size: 32,
        })
    } else {
        Op::Leaf
    };
    p.nodes.push(Node {
        name: "[]".into(),
        type_names: vec![],
        static_size: if elem_dynamic { 32 } else { 4 },
        is_primitive: false,
        op: elem_op,
        dynamic: false,
        readable: String::new(),
        value: None,
        opaque_union: false,
        foreign: false,
    });
    p.compute_dynamic();
    p
}

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn corrupt_objects_are_errors_not_panics() {
    // vector whose finish lies before its start
    let p = plan(
        Op::Vector {
            layout: VectorLayout {
                start_off: 0,
                finish_off: 8,
                eos_off: 16,
                elem_size: 4,
                size: 24,
            },
            elem: 1,
        },
        false,
    );
    let mem = LocalReader::new(0x1000, words(&[0x2000, 0x1000, 0x3000]));
    assert!(matches!(
        run(&p, 0, 0x1000, &mem, true, 0),
        Err(WalkError::Corrupt { .. })
    ));
    // vector of strings pointing at unreadable memory
    let p = plan(
        Op::Vector {
            layout: VectorLayout {
                start_off: 0,
                finish_off: 8,
                eos_off: 16,
                elem_size: 32,
                size: 24,
            },
            elem: 1,
        },
        true,
    );
    let mem = LocalReader::new(0x1000, words(&[0x9000, 0x9040, 0x9040]));
    assert!(matches!(
        run(&p, 0, 0x1000, &mem, true, 0),
        Err(WalkError::Read(_))
    ));
    // a list claiming 5 nodes whose chain ends at once
    let p = plan(
        Op::List {
            layout: ListLayout {
                head_off: 0,
                next_off: 0,
                size_off: 16,
                value_off: 16,
                node_size: 48,
                elem_size: 32,
                size: 24,
                counted: false,
            },
            elem: 1,
        },
        true,
    );
    let mem = LocalReader::new(0x1000, words(&[0, 0, 5]));
    assert!(matches!(
        run(&p, 0, 0x1000, &mem, true, 0),
        Err(WalkError::Corrupt { .. })
    ));
    // an absurd element count
    let p = plan(
        Op::Vector {
            layout: VectorLayout {
                start_off: 0,
                finish_off: 8,
                eos_off: 16,
                elem_size: 4,
                size: 24,
            },
            elem: 1,
        },
        false,
    );
    let mem = LocalReader::new(0x1000, words(&[0, 1 << 40, 1 << 40]));
    assert!(matches!(
        run(&p, 0, 0x1000, &mem, true, 0),
        Err(WalkError::Corrupt { .. })
    ));
}
