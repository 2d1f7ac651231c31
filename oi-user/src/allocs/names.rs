//! What an allocating stack's names say: which frames are the allocator's own (left out of a
//! site's stack), which C++ type is allocated (from the allocator frames the standard library
//! inlines or calls: `std::__new_allocator<T>::allocate`, `allocator_traits<allocator<T>>`,
//! `_Rb_tree<K, V, …>::_M_get_node`, `make_shared<T>`, `_Sp_counted_ptr_inplace<T, …>`), and
//! which class a method belongs to.
//!
//! Pure: demangled names in, names out. The type is the innermost such frame's template
//! argument, unwrapped from the node types of the standard containers (`_Rb_tree_node<V>`,
//! `_Hash_node<V, …>`, `_List_node<V>`), so a map's nodes are its value type; `None` where no
//! frame says it (a plain `new T` calls `operator new` from the caller's own code).

/// Whether `function` (demangled, without parameters) is an allocator's own frame: the entry
/// points themselves and what glibc, libstdc++, libc++, jemalloc or tcmalloc call them through.
pub fn is_allocator_frame(function: &str) -> bool {
    let f = function.trim();
    f.starts_with("operator new")
        || f.starts_with("operator delete")
        || matches!(
            f,
            "malloc"
                | "calloc"
                | "realloc"
                | "reallocarray"
                | "free"
                | "posix_memalign"
                | "aligned_alloc"
                | "memalign"
                | "valloc"
                | "pvalloc"
                | "__libc_malloc"
                | "__libc_calloc"
                | "__libc_realloc"
                | "__libc_memalign"
                | "__libc_free"
                | "_mid_memalign"
                | "mallocx"
                | "rallocx"
                | "sdallocx"
                | "dallocx"
        )
        || f.starts_with("je_")
        || f.starts_with("tc_")
        || f.starts_with("tcmalloc::")
        // libc++'s own calls of `operator new`, inlined at -O2 and frames at -O0.
        || f.starts_with("std::__1::__libcpp_operator_new")
        || f.starts_with("std::__1::__libcpp_allocate")
}

/// The type an allocator frame allocates, if `function` is one.
pub fn allocated_type(function: &str) -> Option<String> {
    const FIRST_ARGUMENT: [&str; 8] = [
        "__new_allocator<",
        "new_allocator<",
        "allocator_traits<std::allocator<",
        // libc++: `std::__1::allocator<T>::allocate` (and its `allocator_traits`).
        "std::__1::allocator<",
        "make_shared<",
        "__allocate_shared<",
        "_Sp_counted_ptr_inplace<",
        "__shared_ptr_emplace<",
    ];
    for marker in FIRST_ARGUMENT {
        if let Some(at) = function.find(marker) {
            // `std::__new_allocator<T>::allocate`, never the allocator's other methods.
            if marker.contains("allocator<") && !function.ends_with("::allocate") {
                continue;
            }
            let args = template_arguments(&function[at + marker.len() - 1..])?;
            return Some(unwrap_node(args.first()?));
        }
    }
    if let Some(at) = function.find("_Rb_tree<")
        && function.ends_with("::_M_get_node")
    {
        let args = template_arguments(&function[at + "_Rb_tree".len()..])?;
        return Some(args.get(1)?.clone());
    }
    None
}

/// The type of the block an allocating stack (innermost frame first, the allocator's own
/// frames left out) allocates: the innermost frame [`allocated_type`] names, except that a
/// string's buffer is its string type (`std::string`), never its characters. A string's
/// members live in the compiled standard library (`_M_create`, `_M_construct`, `reserve`, …,
/// without debug information there), so for most string buffers the string's own frame is
/// the only one that says anything; where the allocator's frames are inlined into the
/// program they say `char`, and the string's frame further out says more.
pub fn stack_type<S: AsRef<str>>(frames: &[S]) -> Option<String> {
    let mut characters = None;
    for frame in frames {
        let frame = frame.as_ref();
        if let Some(string) = string_of(frame) {
            return Some(string);
        }
        if characters.is_none()
            && let Some(ty) = allocated_type(frame)
        {
            if !is_character(&ty) {
                return Some(ty);
            }
            characters = Some(ty);
        }
    }
    characters
}

