//! Which functions of a process's files are allocator entry points, and where their probes go.
//!
//! By symbol (static and dynamic tables of every mapped ELF: the executable, libc, libstdc++,
//! libjemalloc, libtcmalloc, a statically linked allocator): the malloc family, every
//! `operator new`/`delete` variant by its mangled name, jemalloc's `*allocx` and `je_` names,
//! tcmalloc's `tc_` names ([`classify`]). Aliases (one address, several names) are hooked once;
//! parts GCC splits off (`_Znwm.cold`) are not entry points and are left alone. A file mapped
//! after attaching is hooked alone by [`file_hooks`], with the kind of blocks decided at start.
//!
//! Each function gets a probe on its entry: on the first instruction the kernel emulates
//! (`push`, a direct jump, a nop; `code::emulated_entry_probe`) when the ones before it leave
//! the registers the program reads, `rsp` and `rbp` alone (glibc's `free` on the `je` after its
//! `test`, libstdc++'s `operator new` on its first `push` past `endbr64`), because any other
//! instruction is stepped out of line, a second exception that costs ~15× the first on a VM
//! (docs/performance.md, "What bounds the figures"). Beyond it:
//! - a free (`free`, every `operator delete`, `dallocx` …) nothing: it is counted at its entry;
//! - a C allocation function (`malloc`, `calloc`, `realloc`, `posix_memalign`, `aligned_alloc`,
//!   jemalloc's `*allocx`, `tc_malloc` …) a uretprobe: no C++ exception unwinds through C code,
//!   so the hijacked return address is safe (see the eBPF program's docs);
//! - an `operator new` (it can throw: never a uretprobe) that calls or jumps to a hooked C
//!   allocation function (libstdc++'s `operator new` → `malloc`) nothing but probes on its
//!   tail jumps to hooked functions: the C function's return closes it;
//! - any other `operator new` (tcmalloc's, one defined by the program) a probe on every
//!   instruction that leaves it (from `debuginfo::code`): a `ret` closes the call with rax; a
//!   tail jump to another hooked function (directly, or through a PLT stub whose GOT slot names
//!   one) marks the call so that the callee's entry is part of it; a tail jump to another
//!   function of the same file (a static one found by its call frame information, or an
//!   exported one through the file's own PLT: tcmalloc's slow paths) hooks that function's
//!   returns too (two levels deep), so the call closes there with its result; any other jump
//!   out ends the call at the jump, its result unseen.
//!
//! Pure: reads the files, never touches a process. A function one of whose exits cannot carry
//! a uprobe is not hooked (its calls could not all be closed) and said so.

use std::collections::{HashMap, HashSet};

use object::{Object as _, ObjectSymbol as _, SymbolKind};
use oi_common::allocs::{cookie, function};

use crate::{
    debuginfo::{
        Binary,
        cfi::function_range,
        code::{self, Part, ReturnKind, condition_code},
        symbols::{file_offset_of, plt_target},
    },
    probe::scope::File,
};

/// One probe: an offset in a file and its cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    pub file_offset: u64,
    pub cookie: u64,
}

impl Site {
    /// Whether the probe is a uretprobe (at a C function's entry place), not a uprobe.
    pub fn is_uretprobe(&self) -> bool {
        cookie::kind(self.cookie) == cookie::UPROBE_RETURN
    }
}

/// A hooked function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hooked {
    pub name: String,
    pub address: u64,
    pub function: u64,
}

/// The hooks of one file.
#[derive(Debug, Default, Clone)]
pub struct FileHooks {
    pub functions: Vec<Hooked>,
    pub sites: Vec<Site>,
    /// Functions left out, with why.
    pub skipped: Vec<String>,
}

