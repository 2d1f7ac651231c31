//! The one HTTP client of the delivery backends (Pyroscope, OTLP): a `ureq` agent with the
//! agent's timeout and user agent; each request carries the tenant (`X-Scope-OrgID`) and the
//! bearer token when given, and an answer is sorted the same way for every backend: 2xx is
//! delivered; 5xx, 408 and 429 are tried again; anything else is rejected, with the status and
//! the first 512 bytes of the body.

use std::time::Duration;

use ureq::{RequestBuilder, typestate::WithBody};

use super::queue::SendError;

pub struct Client {
    agent: ureq::Agent,
    tenant: Option<String>,
    token: Option<String>,
}

impl Client {
    pub fn new(tenant: Option<String>, token: Option<String>, timeout: Duration) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .user_agent(concat!("oi-trace/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Self {
            agent,
            tenant,
            token,
        }
    }

    /// A `POST` to `url`, with the tenant and the token.
    pub fn post(&self, url: &str) -> RequestBuilder<WithBody> {
        let mut request = self.agent.post(url);
        if let Some(tenant) = &self.tenant {
            request = request.header("X-Scope-OrgID", tenant);
        }
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        request
    }

    /// Sends `request` with `body`, and sorts the answer.
    pub fn send(request: RequestBuilder<WithBody>, body: &[u8]) -> Result<(), SendError> {
        let mut response = request
            .send(body)
            .map_err(|e| SendError::Retry(e.to_string()))?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let text = response
            .body_mut()
            .with_config()
            .limit(512)
            .read_to_vec()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let why = format!("HTTP {status}: {}", text.trim());
        // The answers OTLP/HTTP and Pyroscope call retryable, and any other server error.
        if status >= 500 || status == 408 || status == 429 {
            Err(SendError::Retry(why))
        } else {
            Err(SendError::Reject(why))
        }
    }
}
