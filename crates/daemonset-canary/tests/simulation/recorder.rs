//! A tower layer between one controller replica and the simulator: it logs every request of
//! that replica and checks, at the moment a write is sent, that the replica holds the lease
//! (invariant 7), counts DaemonSet writes per version (invariant 7) and requests per virtual
//! minute (invariant 8), and reads the answer of every pod DELETE: the pod deleted, for
//! invariants 11 (handed to the checker), 12 (no deletion while failed) and 14 (one per UID).

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use canary_sim::{SimService, Store};
use http::{Method, Request, Response};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::Instant;

use super::checker::SharedIntent;
use super::world::{Deleted, Invariant, World};
use super::{LEASE_NAME, NAME, NAMESPACE, VERSION_KEY};

/// What a request is about.
#[derive(Debug, Clone)]
struct Request_ {
    method: Method,
    /// `plural` or `plural/subresource`.
    resource: String,
    watch: bool,
}

impl Request_ {
    fn of<B>(request: &Request<B>) -> Self {
        let path = request.uri().path();
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        // /api/v1/... or /apis/<group>/<version>/...; then optional namespaces/<ns>.
        let rest: &[&str] = match segments.first() {
            Some(&"api") => segments.get(2..).unwrap_or_default(),
            Some(&"apis") => segments.get(3..).unwrap_or_default(),
            _ => &[],
        };
        let rest = match rest {
            ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
            other => other,
        };
        let resource = match rest {
            [plural] | [plural, _] => (*plural).to_owned(),
            [plural, _, sub, ..] => format!("{plural}/{sub}"),
            [] => String::new(),
        };
        let watch = request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
        Self {
            method: request.method().clone(),
            resource,
            watch,
        }
    }

    fn is_pod_delete(&self) -> bool {
        self.method == Method::DELETE && self.resource == "pods"
    }

    fn is_write(&self) -> bool {
        matches!(
            self.method,
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        )
    }
}

/// The simulator's service, seen through one replica.
#[derive(Clone)]
pub struct Recorded {
    inner: SimService,
    replica: usize,
    identity: String,
    leader_election: bool,
    store: Store,
    world: World,
    intent: SharedIntent,
    hot_loop_limit: u64,
    alive: Arc<AtomicBool>,
    /// When this replica is cut off, and whether frozen (`Action::Isolate`).
    isolated: Isolations,
}

/// The isolations of one replica's connection (`Action::Isolate`), each with its end and
/// whether the replica is frozen.
///
/// They add up: one that starts during another neither ends nor shortens it (soak seed
/// 24005360, where a 6 s freeze during an 81 s cut gave the leader its connection back after
/// 8 s, and the checker, which judged the 81 s cut, saw it keep the Lease).
#[derive(Clone, Default)]
struct Isolations(Arc<Mutex<Vec<(Instant, bool)>>>);

impl Isolations {
    fn add(&self, until: Instant, frozen: bool) {
        if let Ok(mut isolations) = self.0.lock() {
            isolations.push((until, frozen));
        }
    }

    fn clear(&self) {
        if let Ok(mut isolations) = self.0.lock() {
            isolations.clear();
        }
    }

    /// The isolation in force at `now`: a freeze before a cut (a frozen process sends
    /// nothing until it wakes), and of those the one that lasts longest.
    fn in_force(&self, now: Instant) -> Option<(Instant, bool)> {
        let mut isolations = self.0.lock().ok()?;
        isolations.retain(|(until, _)| now < *until);
        isolations
            .iter()
            .copied()
            .max_by_key(|(until, frozen)| (*frozen, *until))
    }
}

impl Recorded {
    /// Invariant 15 at a successful DaemonSet write or pod DELETE: the rollout is not held on
    /// request with the hold acted on, or set for longer than the grace.
    fn check_not_held(&self, what: &str) {
        let Some(cds) = self
            .store
            .get::<canary_kube_adapter::CanaryDaemonSet>(Some(NAMESPACE), NAME)
        else {
            return;
        };
        let acted_on = cds.status.as_ref().is_some_and(|s| s.held == Some(true));
        let held = canary_kube_adapter::crd::hold_requested(&cds);
        if held && (acted_on || self.world.held_past_grace()) {
            self.world.violate(
                Invariant::NothingMovesWhileHeld,
                format!("{what} while the rollout is held on request"),
            );
        }
    }