/// What an allocator function of this name does (`oi_common::allocs::function`), or `None`
/// for any other name. `je_` and `tc_` prefixes are jemalloc's and tcmalloc's own names.
pub fn classify(name: &str) -> Option<u64> {
    // Versioned dynamic names (`malloc@@GLIBC_2.2.5`) never reach here: object strips them.
    // Placement new and delete (`operator new(size_t, void*)`) allocate nothing.
    if matches!(name, "_ZnwmPv" | "_ZnamPv" | "_ZdlPvS_" | "_ZdaPvS_") {
        return None;
    }
    // Parts and clones GCC splits off a function (`_Znwm.cold`, `malloc.part.0`) are no entry
    // points: only the function itself is called, and its probes cover the call.
    if name.contains('.') {
        return None;
    }
    if name.starts_with("_Znw") || name.starts_with("_Zna") {
        return Some(function::MALLOC);
    }
    if name.starts_with("_ZdlPv") || name.starts_with("_ZdaPv") {
        return Some(function::FREE);
    }
    let base = name
        .strip_prefix("je_")
        .or_else(|| name.strip_prefix("tc_"))
        .unwrap_or(name);
    let tc = name.starts_with("tc_");
    Some(match base {
        "malloc" | "valloc" | "pvalloc" | "mallocx" => function::MALLOC,
        "calloc" => function::CALLOC,
        "realloc" | "rallocx" => function::REALLOC,
        "reallocarray" => function::REALLOCARRAY,
        "memalign" | "aligned_alloc" => function::MEMALIGN,
        "posix_memalign" => function::POSIX_MEMALIGN,
        "free" | "cfree" | "dallocx" | "sdallocx" | "free_sized" | "free_aligned_sized" => {
            function::FREE
        }
        // tcmalloc: tc_new, tc_newarray, tc_new_nothrow, tc_new_aligned …
        b if tc && (b.starts_with("new") || b.starts_with("malloc_skip_new_handler")) => {
            function::MALLOC
        }
        b if tc && b.starts_with("delete") => function::FREE,
        b if tc && b.starts_with("free") => function::FREE,
        _ => return None,
    })
}

/// Whether `name` is a C++ allocation function (it can throw): `operator new`/`new[]` in every
/// variant, tcmalloc's `tc_new*`.
fn is_cxx_new(name: &str) -> bool {
    name.starts_with("_Znw")
        || name.starts_with("_Zna")
        || name
            .strip_prefix("tc_")
            .is_some_and(|b| b.starts_with("new"))
}

/// Whether `binary` is glibc's libc, or a program linked statically with it: it defines
/// `__libc_start_main` (tcmalloc defines `__libc_malloc` too, to replace glibc's).
pub fn is_glibc(binary: &Binary) -> bool {
    let Ok(obj) = binary.object() else {
        return false;
    };
    obj.symbols()
        .chain(obj.dynamic_symbols())
        .any(|s| s.name() == Ok("__libc_start_main") && !s.is_undefined() && s.address() != 0)
}

/// Whose blocks the processes allocate, which says how usable sizes are known (JSON
/// `usable_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocks {
    /// Every `malloc` is glibc's: the usable size is read from the chunk header.
    Glibc,
    /// A jemalloc (it defines `malloc`, `mallocx` and `sallocx`) replaces glibc's: the usable
    /// size is jemalloc's size class of the request, which depends only on the size and the
    /// alignment for a given build (16-byte quantum, 4 KiB pages: Debian's libjemalloc2 on
    /// x86-64), computed in the kernel (`jemalloc_usable` in `oi-ebpf/src/bin/allocs.rs`).
    Jemalloc,
    /// Anything else (tcmalloc, an allocator of the program's own): the requested size.
    Requested,
}

impl Blocks {
    pub fn name(self) -> &'static str {
        match self {
            Blocks::Glibc => "glibc",
            Blocks::Jemalloc => "jemalloc",
            Blocks::Requested => "requested",
        }
    }
}

/// Whether `binary` is a jemalloc that replaces `malloc`: it defines `mallocx` and `sallocx`
/// next to `malloc` (a `je_`-prefixed build leaves `malloc` to glibc).
fn is_jemalloc(binary: &Binary) -> bool {
    let Ok(obj) = binary.object() else {
        return false;
    };
    let defined: HashSet<&str> = obj
        .dynamic_symbols()
        .chain(obj.symbols())
        .filter(|s| !s.is_undefined() && s.address() != 0)
        .filter_map(|s| s.name().ok())
        .filter(|n| matches!(*n, "mallocx" | "sallocx"))
        .collect();
    defined.len() == 2
}

/// Where the alignment of a request to the function `name` is (`cookie::ALIGN_*`, 0: none).
pub fn align_source(name: &str) -> u64 {
    if (name.starts_with("_Znw") || name.starts_with("_Zna")) && name.contains("St11align_val_t") {
        return cookie::ALIGN_RSI;
    }
    match name.strip_prefix("je_").unwrap_or(name) {
        "posix_memalign" => cookie::ALIGN_RSI,
        "memalign" | "aligned_alloc" => cookie::ALIGN_RDI,
        "valloc" => cookie::ALIGN_PAGE,
        "mallocx" => cookie::ALIGN_FLAGS_RSI,
        "rallocx" => cookie::ALIGN_FLAGS_RDX,
        _ => 0,
    }
}

