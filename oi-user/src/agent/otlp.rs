//! OTLP profiles over HTTP (experimental: the signal is Alpha): each profile as an
//! `ExportProfilesServiceRequest` (`export::otlp::from_pprof`), protobuf-encoded, `POST`ed to
//! `ENDPOINT/v1development/profiles` with `Content-Type: application/x-protobuf`, the resource
//! attributes `service.name`, `process.pid`, `container.id` and `k8s.pod.uid` (when known) and
//! the other labels (`cgroup`, `qos`, the user's) as they are. The tenant and bearer token go
//! along as they do to Pyroscope.
//!
//! Only builds and sends requests; the queue decides when and how often ([`super::queue`]).

use std::{io::Read as _, time::Duration};

use prost::Message as _;

use super::{
    http::Client,
    queue::{Backend, Profile, SendError},
};
use crate::export::{
    otlp::{Process, from_pprof},
    pprof::proto::Profile as Pprof,
};

/// The path of the profiles signal under an OTLP/HTTP endpoint, for the pinned version.
pub const PROFILES_PATH: &str = "/v1development/profiles";

/// One OTLP/HTTP receiver (an OpenTelemetry Collector, Pyroscope's OTLP endpoint).
pub struct Otlp {
    client: Client,
    url: String,
}

impl Otlp {
    /// A client of the endpoint at `base` (`http://collector:4318`).
    pub fn new(
        base: &str,
        tenant: Option<String>,
        token: Option<String>,
        timeout: Duration,
    ) -> Self {
        Self {
            client: Client::new(tenant, token, timeout),
            url: format!("{}{PROFILES_PATH}", base.trim_end_matches('/')),
        }
    }
}

impl Backend for Otlp {
    fn kind(&self) -> &'static str {
        "otlp"
    }

    fn describe(&self) -> String {
        format!("otlp {}", self.url)
    }

    fn send(&mut self, profile: &Profile) -> Result<(), SendError> {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(profile.pprof_gz.as_slice())
            .read_to_end(&mut raw)
            .map_err(|e| SendError::Reject(format!("reading our own profile: {e}")))?;
        let pprof = Pprof::decode(raw.as_slice())
            .map_err(|e| SendError::Reject(format!("decoding our own profile: {e}")))?;
        let labels = &profile.labels;
        let extra: Vec<(String, String)> = labels
            .pairs
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "pid" | "container_id" | "pod_uid"))
            .cloned()
            .collect();
        let request = from_pprof(
            &pprof,
            &Process {
                service_name: &labels.service_name,
                pid: labels.get("pid").and_then(|p| p.parse().ok()),
                container_id: labels.get("container_id"),
                pod_uid: labels.get("pod_uid"),
                extra: &extra,
            },
        );
        let http = self
            .client
            .post(&self.url)
            .header("Content-Type", "application/x-protobuf");
        Client::send(http, &request.encode_to_vec())
    }
}
