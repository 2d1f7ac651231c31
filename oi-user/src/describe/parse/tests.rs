//! Unit tests of `parse`.

use super::*;

const SBV: &str = r#"
[[container]]
name = "sbv::SmallVec"
args = ["T", "N"]
elem = "T"
layout = "array"

[container.fields]
data = "data_"
size = { path = "size_" }
flag = { offset = 16, width = 1 }

[container.array]
data = "data"
len = "size"
heap = "cap * sizeof(T)"
inline = "data == this + offsetof(buf_)"
"#;

#[test]
fn reads_a_description_with_lines() {
    let d = parse_file("t.toml", SBV).expect("parses");
    assert_eq!(d.len(), 1);
    let d = &d[0];
    assert_eq!((d.line, d.name.as_str()), (3, "sbv::SmallVec"));
    assert_eq!(d.args, ["T", "N"]);
    assert_eq!(d.fields.len(), 3);
    let Layout::Array(a) = &d.layout;
    assert_eq!(a.heap.line, 16);
    assert!(a.cap.is_none());
    assert!(d.matches("sbv::SmallVec<int, 4>"));
    assert!(d.matches("sbv::SmallVec"));
    assert!(!d.matches("sbv::SmallVector<int>"));
}

#[test]
fn errors_name_file_and_line() {
    let bad = SBV.replace("cap * sizeof(T)", "cap * (sizeof(T)");
    let e = parse_file("t.toml", &bad).unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("t.toml", 16), "{e}");
    let bad = SBV.replace("len = ", "lenn = ");
    let e = parse_file("t.toml", &bad).unwrap_err();
    assert_eq!(e.line, 15, "{e}");
    let bad = SBV.replace("width = 1", "width = 3");
    let e = parse_file("t.toml", &bad).unwrap_err();
    assert_eq!(e.line, 11, "{e}");
    let bad = SBV.replace("\"array\"", "\"ring\"");
    let e = parse_file("t.toml", &bad).unwrap_err();
    assert_eq!(e.line, 6, "{e}");
    assert!(e.to_string().starts_with("t.toml:6: unknown layout"), "{e}");
}

const SWISS: &str = r#"
[[container]]
name = "t::Table"
elem = "pointee:slots_"
layout = "control_bytes"

[container.control_bytes]
ctrl = "load(this, 8)"
slots = "load(this + 8, 8)"
capacity = "load(this + 24, 8)"
full = "c < 0x80"
ctrl_at = "ctrl + i / 15 * 16 + i % 15"
len = "load(this + 16, 8)"
heap = "capacity * 17"
"#;

#[test]
fn reads_control_bytes() {
    let d = parse_file("s.toml", SWISS).expect("parses");
    let Layout::Array(a) = &d[0].layout;
    let sw = a.swiss.as_ref().expect("control_bytes");
    assert_eq!((sw.full.line, a.heap.line), (11, 14));
    assert!(sw.ctrl_at.is_some() && a.cap.is_some() && a.inline.is_none());
    assert!(!a.owned, "slots hold the elements unless `owned_slots`");
    let owned = parse_file("s.toml", &format!("{SWISS}owned_slots = true\n")).expect("parses");
    let Layout::Array(a) = &owned[0].layout;
    assert!(a.owned, "node_hash_map: each slot owns its node");
    let head = &SWISS[..SWISS.find("[container.control_bytes]").expect("table")];
    let e = parse_file("s.toml", head).unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    let e = parse_file("s.toml", &SWISS.replace("full = ", "fulll = ")).unwrap_err();
    assert_eq!(e.line, 11, "{e}");
}

const NEW_LAYOUTS: &str = r#"
[[container]]
name = "t::Tagged"
elem = "double"
layout = "tagged_pointer"
[container.tagged_pointer]
pointer = "load(this, 8) & ~3"
owned = "(load(this, 8) & 3) == 2"

[[container]]
name = "t::Chained"
args = ["K", "V"]
elem = "t::Pair<{K}, {V}>"
layout = "node_chains"
[container.node_chains]
buckets = "load(this, 8)"
bucket_count = "load(this + 8, 8)"
next_offset = "sizeof(K) + sizeof(V)"
value_offset = "0"
node_size = "sizeof(K) + sizeof(V) + 8"
len = "load(this + 16, 8)"
heap = "0"

[[owned]]
in = "*::Impl_"
pointee_base = "t::Base"
"#;

#[test]
fn reads_tagged_pointers_node_chains_and_owned_rules() {
    let f = parse("n.toml", NEW_LAYOUTS).expect("parses");
    assert_eq!(f.containers.len(), 2);
    let Layout::Array(t) = &f.containers[0].layout;
    // An array of at most one element: len is `owned && pointer != 0`.
    assert_eq!((t.data.line, t.len.line), (7, 8));
    assert!(t.chains.is_none() && t.swiss.is_none());
    let mut names = Vec::new();
    t.heap.v.type_names(&mut names);
    assert_eq!(names, ["double"]);
    let Layout::Array(c) = &f.containers[1].layout;
    let ch = c.chains.as_ref().expect("node_chains");
    assert_eq!(ch.node_size.line, 20);
    assert_eq!(
        f.containers[1].type_names(),
        ["t::Pair<{K}, {V}>", "K", "V", "K", "V"]
    );
    assert_eq!(f.owned.len(), 1);
    assert_eq!(
        (f.owned[0].line, f.owned[0].holder.as_str()),
        (25, "*::Impl_")
    );
    // A tagged pointer needs its target type.
    let e = parse("n.toml", &NEW_LAYOUTS.replace("elem = \"double\"\n", "")).unwrap_err();
    assert_eq!(e.line, 4, "{e}");
    let e = parse(
        "n.toml",
        &NEW_LAYOUTS.replace("node_size = ", "nodesize = "),
    )
    .unwrap_err();
    assert_eq!(e.line, 20, "{e}");
}