/// The hooks of every file, and whose blocks they allocate: glibc's when no other file
/// defines `malloc` (every allocation reads its usable size from the chunk header),
/// jemalloc's when a jemalloc is the other one.
pub fn hooks_of(files: &[File]) -> (Vec<FileHooks>, Blocks) {
    let defines_malloc = |b: &Binary| {
        b.object().is_ok_and(|o| {
            o.symbols()
                .chain(o.dynamic_symbols())
                .any(|s| s.name() == Ok("malloc") && !s.is_undefined() && s.address() != 0)
        })
    };
    let definers: Vec<&File> = files.iter().filter(|f| defines_malloc(&f.binary)).collect();
    let jemallocs = definers.iter().filter(|f| is_jemalloc(&f.binary)).count();
    let blocks = if definers.iter().all(|f| is_glibc(&f.binary)) {
        Blocks::Glibc
    } else if jemallocs == 1
        && definers
            .iter()
            .all(|f| is_glibc(&f.binary) || is_jemalloc(&f.binary))
    {
        Blocks::Jemalloc
    } else {
        Blocks::Requested
    };
    let hooks = files
        .iter()
        .map(|f| file_hooks(&f.binary, blocks))
        .collect();
    (hooks, blocks)
}

/// The hooks of one file, its blocks' kind decided already (a file mapped after attaching
/// keeps the run's [`Blocks`]).
pub fn file_hooks(binary: &Binary, blocks: Blocks) -> FileHooks {
    let mut out = FileHooks::default();
    let Ok(obj) = binary.object() else {
        return out;
    };
    let mut by_address: HashMap<u64, Hooked> = HashMap::new();
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    // Addresses one of whose names is an `operator new` (tcmalloc: `malloc` and `tc_malloc`
    // are one function, `_Znwm` and `tc_new` another).
    let mut cxx_new: HashSet<u64> = HashSet::new();
    // Every name of each address, and the `.cold` parts by the name of their function: a
    // branch from one into the first instructions of a hooked function keeps its probe there.
    let mut names_at: HashMap<u64, Vec<&str>> = HashMap::new();
    let mut cold_of: HashMap<&str, (u64, u64)> = HashMap::new();
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if let Some((function, _)) = name.split_once(".cold") {
            cold_of.insert(function, (sym.address(), sym.size()));
        }
        names_at.entry(sym.address()).or_default().push(name);
        let Some(function) = classify(name) else {
            continue;
        };
        sizes.entry(sym.address()).or_insert(sym.size());
        if is_cxx_new(name) {
            cxx_new.insert(sym.address());
        }
        by_address.entry(sym.address()).or_insert(Hooked {
            name: name.to_string(),
            address: sym.address(),
            function,
        });
    }
    let mut functions: Vec<Hooked> = by_address.values().cloned().collect();
    functions.sort_by_key(|h| h.address);
    let flags = match blocks {
        Blocks::Glibc => cookie::GLIBC,
        Blocks::Jemalloc => cookie::JEMALLOC,
        Blocks::Requested => 0,
    };
    let mut helpers_done: HashSet<u64> = HashSet::new();
    let mut sites: Vec<Site> = Vec::new();
    for h in &functions {
        let size = sizes[&h.address];
        let Some(offset) = file_offset_of(binary, h.address) else {
            out.skipped
                .push(format!("{} (no code in the file)", h.name));
            continue;
        };
        let Some(bytes) = code_at(binary, offset, size) else {
            out.skipped
                .push(format!("{} (no code in the file)", h.name));
            continue;
        };
        let entry = match code::entry_probe(bytes, h.address) {
            Ok(e) => e,
            Err(e) => {
                out.skipped.push(format!("{} ({e})", h.name));
                continue;
            }
        };
        let plain_offset = offset + (entry.address - h.address);
        // What the function needs beyond its entry: a uretprobe, or probes on its exits.
        let c_function = !function::is_free(h.function) && !cxx_new.contains(&h.address);
        let mut inner_closed = false;
        let exits = if function::is_free(h.function) || c_function {
            // A free is counted at its entry; a C function returns through its uretprobe.
            Ok(Vec::new())
        } else if calls_hooked_allocation(binary, h.address, bytes, &by_address, &cxx_new) {
            inner_closed = true;
            // Its tail jumps to hooked functions (`_Znam: jmp _Znwm@plt`): the callee's entry
            // at this stack pointer is this call, not a new one.
            tail_jumps_to_hooks(binary, h, bytes, offset, &by_address)
        } else {
            part_exits(
                binary,
                h,
                h.address,
                bytes,
                offset,
                &by_address,
                &mut helpers_done,
                0,
            )
        };
        let exits = match exits {
            Ok(e) => e,
            Err(why) => {
                out.skipped.push(format!("{} ({why})", h.name));
                continue;
            }
        };
        // The entry probe on the first instruction the kernel emulates, where a hit costs one
        // exception instead of two (`code::kernel_emulates`), unless an exit that needs a
        // probe of its own kind is there (a conditional tail jump, a jump out).
        let cheap = code::emulated_entry_probe(
            entry,
            bytes,
            h.address,
            registers_read(h.function),
            &cold_parts(binary, &names_at, &cold_of, h.address),
        );
        let cheap_offset = offset + (cheap.address - h.address);
        let entry_offset = if exits
            .iter()
            .any(|s| s.file_offset == cheap_offset && cookie::kind(s.cookie) != cookie::TAIL)
        {
            plain_offset
        } else {
            cheap_offset
        };
        let mut mine = vec![Site {
            file_offset: entry_offset,
            cookie: cookie::with_align(
                cookie::encode(cookie::ENTRY, h.function, flags),
                align_source(&h.name),
            ),
        }];
        if c_function {
            // Its return through a uretprobe (at the entry probe's place, where [rsp] is still
            // the return address).
            mine[0].cookie |= cookie::C_RETURN;
            mine.push(Site {
                file_offset: entry_offset,
                cookie: cookie::encode(cookie::UPROBE_RETURN, h.function, flags),
            });
        } else if !function::is_free(h.function) {
            if inner_closed {
                mine[0].cookie |= cookie::INNER_CLOSED;
            }
            mine.extend(exits);
            merge_tail_at_entry(&mut mine, entry_offset);
        }
        sites.extend(mine);
        out.functions.push(h.clone());
    }
    // One entry probe and at most one uretprobe per offset.
    let key = |s: &Site| {
        (
            s.file_offset,
            cookie::kind(s.cookie) == cookie::UPROBE_RETURN,
        )
    };
    sites.sort_by_key(key);
    sites.dedup_by_key(|s| key(s));
    out.sites = sites;
    out
}

