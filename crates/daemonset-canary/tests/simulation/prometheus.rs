//! The fake Prometheus of the simulation: the demo's ([`SimQueries`], canary-sim's stand-in
//! behind the controller's [`Provider`]: the agents' error ratio per node, from the pods), with
//! the plan's outage (unreachable), slow answers (late, past the query's timeout: a timeout)
//! and stretch without data (an empty vector), in virtual time. With the plan's bearer token, it accepts only the token the
//! harness wrote last, as a server that revokes a token when it is rotated (401 otherwise), and
//! reports as a violation of invariant 22 a query with no token, with a token never written, or
//! with a rotated one after [`ROTATION_GRACE`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use canary_analysis::{Endpoint, Provider, QueryError};
use daemonset_canary::demo::prometheus::SimQueries;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::plan::AnalysisPlan;
use super::world::{Invariant, World};

/// The bearer tokens the harness has written to the Secret and when, oldest first.
pub type Tokens = Arc<Mutex<Vec<(String, Instant)>>>;

/// How long a rotated token may still be sent: a round that read the Secret just before the
/// rotation asks its query and its baseline query, each within the timeout.
pub const ROTATION_GRACE: Duration =
    Duration::from_secs(2 * super::plan::ANALYSIS_TIMEOUT.as_secs() + 1);

/// See the module documentation.
#[derive(Debug)]
pub struct FakePrometheus {
    sim: SimQueries,
    plan: AnalysisPlan,
    start: Instant,
    tokens: Tokens,
    world: World,
}

impl FakePrometheus {
    /// Answers from `sim` as `plan` says, its times counted from `start`.
    pub fn new(
        sim: SimQueries,
        plan: AnalysisPlan,
        start: Instant,
        tokens: Tokens,
        world: World,
    ) -> Self {
        Self {
            sim,
            plan,
            start,
            tokens,
            world,
        }
    }

    /// Invariant 22: the token of `endpoint` is one the harness wrote, or there is none when
    /// the plan has none. A query that breaks it is refused, as a server would.
    fn check_token(&self, endpoint: &Endpoint) -> Result<(), QueryError> {
        let sent = endpoint.bearer_token.as_deref();
        let unauthorized = || QueryError::Refused {
            status: 401,
            error: "Unauthorized".to_owned(),
        };
        let broken = match (&self.plan.token, sent) {
            (None, None) => return Ok(()),
            (None, Some(_)) => "a token, though the plan has none".to_owned(),
            (Some(_), None) => "no token".to_owned(),
            (Some(_), Some(sent)) => {
                let tokens = self
                    .tokens
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if tokens.last().is_some_and(|(last, _)| last == sent) {
                    return Ok(());
                }
                // Rotated: when its successor was written.
                let rotated = tokens
                    .windows(2)
                    .find(|pair| pair[0].0 == sent)
                    .map(|pair| pair[1].1);
                match rotated {
                    Some(at) if at.elapsed() <= ROTATION_GRACE => return Err(unauthorized()),
                    Some(at) => format!(
                        "a token rotated {:?} ago (the Secret holds a new one)",
                        at.elapsed()
                    ),
                    None => "a token the Secret never held".to_owned(),
                }
            }
        };
        self.world.violate(
            Invariant::QueriesCarryTheToken,
            format!("a query to {} with {broken}", endpoint.address),
        );
        Err(unauthorized())
    }

    fn within(&self, window: Option<(Duration, Duration)>) -> bool {
        let now = self.start.elapsed();
        window.is_some_and(|(at, length)| now >= at && now < at + length)
    }
}

impl Provider for FakePrometheus {
    fn query<'a>(
        &'a self,
        endpoint: &'a Endpoint,
        promql: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<f64, QueryError>> {
        Box::pin(async move {
            self.check_token(endpoint)?;
            if self.within(self.plan.outage) {
                return Err(QueryError::Unreachable("connection refused".to_owned()));
            }
            if self.within(self.plan.no_data) {
                return Err(QueryError::NoData);
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
            self.sim.query(endpoint, promql, timeout).await
        })
    }
}