    /// Wraps `inner` for replica number `replica` called `identity`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        inner: SimService,
        replica: usize,
        identity: String,
        leader_election: bool,
        store: Store,
        world: World,
        intent: SharedIntent,
        hot_loop_limit: u64,
    ) -> Self {
        Self {
            inner,
            replica,
            identity,
            leader_election,
            store,
            world,
            intent,
            hot_loop_limit,
            alive: Arc::new(AtomicBool::new(true)),
            isolated: Isolations::default(),
        }
    }

    /// Kills the replica's connection: every later request fails without reaching the
    /// simulator, as for a dead process. Aborting the controller's task does not stop the
    /// tasks its libraries spawned (kube-lease-manager's renewal task); this does.
    pub fn kill(&self) {
        self.alive.store(false, Ordering::Release);
    }

    /// Cuts the replica off until `until`: its new requests never reach the simulator. A cut
    /// connection answers at once; a `frozen` one holds each request until `until`, then
    /// answers that the connection is gone (the server dropped it while the process slept),
    /// so nothing a frozen replica sent lands late. Watches already open keep streaming.
    /// Isolations add up ([`Isolations`]).
    pub fn isolate(&self, until: Instant, frozen: bool) {
        self.isolated.add(until, frozen);
    }

    /// Ends every isolation now.
    pub fn reconnect(&self) {
        self.isolated.clear();
    }

    /// The isolation in force now: see [`Isolations::in_force`].
    fn isolation(&self) -> Option<(Instant, bool)> {
        self.isolated.in_force(Instant::now())
    }

    fn tally_key(&self) -> String {
        tally_key(&self.store)
    }

    /// What a DaemonSet write can change: the generation (the spec) and the maps it replaces.
    fn daemon_set_shape(&self) -> Option<DaemonSetShape> {
        self.store
            .get::<DaemonSet>(Some(NAMESPACE), NAME)
            .map(|ds| {
                let spec = ds.spec.unwrap_or_default();
                let update = spec.update_strategy.unwrap_or_default();
                DaemonSetShape {
                    generation: ds.metadata.generation,
                    labels: ds.metadata.labels,
                    annotations: ds.metadata.annotations,
                    owners: ds.metadata.owner_references,
                    template: serde_json::to_value(&spec.template).unwrap_or_default(),
                    strategy_type: update.type_,
                    max_unavailable: update.rolling_update.and_then(|r| r.max_unavailable),
                }
            })
    }

    fn before(&self, request: &Request_) {
        let kind = format!(
            "{} {}{}",
            request.method,
            request.resource,
            if request.watch { " (watch)" } else { "" }
        );
        let count = self.world.count_request(self.replica, kind);
        if count == self.hot_loop_limit + 1 {
            self.world.violate(
                Invariant::NoPanicNoHotLoop,
                format!(
                    "{} made more than {} requests in one virtual minute: {}",
                    self.identity,
                    self.hot_loop_limit,
                    self.world.requests_this_minute(self.replica)
                ),
            );
        }
        if !request.is_write() || request.resource == "leases" || !self.leader_election {
            return;
        }
        let holder = self
            .store
            .get::<Lease>(Some(NAMESPACE), LEASE_NAME)
            .and_then(|lease| lease.spec)
            .and_then(|spec| spec.holder_identity);
        if holder.as_deref() != Some(self.identity.as_str()) {
            self.world.violate(
                Invariant::BoundedLeaderOnlyWrites,
                format!(
                    "{} sent {} {} while the lease holder is {:?}",
                    self.identity, request.method, request.resource, holder
                ),
            );
        }
    }

    fn after(&self, request: &Request_, status: http::StatusCode, shape: Option<DaemonSetShape>) {
        if status.is_client_error() || status.is_server_error() {
            if matches!(status.as_u16(), 500 | 429 | 409 | 410) {
                self.world.count(|e| e.error_answers += 1);
            }
            if request.watch {
                return;
            }
        }
        if request.resource != "daemonsets" || !request.is_write() {
            return;
        }
        // The claim (issue 47, invariant 29): the one write a referenced DaemonSet gets, its
        // annotation alone; not a rollout's write either.
        if status.is_success() && claim_only(shape.as_ref(), self.daemon_set_shape().as_ref()) {
            return;
        }
        let referenced = self
            .store
            .get::<canary_kube_adapter::CanaryDaemonSet>(Some(NAMESPACE), NAME)
            .is_some_and(|cds| cds.spec.workload_ref.is_some());
        // A refused write changed nothing (a claim's failed `test` of the resourceVersion).
        if referenced && status.is_success() {
            self.world.violate(
                Invariant::BoundedLeaderOnlyWrites,
                format!(
                    "{} {} daemonsets -> {status}: the DaemonSet belongs to spec.workloadRef's owner",
                    self.identity, request.method
                ),
            );
        }
        let version = self.tally_key();
        if status.is_success() {
            let now = self.daemon_set_shape();
            // The update strategy type moved alone: a hold on request (to `OnDelete`) or its end.
            let type_moved_to = match (&shape, &now) {
                (Some(before), Some(after))
                    if before.template == after.template
                        && before.max_unavailable == after.max_unavailable
                        && before.strategy_type != after.strategy_type =>
                {
                    after.strategy_type.clone()
                }
                _ => None,
            };
            let holds = type_moved_to.as_deref() == Some("OnDelete");
            if !holds {
                self.check_not_held(&format!("{} {} daemonsets", self.identity, request.method));
            }
            self.world.count(|e| e.daemon_set_writes += 1);
            if holds {
                let mut soak_hold = false;
                self.world.tally(&version, |t| soak_hold = t.soak_hold());
                if soak_hold {
                    self.world.trace(format!(
                        "{} {} daemonsets -> {} (update strategy OnDelete, the canary's soak)",
                        self.identity,
                        request.method,
                        status.as_u16()
                    ));
                    return;
                }
            }
            if let Some(to) = &type_moved_to
                && self.world.strategy_type_written()
            {
                self.world.trace(format!(
                    "{} {} daemonsets -> {} (update strategy {to}, for a hold on request)",
                    self.identity,
                    request.method,
                    status.as_u16()
                ));
                return;
            }
            let unchanged = shape.is_some() && shape == now;
            let terms_ended = self.world.terms_ended();
            let tally = self.world.tally(&version, |t| {
                t.kills += terms_ended;
                t.succeeded += 1;
                t.unchanged += u64::from(unchanged);
            });
            self.world.trace(format!(
                "{} {} daemonsets -> {} (now {version}, write {} for it{})",
                self.identity,
                request.method,
                status.as_u16(),
                tally.succeeded,
                if unchanged { ", changed nothing" } else { "" }
            ));
            if tally.excess() > 0 {
                self.world.violate(
                    Invariant::BoundedLeaderOnlyWrites,
                    format!(
                        "{} successful DaemonSet writes for {version} with {} failed ones, {} that changed nothing and {} kills",
                        tally.succeeded, tally.failed, tally.unchanged, tally.kills
                    ),
                );
            }
        } else {
            self.world.tally(&version, |t| t.failed += 1);
            self.world.trace(format!(
                "{} {} daemonsets -> {}",
                self.identity,
                request.method,
                status.as_u16()
            ));
        }
    }
}

