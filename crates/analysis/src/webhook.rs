//! One JSON POST to a webhook (the controller's notifications, issue 51), on the same hyper
//! and rustls clients as the Prometheus provider ([`HttpPrometheus`]): one HTTP stack in the
//! controller, one way of verifying TLS, one cut of outside text.
//!
//! # Invariants
//!
//! - Every request has a deadline (`timeout`): a receiver that does not answer is an error
//!   after it, never a hang.
//! - An answer's body is never read beyond the 64 KiB of a Prometheus answer and is not
//!   returned: only the status code is.
//! - An error names neither the URL nor a header (a Slack URL or an `Authorization` header is
//!   a secret): its text is the connection error's, cut to
//!   [`OUTSIDE_TEXT_BYTES`](canary_state_machine::OUTSIDE_TEXT_BYTES).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};

use canary_state_machine::{OUTSIDE_TEXT_BYTES, cut};

use crate::HttpPrometheus;

/// Why a webhook POST had no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// Not an `http://` or `https://` URL, or a header that cannot be sent.
    #[error("the receiver's request cannot be built: {0}")]
    BadRequest(String),
    /// The TLS configuration could not be built.
    #[error("TLS: {0}")]
    Tls(String),
    /// No connection, or the connection broke.
    #[error("the receiver is unreachable: {0}")]
    Unreachable(String),
    /// No answer within the timeout.
    #[error("the receiver did not answer within {0:?}")]
    Timeout(Duration),
}

impl WebhookError {
    /// Whether sending again later may succeed (an unreachable or slow receiver), unlike a
    /// request that cannot be built.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            WebhookError::Unreachable(_) | WebhookError::Timeout(_)
        )
    }
}

impl HttpPrometheus {
    /// POSTs `body` (JSON) to `url` with `headers`, within `timeout`; the answer's status code.
    ///
    /// # Errors
    ///
    /// [`WebhookError`]: no answer (its text never holds the URL or a header).
    pub async fn post_json(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<u16, WebhookError> {
        match tokio::time::timeout(timeout, self.post_json_now(url, headers, body)).await {
            Ok(answer) => answer,
            Err(_) => Err(WebhookError::Timeout(timeout)),
        }
    }

    async fn post_json_now(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> Result<u16, WebhookError> {
        let uri: hyper::Uri = url
            .parse()
            .map_err(|_| WebhookError::BadRequest("the URL does not parse".to_owned()))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(WebhookError::BadRequest(
                    "the URL is not http:// or https://".to_owned(),
                ));
            }
        };
        let mut request = hyper::Request::post(uri)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::USER_AGENT, "daemonset-canary");
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        // The builder's error names the header, never its value.
        let request = request.body(Full::new(Bytes::from(body))).map_err(|e| {
            WebhookError::BadRequest(cut(&e.to_string(), OUTSIDE_TEXT_BYTES).into_owned())
        })?;
        let sent = if https {
            self.https_client(None)
                .map_err(|e| WebhookError::Tls(e.to_string()))?
                .request(request)
                .await
        } else {
            self.http.request(request).await
        };
        let response = sent.map_err(|e| {
            WebhookError::Unreachable(
                cut(&crate::provider::error_chain(&e), OUTSIDE_TEXT_BYTES).into_owned(),
            )
        })?;
        let status = response.status().as_u16();
        // Drained (up to the cap) so that the connection can be kept; its text is not kept.
        let _ = Limited::new(response.into_body(), crate::prometheus::MAX_ANSWER_BYTES)
            .collect()
            .await;
        Ok(status)
    }
}
