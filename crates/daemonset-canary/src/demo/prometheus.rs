//! The demo's Prometheus: the simulator's stand-in ([`SimPrometheus`]) behind the controller's
//! [`Provider`], so that a demo rollout with `spec.analysis` is judged by the error ratio its
//! simulated pods report, with no server.

use std::time::Duration;

use canary_analysis::{Endpoint, Provider, QueryError};
use canary_sim::{SimPrometheus, SimQueryError};
use futures::future::BoxFuture;

/// The address the demo's analysis names; the stand-in answers whatever address it is given.
pub const DEMO_PROMETHEUS: &str = "http://prometheus.demo.svc:9090";

/// [`Provider`] answered by the simulator.
#[derive(Debug, Clone)]
pub struct SimQueries(pub SimPrometheus);

impl Provider for SimQueries {
    fn query<'a>(
        &'a self,
        _endpoint: &'a Endpoint,
        promql: &'a str,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<f64, QueryError>> {
        let answer = self.0.query(promql).map_err(|error| match error {
            SimQueryError::NoData => QueryError::NoData,
            SimQueryError::NoNodeMatcher => QueryError::Refused {
                status: 400,
                error: error.to_string(),
            },
        });
        Box::pin(std::future::ready(answer))
    }
}
