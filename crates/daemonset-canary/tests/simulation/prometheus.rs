//! The fake Prometheus of the simulation: the demo's ([`SimQueries`], canary-sim's stand-in
//! behind the controller's [`QueryApi`]: the agents' error ratio per node, from the pods), with
//! the plan's outage (unreachable) and slow answers (late, past the query's timeout: a
//! timeout), in virtual time.

use std::time::Duration;

use canary_kube_adapter::analysis::{QueryApi, QueryError};
use daemonset_canary::demo::prometheus::SimQueries;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::plan::AnalysisPlan;

/// See the module documentation.
#[derive(Debug)]
pub struct FakePrometheus {
    sim: SimQueries,
    plan: AnalysisPlan,
    start: Instant,
}

impl FakePrometheus {
    /// Answers from `sim` as `plan` says, its times counted from `start`.
    pub fn new(sim: SimQueries, plan: AnalysisPlan, start: Instant) -> Self {
        Self { sim, plan, start }
    }

    fn within(&self, window: Option<(Duration, Duration)>) -> bool {
        let now = self.start.elapsed();
        window.is_some_and(|(at, length)| now >= at && now < at + length)
    }
}

impl QueryApi for FakePrometheus {
    fn query<'a>(
        &'a self,
        address: &'a str,
        promql: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<f64, QueryError>> {
        Box::pin(async move {
            if self.within(self.plan.outage) {
                return Err(QueryError::Unreachable("connection refused".to_owned()));
            }
            if let Some((at, length, delay)) = self.plan.slow
                && self.within(Some((at, length)))
            {
                if delay >= timeout {
                    tokio::time::sleep(timeout).await;
                    return Err(QueryError::Timeout(timeout));
                }
                tokio::time::sleep(delay).await;
            }
            self.sim.query(address, promql, timeout).await
        })
    }
}