/// The readable string type whose member `function` is (`std::__cxx11::basic_string<char,
/// std::char_traits<char>, std::allocator<char> >::_M_create` → `std::string`).
fn string_of(function: &str) -> Option<String> {
    let class = qualifier(function)?;
    let plain = class
        .strip_prefix("std::__cxx11::")
        .or_else(|| class.strip_prefix("std::__1::"))
        .or_else(|| class.strip_prefix("std::"))?;
    plain
        .starts_with("basic_string<")
        .then(|| crate::typegraph::readable::normalise(class))
}

fn is_character(ty: &str) -> bool {
    matches!(ty, "char" | "wchar_t" | "char8_t" | "char16_t" | "char32_t")
}

/// The container node types wrap the value type: `_Rb_tree_node<V>` → V (libstdc++), and
/// libc++'s `__tree_node<V, void*>` → V, whose maps' V is `__value_type<K, M>`
/// (`__hash_value_type` in the unordered ones): a wrapper of `std::pair<const K, M>`, which
/// is what is named, as libstdc++'s map nodes are.
fn unwrap_node(ty: &str) -> String {
    for node in [
        "_Rb_tree_node<",
        "_Hash_node<",
        "_List_node<",
        "_Fwd_list_node<",
        "__tree_node<",
        "__hash_node<",
        "__list_node<",
        "__forward_list_node<",
    ] {
        if let Some(at) = ty.find(node)
            && let Some(args) = template_arguments(&ty[at + node.len() - 1..])
            && let Some(first) = args.first()
        {
            return libcxx_map_value(first).unwrap_or_else(|| first.clone());
        }
    }
    // make_shared's control block: `_Sp_counted_ptr_inplace<T, …>`.
    if let Some(at) = ty.find("_Sp_counted_ptr_inplace<")
        && let Some(args) = template_arguments(&ty[at + "_Sp_counted_ptr_inplace".len()..])
        && let Some(first) = args.first()
    {
        return first.clone();
    }
    ty.to_string()
}

/// libc++'s map value wrapper `std::__1::__value_type<K, M>` (or `__hash_value_type`) as the
/// pair it holds, spelled as g++'s DWARF spells libstdc++'s: `std::pair<K const, M>`.
fn libcxx_map_value(ty: &str) -> Option<String> {
    let inner = ty
        .strip_prefix("std::__1::__value_type")
        .or_else(|| ty.strip_prefix("std::__1::__hash_value_type"))?;
    match template_arguments(inner)?.as_slice() {
        [key, mapped] => Some(format!("std::pair<{key} const, {mapped}>")),
        _ => None,
    }
}

