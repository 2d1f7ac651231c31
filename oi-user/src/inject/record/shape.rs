//! Which wrapper a hooked allocator function gets: its [`Shape`] (where the size, the pointer
//! and the result are) and, for jemalloc's size classes, where its alignment is ([`Align`]).
//! Derived from the uprobe path's classification (`oi_common::allocs::function` and the
//! alignment source of `allocs::hooks::align_source`), so both mechanisms hook the same
//! functions the same way. Pure.

use oi_common::allocs::{cookie, function};

/// Where a request's alignment is, for jemalloc's size classes (`Header::usable_rule`
/// `JEMALLOC`); ignored by the other rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    None,
    /// The first argument: `memalign`, `aligned_alloc`.
    Rdi,
    /// The second: `posix_memalign`, an aligned `operator new`.
    Rsi,
    /// A page: `valloc`.
    Page,
    /// jemalloc's `flags` (`MALLOCX_LG_ALIGN` in its low six bits) in rsi (`mallocx`) or rdx
    /// (`rallocx`).
    FlagsRsi,
    FlagsRdx,
}

/// What a hooked function does with its arguments and result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `malloc(size)`, `valloc`, `pvalloc`, `mallocx(size, flags)`, every `operator new`:
    /// size in rdi, the block in rax.
    Malloc(Align),
    /// `calloc(n, size)`: n × size bytes (saturated: an overflowing request fails).
    Calloc,
    /// `realloc(ptr, size)`, `rallocx(ptr, size, flags)`: a free of ptr and an allocation.
    Realloc(Align),
    /// `reallocarray(ptr, n, size)`.
    ReallocArray,
    /// `memalign(align, size)`, `aligned_alloc(align, size)`: size in rsi.
    Memalign,
    /// `posix_memalign(&ptr, align, size)`: the block in `*ptr` when it returns 0.
    PosixMemalign,
    /// `free(ptr)`, `cfree`, `dallocx`, `sdallocx`, `free_sized`, `free_aligned_sized`, every
    /// `operator delete`: ptr in rdi.
    Free,
}

impl Shape {
    /// The shape of a function of kind `function` (`oi_common::allocs::function`) whose
    /// alignment source is `align_source` (`oi_common::allocs::cookie::ALIGN_*`, 0: none), as
    /// `allocs::hooks::classify` and `allocs::hooks::align_source` give them for its name.
    pub fn of(function: u64, align_source: u64) -> Option<Shape> {
        let align = match align_source {
            0 => Align::None,
            cookie::ALIGN_RDI => Align::Rdi,
            cookie::ALIGN_RSI => Align::Rsi,
            cookie::ALIGN_PAGE => Align::Page,
            cookie::ALIGN_FLAGS_RSI => Align::FlagsRsi,
            cookie::ALIGN_FLAGS_RDX => Align::FlagsRdx,
            _ => return None,
        };
        Some(match function {
            function::MALLOC => Shape::Malloc(align),
            function::CALLOC => Shape::Calloc,
            function::REALLOC => Shape::Realloc(align),
            function::REALLOCARRAY => Shape::ReallocArray,
            function::MEMALIGN => Shape::Memalign,
            function::POSIX_MEMALIGN => Shape::PosixMemalign,
            function::FREE => Shape::Free,
            _ => return None,
        })
    }

    /// The alignment source the wrapper reads (the functions with a fixed place for it have it
    /// from their shape).
    pub fn align(self) -> Align {
        match self {
            Shape::Malloc(a) | Shape::Realloc(a) => a,
            Shape::Memalign => Align::Rdi,
            Shape::PosixMemalign => Align::Rsi,
            Shape::Calloc | Shape::ReallocArray | Shape::Free => Align::None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Shape::Malloc(_) => "malloc",
            Shape::Calloc => "calloc",
            Shape::Realloc(_) => "realloc",
            Shape::ReallocArray => "reallocarray",
            Shape::Memalign => "memalign",
            Shape::PosixMemalign => "posix_memalign",
            Shape::Free => "free",
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_follow_the_uprobe_classification() {
        assert_eq!(
            Shape::of(function::MALLOC, 0),
            Some(Shape::Malloc(Align::None))
        );
        assert_eq!(
            Shape::of(function::MALLOC, cookie::ALIGN_FLAGS_RSI),
            Some(Shape::Malloc(Align::FlagsRsi))
        );
        assert_eq!(
            Shape::of(function::REALLOC, cookie::ALIGN_FLAGS_RDX),
            Some(Shape::Realloc(Align::FlagsRdx))
        );
        assert_eq!(
            Shape::of(function::MEMALIGN, cookie::ALIGN_RDI),
            Some(Shape::Memalign)
        );
        assert_eq!(Shape::Memalign.align(), Align::Rdi);
        assert_eq!(Shape::of(function::FREE, 0), Some(Shape::Free));
        assert_eq!(Shape::of(99, 0), None);
        assert_eq!(Shape::of(function::MALLOC, 9), None);
    }
}
