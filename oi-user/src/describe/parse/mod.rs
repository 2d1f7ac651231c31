//! Description files: TOML → [`Description`]s, every value with its line, expressions parsed.
//! Unknown keys are errors (a misspelt `cpacity` must not silently default); so is a layout
//! this build does not know. Never looks at DWARF or a process.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::expr::{self, Ast};
pub use super::rule::{At, DescribeError, name_matches};
use super::rule::{Cases, UnionRule};

/// The shipped descriptions (`oi-user/containers/`, named `containers/FILE` in messages),
/// embedded. Their text is part of the binary, so a changed file is a new build, and the plan
/// cache key holds the build (`disk_cache::stable_hash`).
pub const SHIPPED: &[(&str, &str)] = &[
    (
        "containers/boost.toml",
        include_str!("../../../containers/boost.toml"),
    ),
    (
        "containers/protobuf.toml",
        include_str!("../../../containers/protobuf.toml"),
    ),
    (
        "containers/abseil.toml",
        include_str!("../../../containers/abseil.toml"),
    ),
    (
        "containers/libcxx.toml",
        include_str!("../../../containers/libcxx.toml"),
    ),
];

#[derive(Debug, Clone)]
pub enum FieldSpec {
    /// A member path (`m_holder.m_start`), read with the member's DWARF size unless `width`.
    Path { path: String, width: Option<u8> },
    /// A byte offset in the object and a width.
    Offset { offset: u64, width: u8 },
}

#[derive(Debug, Clone)]
pub struct ArrayDesc {
    pub data: At<Ast>,
    pub len: At<Ast>,
    pub cap: Option<At<Ast>>,
    pub heap: At<Ast>,
    pub inline: Option<At<Ast>>,
    /// Layout `owned_pointers` (and `control_bytes` with `owned_slots`): each element is a
    /// `T*` to an owned `T`, walked and charged its `sizeof(T)` (as a `unique_ptr` is).
    pub owned: bool,
    /// Layout `control_bytes` (a Swiss table): `data` is `slots`, `cap` is `capacity`, and
    /// only the slots whose control byte passes `full` are elements.
    pub swiss: Option<SwissDesc>,
    /// Layout `node_chains` (a node-based hash map): `data` is `buckets`, `cap` is
    /// `bucket_count`, the elements are the nodes of every bucket's chain.
    pub chains: Option<ChainsDesc>,
    /// Layout `btree` (Abseil `btree_map`): `data` is `root`, the elements are the values
    /// of every node, in key order.
    pub btree: Option<BtreeDesc>,
}

/// The `btree` keys beyond `root` and `len`. `start`, `finish`, `leaf` and `node_size` are
/// expressions of `node` (a node's address); `values_offset`, `node_slots` and
/// `children_offset` fold to constants, each may use `elem_size`, `elem_align` and the keys
/// before it.
#[derive(Debug, Clone)]
pub struct BtreeDesc {
    pub start: At<Ast>,
    pub finish: At<Ast>,
    pub leaf: At<Ast>,
    pub node_size: At<Ast>,
    pub values_offset: At<Ast>,
    pub node_slots: At<Ast>,
    pub children_offset: At<Ast>,
}

/// The `node_chains` keys beyond those of an array; each folds to a constant.
#[derive(Debug, Clone)]
pub struct ChainsDesc {
    pub next_offset: At<Ast>,
    pub value_offset: At<Ast>,
    pub node_size: At<Ast>,
    /// `[container.node_chains.tree]`: buckets b and b^1 holding one pointer share a tree.
    pub tree: Option<ChainTreeDesc>,
}

/// A bucket pair's shared tree (protobuf's `Map` once a chain would exceed 8 nodes): a
/// libstdc++ red-black tree whose nodes each hold a chain head. Each key folds to a
/// constant.
#[derive(Debug, Clone)]
pub struct ChainTreeDesc {
    /// Bytes of the tree object.
    pub size: At<Ast>,
    /// Offset in the tree object of the root node's address.
    pub root: At<Ast>,
    /// Bytes of a tree node.
    pub node_size: At<Ast>,
    /// Offset in a tree node of the chain head it holds.
    pub chain: At<Ast>,
}

