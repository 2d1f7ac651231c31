//! Unit tests of `symbols`.

use super::*;

#[test]
fn normalize_drops_only_insignificant_spaces() {
    assert_eq!(normalize(" f(int, char const *) "), "f(int,char const*)");
    assert_eq!(normalize("unsigned long"), "unsigned long");
}

#[test]
fn closest_names_by_edit_distance() {
    let names: Vec<String> = [
        "shop::inspect(shop::Ledger const&, long)",
        "shop::Ledger::audit(long) const",
        "shop::price(int)",
        "shop::price(double)",
        "main",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        closest("shop::inspectt", &names, 3),
        ["shop::inspect(shop::Ledger const&, long)"]
    );
    assert_eq!(
        closest("shop::prize", &names, 3),
        ["shop::price(double)", "shop::price(int)"]
    );
    // Every overload, the closest parameter list first.
    assert_eq!(
        closest("shop::price(lnog)", &names, 3),
        ["shop::price(int)", "shop::price(double)"]
    );
    assert!(closest("something::else::entirely", &names, 3).is_empty());
    assert_eq!(edit_distance("kitten", "sitting"), 3);
}

#[test]
fn required_identifier_is_the_function_name() {
    let cases = [
        ("gen::f4999_0", Some("f4999_0")),
        ("shop::Ledger::inspect(int) const", Some("inspect")),
        ("ns::f<a::b<c>>(std::map<int, int>)", Some("f")),
        ("void ns::f<int>[abi:cxx11](int)", Some("f")),
        ("std::vector<int> ns::X::g<int>()", Some("g")),
        ("shop::Ledger::~Ledger()", Some("Ledger")),
        ("(anonymous namespace)::helper(int)", Some("helper")),
        (
            "_ZN4shop6Ledger7inspectEi",
            Some("_ZN4shop6Ledger7inspectEi"),
        ),
        ("std::allocator<char>::allocator()", None),
        ("std::basic_string<char>::~basic_string", None),
        ("shop::Ledger::operator==(shop::Ledger const&)", None),
        ("main::{lambda()#1}::operator()() const", None),
        ("f>(int)", None),
        ("decltype(auto) std::get<0>(std::tuple<int>&)", None),
        ("void (*ns::f<int>(int))(int)", None),
    ];
    for (query, want) in cases {
        assert_eq!(required_identifier(&normalize(query)), want, "{query}");
    }
}

/// Every symbol that matches a query contains the identifier required of it: checked on
/// names that stress the mangling (substitutions, std abbreviations, templates, clones).
#[test]
fn required_identifier_never_rejects_a_match() {
    let names = [
        "_ZN4shop6Ledger7inspectEi",
        "_ZN3gen7f4999_0ERKNS_5T4999E",
        "_ZNSaIcEC2Ev",
        "_ZNSaIcED1Ev",
        "_ZNSsC1ERKSs",
        "_ZNSsD2Ev",
        "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEC2EPKcRKS3_",
        "_ZNSt6vectorIiSaIiEE9push_backERKi",
        "_ZNSt6vectorIiSaIiEEC2ERKS1_",
        "_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE4sizeEv",
        "_ZNSolsEi",
        "_ZNSo5flushEv",
        "_ZNSiD0Ev",
        "_ZNSdC1EPSt15basic_streambufIcSt11char_traitsIcEE",
        "_Z1fIiEvT_",
        "_ZN1A1fIiEEvT_",
        "_ZN2ns1fB5cxx11Ev",
        "_ZZ1gvEN1S1hEv",
        "_ZN12_GLOBAL__N_16helperEi",
        "_ZThn8_N4shop4Dog5speakEv",
        "_ZN4shop6LedgerD2Ev",
        "_Z3fooi.constprop.0",
        "_Z3foov.cold",
        "_ZN4shop6LedgereqERKS0_",
        "_ZZ4mainENKUlvE_clEv",
        "_ZNKSt4hashIiEclEi",
        "_ZNSt8__detail9__variant7__get_nILm1ERNS0_15_Variadic_unionIJiNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEEEEEEDcOT0_",
        "_ZN1A1fIiEEPFviET_",
        "_ZN1A1fIiEEMNS_1BEFivET_",
        "_ZSt4moveIRiEONSt16remove_referenceIT_E4typeEOS2_",
        "work",
        "_GLOBAL__sub_I_main.cpp",
    ];
    for name in names {
        let full = normalize(&demangle(name));
        let bare = demangle_without_params(name).map(|b| normalize(&b));
        for query in [Some(name.to_string()), Some(full), bare]
            .into_iter()
            .flatten()
        {
            assert!(matches(name, &query).is_some(), "{name} vs {query}");
            if let Some(id) = required_identifier(&query) {
                assert!(
                    name.contains(id),
                    "{name} lacks {id:?} required by {query:?}"
                );
            }
        }
    }
}

/// `DBImpl::Write(int)` brings the real `Write` overloads first: the last components
/// rank before the parameter list, and before unrelated names that are merely close.
#[test]
fn suggestions_rank_the_last_components_first() {
    let names: Vec<String> = [
        "leveldb::DBImpl::Write(leveldb::WriteOptions const&, leveldb::WriteBatch*)",
        "leveldb::DBImpl::Write(long)",
        "leveldb::DB::Write(leveldb::WriteOptions const&, leveldb::WriteBatch*)",
        "leveldb::log::Writer::AddRecord(leveldb::Slice const&)",
        "write",
        "leveldb::DBImpl::Get(leveldb::ReadOptions const&)",
        "leveldb::DBImpl::Wait(int)",
        "leveldb::WriteBatch::Put(leveldb::Slice const&, leveldb::Slice const&)",
    ]
    .map(String::from)
    .to_vec();
    // The Write overloads first (the closest parameter list first), then a method of
    // the same class whose name is near; never `write` or another class's Write.
    assert_eq!(
        closest("DBImpl::Write(int)", &names, 4),
        [
            "leveldb::DBImpl::Write(long)",
            "leveldb::DBImpl::Write(leveldb::WriteOptions const&, leveldb::WriteBatch*)",
            "leveldb::DBImpl::Wait(int)",
        ]
    );
}

