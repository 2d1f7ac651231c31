//! Links liboil.so with `-z nodelete`: the fault handler it installs and the walkers it
//! compiles must outlive any `dlclose` of the library (a handler left pointing into an
//! unmapped library would crash the program at its next SIGSEGV).

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
