//! Which standard-library container a type is: [`ContainerKind`] and its recognition by the
//! qualified DWARF name (docs/semantics.md, "Type names"): the name itself or the name followed by `<`.
//! Decided while the type graph is built; never looks at a layout (`containers` does).
//! [`unknown_standard`] names what is *not* recognised yet looks like a standard container: a
//! container of a standard library oi-trace does not know (libc++'s `std::__1::vector`,
//! libstdc++'s old-ABI `std::basic_string`), which is never walked as a plain struct.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainerKind {
    Vector,
    String,
    List,
    /// A singly linked list (libc++'s `forward_list`; libstdc++'s under real sizes only,
    /// by `plan::build`, as OI's rules measure it as an ordinary class).
    ForwardList,
    Deque,
    Set,
    MultiSet,
    Map,
    MultiMap,
    UnorderedSet,
    UnorderedMultiSet,
    UnorderedMap,
    UnorderedMultiMap,
    Pair,
    Array,
    Optional,
    Variant,
    UniquePtr,
    SharedPtr,
    WeakPtr,
    ReferenceWrapper,
    Stack,
    Queue,
    PriorityQueue,
}

const NAMES: &[(&str, ContainerKind)] = &[
    ("std::vector", ContainerKind::Vector),
    ("std::__cxx11::basic_string", ContainerKind::String),
    ("std::__cxx11::list", ContainerKind::List),
    // libc++ (LLVM 14): what the built-in walkers take with another field's name (list,
    // pair, map, set, shared_ptr, weak_ptr, deque, variant, forward_list; vector<bool> in
    // `recognise`); its other containers are described in containers/libcxx.toml.
    ("std::__1::list", ContainerKind::List),
    ("std::__1::forward_list", ContainerKind::ForwardList),
    ("std::__1::deque", ContainerKind::Deque),
    ("std::__1::variant", ContainerKind::Variant),
    ("std::__1::pair", ContainerKind::Pair),
    ("std::__1::map", ContainerKind::Map),
    ("std::__1::multimap", ContainerKind::MultiMap),
    ("std::__1::set", ContainerKind::Set),
    ("std::__1::multiset", ContainerKind::MultiSet),
    ("std::__1::shared_ptr", ContainerKind::SharedPtr),
    ("std::__1::weak_ptr", ContainerKind::WeakPtr),
    ("std::deque", ContainerKind::Deque),
    ("std::set", ContainerKind::Set),
    ("std::multiset", ContainerKind::MultiSet),
    ("std::map", ContainerKind::Map),
    ("std::multimap", ContainerKind::MultiMap),
    ("std::unordered_set", ContainerKind::UnorderedSet),
    ("std::unordered_multiset", ContainerKind::UnorderedMultiSet),
    ("std::unordered_map", ContainerKind::UnorderedMap),
    ("std::unordered_multimap", ContainerKind::UnorderedMultiMap),
    ("std::pair", ContainerKind::Pair),
    ("std::array", ContainerKind::Array),
    ("std::optional", ContainerKind::Optional),
    ("std::variant", ContainerKind::Variant),
    ("std::unique_ptr", ContainerKind::UniquePtr),
    ("std::shared_ptr", ContainerKind::SharedPtr),
    ("std::weak_ptr", ContainerKind::WeakPtr),
    ("std::reference_wrapper", ContainerKind::ReferenceWrapper),
    ("std::stack", ContainerKind::Stack),
    ("std::queue", ContainerKind::Queue),
    ("std::priority_queue", ContainerKind::PriorityQueue),
];

/// The container a qualified DWARF type name denotes, if any. libc++'s `vector<bool>` is the
/// built-in bit vector (its `vector<T>` is described in containers/libcxx.toml, whose
/// `array` layout cannot say that elements are bits).
pub fn recognise(qualified: &str) -> Option<ContainerKind> {
    if qualified.starts_with("std::__1::vector<bool,") || qualified == "std::__1::vector<bool>" {
        return Some(ContainerKind::Vector);
    }
    NAMES.iter().find_map(|(n, k)| {
        let rest = qualified.strip_prefix(n)?;
        (rest.is_empty() || rest.starts_with('<')).then_some(*k)
    })
}

/// Container families of the C++ standard library, by their unqualified template name: the
/// recognised ones' and those libstdc++ lays out as ordinary classes (`forward_list`, `tuple`).
const FAMILIES: &[&str] = &[
    "vector",
    "basic_string",
    "list",
    "forward_list",
    "deque",
    "set",
    "multiset",
    "map",
    "multimap",
    "unordered_set",
    "unordered_multiset",
    "unordered_map",
    "unordered_multimap",
    "pair",
    "tuple",
    "array",
    "optional",
    "variant",
    "unique_ptr",
    "shared_ptr",
    "weak_ptr",
    "reference_wrapper",
    "stack",
    "queue",
    "priority_queue",
];