impl Recorded {
    /// Invariants 12 and 14 at a successful pod DELETE, whose answer is the pod deleted (or
    /// marked terminating); the deletion goes to the checker for invariant 11.
    fn pod_deleted(&self, body: &[u8]) {
        let Ok(pod) = serde_json::from_slice::<k8s_openapi::api::core::v1::Pod>(body) else {
            self.world.violate(
                Invariant::OneDeletePerPod,
                format!(
                    "harness: the answer of a pod DELETE is no pod: {}",
                    String::from_utf8_lossy(body)
                ),
            );
            return;
        };
        // A pre-pull pod (issue 50) is no agent pod: invariant 35 checks those.
        if super::pre_pull::PrePullCheck::is_pre_pull(&pod) {
            return;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let count = self.world.pod_deleted(Deleted {
            uid: uid.clone(),
            node: node.clone(),
            ready: canary_predicates::pod_is_ready(&pod),
        });
        self.world
            .trace(format!("{} deleted pod {name} on {node}", self.identity));
        self.check_not_held(&format!("{} deleted pod {name} on {node}", self.identity));
        if count > 1 {
            self.world.violate(
                Invariant::OneDeletePerPod,
                format!("pod {name} (UID {uid}) on {node}: successful DELETE number {count}"),
            );
        }
        // Invariant 12: the stored status, which the controller wrote before this pass.
        let Some(cds) = self
            .store
            .get::<canary_kube_adapter::CanaryDaemonSet>(Some(NAMESPACE), NAME)
        else {
            return;
        };
        let Some(status) = &cds.status else { return };
        let sticky = super::checker::sticky_reason(status.reason_name());
        let current = status.observed_generation == cds.metadata.generation;
        // A hand edit reverted after the failure is a rollout of its own (its status write may
        // have failed: the controller goes on from the status it remembers).
        let edited = self
            .intent
            .lock()
            .is_ok_and(|intent| intent.hand_edit_since_change);
        // A retry asked for and not yet recorded: the pass acting on it deletes before it
        // writes the status that leaves `failed`.
        let retrying = cds
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(canary_kube_adapter::crd::RETRY_ANNOTATION))
            .is_some_and(|mark| status.retry.as_ref() != Some(mark));
        if status.phase_name() == Some("failed") && sticky && current && !edited && !retrying {
            self.world.violate(
                Invariant::NoDeletionAfterFailure,
                format!(
                    "{} deleted pod {name} on {node} while the status is failed ({}) for the current spec",
                    self.identity,
                    status.reason_name().unwrap_or_default()
                ),
            );
        }
    }
}