#[test]
fn names_people_type() {
    let isra = "_ZNK4shop12_GLOBAL__N_16Ledger7inspectEl.isra.0";
    let fit = |name: &str, q: &str| Query::parse(q).fit(name).map(|(f, _)| f);
    // Anonymous namespaces need not be typed; clone annotations never are.
    assert_eq!(fit(isra, "shop::Ledger::inspect"), Some(Fit::Exact));
    assert_eq!(fit(isra, "shop::Ledger::inspect(long)"), Some(Fit::Exact));
    assert_eq!(
        fit(isra, "shop::Ledger::inspect(long) const"),
        Some(Fit::Exact)
    );
    assert_eq!(
        fit(isra, "shop::(anonymous namespace)::Ledger::inspect"),
        Some(Fit::Exact)
    );
    assert_eq!(fit(isra, "shop::Ledger::inspect(int)"), None);
    assert_eq!(fit(isra, "shop::Ledger::inspect(long) volatile"), None);
    // A unique suffix of the qualified name, at a `::`.
    assert_eq!(fit(isra, "Ledger::inspect"), Some(Fit::Suffix));
    assert_eq!(fit(isra, "inspect"), Some(Fit::Suffix));
    assert_eq!(fit(isra, "dger::inspect"), None);
    // The mangled name of the function names its clones too.
    assert_eq!(
        fit(isra, "_ZNK4shop12_GLOBAL__N_16Ledger7inspectEl"),
        Some(Fit::Exact)
    );
    // `const T&` is `T const&`; `std::string` is its basic_string.
    let write = "_ZN4shop4Book5writeERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE";
    for q in [
        "shop::Book::write(const std::string&)",
        "shop::Book::write(std::string const &)",
        "Book::write(const std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >&)",
    ] {
        assert!(fit(write, q).is_some(), "{q}");
    }
    assert_eq!(fit(write, "shop::Book::write(std::string)"), None);
    let ptr = "_Z4showPKcRKSt6vectorIiSaIiEE";
    assert!(
        fit(
            ptr,
            "show(const char*, const std::vector<int, std::allocator<int> >&)"
        )
        .is_some()
    );
    // Class templates without their arguments, inline namespaces left out.
    let push = "_ZN8nlohmann16json_abi_v3_11_210basic_jsonISt3mapSt6vectorNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEblmdSaNS0_14adl_serializerES3_IhSaIhEEvE9push_backEOSD_";
    assert_eq!(fit(push, "basic_json::push_back"), Some(Fit::Suffix));
    assert_eq!(
        fit(push, "nlohmann::basic_json::push_back"),
        Some(Fit::Suffix)
    );
    assert_eq!(
        fit(push, "nlohmann::json_abi_v3_11_2::basic_json::push_back"),
        Some(Fit::Exact)
    );
    assert_eq!(fit(push, "nlohmann::push_back"), None);
    assert_eq!(fit(push, "json::push_back"), None);
    assert_eq!(
        without_template_args("a::b<c::d<e>>::operator<<"),
        "a::b::operator<<"
    );
    assert_eq!(base_name(isra), "_ZNK4shop12_GLOBAL__N_16Ledger7inspectEl");
    assert_eq!(clone_suffix(isra), Some("isra.0"));
    assert_eq!(clone_suffix("_Z1fv"), None);
    assert_eq!(
        split_function_name("void ns::f<unsigned int>(int, char) const [clone .isra.0]"),
        (
            "ns::f<unsigned int>".into(),
            Some("int, char".into()),
            Some("const".into())
        )
    );
    assert_eq!(
        split_function_name("ns::X::operator()(int)"),
        (
            "ns::X::operator()".into(),
            Some("int".into()),
            Some(String::new())
        )
    );
    assert_eq!(
        split_function_name("main::{lambda()#1}::operator()() const"),
        (
            "main::{lambda()#1}::operator()".into(),
            Some(String::new()),
            Some("const".into())
        )
    );
}

#[test]
fn matches_mangled_demangled_and_bare() {
    let m = "_ZN4shop6Ledger7inspectEi";
    assert_eq!(matches(m, m).as_deref(), Some("shop::Ledger::inspect(int)"));
    assert!(matches(m, &normalize("shop::Ledger::inspect(int)")).is_some());
    assert!(matches(m, "shop::Ledger::inspect").is_some());
    assert!(matches(m, "shop::Ledger::insp").is_none());
    assert!(matches("work", "work").is_some());
}

#[test]
fn variables_match_without_abi_tags_and_never_as_compiler_objects() {
    assert_eq!(without_abi_tags("shop::tagged[abi:cxx11]"), "shop::tagged");
    assert_eq!(without_abi_tags("f[abi:cxx11]()::x[abi:cxx11]"), "f()::x");
    assert_eq!(without_abi_tags("broken[abi:"), "broken[abi:");
    for special in [
        "_ZTV4Shop",
        "_ZTI4Shop",
        "_ZTS4Shop",
        "_ZGVZ4mainE1x",
        "_ZTH1x",
    ] {
        assert!(is_special_object(special), "{special}");
    }
    assert!(!is_special_object("_ZN4shop6taggedB5cxx11E"));
    assert!(!is_special_object("registry"));
}
