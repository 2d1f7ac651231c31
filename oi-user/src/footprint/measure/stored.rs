//! The measurer as the plan cache stores it: the plan and each argument's root and location,
//! serialised, and read back. A stored measurer that does not parse is none (rebuilt), never
//! trusted in part.

use super::*;

/// A [`Measurer`] as the plan cache stores it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    plan: Plan,
    args: Vec<StoredArg>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StoredArg {
    name: String,
    param: Option<String>,
    root: NodeId,
    location: StoredLocation,
    deref: bool,
    size: u64,
}

/// The [`Location`]s a built measurer can hold (unavailable ones are refused when building).
#[derive(serde::Serialize, serde::Deserialize)]
enum StoredLocation {
    Regs(Vec<usize>),
    Stack(u64),
    Indirect(usize),
    At(usize, i64),
    Computed(usize, i64),
    Address(u64),
    Constant(u64),
}

impl Measurer {
    /// The bytes the plan cache stores; `None` for a measurer it cannot hold.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        let args = self
            .args
            .iter()
            .map(|a| {
                let location = match &a.location {
                    Location::Regs(r) => StoredLocation::Regs(r.clone()),
                    Location::Stack(o) => StoredLocation::Stack(*o),
                    Location::Indirect(r) => StoredLocation::Indirect(*r),
                    Location::At { reg, offset } => StoredLocation::At(*reg, *offset),
                    Location::Computed { reg, offset } => StoredLocation::Computed(*reg, *offset),
                    Location::Address(a) => StoredLocation::Address(*a),
                    Location::Constant(c) => StoredLocation::Constant(*c),
                    Location::Unavailable(_) => return None,
                };
                Some(StoredArg {
                    name: a.name.clone(),
                    param: a.param.clone(),
                    root: a.root,
                    location,
                    deref: a.deref,
                    size: a.size,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        serde_json::to_vec(&Stored {
            plan: self.plan.clone(),
            args,
        })
        .ok()
    }

    /// A measurer from [`Self::to_bytes`]; `None` for anything else. (The plan cache checks
    /// a checksum first: a damaged file is rebuilt, never trusted.)
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let stored: Stored = serde_json::from_slice(bytes).ok()?;
        let nodes = stored.plan.nodes.len();
        let args: Vec<ArgPlan> = stored
            .args
            .into_iter()
            .map(|a| ArgPlan {
                name: a.name,
                param: a.param,
                root: a.root,
                location: match a.location {
                    StoredLocation::Regs(r) => Location::Regs(r),
                    StoredLocation::Stack(o) => Location::Stack(o),
                    StoredLocation::Indirect(r) => Location::Indirect(r),
                    StoredLocation::At(reg, offset) => Location::At { reg, offset },
                    StoredLocation::Computed(reg, offset) => Location::Computed { reg, offset },
                    StoredLocation::Address(a) => Location::Address(a),
                    StoredLocation::Constant(c) => Location::Constant(c),
                },
                deref: a.deref,
                size: a.size,
            })
            .collect();
        args.iter().all(|a| a.root < nodes).then_some(Self {
            plan: stored.plan,
            args,
        })
    }
}