/// The probes [`file_hooks`] sets on the function `name` of `binary` (its entry, and its
/// uretprobe or exits), by file offset; empty when `name` is not a hooked function there.
/// `cargo xtask bench` puts its bare counting probes on the same places.
pub fn probes_of(binary: &Binary, blocks: Blocks, name: &str) -> Vec<Site> {
    let Ok(obj) = binary.object() else {
        return Vec::new();
    };
    let Some((start, size)) = obj
        .dynamic_symbols()
        .chain(obj.symbols())
        .find(|s| s.name() == Ok(name) && !s.is_undefined() && s.address() != 0)
        .and_then(|s| Some((file_offset_of(binary, s.address())?, s.size())))
    else {
        return Vec::new();
    };
    file_hooks(binary, blocks)
        .sites
        .into_iter()
        .filter(|s| (start..start + size).contains(&s.file_offset))
        .collect()
}

/// The registers the eBPF program reads at the entry of a function of kind `function`: a free
/// its pointer; an allocation its size, alignment and pointer arguments (rdi, rsi, rdx).
fn registers_read(function: u64) -> &'static [iced_x86::Register] {
    use iced_x86::Register::{RDI, RDX, RSI};
    if function::is_free(function) {
        &[RDI]
    } else {
        &[RDI, RSI, RDX]
    }
}

/// The `.cold` parts of the function at `address`, by any of its names.
fn cold_parts<'a>(
    binary: &'a Binary,
    names_at: &HashMap<u64, Vec<&str>>,
    cold_of: &HashMap<&str, (u64, u64)>,
    address: u64,
) -> Vec<Part<'a>> {
    names_at
        .get(&address)
        .into_iter()
        .flatten()
        .filter_map(|name| cold_of.get(name))
        .filter_map(|&(start, size)| {
            let bytes = code_at(binary, file_offset_of(binary, start)?, size)?;
            Some(Part {
                address: start,
                bytes,
            })
        })
        .collect()
}