impl ArrayDesc {
    /// Every expression, for the type names they mention.
    fn exprs(&self) -> Vec<&At<Ast>> {
        let mut out = vec![&self.data, &self.len, &self.heap];
        out.extend(self.cap.iter().chain(&self.inline));
        if let Some(sw) = &self.swiss {
            out.extend([&sw.ctrl, &sw.full]);
            out.extend(&sw.ctrl_at);
        }
        if let Some(c) = &self.chains {
            out.extend([&c.next_offset, &c.value_offset, &c.node_size]);
            if let Some(t) = &c.tree {
                out.extend([&t.size, &t.root, &t.node_size, &t.chain]);
            }
        }
        if let Some(b) = &self.btree {
            out.extend([&b.start, &b.finish, &b.leaf, &b.node_size]);
            out.extend([&b.values_offset, &b.node_slots, &b.children_offset]);
        }
        out
    }
}

/// The `control_bytes` keys beyond those of an array.
#[derive(Debug, Clone)]
pub struct SwissDesc {
    pub ctrl: At<Ast>,
    /// Of `c`, the control byte.
    pub full: At<Ast>,
    /// Of `i`, the slot index; `ctrl + i` when absent.
    pub ctrl_at: Option<At<Ast>>,
}

#[derive(Debug, Clone)]
pub enum Layout {
    Array(ArrayDesc),
}

#[derive(Debug, Clone)]
pub struct Description {
    pub file: String,
    /// Line of the `name` key (errors about the whole description point here).
    pub line: usize,
    pub name: String,
    /// Template argument names in order; `_` binds nothing.
    pub args: Vec<String>,
    pub elem: Option<At<String>>,
    pub fields: Vec<(String, At<FieldSpec>)>,
    pub layout: Layout,
    /// Embedded in the binary ([`SHIPPED`]), not given with `--containers`: one that does
    /// not fit the program is a warning and a plain class, never an error (it was written
    /// for one library version, the program may use another).
    pub shipped: bool,
}

impl Description {
    pub fn error(&self, line: usize, what: impl Into<String>) -> DescribeError {
        DescribeError {
            file: self.file.clone(),
            line,
            what: what.into(),
        }
    }

    /// Whether the qualified DWARF name is this container: the name itself or it followed
    /// by `<` (as built-in containers are recognised, docs/semantics.md, "Type names").
    pub fn matches(&self, qualified: &str) -> bool {
        name_matches(&self.name, qualified)
    }

    /// The types the description names: `elem` and the arguments of `sizeof`/`alignof`.
    pub fn type_names(&self) -> Vec<String> {
        let mut out: Vec<String> = self.elem.iter().map(|e| e.v.clone()).collect();
        let Layout::Array(a) = &self.layout;
        for e in a.exprs() {
            e.v.type_names(&mut out);
        }
        out
    }
}

/// `[[owned]]`: raw pointer members of the classes `holder` matches that own what they
/// point to (protobuf's singular sub-messages), walked as a `unique_ptr` is without
/// `--feature chase-raw-pointers`. With `pointee_base`, only pointers to a class that is
/// or derives from it.
#[derive(Debug, Clone)]
pub struct OwnedRule {
    pub file: String,
    pub line: usize,
    pub holder: String,
    pub pointee_base: Option<String>,
}

/// Every description in force: the shipped ones, then those of `--containers` files in
/// order. The last matching one wins, so a user's file overrides a shipped description.
#[derive(Debug, Clone, Default)]
pub struct Descriptions {
    pub list: Arc<Vec<Description>>,
    pub owned: Arc<Vec<OwnedRule>>,
    /// `[[union]]` rules, in the same order (a later one wins for the same union).
    pub unions: Arc<Vec<UnionRule>>,
}

