//! Unit tests of `hooks`.

use super::*;

#[test]
fn allocator_names() {
    assert_eq!(classify("malloc"), Some(function::MALLOC));
    assert_eq!(classify("_Znwm"), Some(function::MALLOC));
    assert_eq!(classify("_ZnamSt11align_val_t"), Some(function::MALLOC));
    assert_eq!(classify("_ZdlPvm"), Some(function::FREE));
    assert_eq!(classify("_ZdaPvSt11align_val_t"), Some(function::FREE));
    assert_eq!(classify("je_rallocx"), Some(function::REALLOC));
    assert_eq!(classify("tc_newarray_nothrow"), Some(function::MALLOC));
    assert_eq!(classify("tc_deletearray_sized"), Some(function::FREE));
    assert_eq!(classify("posix_memalign"), Some(function::POSIX_MEMALIGN));
    assert_eq!(classify("aligned_alloc"), Some(function::MEMALIGN));
    assert_eq!(classify("mallinfo"), None);
    assert_eq!(classify("_ZnwmPv"), None);
    assert_eq!(classify("_ZdlPvS_"), None);
    assert_eq!(classify("_ZN4shop3newEv"), None);
    // GCC's split parts and clones are not entry points.
    assert_eq!(classify("_Znwm.cold"), None);
    assert_eq!(classify("malloc.part.0"), None);
}

/// Debian's glibc: every allocator function is hooked; the allocation functions have an
/// entry and a uretprobe, `free` its entry only.
#[test]
fn glibc_hooks() {
    let libc = Binary::open("/lib/x86_64-linux-gnu/libc.so.6").expect("libc");
    let hooks = file_hooks(&libc, Blocks::Glibc);
    let names: HashSet<&str> = hooks.functions.iter().map(|h| h.name.as_str()).collect();
    for want in [
        "malloc",
        "free",
        "calloc",
        "realloc",
        "posix_memalign",
        "valloc",
    ] {
        assert!(
            names.contains(want),
            "{want} not hooked: {:?}",
            hooks.skipped
        );
    }
    assert!(hooks.skipped.is_empty(), "{:?}", hooks.skipped);
    let kinds = |f: u64| -> Vec<u64> {
        hooks
            .sites
            .iter()
            .filter(|s| cookie::function(s.cookie) == f)
            .map(|s| cookie::kind(s.cookie))
            .collect()
    };
    assert!(kinds(function::FREE).iter().all(|k| *k == cookie::ENTRY));
    for f in [function::MALLOC, function::CALLOC, function::REALLOC] {
        let k = kinds(f);
        assert!(k.contains(&cookie::UPROBE_RETURN), "{f}: {k:?}");
        assert!(
            k.iter()
                .all(|k| *k == cookie::ENTRY || *k == cookie::UPROBE_RETURN),
            "{f}: {k:?}"
        );
    }
}

/// Debian's libstdc++: `operator new` calls `malloc` (closed by its return, no probe of its
/// own beyond the entry); `new[]` jumps to `new` (a tail probe or a marked entry); nothrow
/// `new` calls `new`, another C++ function, so its own returns are probed.
#[test]
fn libstdcxx_new_is_closed_by_malloc() {
    let Ok(lib) = Binary::open("/lib/x86_64-linux-gnu/libstdc++.so.6") else {
        eprintln!("SKIPPED: no libstdc++");
        return;
    };
    let hooks = file_hooks(&lib, Blocks::Glibc);
    let entry_of = |name: &str| {
        let h = hooks
            .functions
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("{name} not hooked: {:?}", hooks.skipped));
        let offset = file_offset_of(&lib, h.address).unwrap();
        hooks
            .sites
            .iter()
            .find(|s| {
                cookie::kind(s.cookie) == cookie::ENTRY
                    && s.file_offset >= offset
                    && s.file_offset < offset + 16
            })
            .expect("entry")
            .cookie
    };
    assert_ne!(cookie::flags(entry_of("_Znwm")) & cookie::INNER_CLOSED, 0);
    assert_eq!(
        cookie::flags(entry_of("_ZnwmRKSt9nothrow_t")) & cookie::INNER_CLOSED,
        0
    );
    assert_eq!(cookie::flags(entry_of("_ZdlPv")) & cookie::C_RETURN, 0);
    assert!(
        hooks
            .sites
            .iter()
            .all(|s| cookie::kind(s.cookie) != cookie::UPROBE_RETURN),
        "no uretprobe in libstdc++"
    );
}

/// The entry probes of the hot allocator functions of Debian's glibc and libstdc++ sit on
/// instructions the kernel emulates (one exception a hit, not two): glibc's `free` on the
/// `je` after its `test`, libstdc++'s `operator new` on its first `push`, its `operator
/// delete` on the jump to `free`, past `endbr64`.
#[test]
fn entries_sit_where_the_kernel_emulates() {
    for (path, names) in [
        (
            "/lib/x86_64-linux-gnu/libc.so.6",
            &["malloc", "free", "calloc", "realloc", "posix_memalign"][..],
        ),
        (
            "/lib/x86_64-linux-gnu/libstdc++.so.6",
            &["_Znwm", "_Znam", "_ZdlPv", "_ZdlPvm", "_ZdaPv"][..],
        ),
    ] {
        let Ok(lib) = Binary::open(path) else {
            eprintln!("SKIPPED: no {path}");
            continue;
        };
        let hooks = file_hooks(&lib, Blocks::Glibc);
        for name in names {
            let h = hooks
                .functions
                .iter()
                .find(|h| h.name == *name)
                .unwrap_or_else(|| panic!("{name} not hooked: {:?}", hooks.skipped));
            let start = file_offset_of(&lib, h.address).unwrap();
            let entry = hooks
                .sites
                .iter()
                .filter(|s| cookie::kind(s.cookie) == cookie::ENTRY)
                .map(|s| s.file_offset)
                .filter(|o| (start..start + 32).contains(o))
                .min()
                .unwrap_or_else(|| panic!("{name}: no entry probe"));
            let code = &lib.bytes()[entry as usize..];
            assert!(
                code::kernel_emulates(code),
                "{name}: entry probe at +{} on {:02x?}",
                entry - start,
                &code[..4]
            );
        }
    }
}