/// A first instruction that already jumps to a hooked function carries one probe: the entry
/// (`mine[0]`), marked as its own tail, instead of an entry and a tail at the same offset.
fn merge_tail_at_entry(mine: &mut Vec<Site>, entry_offset: u64) {
    if mine[1..]
        .iter()
        .any(|s| s.file_offset == entry_offset && cookie::kind(s.cookie) == cookie::TAIL)
    {
        mine[0].cookie |= cookie::TAIL_AT_ENTRY;
    }
    mine.retain(|s| s.file_offset != entry_offset || cookie::kind(s.cookie) == cookie::ENTRY);
}

/// The probes on the exits of `h`'s code (`bytes` at ELF address `start`, file offset
/// `offset`), those of the local functions it tail-jumps to included.
#[allow(clippy::too_many_arguments)]
fn part_exits(
    binary: &Binary,
    h: &Hooked,
    start: u64,
    bytes: &[u8],
    offset: u64,
    hooked: &HashMap<u64, Hooked>,
    helpers_done: &mut HashSet<u64>,
    depth: u32,
) -> Result<Vec<Site>, String> {
    let mut out = Vec::new();
    for site in code::return_sites_of(&[Part {
        address: start,
        bytes,
    }]) {
        if let Some(refusal) = site.refusal {
            return Err(format!(
                "its exit at {:#x} cannot carry a uprobe: {refusal}",
                site.address
            ));
        }
        let at = offset + (site.address - start);
        let (kind, target) = match site.kind {
            ReturnKind::Ret => {
                out.push(Site {
                    file_offset: at,
                    cookie: cookie::encode(cookie::RETURN, h.function, 0),
                });
                continue;
            }
            ReturnKind::IndirectTailCall => (false, None),
            ReturnKind::TailCall { target } => (false, Some(target)),
            ReturnKind::ConditionalTailCall { target } => (true, Some(target)),
        };
        let condition = if kind {
            let Some(cc) = usize::try_from(at)
                .ok()
                .and_then(|o| binary.bytes().get(o..o + usize::from(site.len)))
                .and_then(condition_code)
            else {
                return Err(format!("cannot read the jump at {:#x}", site.address));
            };
            Some(cc)
        } else {
            None
        };
        let plt_name = target.and_then(|t| plt_target(binary, t));
        let leads_to_hook = target.is_some_and(|t| hooked.contains_key(&t))
            || plt_name.as_deref().is_some_and(|n| classify(n).is_some());
        let mut cookie_kind = if leads_to_hook {
            cookie::TAIL
        } else {
            cookie::LEAVE
        };
        // A function of this file returns in our place (a static helper jumped to directly,
        // or an exported one through this file's own PLT: tcmalloc's slow paths): its
        // returns close the call.
        let helper = match (target, &plt_name) {
            _ if leads_to_hook || depth >= 2 => None,
            (Some(t), None) => function_range(binary, t).filter(|(start, _)| *start == t),
            (Some(_), Some(name)) => defined(binary, name),
            (None, _) => None,
        };
        if let Some((start, len)) = helper {
            if helpers_done.insert(start) {
                let code = file_offset_of(binary, start)
                    .and_then(|off| code_at(binary, off, len).map(|bytes| (off, bytes)));
                let Some((hoff, hbytes)) = code else {
                    return Err(format!("no code for its tail callee at {start:#x}"));
                };
                out.extend(part_exits(
                    binary,
                    h,
                    start,
                    hbytes,
                    hoff,
                    hooked,
                    helpers_done,
                    depth + 1,
                )?);
            }
            cookie_kind = cookie::TAIL;
        }
        let mut flags = 0;
        if cookie_kind == cookie::LEAVE && h.function == function::CALLOC {
            flags |= cookie::RESULT_IN_RDI;
        }
        let c = match (condition, cookie_kind) {
            (Some(cc), cookie::TAIL) => {
                cookie::with_condition(cookie::encode(cookie::TAIL_IF, h.function, flags), cc)
            }
            (Some(cc), _) => {
                cookie::with_condition(cookie::encode(cookie::LEAVE_IF, h.function, flags), cc)
            }
            (None, k) => cookie::encode(k, h.function, flags),
        };
        out.push(Site {
            file_offset: at,
            cookie: c,
        });
    }
    Ok(out)
}

