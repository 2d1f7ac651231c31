//! Reading what a binary says about itself: ELF symbols (with demangling), DWARF functions
//! and types for the footprint stages. Pure: files are read, processes never touched; a path
//! inside a target's mount namespace is reached through `/proc/PID/root` by the caller.

pub mod callers;
pub mod cfi;
pub mod code;
pub mod dwarf;
pub mod elf;
pub mod points;
pub mod symbols;
pub mod type_names;
pub mod vtables;

pub use elf::{Binary, ElfError};
pub use symbols::{FunctionSymbol, SymbolError, find_function};