/// `[container.node_chains.tree]`: four expressions with their lines, in the type names
/// the description mentions; a misspelt key is an error at its line.
#[test]
fn reads_the_trees_of_node_chains() {
    let tree = "heap = \"0\"\n[container.node_chains.tree]\nsize = \"sizeof(V)\"\nroot = \"24\"\nnode_size = \"48\"\nchain = \"40\"\n";
    let text = NEW_LAYOUTS.replacen("heap = \"0\"\n", tree, 1);
    let f = parse("n.toml", &text).expect("parses");
    let Layout::Array(c) = &f.containers[1].layout;
    let t = c
        .chains
        .as_ref()
        .and_then(|ch| ch.tree.as_ref())
        .expect("tree");
    assert_eq!(
        (t.size.line, t.root.line, t.node_size.line, t.chain.line),
        (24, 25, 26, 27)
    );
    assert_eq!(
        f.containers[1].type_names(),
        ["t::Pair<{K}, {V}>", "K", "V", "K", "V", "V"]
    );
    let Layout::Array(plain) = &parse("n.toml", NEW_LAYOUTS).expect("parses").containers[1].layout;
    assert!(plain.chains.as_ref().is_some_and(|ch| ch.tree.is_none()));
    let e = parse("n.toml", &text.replace("chain = ", "chian = ")).unwrap_err();
    assert_eq!(e.line, 27, "{e}");
}

const BTREE: &str = r#"
[[container]]
name = "t::Tree"
args = ["K"]
elem = "K"
layout = "btree"
[container.btree]
root = "load(this, 8)"
len = "load(this + 16, 8)"
start = "load(node + 9, 1)"
finish = "load(node + 10, 1)"
leaf = "load(node + 11, 1) != 0"
values_offset = "align(12, elem_align)"
node_slots = "(256 - values_offset) / elem_size"
children_offset = "align(values_offset + node_slots * elem_size, 8)"
node_size = "children_offset"
"#;

#[test]
fn reads_a_btree() {
    let d = parse_file("b.toml", BTREE).expect("parses");
    let Layout::Array(a) = &d[0].layout;
    let b = a.btree.as_ref().expect("btree");
    assert_eq!((a.data.line, b.leaf.line, b.node_size.line), (8, 12, 16));
    assert!(a.swiss.is_none() && a.chains.is_none() && !a.owned);
    let head = &BTREE[..BTREE.find("[container.btree]").expect("table")];
    let e = parse_file("b.toml", head).unwrap_err();
    assert_eq!(e.line, 6, "{e}");
    assert!(e.to_string().contains("[container.btree]"), "{e}");
    let e = parse_file("b.toml", &BTREE.replace("node_slots =", "nodeslots =")).unwrap_err();
    assert_eq!(e.line, 14, "{e}");
    let e = parse_file("b.toml", &BTREE.replace("(256 - values", "(256 - (values")).unwrap_err();
    assert_eq!(e.line, 14, "{e}");
}

#[test]
fn name_patterns() {
    assert!(name_matches("*::Impl_", "oi::fixture::Order::Impl_"));
    assert!(name_matches("*::Impl_", "a::Impl_<int>"));
    assert!(!name_matches("*::Impl_", "Impl_"));
    assert!(!name_matches("*::Impl_", "a::Impl_x"));
    assert!(!name_matches("*::Impl_", "a::B<c::Impl_>"));
    assert!(name_matches("*::Impl_", "a::B<c::Impl_>::Impl_"));
    assert!(name_matches(
        "google::protobuf::Map",
        "google::protobuf::Map<int, int>"
    ));
    assert!(!name_matches(
        "google::protobuf::Map",
        "google::protobuf::MapPair<int, int>"
    ));
}

#[test]
fn shipped_descriptions_parse() {
    let d = Descriptions::load(&[]).expect("shipped files parse");
    for name in [
        "boost::container::vector<int, void, void>",
        "google::protobuf::RepeatedPtrField<std::__cxx11::basic_string<char> >",
        "google::protobuf::RepeatedField<double>",
        "absl::debian3::InlinedVector<int, 4, std::allocator<int> >",
        "absl::debian3::flat_hash_set<long int>",
        "absl::debian3::node_hash_map<long int, long int>",
        "absl::debian3::btree_map<long int, long int>",
    ] {
        let found = d.find(name).unwrap_or_else(|| panic!("no shipped {name}"));
        assert!(found.shipped, "{name} from {}", found.file);
    }
}

/// A `--containers` file is not shipped, even when it overrides a shipped name: a
/// misfit of it stays an error (exit 2), not a warning.
#[test]
fn given_descriptions_are_not_shipped() {
    let text = "[[container]]\nname = \"absl::debian3::InlinedVector\"\nlayout = \"array\"\n\
                [container.array]\ndata = \"0\"\nlen = \"0\"\nheap = \"0\"\n";
    let d = Descriptions::load(&[("mine.toml".into(), text.into())]).expect("parses");
    let found = d
        .find("absl::debian3::InlinedVector<int, 4>")
        .expect("found");
    assert_eq!((found.file.as_str(), found.shipped), ("mine.toml", false));
}
