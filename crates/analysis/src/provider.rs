//! The one trait every analysis provider implements ([`Provider`]: one query in, one number
//! or why not out), what a query is sent to ([`Endpoint`]), and why it gave no number
//! ([`QueryError`]).
//!
//! # Invariants
//!
//! - A run knows providers only through [`Provider`]: the adapter, the binary and the tests
//!   hold an `Arc<dyn Provider>` (by default [`Providers`](crate::Providers)), so a provider
//!   added to this crate reaches them all without a change there.
//! - A bearer token never appears in a `Debug` output ([`Endpoint`]'s hides it).

use std::time::Duration;

use futures::future::BoxFuture;

/// Which kind of server answers a plan's queries (the field of `spec.analysis` that is set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProviderKind {
    /// Prometheus' instant-query API (`spec.analysis.prometheus`), or any server that speaks
    /// it (Thanos Querier, Mimir, VictoriaMetrics).
    #[default]
    Prometheus,
}

impl ProviderKind {
    /// The spec's name of the provider (`prometheus`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Prometheus => "prometheus",
        }
    }
}

/// Why a query gave no number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The address is not an `http://` or `https://` URL.
    #[error("address {0}")]
    BadAddress(String),
    /// The CA certificates cannot be used, or the system has no roots.
    #[error("TLS: {0}")]
    Tls(String),
    /// No connection, or it broke (a certificate the CA does not sign included).
    #[error("Prometheus unreachable: {0}")]
    Unreachable(String),
    /// No answer within the timeout.
    #[error("no answer from Prometheus within {0:?}")]
    Timeout(Duration),
    /// Prometheus refused the query (a PromQL error, a bad request, a token refused).
    #[error("Prometheus answered {status}: {error}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// Prometheus' `errorType: error`, or the start of the body.
        error: String,
    },
    /// The answer is not Prometheus' JSON.
    #[error("undecodable answer: {0}")]
    Undecodable(String),
    /// An empty vector: no series matched.
    #[error("no data (the query matched no series)")]
    NoData,
    /// More than one series: the query needs an aggregation (`sum`, `max`, `avg`).
    #[error("{0} series instead of one; aggregate them (sum, max or avg)")]
    SeveralSeries(usize),
    /// A range vector or a string instead of a number.
    #[error("a {0} instead of a number; use an instant query")]
    NotANumber(String),
}

/// Where a query goes and what proves who asks: read from the spec and its Secrets before
/// each round of measurements.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Endpoint {
    /// Which kind of server this is: which client of [`Providers`](crate::Providers) asks it.
    pub provider: ProviderKind,
    /// The server's base URL.
    pub address: String,
    /// Sent as `Authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
    /// PEM certificates of the CAs that sign the server's certificate (https); `None`: the
    /// system's roots.
    pub ca_pem: Option<Vec<u8>>,
}

impl Endpoint {
    /// A Prometheus endpoint with no credentials.
    pub fn plain(address: &str) -> Self {
        Endpoint {
            address: address.to_owned(),
            ..Endpoint::default()
        }
    }
}

impl std::fmt::Debug for Endpoint {
    /// The token is a secret: only whether there is one shows.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.provider)
            .field("address", &self.address)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<hidden>"),
            )
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .finish()
    }
}

/// An analysis provider: asks one query of the server of an endpoint and gives one number, or
/// why there is none. A trait so that tests and the deterministic simulation can answer
/// without a server, and so that a run never knows which provider it asks.
pub trait Provider: std::fmt::Debug + Send + Sync + 'static {
    /// The value of `query` now, from the server of `endpoint`, within `timeout`.
    fn query<'a>(
        &'a self,
        endpoint: &'a Endpoint,
        query: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<f64, QueryError>>;
}

/// Every message of `error`'s source chain, each once, joined by `: `, in the form of the
/// adapter's `error::chain` (this crate sits below the adapter; kube's and hyper's messages
/// repeat their source's text, and a part already contained in an earlier one is left out).
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    for text in std::iter::successors(Some(error), |e| e.source()).map(ToString::to_string) {
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}
