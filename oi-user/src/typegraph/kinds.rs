//! Which standard-library container a type is: [`ContainerKind`] and its recognition by the
//! qualified DWARF name (docs/semantics.md, "Type names"): the name itself or the name followed by `<`.
//! Decided while the type graph is built; never looks at a layout (`containers` does).

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainerKind {
    Vector,
    String,
    List,
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

/// The container a qualified DWARF type name denotes, if any.
pub fn recognise(qualified: &str) -> Option<ContainerKind> {
    NAMES.iter().find_map(|(n, k)| {
        let rest = qualified.strip_prefix(n)?;
        (rest.is_empty() || rest.starts_with('<')).then_some(*k)
    })
}

impl ContainerKind {
    /// How many leading template type arguments are measured (and therefore spelled by the
    /// full rules rather than by their bare name). `None`: all of them (variant).
    pub fn measured_args(self) -> Option<usize> {
        use ContainerKind::*;
        Some(match self {
            Vector | List | Deque | Set | MultiSet | UnorderedSet | UnorderedMultiSet
            | Optional | UniquePtr | SharedPtr | WeakPtr | ReferenceWrapper | Array => 1,
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
}
