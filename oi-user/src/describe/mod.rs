//! Containers described as data: TOML descriptions (the format is docs/containers.md),
//! matched against the type graph while the plan is built and compiled into plan ops that the
//! interpreter, the JIT and the decoder already share.
//!
//! The steps, one file each:
//! - [`parse`]: TOML → [`Description`]s with parsed expressions and the file/line of every
//!   value, so that each later error names the line it comes from. Parsing never looks at
//!   DWARF; a file that does not parse is refused at start (exit 2).
//! - [`expr`]: the expression language (`cap * sizeof(T)`, `ptr & ~3`, `i8(c) >= 0`) as an
//!   [`expr::Ast`] with names, and, once compiled against one instantiation, as a plan
//!   [`expr::Expr`] whose fields are (offset, width) reads and whose `sizeof`s are constants.
//!   [`expr::Expr::eval`] is the interpreter's meaning; the JIT compiles the same tree.
//! - [`names`]: types a description names by spelling (`double`, `MapPair<{K}, {V}>`),
//!   found in DWARF before the plan is built (the type graph holds only what the arguments
//!   reach).
//! - [`unions`]: `[[union]]` rules (a union walked as the member its discriminator names),
//!   parsed here and checked against each holding class while the plan is built.
//! - [`compile`]: one description against one struct of the type graph: binds the template
//!   arguments, finds every field by member path (after base flattening) and checks its width,
//!   resolves the element type, folds the expressions. A mismatch is an error naming the file
//!   and line, never a guess: a `--containers` description that does not fit yields no number
//!   at all (exit 2). A shipped one that does not fit (written for another library version)
//!   is a warning in [`crate::plan::Plan::warnings`] and the type is planned as the plain
//!   class it is (`plan::build`); the session prints each warning once.
//!
//! Design: a described container is one more [`crate::plan::Op`]
//! (`Op::Described`), not code: its runtime values are expressions over the object's own
//! fields, and its elements are walked by the same loops as the built-in containers (a
//! described array of PODs costs what a `std::vector` costs). Descriptions are part of
//! what a plan is derived from, so their text is part of the plan cache key. Shipped
//! descriptions (`oi-user/containers/*.toml`, named `containers/FILE` in messages) are
//! embedded with `include_str!`: a copied binary carrying capabilities needs no data directory
//! and reads none it was not handed on its command line.
//!
//! Never reads the target: everything here is static. Never overrides a built-in
//! libstdc++ container (those keep their own, tested, code).

pub mod compile;
pub mod expr;
pub mod names;
pub mod parse;
pub mod rule;
pub mod unions;

pub use parse::{DescribeError, Description, Descriptions};