/// Whether a qualified DWARF name that [`recognise`] does not know is a standard container of
/// a library whose layout oi-trace does not know: `std::`, then inline namespaces (`__1`,
/// `__ndk1`, `__debug`: every component starting with `__`), then a container family's name,
/// alone or followed by `<`. Under libstdc++'s own namespaces (`std::`, `std::__cxx11::`)
/// only the families [`recognise`] knows count: `forward_list` and `tuple` are ordinary
/// classes there (docs/semantics.md, "Type names"), and an old-ABI `std::list` or
/// `std::basic_string` is not a layout oi-trace knows.
pub fn unknown_standard(qualified: &str) -> bool {
    if recognise(qualified).is_some() {
        return false;
    }
    let head = qualified.split('<').next().unwrap_or(qualified);
    let mut parts = head.split("::");
    if parts.next() != Some("std") {
        return false;
    }
    let parts: Vec<&str> = parts.collect();
    let Some((family, inline)) = parts.split_last() else {
        return false;
    };
    if !inline.iter().all(|p| p.starts_with("__")) || !FAMILIES.contains(family) {
        return false;
    }
    let libstdcxx = inline.iter().all(|p| *p == "__cxx11");
    // libc++'s tuple is an ordinary class too: leaves holding `__value_`, first element first.
    let libcxx_tuple = inline == ["__1"] && *family == "tuple";
    !libcxx_tuple && (!libstdcxx || !matches!(*family, "forward_list" | "tuple"))
}

impl ContainerKind {
    /// How many leading template type arguments are measured (and therefore spelled by the
    /// full rules rather than by their bare name). `None`: all of them (variant).
    pub fn measured_args(self) -> Option<usize> {
        use ContainerKind::*;
        Some(match self {
            Vector | List | ForwardList | Deque | Set | MultiSet | UnorderedSet
            | UnorderedMultiSet | Optional | UniquePtr | SharedPtr | WeakPtr | ReferenceWrapper
            | Array => 1,
            String => 1,
            Map | MultiMap | UnorderedMap | UnorderedMultiMap | Pair => 2,
            // The element and the underlying container; priority_queue's comparator is not.
            Stack | Queue | PriorityQueue => 2,
            Variant => return None,
        })
    }

    /// Whether the node shows `pointer` (docs/semantics.md, "Kind by kind").
    pub fn is_map(self) -> bool {
        matches!(
            self,
            ContainerKind::Map
                | ContainerKind::MultiMap
                | ContainerKind::UnorderedMap
                | ContainerKind::UnorderedMultiMap
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognition_is_by_exact_qualified_prefix() {
        assert_eq!(
            recognise("std::vector<int, std::allocator<int> >"),
            Some(ContainerKind::Vector)
        );
        assert_eq!(recognise("std::vector"), Some(ContainerKind::Vector));
        assert_eq!(recognise("std::vectorx<int>"), None);
        assert_eq!(recognise("std::_Vector_base<int>"), None);
        assert_eq!(recognise("std::map<int, int>"), Some(ContainerKind::Map));
        assert_eq!(
            recognise("std::multimap<int, int>"),
            Some(ContainerKind::MultiMap)
        );
        assert_eq!(recognise("std::tuple<int>"), None);
        assert_eq!(
            recognise(
                "std::priority_queue<int, std::vector<int, std::allocator<int> >, std::less<int> >"
            ),
            Some(ContainerKind::PriorityQueue)
        );
        assert_eq!(recognise("std::stacked<int>"), None);
    }

    #[test]
    fn unknown_standard_containers_are_named_by_family_under_inline_namespaces() {
        assert!(unknown_standard(
            "std::__1::vector<int, std::__1::allocator<int> >"
        ));
        assert!(unknown_standard("std::__ndk1::basic_string<char>"));
        assert!(unknown_standard("std::__ndk1::forward_list<int>"));
        assert!(!unknown_standard("std::__1::forward_list<int>"));
        assert!(!unknown_standard("std::__1::tuple<int, long>"));
        assert!(unknown_standard("std::__ndk1::tuple<int, long>"));
        assert_eq!(
            recognise("std::__1::vector<bool, std::__1::allocator<bool> >"),
            Some(ContainerKind::Vector)
        );
        assert_eq!(recognise("std::__1::vector<int>"), None);
        assert!(unknown_standard("std::__debug::map<int, int>"));
        assert!(unknown_standard("std::basic_string<char>"));
        assert!(unknown_standard("std::list<int>"));
        assert!(!unknown_standard("std::vector<int>"));
        assert!(!unknown_standard("std::forward_list<int>"));
        assert!(!unknown_standard("std::tuple<int, long>"));
        assert!(!unknown_standard("std::__1::__tree<int>"));
        assert!(!unknown_standard("std::__1::vector_base<int>"));
        assert!(!unknown_standard("std::_Vector_base<int>"));
        assert!(!unknown_standard("ns::vector<int>"));
        assert!(!unknown_standard("std::__detail::_Hash_node<int, false>"));
    }
}