impl<B> tower::Service<Request<B>> for Recorded
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Display + Send,
{
    type Response = Response<canary_sim::api::ResponseBody>;
    type Error = std::convert::Infallible;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::<Request<B>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !self.alive.load(Ordering::Acquire) {
            return Box::pin(async { Ok(unreachable_answer("the replica is dead")) });
        }
        if let Some((until, frozen)) = self.isolation() {
            return Box::pin(async move {
                if frozen {
                    tokio::time::sleep_until(until).await;
                }
                Ok(unreachable_answer(
                    "the replica is cut off from the API server",
                ))
            });
        }
        let info = Request_::of(&request);
        self.before(&info);
        let shape = (info.resource == "daemonsets" && info.is_write())
            .then(|| self.daemon_set_shape())
            .flatten();
        let trace = self.world.requests();
        let answer = if trace.enabled() {
            let request = trace.record(self.replica, self.world.elapsed(), request);
            self.inner.call(request)
        } else {
            self.inner.call(request)
        };
        let this = self.clone();
        Box::pin(async move {
            let response = answer.await?;
            this.after(&info, response.status(), shape);
            if info.is_pod_delete() && response.status().is_success() {
                use http_body_util::BodyExt;
                let (parts, body) = response.into_parts();
                let bytes = match body.collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(never) => match never {},
                };
                this.pod_deleted(&bytes);
                let body = http_body_util::Full::new(bytes).boxed_unsync();
                return Ok(Response::from_parts(parts, body));
            }
            Ok(response)
        })
    }
}

/// The install-strategy version of the live DaemonSet, `"none"` before it exists.
/// The rollout a DaemonSet write belongs to (invariant 7's tally): the version it leaves on the
/// DaemonSet, and, while a rollback to that version is in force, the rollback (a rollout of its
/// own).
pub fn tally_key(store: &Store) -> String {
    let version = live_version(store);
    let history = store
        .get::<canary_kube_adapter::CanaryDaemonSet>(Some(NAMESPACE), NAME)
        .and_then(|cds| cds.status?.history);
    match history.as_ref().and_then(|h| rollback_key(h, &version)) {
        Some(key) => key,
        None => version,
    }
}

