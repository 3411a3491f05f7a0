//! The built-in providers, one client per [`ProviderKind`], as one [`Provider`]: the default
//! of every caller. A new provider's client is registered here, and only here.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::prometheus::HttpPrometheus;
use crate::provider::{Endpoint, Provider, ProviderKind, QueryError};

/// The built-in providers, each over HTTP: the default [`Provider`], which asks each endpoint
/// through the client of its [`ProviderKind`].
#[derive(Debug, Clone, Default)]
pub struct Providers {
    prometheus: HttpPrometheus,
}

impl Provider for Providers {
    fn query<'a>(
        &'a self,
        endpoint: &'a Endpoint,
        query: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<f64, QueryError>> {
        match endpoint.provider {
            ProviderKind::Prometheus => self.prometheus.query(endpoint, query, timeout),
        }
    }
}
