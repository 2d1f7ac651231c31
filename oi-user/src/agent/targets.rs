//! The agent's targets: the processes of `--pid`, each with its labels. Reads
//! `/proc/PID/comm` once at start; never attaches anything (each target's profiler does).

use super::labels::{Labels, service_name_from, valid_service_name};
use crate::{
    cli::agent::AgentArgs,
    error::{Error, Result},
    inferior::ProcessInfo,
};

/// One process the agent profiles.
#[derive(Debug, Clone)]
pub struct Target {
    pub pid: i32,
    /// Its command name, for messages.
    pub comm: String,
    pub labels: Labels,
}

/// The targets of `args`, with `--service-name` (or each command name) and `--label`s; an
/// unknown pid, a repeated one or a bad label is an input error.
pub fn resolve(args: &AgentArgs, extra: &[(String, String)]) -> Result<Vec<Target>> {
    if let Some(name) = &args.service_name
        && !valid_service_name(name)
    {
        return Err(Error::input(format!(
            "--service-name {name:?}: a service name is letters, digits, '_', '.', '-' and '/'"
        )));
    }
    let mut targets: Vec<Target> = Vec::new();
    for &pid in &args.pids {
        if targets.iter().any(|t| t.pid == pid) {
            return Err(Error::input(format!("--pid {pid} is given twice")));
        }
        let info = ProcessInfo::inspect(pid)?;
        let service_name = args
            .service_name
            .clone()
            .unwrap_or_else(|| service_name_from(&info.comm));
        let mut pairs = vec![("pid".to_string(), pid.to_string())];
        pairs.extend(extra.iter().cloned());
        targets.push(Target {
            pid,
            comm: info.comm,
            labels: Labels {
                service_name,
                pairs,
            },
        });
    }
    Ok(targets)
}
