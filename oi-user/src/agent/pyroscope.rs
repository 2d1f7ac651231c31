//! Grafana Pyroscope, by either of its two write APIs:
//!
//! - **ingest** (the default; also what Grafana Alloy's `pyroscope.receive_http` serves):
//!   `POST URL/ingest?name=SERVICE{k=v,…}&from=S&until=S&format=pprof&spyName=oi-trace`, the
//!   gzipped pprof as the `profile` field of a `multipart/form-data` body (the form every
//!   Pyroscope version reads; the newer ones read a bare body too), `from` and `until` in Unix
//!   seconds;
//! - **push** (`push.v1.PusherService/Push`, what Alloy's `pyroscope.write` and the SDKs use):
//!   `POST URL/push.v1.PusherService/Push` as a Connect unary call (`Content-Type:
//!   application/proto`), a `PushRequest` of one series whose labels are `__name__="memory"`
//!   (Go's name for heap profiles, which with the sample types makes Pyroscope's profile type
//!   ids, `memory:alloc_space:bytes:space:bytes`), `service_name` and the target's labels, and
//!   whose one sample is the gzipped pprof with a random id; the time range is the profile's
//!   own `time_nanos` and `duration_nanos`.
//!
//! Both send the tenant in `X-Scope-OrgID` and a bearer token in `Authorization`. Only builds
//! and sends requests; the queue decides when and how often ([`super::queue`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message as _;

pub use crate::cli::agent::PyroscopeApi as Api;

use super::{
    http::Client,
    push_proto::{LabelPair, PushRequest, RawProfileSeries, RawSample},
    queue::{Backend, Profile, SendError},
};

/// The path of the Push API's one call.
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";

/// One Pyroscope server.
pub struct Pyroscope {
    client: Client,
    base: String,
    api: Api,
}

impl Pyroscope {
    /// A client of the server at `base` (`http://host:4040`, a path prefix allowed).
    pub fn new(
        base: &str,
        api: Api,
        tenant: Option<String>,
        token: Option<String>,
        timeout: Duration,
    ) -> Self {
        Self {
            client: Client::new(tenant, token, timeout),
            base: base.trim_end_matches('/').to_string(),
            api,
        }
    }
}

/// The Push API's request for one profile: one series, one sample.
pub fn push_request(profile: &Profile) -> Vec<u8> {
    let pair = |name: &str, value: &str| LabelPair {
        name: name.to_string(),
        value: value.to_string(),
    };
    let mut labels = vec![
        pair("__name__", "memory"),
        pair("service_name", &profile.labels.service_name),
    ];
    labels.extend(profile.labels.pairs.iter().map(|(k, v)| pair(k, v)));
    PushRequest {
        series: vec![RawProfileSeries {
            labels,
            samples: vec![RawSample {
                raw_profile: profile.pprof_gz.clone(),
                id: random_uuid(),
            }],
        }],
    }
    .encode_to_vec()
}

/// A random (version 4) UUID, as the Push API's sample ids are.
fn random_uuid() -> String {
    let mut b = [0u8; 16];
    let _ = getrandom::fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
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
        if self.api == Api::Push {
            let request = self
                .client
                .post(&format!("{}{PUSH_PATH}", self.base))
                .header("Content-Type", "application/proto")
                .header("Connect-Protocol-Version", "1");
            return Client::send(request, &push_request(profile));
        }
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

    #[test]
    fn a_push_request_holds_the_labels_and_the_profile() {
        let profile = Profile {
            labels: std::sync::Arc::new(crate::agent::labels::Labels {
                service_name: "shop".into(),
                pairs: vec![("pid".into(), "42".into()), ("env".into(), "prod".into())],
            }),
            from: SystemTime::UNIX_EPOCH,
            until: SystemTime::UNIX_EPOCH,
            pprof_gz: b"\x1f\x8bdata".to_vec(),
        };
        let request = PushRequest::decode(push_request(&profile).as_slice()).unwrap();
        let [series] = &request.series[..] else {
            panic!("{request:?}")
        };
        let labels: Vec<(&str, &str)> = series
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("__name__", "memory"),
                ("service_name", "shop"),
                ("pid", "42"),
                ("env", "prod")
            ]
        );
        let [sample] = &series.samples[..] else {
            panic!("{series:?}")
        };
        assert_eq!(sample.raw_profile, b"\x1f\x8bdata");
        assert_eq!(sample.id.len(), 36);
        assert_eq!(&sample.id[14..15], "4");
    }
}