/// The top-level template arguments of `s`, which starts with `<`.
fn template_arguments(s: &str) -> Option<Vec<String>> {
    let mut depth = 0usize;
    let mut args = Vec::new();
    let mut current = String::new();
    for c in s.chars() {
        match c {
            '<' | '(' => {
                depth += 1;
                if depth == 1 && c == '<' {
                    continue;
                }
            }
            '>' | ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    args.push(current.trim().to_string());
                    return Some(args);
                }
            }
            ',' if depth == 1 => {
                args.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    None
}

/// `ns::Class::method` → `ns::Class` (the qualifier at top level: `::` inside template
/// arguments does not count); `None` for an unqualified name.
pub fn qualifier(function: &str) -> Option<&str> {
    let at = crate::cpp_name::rfind(function, "::")?;
    let q = &function[..at];
    // `(anonymous namespace)::f` and lambdas' `{lambda()#1}` have no class to name.
    (!q.is_empty() && !q.ends_with(')')).then_some(q)
}

/// Whether a qualifier is certainly a class by its spelling: its last component has template
/// arguments (a namespace cannot).
pub fn is_template_class(qualifier: &str) -> bool {
    qualifier.ends_with('>')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_of_allocator_frames() {
        assert_eq!(
            allocated_type("std::__new_allocator<shop::Item>::allocate").as_deref(),
            Some("shop::Item")
        );
        assert_eq!(
            allocated_type(
                "std::__new_allocator<std::_Rb_tree_node<std::pair<int const, shop::Item> > >::allocate"
            )
            .as_deref(),
            Some("std::pair<int const, shop::Item>")
        );
        assert_eq!(
            allocated_type(
                "std::allocator_traits<std::allocator<std::pair<int, long> > >::allocate"
            )
            .as_deref(),
            Some("std::pair<int, long>")
        );
        assert_eq!(
            allocated_type(
                "std::_Rb_tree<int, std::pair<int const, shop::Item>, std::_Select1st<std::pair<int const, shop::Item> >, std::less<int>, std::allocator<std::pair<int const, shop::Item> > >::_M_get_node"
            )
            .as_deref(),
            Some("std::pair<int const, shop::Item>")
        );
        assert_eq!(
            allocated_type("std::make_shared<shop::Widget, int&>").as_deref(),
            Some("shop::Widget")
        );
        assert_eq!(
            allocated_type("std::__new_allocator<shop::Item>::deallocate"),
            None
        );
        assert_eq!(allocated_type("shop::Factory::make"), None);
    }

    #[test]
    fn types_of_libcxx_allocator_frames() {
        assert_eq!(
            allocated_type("std::__1::allocator<shop::Item>::allocate").as_deref(),
            Some("shop::Item")
        );
        assert_eq!(
            allocated_type(
                "std::__1::allocator<std::__1::__tree_node<std::__1::__value_type<int, \
                 shop::Item>, void*> >::allocate"
            )
            .as_deref(),
            Some("std::pair<int const, shop::Item>")
        );
        assert_eq!(
            allocated_type(
                "std::__1::allocator<std::__1::__hash_node<std::__1::__hash_value_type<long, \
                 double>, void*> >::allocate"
            )
            .as_deref(),
            Some("std::pair<long const, double>")
        );
        assert_eq!(
            allocated_type("std::__1::allocator<std::__1::__list_node<double, void*> >::allocate")
                .as_deref(),
            Some("double")
        );
        assert_eq!(
            allocated_type("std::__1::allocator<shop::Item>::deallocate"),
            None
        );
    }

    #[test]
    fn string_buffers_are_strings() {
        const CREATE: &str = "std::__cxx11::basic_string<char, std::char_traits<char>, \
                              std::allocator<char> >::_M_create";
        // libstdc++'s own frame, no inlined allocator frames (the compiled library).
        assert_eq!(
            stack_type(&[CREATE, "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_construct", "shop::name_items"]).as_deref(),
            Some("std::string")
        );
        // The allocator inlined into the program says `char`; the string says more.
        assert_eq!(
            stack_type(&["std::__new_allocator<char>::allocate", CREATE, "f"]).as_deref(),
            Some("std::string")
        );
        assert_eq!(
            stack_type(&["std::__1::basic_string<wchar_t, std::__1::char_traits<wchar_t>, std::__1::allocator<wchar_t> >::__init", "f"]).as_deref(),
            Some("std::wstring")
        );
        // Characters with no string around them stay characters; other types are untouched.
        assert_eq!(
            stack_type(&["std::__new_allocator<char>::allocate", "f"]).as_deref(),
            Some("char")
        );
        assert_eq!(
            stack_type(&["std::__new_allocator<shop::Item>::allocate", CREATE]).as_deref(),
            Some("shop::Item")
        );
        assert_eq!(stack_type(&["shop::Factory::make"]), None);
    }

    #[test]
    fn qualifiers() {
        assert_eq!(qualifier("shop::Factory::make"), Some("shop::Factory"));
        assert_eq!(
            qualifier("std::vector<shop::Item, std::allocator<shop::Item> >::push_back"),
            Some("std::vector<shop::Item, std::allocator<shop::Item> >")
        );
        assert_eq!(qualifier("main"), None);
        assert!(is_template_class("std::vector<int>"));
        assert!(!is_template_class("shop"));
        assert!(is_allocator_frame("operator new"));
        assert!(is_allocator_frame("malloc"));
        assert!(!is_allocator_frame("shop::make"));
    }
}
