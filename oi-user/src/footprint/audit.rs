//! A record of every injection: each time oi-trace maps code into a process, one line goes to
//! syslog (the journal, where one runs), facility authpriv, and to `--audit-log FILE` when
//! given. It names who injected (oi-trace's pid and uid), into what (the target's pid,
//! executable and cgroup), for which probes, which code (a BLAKE3 digest of the exact bytes
//! mapped) and where (the region's addresses).
//!
//! `libc::syslog` is called directly: the line is one call, and the crates that wrap it add a
//! logger framework we do not need here.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::Once;

/// One mapping of our code into a process.
pub struct Injection<'a> {
    pub tgid: i32,
    pub probes: &'a [String],
    /// BLAKE3 of the code region's bytes as written.
    pub code_digest: &'a [u8; 32],
    pub base: u64,
    pub code_len: u64,
    pub total_len: u64,
}

pub struct Audit {
    file: Option<File>,
}

impl Audit {
    /// Audit to syslog, and to `path` (appended to, created 0600) when given.
    pub fn new(path: Option<&Path>) -> Result<Self, String> {
        let file = path
            .map(|p| {
                OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(p)
                    .map_err(|e| format!("--audit-log {}: {e}", p.display()))
            })
            .transpose()?;
        Ok(Self { file })
    }

    /// Writes the line of `injection` to syslog and the audit file.
    pub fn record(&mut self, injection: &Injection) {
        let line = line(injection);
        to_syslog(&line);
        if let Some(file) = &mut self.file
            && let Err(e) = writeln!(file, "{line}").and_then(|()| file.sync_data())
        {
            eprintln!("oi-trace: warning: could not write the audit log: {e}");
        }
    }
}

/// `injected target_pid=… exe=… cgroup=… tracer_pid=… uid=… euid=… probes=… code=blake3:…
/// region=…-… code_bytes=… region_bytes=…`: one `key=value` per field, keys unique.
fn line(i: &Injection) -> String {
    let exe = std::fs::read_link(format!("/proc/{}/exe", i.tgid))
        .map_or_else(|_| "?".to_string(), |p| p.display().to_string());
    let cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", i.tgid))
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        })
        .unwrap_or_else(|| "?".into());
    let digest: String = i.code_digest.iter().map(|b| format!("{b:02x}")).collect();
    // SAFETY: getuid has no preconditions and cannot fail.
    let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
    format!(
        "injected target_pid={} exe={} cgroup={} tracer_pid={} uid={uid} euid={euid} probes={} \
         code=blake3:{digest} region={:#x}-{:#x} code_bytes={} region_bytes={}",
        i.tgid,
        quoted(&exe),
        quoted(&cgroup),
        std::process::id(),
        quoted(&i.probes.join(",")),
        i.base,
        i.base + i.total_len,
        i.code_len,
        i.total_len,
    )
}

/// Paths and C++ names may hold spaces: quote them so the line splits on fields.
fn quoted(s: &str) -> String {
    if s.contains([' ', '"', '\n']) {
        format!("{s:?}")
    } else {
        s.to_string()
    }
}

fn to_syslog(line: &str) {
    static OPEN: Once = Once::new();
    OPEN.call_once(|| {
        // SAFETY: the identity is a static C string that lives as long as the process.
        unsafe {
            libc::openlog(
                c"oi-trace".as_ptr(),
                libc::LOG_PID | libc::LOG_NDELAY,
                libc::LOG_AUTHPRIV,
            );
        }
    });
    let Ok(message) = CString::new(line.replace('\0', " ")) else {
        return;
    };
    // SAFETY: a constant "%s" format with one NUL-terminated argument.
    unsafe {
        libc::syslog(
            libc::LOG_NOTICE | libc::LOG_AUTHPRIV,
            c"%s".as_ptr(),
            message.as_ptr(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_every_field() {
        let probes = vec!["shop::inspect(Ledger const&)".to_string()];
        let line = line(&Injection {
            tgid: std::process::id() as i32,
            probes: &probes,
            code_digest: &[0xab; 32],
            base: 0x7000_0000,
            code_len: 0x1000,
            total_len: 0x10000,
        });
        let me = std::process::id();
        assert!(
            line.starts_with(&format!("injected target_pid={me} exe=/")),
            "{line}"
        );
        assert!(line.contains(&format!(" tracer_pid={me} uid=")), "{line}");
        assert!(line.contains(" cgroup=/"), "{line}");
        assert!(
            line.contains(r#"probes="shop::inspect(Ledger const&)""#),
            "{line}"
        );
        assert!(
            line.contains(&format!("code=blake3:{}", "ab".repeat(32))),
            "{line}"
        );
        assert!(
            line.contains("region=0x70000000-0x70010000 code_bytes=4096"),
            "{line}"
        );
    }
}
