use super::*;

/// g++ 12's DWARF names of every libstdc++ container oi-trace recognises, and of the
/// standard classes around them (collected from a -g build), with what people write.
const GXX: &[(&str, &str)] = &[
    (
        "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >",
        "std::string",
    ),
    (
        "std::__cxx11::basic_string<wchar_t, std::char_traits<wchar_t>, std::allocator<wchar_t> >",
        "std::wstring",
    ),
    (
        "std::__cxx11::basic_string<char16_t, std::char_traits<char16_t>, std::allocator<char16_t> >",
        "std::u16string",
    ),
    (
        "std::__cxx11::basic_string<char32_t, std::char_traits<char32_t>, std::allocator<char32_t> >",
        "std::u32string",
    ),
    (
        "std::__cxx11::basic_string<char8_t, std::char_traits<char8_t>, std::allocator<char8_t> >",
        "std::u8string",
    ),
    (
        "std::basic_string_view<char, std::char_traits<char> >",
        "std::string_view",
    ),
    (
        "std::vector<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, std::allocator<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > >",
        "std::vector<std::string>",
    ),
    (
        "std::vector<long unsigned int, std::allocator<long unsigned int> >",
        "std::vector<unsigned long>",
    ),
    (
        "std::vector<bool, std::allocator<bool> >",
        "std::vector<bool>",
    ),
    (
        "std::__cxx11::list<int, std::allocator<int> >",
        "std::list<int>",
    ),
    (
        "std::deque<short int, std::allocator<short int> >",
        "std::deque<short>",
    ),
    (
        "std::set<long int, std::less<long int>, std::allocator<long int> >",
        "std::set<long>",
    ),
    (
        "std::multiset<unsigned int, std::less<unsigned int>, std::allocator<unsigned int> >",
        "std::multiset<unsigned int>",
    ),
    (
        "std::set<int, std::greater<int>, std::allocator<int> >",
        "std::set<int, std::greater<int>>",
    ),
    (
        "std::map<int, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, std::less<int>, std::allocator<std::pair<int const, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > > >",
        "std::map<int, std::string>",
    ),
    (
        "std::multimap<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, double, std::less<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >, std::allocator<std::pair<const std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, double> > >",
        "std::multimap<std::string, double>",
    ),
    (
        "std::map<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, int, std::less<void>, std::allocator<std::pair<const std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, int> > >",
        "std::map<std::string, int, std::less<void>>",
    ),
    (
        "std::unordered_map<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, std::vector<int, std::allocator<int> >, std::hash<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >, std::equal_to<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >, std::allocator<std::pair<const std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, std::vector<int, std::allocator<int> > > > >",
        "std::unordered_map<std::string, std::vector<int>>",
    ),
    (
        "std::unordered_multimap<int, int, std::hash<int>, std::equal_to<int>, std::allocator<std::pair<int const, int> > >",
        "std::unordered_multimap<int, int>",
    ),
    (
        "std::unordered_set<long long int, std::hash<long long int>, std::equal_to<long long int>, std::allocator<long long int> >",
        "std::unordered_set<long long>",
    ),
    (
        "std::unordered_multiset<char, std::hash<char>, std::equal_to<char>, std::allocator<char> >",
        "std::unordered_multiset<char>",
    ),
    ("std::pair<int, char const*>", "std::pair<int, const char*>"),
    ("std::array<int, 3>", "std::array<int, 3>"),
    (
        "std::optional<long long unsigned int>",
        "std::optional<unsigned long long>",
    ),
    (
        "std::variant<int, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >",
        "std::variant<int, std::string>",
    ),
    (
        "std::unique_ptr<Node, std::default_delete<Node> >",
        "std::unique_ptr<Node>",
    ),
    (
        "std::unique_ptr<int [], std::default_delete<int []> >",
        "std::unique_ptr<int[]>",
    ),
    ("std::shared_ptr<Node>", "std::shared_ptr<Node>"),
    ("std::weak_ptr<Node>", "std::weak_ptr<Node>"),
    (
        "std::reference_wrapper<Node>",
        "std::reference_wrapper<Node>",
    ),
    (
        "std::stack<int, std::deque<int, std::allocator<int> > >",
        "std::stack<int>",
    ),
    (
        "std::queue<int, std::deque<int, std::allocator<int> > >",
        "std::queue<int>",
    ),
    (
        "std::priority_queue<int, std::vector<int, std::allocator<int> >, std::less<int> >",
        "std::priority_queue<int>",
    ),
    (
        "std::tuple<int, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >",
        "std::tuple<int, std::string>",
    ),
    (
        "std::forward_list<int, std::allocator<int> >",
        "std::forward_list<int>",
    ),
    ("std::function<int(int)>", "std::function<int(int)>"),
];

#[test]
fn gxx_spellings_of_every_container() {
    for (gxx, want) in GXX {
        assert_eq!(normalise(gxx), *want, "{gxx}");
    }
}

#[test]
fn base_types_and_declarators() {
    assert_eq!(normalise("long unsigned int"), "unsigned long");
    assert_eq!(normalise("short int const"), "const short");
    assert_eq!(normalise("char const*"), "const char*");
    assert_eq!(normalise("char* const"), "char* const");
    assert_eq!(normalise("long volatile"), "volatile long");
    assert_eq!(normalise("int const volatile*"), "const volatile int*");
    assert_eq!(normalise("std::string&&"), "std::string&&");
    assert_eq!(
        normalise("Tagged<char const*, std::string const&, long volatile>"),
        "Tagged<const char*, const std::string&, volatile long>"
    );
    assert_eq!(normalise("int [2][3]"), "int[2][3]");
    assert_eq!(normalise("leveldb::MemTable*"), "leveldb::MemTable*");
    assert_eq!(
        normalise("(anonymous namespace)::Cache<int>"),
        "(anonymous namespace)::Cache<int>"
    );
    assert_eq!(
        normalise("std::vector<int, std::allocator<int> >::iterator"),
        "std::vector<int>::iterator"
    );
    assert_eq!(normalise("Holder<true, 3>"), "Holder<true, 3>");
    // clang's integer suffixes go.
    assert_eq!(normalise("std::__1::array<int, 3UL>"), "std::array<int, 3>");
    assert_eq!(normalise("Holder<-2L, 0x10UL>"), "Holder<-2, 0x10UL>");
    assert_eq!(normalise("std::less<>"), "std::less<>");
    // A non-default allocator stays.
    assert_eq!(
        normalise("std::vector<int, MyAlloc<int> >"),
        "std::vector<int, MyAlloc<int>>"
    );
    // Only trailing defaults go: a custom comparator keeps the allocator's place empty.
    assert_eq!(
        normalise("std::map<int, int, MyLess, std::allocator<std::pair<int const, int> > >"),
        "std::map<int, int, MyLess>"
    );
}

#[test]
fn damaged_names_are_kept_verbatim() {
    assert_eq!(normalise("std::vector<int"), "std::vector<int");
    assert_eq!(normalise(""), "");
    let deep = "A<".repeat(100) + &">".repeat(100);
    assert!(!normalise(&deep).is_empty());
}