/// The probes on the tail jumps of `h` (its code `bytes` at file offset `offset`) that lead to
/// hooked functions (directly or through a PLT slot naming one).
fn tail_jumps_to_hooks(
    binary: &Binary,
    h: &Hooked,
    bytes: &[u8],
    offset: u64,
    hooked: &HashMap<u64, Hooked>,
) -> Result<Vec<Site>, String> {
    let mut out = Vec::new();
    for site in code::return_sites_of(&[Part {
        address: h.address,
        bytes,
    }]) {
        let (conditional, target) = match site.kind {
            ReturnKind::TailCall { target } => (false, target),
            ReturnKind::ConditionalTailCall { target } => (true, target),
            _ => continue,
        };
        let leads_to_hook = hooked.contains_key(&target)
            || plt_target(binary, target).is_some_and(|n| classify(&n).is_some());
        if !leads_to_hook {
            continue;
        }
        if let Some(refusal) = site.refusal {
            return Err(format!(
                "its tail jump at {:#x} cannot carry a uprobe: {refusal}",
                site.address
            ));
        }
        let at = offset + (site.address - h.address);
        let c = if conditional {
            let Some(cc) = usize::try_from(at)
                .ok()
                .and_then(|o| binary.bytes().get(o..o + usize::from(site.len)))
                .and_then(condition_code)
            else {
                return Err(format!("cannot read the jump at {:#x}", site.address));
            };
            cookie::with_condition(cookie::encode(cookie::TAIL_IF, h.function, 0), cc)
        } else {
            cookie::encode(cookie::TAIL, h.function, 0)
        };
        out.push(Site {
            file_offset: at,
            cookie: c,
        });
    }
    Ok(out)
}

/// Whether the code of the `operator new` at `address` calls or jumps to a hooked C allocation
/// function whose return gives the block in rax (in this file, or through a PLT slot naming
/// one): then that call's return closes it. Not another `operator new` (nothrow `new` →
/// `new`): that one's own closing would happen at a lower stack pointer.
fn calls_hooked_allocation(
    binary: &Binary,
    address: u64,
    bytes: &[u8],
    hooked: &HashMap<u64, Hooked>,
    cxx_new: &HashSet<u64>,
) -> bool {
    use iced_x86::{Decoder, DecoderOptions, OpKind};
    // A C allocation function: its uretprobe sees the block in rax.
    let gives_block = |f: u64| !function::is_free(f) && f != function::POSIX_MEMALIGN;
    let end = address + bytes.len() as u64;
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    decoder.iter().any(|insn| {
        // Calls, jumps and conditional jumps with a direct target.
        if insn.op_count() != 1 || insn.op0_kind() != OpKind::NearBranch64 {
            return false;
        }
        let target = insn.near_branch_target();
        if target == 0 || (address..end).contains(&target) {
            return false;
        }
        if let Some(h) = hooked.get(&target) {
            return gives_block(h.function) && !cxx_new.contains(&target);
        }
        plt_target(binary, target)
            .is_some_and(|name| !is_cxx_new(&name) && classify(&name).is_some_and(gives_block))
    })
}

/// The address and size of the function `name` defines in `binary`, if it does. An IFUNC
/// (`memset`) is no function: its symbol is the resolver that picks one at load time.
fn defined(binary: &Binary, name: &str) -> Option<(u64, u64)> {
    const STT_GNU_IFUNC: u8 = 10;
    let obj = binary.object().ok()?;
    obj.symbols()
        .chain(obj.dynamic_symbols())
        .find(|s| {
            let ifunc = matches!(s.flags(), object::SymbolFlags::Elf { st_info, .. } if st_info & 0xf == STT_GNU_IFUNC);
            s.kind() == SymbolKind::Text
                && !ifunc
                && !s.is_undefined()
                && s.address() != 0
                && s.size() != 0
                && s.name() == Ok(name)
        })
        .map(|s| (s.address(), s.size()))
}

fn code_at(binary: &Binary, offset: u64, size: u64) -> Option<&[u8]> {
    if size == 0 {
        return None;
    }
    let start = usize::try_from(offset).ok()?;
    binary
        .bytes()
        .get(start..start.checked_add(usize::try_from(size).ok()?)?)
}

#[cfg(test)]
mod tests;