impl Descriptions {
    /// The shipped descriptions followed by `files` (name, text).
    pub fn load(files: &[(String, String)]) -> Result<Self, DescribeError> {
        let (mut list, mut owned, mut unions) = (Vec::new(), Vec::new(), Vec::new());
        let shipped = SHIPPED.iter().map(|(n, t)| (*n, *t, true));
        let given = files.iter().map(|(n, t)| (n.as_str(), t.as_str(), false));
        for (name, text, is_shipped) in shipped.chain(given) {
            let f = parse(name, text)?;
            list.extend(f.containers.into_iter().map(|mut d| {
                d.shipped = is_shipped;
                d
            }));
            owned.extend(f.owned);
            unions.extend(f.unions.into_iter().map(|mut u| {
                u.shipped = is_shipped;
                u
            }));
        }
        Ok(Self {
            list: Arc::new(list),
            owned: Arc::new(owned),
            unions: Arc::new(unions),
        })
    }

    /// Whether a pointer member of class `holder` to a class with these names (the class
    /// and its bases, transitively) is owned by an `[[owned]]` rule.
    pub fn owns(&self, holder: &str, pointee: &[String]) -> bool {
        self.owned.iter().any(|r| {
            name_matches(&r.holder, holder)
                && r.pointee_base
                    .as_ref()
                    .is_none_or(|b| pointee.iter().any(|p| name_matches(b, p)))
        })
    }

    pub fn find(&self, qualified: &str) -> Option<&Description> {
        self.list.iter().rev().find(|d| d.matches(qualified))
    }
}

/// Prefix of the pseudo-feature that carries a `--containers` file to the plan: its name,
/// a newline, its text. As a feature it is part of the plan cache's key (its content, not
/// only its name), like OI's configuration rules (`oi_config`).
const FEATURE_PREFIX: &str = "containers=";

/// The pseudo-feature for a description file.
pub fn to_feature(file: &str, text: &str) -> String {
    format!("{FEATURE_PREFIX}{file}\n{text}")
}

/// The (file, text) a pseudo-feature carries, if it is one.
pub fn from_feature(feature: &str) -> Option<(String, String)> {
    let (file, text) = feature.strip_prefix(FEATURE_PREFIX)?.split_once('\n')?;
    Some((file.to_string(), text.to_string()))
}

