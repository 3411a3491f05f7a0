//! A CanaryDaemonSet's rollout as the process tests drive and watch it through a kube client:
//! install a release, ask for the next, wait for a phase, find the agent pods of a version, read
//! the nodes' readiness and the events, pause and resume. One home for these steps, so that a
//! test says only what it does differently.
//!
//! Waiting is [`eventually`]: a probe polled until it answers, with the last thing it saw in
//! the failure, never a silent timeout.

use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::crd::CanaryDaemonSetStatus;
use daemonset_canary::demo::scenario::{NAME, NAMESPACE};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use std::time::{Duration, Instant};

/// The pause mark the `pause` verb and an `onUnhealthy: Hold` set.
pub const PAUSE_MARK: &str = "canary.daemonset.dev/paused";

/// Polls `probe` every 200 ms until it answers `Ok`, and returns the answer; fails after
/// `within`, saying `what` and the last `Err` the probe gave (what it saw).
pub async fn eventually<T, Seen: std::fmt::Debug>(
    within: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> Result<T, Seen>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match probe().await {
            Ok(answer) => return answer,
            Err(seen) => assert!(
                Instant::now() < deadline,
                "{what} after {within:?}: {seen:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What a probe saw, printed as it is (a log's tail keeps its lines).
pub struct Said(pub String);

impl std::fmt::Debug for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The CanaryDaemonSet's status (empty before the controller writes one).
pub async fn current_status(api: &Api<CanaryDaemonSet>) -> CanaryDaemonSetStatus {
    api.get(NAME).await.unwrap().status.unwrap_or_default()
}

/// Creates the CanaryDaemonSet of `manifest`: its generation.
pub async fn create(api: &Api<CanaryDaemonSet>, manifest: serde_json::Value) -> Option<i64> {
    let object: CanaryDaemonSet = serde_json::from_value(manifest).unwrap();
    let created = api.create(&PostParams::default(), &object).await.unwrap();
    created.metadata.generation
}

/// Replaces the CanaryDaemonSet's spec with the one of `manifest` (a merge patch, as `kubectl
/// apply` of the whole spec): its generation.
pub async fn set_spec(api: &Api<CanaryDaemonSet>, manifest: &serde_json::Value) -> Option<i64> {
    let patch = serde_json::json!({"spec": manifest["spec"]});
    let patched = api
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    patched.metadata.generation
}

/// The status, once it is `phase` on spec generation `generation` or later.
fn in_phase(
    status: CanaryDaemonSetStatus,
    generation: Option<i64>,
    phase: &str,
) -> Result<CanaryDaemonSetStatus, Box<CanaryDaemonSetStatus>> {
    if status.observed_generation >= generation && status.phase_name() == Some(phase) {
        Ok(status)
    } else {
        Err(Box::new(status))
    }
}

/// Waits (120 s at most) for `phase` on spec generation `generation` or later, and returns the
/// status.
pub async fn until_phase(
    api: &Api<CanaryDaemonSet>,
    generation: Option<i64>,
    phase: &str,
) -> CanaryDaemonSetStatus {
    let what = format!("never {phase}");
    eventually(Duration::from_secs(120), &what, async || {
        in_phase(current_status(api).await, generation, phase)
    })
    .await
}

/// [`until_phase`], and meanwhile the most live pods seen at once on `version`, in `most`.
pub async fn until_phase_counting(
    api: &Api<CanaryDaemonSet>,
    pods: &Api<Pod>,
    generation: Option<i64>,
    phase: &str,
    version: &str,
    most: &mut usize,
) -> CanaryDaemonSetStatus {
    let what = format!("never {phase}");
    eventually(Duration::from_secs(120), &what, async || {
        *most = (*most).max(live_pods_on(pods, version).await.len());
        in_phase(current_status(api).await, generation, phase)
    })
    .await
}

/// [`until_phase`] `successful` with `nodes` pods updated and ready; fails at once on `failed`.
pub async fn until_rolled_out(
    api: &Api<CanaryDaemonSet>,
    generation: Option<i64>,
    nodes: usize,
) -> CanaryDaemonSetStatus {
    eventually(Duration::from_secs(120), "not rolled out", async || {
        let status = current_status(api).await;
        assert!(status.phase_name() != Some("failed"), "{status:?}");
        let done = status.observed_generation >= generation
            && status.phase_name() == Some("successful")
            && status.updated_ready as usize == nodes;
        if done { Ok(status) } else { Err(status) }
    })
    .await
}

/// Since when `pod` has been Ready (its condition's transition time), if it is.
pub fn ready_since(pod: &Pod) -> Option<k8s_openapi::jiff::Timestamp> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// Whether `pod`'s agent runs `version` (its first container's image tag).
pub fn runs(pod: &Pod, version: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.as_deref())
        .is_some_and(|image| image.ends_with(&format!(":{version}")))
}

/// The pods of `pods` that run `version` and are not being deleted.
pub async fn live_pods_on(pods: &Api<Pod>, version: &str) -> Vec<Pod> {
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none() && runs(pod, version))
        .collect()
}

/// The node `pod` is bound to.
pub fn node_of(pod: Pod) -> Option<String> {
    pod.spec.and_then(|s| s.node_name)
}

/// The Ready status of every node, by name.
pub async fn node_ready(client: &kube::Client) -> Vec<(String, String)> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|node| {
            let ready = node
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.status)
                .unwrap_or_default();
            (node.metadata.name.unwrap_or_default(), ready)
        })
        .collect()
}

/// The events of the test namespace, in no order.
pub async fn events(client: &kube::Client) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), NAMESPACE);
    events.list(&ListParams::default()).await.unwrap().items
}

/// The reasons of the events of the test namespace, in no order.
pub async fn event_reasons(client: &kube::Client) -> Vec<String> {
    events(client)
        .await
        .into_iter()
        .filter_map(|event| event.reason)
        .collect()
}

/// The CanaryDaemonSet's pause mark, if set (its value says who set it).
pub fn pause_mark(cds: &CanaryDaemonSet) -> Option<String> {
    cds.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PAUSE_MARK).cloned())
}

/// Resumes as `daemonset-canary resume` does: the pause mark removed.
pub async fn resume(api: &Api<CanaryDaemonSet>) {
    let patch = serde_json::json!({"metadata": {"annotations": {PAUSE_MARK: null}}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}
