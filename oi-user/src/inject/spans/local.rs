//! The stubs in oi-trace's own process: a data part and stubs around this process's own
//! functions, mapped here instead of in a target, for the tests and the bench. A stub is
//! called instead of the function it hooks (there is no patched entry here), which is what
//! the patched entry's `jmp` does.
//!
//! Code is written while read-write, then made read-execute (`record::local::executable`).

use oi_common::inject::spans::SpansLayout;

use super::{
    Result, SpansError,
    nodes::Nodes,
    reader::{self, AreaTotals, Drained, View},
    stubs::{self, ENTRY_MAX, EXIT_MAX, Place, UNWIND_MAX, Unwinding},
};
use crate::inject::record::{
    clock::ns_per_tick_q32,
    local::{Mapping, executable},
};

/// One function to hook: its id in events, whether it is the entry function, and the code
/// that runs it (its own address here). `unwinding`: it is one of the runtime's unwinding
/// entry points instead (`function` and `window` unused).
#[derive(Debug, Clone, Copy)]
pub struct Hook {
    pub function: u32,
    pub window: bool,
    pub original: u64,
    pub unwinding: Option<Unwinding>,
}

/// Room for one stub.
const ROOM: usize = if ENTRY_MAX > UNWIND_MAX {
    ENTRY_MAX
} else {
    UNWIND_MAX
};

/// A data part and stubs in this process.
pub struct LocalSpans {
    layout: SpansLayout,
    data: Mapping,
    _code: Mapping,
    entries: Vec<u64>,
    exit: u64,
}

impl LocalSpans {
    pub fn new(layout: SpansLayout, hooks: &[Hook]) -> Result<LocalSpans> {
        let local = |e: crate::inject::record::RecordError| SpansError::Local(e.to_string());
        let mut data = Mapping::anonymous(layout.size() as usize).map_err(local)?;
        data.write(0, &layout.header(ns_per_tick_q32()).to_bytes())
            .map_err(local)?;
        let data_addr = data.addr();
        let mut entries = Vec::new();
        let mut exit = 0;
        let code = executable(EXIT_MAX + ROOM * hooks.len(), |at| {
            let place = Place {
                data: data_addr,
                layout,
                exit: at,
            };
            let mut bytes = stubs::exit_stub(place)
                .map_err(|e| crate::inject::record::RecordError::Local(e.to_string()))?;
            bytes.resize(EXIT_MAX, 0xcc);
            for h in hooks {
                let stub_at = at + bytes.len() as u64;
                let stub = match h.unwinding {
                    None => stubs::entry_stub(place, stub_at, h.function, h.window, h.original),
                    Some(what) => stubs::unwind_stub(place, stub_at, what, h.original),
                };
                let mut stub =
                    stub.map_err(|e| crate::inject::record::RecordError::Local(e.to_string()))?;
                stub.resize(ROOM, 0xcc);
                bytes.extend(stub);
                entries.push(stub_at);
            }
            exit = at;
            Ok(bytes)
        })
        .map_err(local)?;
        Ok(LocalSpans {
            layout,
            data,
            _code: code,
            entries,
            exit,
        })
    }

    /// The entry stub of the `i`th hook.
    pub fn entry(&self, i: usize) -> u64 {
        self.entries[i]
    }

    pub fn exit(&self) -> u64 {
        self.exit
    }

    pub fn layout(&self) -> SpansLayout {
        self.layout
    }

    pub fn view(&self) -> View {
        // SAFETY: our own read-write mapping of the data part, page aligned, alive as long as
        // `self`, which the view's users do not outlive.
        unsafe { View::new(self.data.addr() as *mut u8, self.data.len()) }
    }

    /// Drains the rings into `nodes`.
    pub fn drain_into(&self, nodes: &mut Nodes) -> Drained {
        reader::drain(self.view(), self.layout, &mut |thread, e| {
            nodes.event(thread, e)
        })
    }

    pub fn totals(&self) -> AreaTotals {
        reader::totals(self.view(), self.layout)
    }
}