/// Reads and checks `--containers` files; the pseudo-features that carry them.
pub fn load_files(paths: &[std::path::PathBuf]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for p in paths {
        let name = p.display().to_string();
        let text = std::fs::read_to_string(p).map_err(|e| format!("--containers {name}: {e}"))?;
        parse_file(&name, &text).map_err(|e| e.to_string())?;
        out.push(to_feature(&name, &text));
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    container: Vec<RawContainer>,
    #[serde(default)]
    owned: Vec<RawOwned>,
    #[serde(default)]
    union: Vec<RawUnion>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUnion {
    #[serde(rename = "in")]
    holder: Spanned<String>,
    member: Spanned<String>,
    discriminator: Spanned<String>,
    cases: Option<Spanned<BTreeMap<String, Spanned<String>>>>,
    cases_enum: Option<Spanned<RawCasesEnum>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCasesEnum {
    #[serde(rename = "enum")]
    name: String,
    enumerator: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOwned {
    #[serde(rename = "in")]
    holder: Spanned<String>,
    pointee_base: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTagged {
    pointer: Spanned<String>,
    owned: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChains {
    buckets: Spanned<String>,
    bucket_count: Spanned<String>,
    next_offset: Spanned<String>,
    value_offset: Spanned<String>,
    node_size: Spanned<String>,
    len: Spanned<String>,
    heap: Spanned<String>,
    tree: Option<RawChainTree>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChainTree {
    size: Spanned<String>,
    root: Spanned<String>,
    node_size: Spanned<String>,
    chain: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBtree {
    root: Spanned<String>,
    len: Spanned<String>,
    start: Spanned<String>,
    finish: Spanned<String>,
    leaf: Spanned<String>,
    node_size: Spanned<String>,
    values_offset: Spanned<String>,
    node_slots: Spanned<String>,
    children_offset: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawContainer {
    name: Spanned<String>,
    #[serde(default)]
    args: Vec<String>,
    elem: Option<Spanned<String>>,
    layout: Spanned<String>,
    #[serde(default)]
    fields: BTreeMap<String, Spanned<RawField>>,
    array: Option<RawArray>,
    owned_pointers: Option<RawArray>,
    control_bytes: Option<RawSwiss>,
    tagged_pointer: Option<RawTagged>,
    node_chains: Option<RawChains>,
    btree: Option<RawBtree>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSwiss {
    ctrl: Spanned<String>,
    slots: Spanned<String>,
    capacity: Spanned<String>,
    full: Spanned<String>,
    ctrl_at: Option<Spanned<String>>,
    len: Spanned<String>,
    heap: Spanned<String>,
    /// Each slot is a pointer to an owned node (Abseil `node_hash_map`).
    #[serde(default)]
    owned_slots: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawField {
    Path(String),
    Table(RawFieldTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFieldTable {
    path: Option<String>,
    offset: Option<u64>,
    width: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawArray {
    data: Spanned<String>,
    len: Spanned<String>,
    cap: Option<Spanned<String>>,
    heap: Spanned<String>,
    inline: Option<Spanned<String>>,
}

fn line_of(text: &str, byte: usize) -> usize {
    text.get(..byte).map_or(1, |t| t.matches('\n').count() + 1)
}

/// Parses one description file (`file` is how errors name it): its containers.
pub fn parse_file(file: &str, text: &str) -> Result<Vec<Description>, DescribeError> {
    Ok(parse(file, text)?.containers)
}

/// What one file holds.
#[derive(Debug)]
pub struct ParsedFile {
    pub containers: Vec<Description>,
    pub owned: Vec<OwnedRule>,
    pub unions: Vec<UnionRule>,
}

/// Parses one description file: its containers and its `[[owned]]` rules.
pub fn parse(file: &str, text: &str) -> Result<ParsedFile, DescribeError> {
    let err = |line: usize, what: String| DescribeError {
        file: file.to_string(),
        line,
        what,
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        err(
            line,
            e.message().lines().next().unwrap_or_default().to_string(),
        )
    })?;
    let at_expr = |s: &Spanned<String>| -> Result<At<Ast>, DescribeError> {
        let line = line_of(text, s.span().start);
        let v = expr::parse(s.get_ref())
            .map_err(|w| err(line, format!("bad expression `{}`: {w}", s.get_ref())))?;
        Ok(At { line, v })
    };
    let mut out = Vec::new();
    for c in raw.container {
        let line = line_of(text, c.name.span().start);
        if c.name.get_ref().is_empty() {
            return Err(err(line, "empty container name".into()));
        }
        let mut fields = Vec::new();
        for (name, f) in &c.fields {
            let fline = line_of(text, f.span().start);
            let width = |w: Option<u64>| -> Result<Option<u8>, DescribeError> {
                match w {
                    None => Ok(None),
                    Some(w @ (1 | 2 | 4 | 8)) => Ok(Some(w as u8)),
                    Some(w) => Err(err(
                        fline,
                        format!("field {name}: width must be 1, 2, 4 or 8, not {w}"),
                    )),
                }
            };
            let spec = match f.get_ref() {
                RawField::Path(p) => FieldSpec::Path {
                    path: p.clone(),
                    width: None,
                },
                RawField::Table(t) => match (&t.path, t.offset) {
                    (Some(p), None) => FieldSpec::Path {
                        path: p.clone(),
                        width: width(t.width)?,
                    },
                    (None, Some(offset)) => FieldSpec::Offset {
                        offset,
                        width: width(t.width)?.ok_or_else(|| {
                            err(fline, format!("field {name}: an offset needs a width"))
                        })?,
                    },
                    _ => {
                        return Err(err(
                            fline,
                            format!("field {name}: give either `path` or `offset`"),
                        ));
                    }
                },
            };
            fields.push((
                name.clone(),
                At {
                    line: fline,
                    v: spec,
                },
            ));
        }
        let lline = line_of(text, c.layout.span().start);
        let layout = match c.layout.get_ref().as_str() {
            kind @ ("array" | "owned_pointers") => {
                let owned = kind == "owned_pointers";
                let table = if owned { &c.owned_pointers } else { &c.array };
                let a = table.as_ref().ok_or_else(|| {
                    err(
                        lline,
                        format!("layout \"{kind}\" needs a [container.{kind}] table"),
                    )
                })?;
                Layout::Array(ArrayDesc {
                    owned,
                    data: at_expr(&a.data)?,
                    len: at_expr(&a.len)?,
                    cap: a.cap.as_ref().map(&at_expr).transpose()?,
                    heap: at_expr(&a.heap)?,
                    inline: a.inline.as_ref().map(&at_expr).transpose()?,
                    swiss: None,
                    chains: None,
                    btree: None,
                })
            }
            // A tagged pointer is an array of at most one element: the pointee, when the
            // pointer is set and `owned` holds (its bytes are the heap, as any element's).
            "tagged_pointer" => {
                let t = c.tagged_pointer.as_ref().ok_or_else(|| {
                    err(
                        lline,
                        "layout \"tagged_pointer\" needs a [container.tagged_pointer] table".into(),
                    )
                })?;
                let elem = c
                    .elem
                    .as_ref()
                    .ok_or_else(|| err(lline, "layout \"tagged_pointer\" needs `elem`".into()))?;
                let pointer = at_expr(&t.pointer)?;
                let owned = at_expr(&t.owned)?;
                let set = Ast::Bin(
                    expr::BinOp::LogAnd,
                    Box::new(owned.v),
                    Box::new(Ast::Bin(
                        expr::BinOp::Ne,
                        Box::new(pointer.v.clone()),
                        Box::new(Ast::Num(0)),
                    )),
                );
                let len = At {
                    line: owned.line,
                    v: set,
                };
                let heap = At {
                    line: len.line,
                    v: Ast::Bin(
                        expr::BinOp::Mul,
                        Box::new(len.v.clone()),
                        Box::new(Ast::SizeOf(elem.get_ref().clone())),
                    ),
                };
                Layout::Array(ArrayDesc {
                    owned: false,
                    data: pointer,
                    len,
                    cap: None,
                    heap,
                    inline: None,
                    swiss: None,
                    chains: None,
                    btree: None,
                })
            }
            "node_chains" => {
                let t = c.node_chains.as_ref().ok_or_else(|| {
                    err(
                        lline,
                        "layout \"node_chains\" needs a [container.node_chains] table".into(),
                    )
                })?;
                Layout::Array(ArrayDesc {
                    owned: false,
                    data: at_expr(&t.buckets)?,
                    len: at_expr(&t.len)?,
                    cap: Some(at_expr(&t.bucket_count)?),
                    heap: at_expr(&t.heap)?,
                    inline: None,
                    swiss: None,
                    chains: Some(ChainsDesc {
                        next_offset: at_expr(&t.next_offset)?,
                        value_offset: at_expr(&t.value_offset)?,
                        node_size: at_expr(&t.node_size)?,
                        tree: match &t.tree {
                            None => None,
                            Some(tr) => Some(ChainTreeDesc {
                                size: at_expr(&tr.size)?,
                                root: at_expr(&tr.root)?,
                                node_size: at_expr(&tr.node_size)?,
                                chain: at_expr(&tr.chain)?,
                            }),
                        },
                    }),
                    btree: None,
                })
            }
            "control_bytes" => {
                let t = c.control_bytes.as_ref().ok_or_else(|| {
                    err(
                        lline,
                        "layout \"control_bytes\" needs a [container.control_bytes] table".into(),
                    )
                })?;
                Layout::Array(ArrayDesc {
                    owned: t.owned_slots,
                    data: at_expr(&t.slots)?,
                    len: at_expr(&t.len)?,
                    cap: Some(at_expr(&t.capacity)?),
                    heap: at_expr(&t.heap)?,
                    inline: None,
                    swiss: Some(SwissDesc {
                        ctrl: at_expr(&t.ctrl)?,
                        full: at_expr(&t.full)?,
                        ctrl_at: t.ctrl_at.as_ref().map(&at_expr).transpose()?,
                    }),
                    chains: None,
                    btree: None,
                })
            }
            "btree" => {
                let t = c.btree.as_ref().ok_or_else(|| {
                    err(
                        lline,
                        "layout \"btree\" needs a [container.btree] table".into(),
                    )
                })?;
                let len = at_expr(&t.len)?;
                Layout::Array(ArrayDesc {
                    owned: false,
                    data: at_expr(&t.root)?,
                    heap: At {
                        line: len.line,
                        v: Ast::Num(0),
                    },
                    len,
                    cap: None,
                    inline: None,
                    swiss: None,
                    chains: None,
                    btree: Some(BtreeDesc {
                        start: at_expr(&t.start)?,
                        finish: at_expr(&t.finish)?,
                        leaf: at_expr(&t.leaf)?,
                        node_size: at_expr(&t.node_size)?,
                        values_offset: at_expr(&t.values_offset)?,
                        node_slots: at_expr(&t.node_slots)?,
                        children_offset: at_expr(&t.children_offset)?,
                    }),
                })
            }
            other => {
                return Err(err(
                    lline,
                    format!(
                        "unknown layout \"{other}\" (this build knows \"array\", \"owned_pointers\", \"control_bytes\", \"tagged_pointer\", \"node_chains\", \"btree\")"
                    ),
                ));
            }
        };
        out.push(Description {
            file: file.to_string(),
            line,
            name: c.name.get_ref().clone(),
            args: c.args.clone(),
            elem: c.elem.as_ref().map(|e| At {
                line: line_of(text, e.span().start),
                v: e.get_ref().clone(),
            }),
            fields,
            layout,
            shipped: false,
        });
    }
    let owned = raw
        .owned
        .iter()
        .map(|o| OwnedRule {
            file: file.to_string(),
            line: line_of(text, o.holder.span().start),
            holder: o.holder.get_ref().clone(),
            pointee_base: o.pointee_base.clone(),
        })
        .collect();
    let mut unions = Vec::new();
    for u in &raw.union {
        let line = line_of(text, u.holder.span().start);
        let at = |s: &Spanned<String>| At {
            line: line_of(text, s.span().start),
            v: s.get_ref().clone(),
        };
        let cases = match (&u.cases, &u.cases_enum) {
            (Some(list), None) => {
                let mut cases = Vec::new();
                for (key, m) in list.get_ref() {
                    let cline = line_of(text, m.span().start);
                    let value = super::rule::parse_case_value(key)
                        .ok_or_else(|| err(cline, format!("case `{key}` is not an integer")))?;
                    let member = Some(m.get_ref().clone()).filter(|m| m != "none");
                    cases.push(At {
                        line: cline,
                        v: (value, member),
                    });
                }
                if cases.is_empty() {
                    return Err(err(line_of(text, list.span().start), "no cases".into()));
                }
                Cases::Listed(cases)
            }
            (None, Some(e)) => Cases::Enum {
                line: line_of(text, e.span().start),
                name: e.get_ref().name.clone(),
                enumerator: e.get_ref().enumerator.clone(),
            },
            _ => {
                return Err(err(
                    line,
                    "a [[union]] needs either `cases` or `cases_enum`".into(),
                ));
            }
        };
        unions.push(UnionRule {
            file: file.to_string(),
            line,
            holder: u.holder.get_ref().clone(),
            member: at(&u.member),
            discriminator: at(&u.discriminator),
            cases,
            shipped: false,
        });
    }
    Ok(ParsedFile {
        containers: out,
        owned,
        unions,
    })
}

#[cfg(test)]
mod tests;
