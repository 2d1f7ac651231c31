//! The one place where failures become exit statuses (ARCHITECTURE.md, "Errors": 0 ok,
//! 1 a sample failed or the target went away, 2 bad usage or input; and OI's 6 when the only
//! failed samples are samples of several arguments none of which could be measured).

use std::process::ExitCode;

/// A failure of the whole run, phrased for the user: `main` prints it as one line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad usage or input: no such pid, symbol, argument, no debug info, missing privileges.
    #[error("{0}")]
    Input(String),
    /// A sample failed or the target went away while we were tracing it.
    #[error("{0}")]
    Sample(String),
    /// Samples of probes with several arguments measured none of them (exit 6, the status
    /// Object Introspection's oid ends with when it has nothing to output).
    #[error("{0}")]
    NothingMeasured(String),
    /// Something the tracer itself could not do (kernel refused a map, I/O on our own files).
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn input(msg: impl Into<String>) -> Self {
        Self::Input(msg.into())
    }

    pub fn sample(msg: impl Into<String>) -> Self {
        Self::Sample(msg.into())
    }

    pub fn internal(msg: impl Into<String>) -> Self {
        Self::Internal(msg.into())
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Self::Input(_) => ExitCode::from(2),
            Self::Sample(_) | Self::Internal(_) => ExitCode::from(1),
            Self::NothingMeasured(_) => ExitCode::from(NOTHING_MEASURED),
        }
    }
}

/// Exit status when every failed sample failed on each of its several arguments: OI's
/// integration suite expects oid's 6 there (`multi_arg.tb_all_fail_crashes`).
pub const NOTHING_MEASURED: u8 = 6;

pub type Result<T, E = Error> = std::result::Result<T, E>;
