//! The ELF modules of this process (the executable and every shared library the dynamic
//! linker loaded), with their files and load biases, from `dl_iterate_phdr`: which module
//! an address belongs to (a call site, a vtable, a `type_info` object), and the list to
//! search when no address says.
//!
//! `dl_iterate_phdr` rather than `dladdr`: it gives the load bias (`dlpi_addr`, runtime minus
//! ELF address, what polymorphic-inheritance needs) and every module in one call, and an
//! address is matched against the module's own `PT_LOAD` segments. Reads the dynamic
//! linker's list only; never opens a file (that is `resolve`'s job).

use std::ffi::{CStr, c_int, c_void};
use std::ops::Range;
use std::path::PathBuf;

/// One loaded ELF module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// Its file: the dynamic linker's name, or the executable's own path.
    pub path: PathBuf,
    /// Runtime address minus ELF virtual address.
    pub bias: u64,
    /// Its loaded segments (runtime addresses).
    pub segments: Vec<Range<usize>>,
}

impl Module {
    pub fn contains(&self, addr: usize) -> bool {
        self.segments.iter().any(|s| s.contains(&addr))
    }
}

/// Every module with a file, the executable first (the dynamic linker's order).
pub fn loaded() -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    // SAFETY: the callback only reads the `dl_phdr_info` the dynamic linker passes (valid for
    // the duration of the call) and pushes to the Vec it is given through `data`.
    unsafe {
        libc::dl_iterate_phdr(Some(visit), (&mut out as *mut Vec<Module>).cast());
    }
    out
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `&mut Vec<Module>` `loaded` passed; `info` is valid during the
    // call, its `dlpi_phdr` points at `dlpi_phnum` program headers, its name is a C string.
    let (out, info) = unsafe { (&mut *data.cast::<Vec<Module>>(), &*info) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string owned by the dynamic linker.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let path = if out.is_empty() && name.is_empty() {
        executable()
    } else if name.starts_with('/') || name.contains('/') {
        PathBuf::from(name)
    } else {
        // The vDSO and other modules without a file.
        return 0;
    };
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: as above, `dlpi_phnum` headers at `dlpi_phdr`.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let bias = info.dlpi_addr;
    let segments = phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD)
        .map(|p| {
            let start = bias.wrapping_add(p.p_vaddr) as usize;
            start..start.saturating_add(p.p_memsz as usize)
        })
        .collect();
    out.push(Module {
        path,
        bias,
        segments,
    });
    0
}

/// The executable's file; `/proc/self/exe` itself if its path no longer names it.
fn executable() -> PathBuf {
    match std::fs::read_link("/proc/self/exe") {
        Ok(p) if p.exists() => p,
        _ => PathBuf::from("/proc/self/exe"),
    }
}

/// The modules holding `addrs`, in the order of the addresses, each once; then, if
/// `then_all`, every other module.
pub fn by_addresses(addrs: &[usize], then_all: bool) -> Vec<Module> {
    let all = loaded();
    let mut out: Vec<Module> = Vec::new();
    for &a in addrs {
        if let Some(m) = all.iter().find(|m| m.contains(a))
            && !out.contains(m)
        {
            out.push(m.clone());
        }
    }
    if then_all {
        for m in all {
            if !out.contains(&m) {
                out.push(m);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_and_libc_are_loaded_modules() {
        let all = loaded();
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        assert_eq!(all.first().map(|m| &m.path), Some(&exe));
        // A function of this binary is in the first module; one of libc in libc's.
        let here = this_test_binary_and_libc_are_loaded_modules as *const () as usize;
        let mods = by_addresses(&[libc::getpid as *const () as usize, here], false);
        assert_eq!(mods.len(), 2);
        assert!(mods[0].path.to_string_lossy().contains("libc"), "{mods:?}");
        assert_eq!(mods[1].path, exe);
        // Unknown addresses are skipped; `then_all` appends the rest once each.
        let rest = by_addresses(&[8], true);
        assert_eq!(rest.len(), all.len());
    }
}