/// The name of the rollback in force in `history` when it goes to `version`: the version, the
/// spec revision it overrides, and the last abort and undo marks. With no spec change between
/// them, two rollbacks to one revision are two rollbacks when a verb came between: abort,
/// undo, abort again (seed 67 of the CI set), or a failure rolled back, undone to the failed
/// revision, failed and rolled back again (soak seeds 7000183 and 7000230).
pub fn rollback_key(
    history: &canary_kube_adapter::crd::HistoryStatus,
    version: &str,
) -> Option<String> {
    let rollback = history.rollback.as_ref()?;
    if rollback.to.version != version {
        return None;
    }
    let marks: String = [&history.abort, &history.undo]
        .into_iter()
        .flatten()
        .map(|mark| format!(", {mark}"))
        .collect();
    Some(format!("{version} (back from {}{marks})", rollback.from))
}

fn live_version(store: &Store) -> String {
    store
        .get::<DaemonSet>(Some(NAMESPACE), NAME)
        .and_then(|ds| ds.metadata.annotations)
        .and_then(|a| a.get(VERSION_KEY).cloned())
        .unwrap_or_else(|| "none".to_owned())
}

/// Whether a write took `before` to `after` by the claim annotation alone.
fn claim_only(before: Option<&DaemonSetShape>, after: Option<&DaemonSetShape>) -> bool {
    let (Some(before), Some(after)) = (before, after) else {
        return false;
    };
    let without_claim = |shape: &DaemonSetShape| {
        let mut annotations = shape.annotations.clone().unwrap_or_default();
        annotations.remove(canary_kube_adapter::claim::CLAIM_ANNOTATION);
        annotations
    };
    let claim = |shape: &DaemonSetShape| {
        shape
            .annotations
            .as_ref()
            .and_then(|a| a.get(canary_kube_adapter::claim::CLAIM_ANNOTATION).cloned())
    };
    claim(before) != claim(after)
        && without_claim(before) == without_claim(after)
        && before.labels == after.labels
        && before.owners == after.owners
        && before.template == after.template
        && before.strategy_type == after.strategy_type
        && before.max_unavailable == after.max_unavailable
}

/// The parts of the DaemonSet a write of the controller can change.
#[derive(Debug, Clone, PartialEq)]
struct DaemonSetShape {
    generation: Option<i64>,
    labels: Option<std::collections::BTreeMap<String, String>>,
    annotations: Option<std::collections::BTreeMap<String, String>>,
    owners: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
    /// The pod template, as JSON.
    template: serde_json::Value,
    /// `spec.updateStrategy.type`.
    strategy_type: Option<String>,
    /// `spec.updateStrategy.rollingUpdate.maxUnavailable`.
    max_unavailable: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
}

/// What a dead or cut-off process's requests get: nothing useful.
fn unreachable_answer(message: &str) -> Response<canary_sim::api::ResponseBody> {
    use http_body_util::BodyExt;
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
        "reason": "ServiceUnavailable", "code": 503,
    });
    let body = http_body_util::Full::new(Bytes::from(status.to_string())).boxed_unsync();
    let mut response = Response::new(body);
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A freeze that starts during a cut holds requests while it lasts; the connection comes
    /// back when the cut ends, not when the freeze does.
    #[test]
    fn a_freeze_during_a_cut_neither_ends_nor_shortens_it() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let isolations = Isolations::default();
        isolations.add(at(81), false);
        isolations.add(at(2 + 6), true);
        assert_eq!(isolations.in_force(at(3)), Some((at(8), true)), "frozen");
        assert_eq!(
            isolations.in_force(at(9)),
            Some((at(81), false)),
            "still cut"
        );
        assert_eq!(isolations.in_force(at(81)), None, "back");
        isolations.add(at(100), false);
        isolations.clear();
        assert_eq!(isolations.in_force(at(90)), None, "reconnected");
    }
}
