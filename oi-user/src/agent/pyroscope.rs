//! Pyroscope's HTTP ingest API (also what Grafana Alloy's `pyroscope.receive_http` serves):
//! `POST URL/ingest?name=SERVICE{k=v,…}&from=S&until=S&format=pprof&spyName=oi-trace`, the
//! gzipped pprof as the `profile` field of a `multipart/form-data` body (the form every
//! Pyroscope version reads; the newer ones read a bare body too), `from` and `until` in Unix
//! seconds, the tenant in `X-Scope-OrgID`, a bearer token in `Authorization`.
//!
//! Only builds and sends requests; the queue decides when and how often ([`super::queue`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{
    http::Client,
    queue::{Backend, Profile, SendError},
};

/// One Pyroscope server.
pub struct Pyroscope {
    client: Client,
    base: String,
}

impl Pyroscope {
    /// A client of the server at `base` (`http://host:4040`, a path prefix allowed).
    pub fn new(
        base: &str,
        tenant: Option<String>,
        token: Option<String>,
        timeout: Duration,
    ) -> Self {
        Self {
            client: Client::new(tenant, token, timeout),
            base: base.trim_end_matches('/').to_string(),
        }
    }
}

/// Whether `url` is one the agent can send to: `http://` or `https://` and a host.
pub fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("{url:?} is not an http:// or https:// URL"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{url:?} names no host"));
    }
    if url.contains(['?', '#']) {
        return Err(format!(
            "{url:?}: give the server's address, without a query"
        ));
    }
    Ok(())
}

/// Unix seconds of `t`.
pub fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// A `multipart/form-data` body with the one field `profile` holding `pprof_gz`, and its
/// content type. The boundary is chosen not to occur in the data.
pub fn form(pprof_gz: &[u8]) -> (String, Vec<u8>) {
    let mut seed = [0u8; 12];
    let mut boundary;
    loop {
        // A fixed boundary would do but for data that happens to hold it.
        let _ = getrandom::fill(&mut seed);
        boundary = format!(
            "oi-trace-{}",
            seed.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        if !pprof_gz
            .windows(boundary.len())
            .any(|w| w == boundary.as_bytes())
        {
            break;
        }
    }
    let mut body = Vec::with_capacity(pprof_gz.len() + 256);
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"profile\"; \
             filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(pprof_gz);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

impl Backend for Pyroscope {
    fn kind(&self) -> &'static str {
        "pyroscope"
    }

    fn describe(&self) -> String {
        format!("pyroscope {}", self.base)
    }

    fn send(&mut self, profile: &Profile) -> Result<(), SendError> {
        let (content_type, body) = form(&profile.pprof_gz);
        let from = unix_seconds(profile.from);
        // A range of at least one second: Pyroscope reads `until` as exclusive.
        let until = unix_seconds(profile.until).max(from + 1);
        let request = self
            .client
            .post(&format!("{}/ingest", self.base))
            .query("name", profile.labels.pyroscope_name())
            .query("from", from.to_string())
            .query("until", until.to_string())
            .query("format", "pprof")
            .query("spyName", "oi-trace")
            .header("Content-Type", content_type);
        Client::send(request, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_forms() {
        assert!(check_url("http://127.0.0.1:4040").is_ok());
        assert!(check_url("https://profiles.example.com/prefix").is_ok());
        assert!(check_url("ftp://x").is_err());
        assert!(check_url("http://").is_err());
        assert!(check_url("http://x/?a=b").is_err());
        let (ct, body) = form(b"\x1f\x8bdata");
        let boundary = ct.strip_prefix("multipart/form-data; boundary=").unwrap();
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with(&format!("--{boundary}\r\n")));
        assert!(text.contains("name=\"profile\""));
        assert!(text.ends_with(&format!("\r\n--{boundary}--\r\n")));
        assert!(body.windows(6).any(|w| w == b"\x1f\x8bdata"));
    }
}
