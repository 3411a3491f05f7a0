//! Invariant 33, node-breakage-stops-the-release (issue 46): once a release that breaks its
//! node has broken one, nothing more of that release moves.
//!
//! What counts as broken is what the node gate must count, read from the simulator's own
//! objects: a node turns unhealthy (`Ready` not `True`, or `NetworkUnavailable` `True`, the
//! gate's default conditions) while it runs a pod of a release that breaks its node
//! (`breaks-node`, `node-condition`), and the condition's `lastTransitionTime` is more than the
//! gate's 5 s clock-skew margin and at most its 10 min window after that pod's
//! `creationTimestamp`. The node must still be unhealthy, with the same pod, when the check runs
//! (the gate judges the current state).
//!
//! The baseline: the gate blames the release only when more of its nodes broke than nodes not
//! yet updated turned unhealthy over the same time. The checker counts as baseline every other
//! node that turned unhealthy since the release's first pod on a broken node (minus the
//! staleness): at least the gate's baseline, so the invariant applies only where the gate must
//! have failed the rollout.
//!
//! The race: the node turns unhealthy, the controller's watch brings it some time later, a pass
//! then fails the rollout (the MaxUnavailable driver's DaemonSet goes on `OnDelete`). Deletions
//! and writes decided on the view before, or already issued (a DaemonSet controller acting on
//! `RollingUpdate` before the `OnDelete` landed), land during that time. So a widening or a pod
//! taken down is a violation only past `stale + 5 s` after the checker saw the node break
//! (`stale`: the controller's view may lag by the API's latency twice, plus 5 s: the
//! invariant 32 allowance), within the window. Not a violation: the release's own pods taken
//! down (a rollback or a node going away), pods on unhealthy nodes, anything while the status
//! records a rollback (`onFailure: Rollback` deletes and writes by design), a node that broke
//! once the rollout had ended `successful` (the gate judges only the late updates then, nodes
//! caught up after the end: docs/health.md; no seed generates one yet, the state machine's
//! tables and the process test `a_node_caught_up_after_successful_and_broken_fails_the_generation`
//! cover them), once the target
//! changed (a new version, an undo), after a `retry` (a person's answer: the nodes broken
//! before it no longer count) and after a hand edit (drift is invariant 9's).

use std::collections::BTreeMap;

use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::crd::RETRY_ANNOTATION;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};

use super::super::world::Invariant;
use super::{Checker, ds_target, node_is_healthy, node_of, pod_target, rolling_back, terminating};

/// The node gate's default window (`spec.health.window`), in seconds.
const WINDOW_SECONDS: i64 = 600;

/// The condition types the node gate reads by default besides `Ready`.
const NODE_CONDITIONS: [&str; 1] = ["NetworkUnavailable"];

/// A node broken by a release.
#[derive(Debug, Clone)]
struct Broken {
    /// The release (`v<n>`).
    version: String,
    /// The UID of the release's pod on the node.
    pod_uid: String,
    /// When (virtual seconds) the checker saw the node turn unhealthy.
    at: f64,
    /// When (virtual seconds) the checker first saw that pod.
    updated_at: f64,
}

/// The checker's memory for invariant 33.
#[derive(Debug, Default)]
pub(super) struct NodeBreakage {
    /// The nodes unhealthy as the gate reads them, since when (virtual seconds).
    unhealthy: BTreeMap<String, f64>,
    /// Every turn of a node to unhealthy: `(node, at)`, pruned past twice the window.
    turns: Vec<(String, f64)>,
    /// The nodes broken by a release, by name.
    broken: BTreeMap<String, Broken>,
    /// When (virtual seconds) each pod of the DaemonSet was first seen, by UID.
    first_seen: BTreeMap<String, f64>,
    /// The `retry` annotation last seen.
    retry: Option<String>,
    /// The status records a rollback.
    rolling_back: bool,
}

/// The earliest `lastTransitionTime` (seconds since the epoch) of the conditions that make the
/// node unhealthy to the gate, or `None` when it is healthy.
fn troubled_since(node: &Node) -> Option<i64> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    let troubled: Vec<i64> = conditions
        .iter()
        .filter(|c| {
            (c.type_ == "Ready" && c.status != "True")
                || (NODE_CONDITIONS.contains(&c.type_.as_str()) && c.status == "True")
        })
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or(i64::MAX, |t| t.0.as_second())
        })
        .collect();
    troubled.into_iter().min()
}

impl Checker {
    /// Whether `version` is a release that breaks its node, as the harness asked for it.
    fn breaks_node(&self, version: &str) -> bool {
        self.intent.lock().is_ok_and(|intent| {
            intent
                .versions
                .iter()
                .any(|(v, behavior)| v == version && behavior.breaks_node())
        })
    }

    /// Follows a node's health; a turn to unhealthy on a node whose release breaks it, after
    /// that release's pod was created beyond the margin and within the window, breaks it.
    pub(super) fn on_node_breakage(&mut self, name: &str, node: Option<&Node>, now: f64) {
        let since = node.and_then(troubled_since);
        let Some(since) = since else {
            self.breakage.unhealthy.remove(name);
            self.breakage.broken.remove(name);
            return;
        };
        if self.breakage.unhealthy.contains_key(name) {
            return;
        }
        // The gate judges a rollout under way, and at rest only the late updates (not
        // generated here yet): a node that breaks after it ended `successful` is left out.
        let ended_successful = self.phase.as_deref() == Some("successful");
        self.breakage.unhealthy.insert(name.to_owned(), now);
        self.breakage
            .turns
            .retain(|(_, at)| now - at <= 2.0 * WINDOW_SECONDS as f64);
        self.breakage.turns.push((name.to_owned(), now));
        let release = self
            .pods
            .values()
            .map(|state| &state.pod)
            .filter(|pod| node_of(pod) == Some(name) && !terminating(pod))
            .find_map(|pod| {
                let version = pod_target(pod).0?;
                let created = pod.metadata.creation_timestamp.as_ref()?.0.as_second();
                let uid = pod.metadata.uid.clone()?;
                Some((version, created, uid))
            });
        let Some((version, created, uid)) = release else {
            return;
        };
        let after = since - created;
        if ended_successful
            || !self.breaks_node(&version)
            || after <= canary_state_machine::health::nodes::CLOCK_SKEW_MARGIN_SECONDS
            || after > WINDOW_SECONDS
        {
            return;
        }
        let updated_at = self.breakage.first_seen.get(&uid).copied().unwrap_or(now);
        self.world.count(|e| e.node_breakages += 1);
        self.world.trace(format!(
            "node {name} broken by {version} ({after} s after its pod was created)"
        ));
        self.breakage.broken.insert(
            name.to_owned(),
            Broken {
                version,
                pod_uid: uid,
                at: now,
                updated_at,
            },
        );
    }

    /// Remembers when each pod of the DaemonSet was first seen.
    pub(super) fn on_pod_breakage(&mut self, pod: &Pod, deleted: bool, now: f64) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        if deleted {
            self.breakage.first_seen.remove(&uid);
        } else {
            self.breakage.first_seen.entry(uid).or_insert(now);
        }
    }

    /// Follows the verbs and the rollbacks that end the invariant.
    pub(super) fn on_canary_breakage(&mut self, cds: &CanaryDaemonSet) {
        let retry = cds
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RETRY_ANNOTATION))
            .cloned();
        if retry.is_some() && retry != self.breakage.retry {
            // A person's answer: what broke before it no longer stops the release.
            self.breakage.broken.clear();
        }
        self.breakage.retry = retry;
        self.breakage.rolling_back = cds.status.as_ref().is_some_and(|status| {
            rolling_back(status) || status.phase_name() == Some("rolledBack")
        });
        // `successful` decided on a view from before a node broke (within the staleness) ends
        // the gate's judgement of that node too; one seen for longer should have failed it.
        if cds.status.as_ref().and_then(|s| s.phase_name()) == Some("successful") {
            let now = self.world.now();
            let stale = self.stale;
            self.breakage
                .broken
                .retain(|_, broken| now - broken.at > stale + 5.0);
        }
    }

    /// The evidence against `version` the controller must have acted on by now: a node it
    /// broke (`(node, when)`), when its broken nodes outnumber the baseline.
    fn node_broken_by(&self, version: Option<&str>) -> Option<(String, f64)> {
        let version = version?;
        if self.breakage.rolling_back
            || !self.breaks_node(version)
            || self
                .intent
                .lock()
                .is_ok_and(|intent| intent.hand_edit_since_change)
        {
            return None;
        }
        let now = self.world.now();
        let live = |broken: &Broken| {
            self.pods.values().any(|state| {
                state.pod.metadata.uid.as_deref() == Some(broken.pod_uid.as_str())
                    && !terminating(&state.pod)
            })
        };
        let of_release: Vec<(&String, &Broken)> = self
            .breakage
            .broken
            .iter()
            .filter(|(_, broken)| broken.version == version && live(broken))
            .collect();
        let earliest = of_release
            .iter()
            .map(|(_, broken)| broken.updated_at)
            .min_by(f64::total_cmp)?;
        let evidence: Vec<(&String, f64)> = of_release
            .iter()
            .filter(|(_, broken)| {
                let lag = now - broken.at;
                lag > self.stale + 5.0 && lag < WINDOW_SECONDS as f64
            })
            .map(|(node, broken)| (*node, broken.at))
            .collect();
        let mut baseline: Vec<&str> = self
            .breakage
            .turns
            .iter()
            .filter(|(node, at)| {
                *at >= earliest - self.stale && !of_release.iter().any(|(n, _)| *n == node)
            })
            .map(|(node, _)| node.as_str())
            .collect();
        baseline.sort_unstable();
        baseline.dedup();
        if evidence.len() <= baseline.len() {
            return None;
        }
        evidence
            .into_iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(node, at)| (node.clone(), at))
    }

    /// At a widening write.
    pub(super) fn check_breakage_widen(&self, ds: &DaemonSet) {
        let target = ds_target(ds);
        if let Some((node, since)) = self.node_broken_by(target.0.as_deref()) {
            self.world.violate(
                Invariant::NodeBreakageStopsTheRelease,
                format!(
                    "widened {:?} while it had broken node {node} since {since:.1}s",
                    target.0
                ),
            );
        }
    }

    /// At a pod of the DaemonSet taken down (either driver, whoever deleted it), or a deletion
    /// by the controller (the Pods driver's, `pod` then unknown): on a healthy node, not one
    /// of the release's own.
    pub(super) fn check_breakage_taken_down(&self, node: &str, pod: Option<&Pod>) {
        let Some(target) = self.ds.as_ref().map(ds_target) else {
            return;
        };
        if pod.is_some_and(|pod| pod_target(pod).0 == target.0)
            || !self
                .nodes
                .get(node)
                .is_some_and(|(n, _)| node_is_healthy(n))
        {
            return;
        }
        if let Some((broken, since)) = self.node_broken_by(target.0.as_deref()) {
            self.world.violate(
                Invariant::NodeBreakageStopsTheRelease,
                format!(
                    "took down {} on {node} for {:?} while it had broken node {broken} since {since:.1}s",
                    pod.and_then(|p| p.metadata.name.as_deref())
                        .unwrap_or("a pod"),
                    target.0
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    //! Invariant 33 on crafted traces: a controller that goes on after its release broke a
    //! node (the gate switched off) is caught; one that stopped, or whose deletion landed
    //! within the staleness, or that faces a baseline as large, is not.

    use std::sync::Arc;
    use std::time::Duration;

    use canary_sim::{EventKind, ResourceKey, StoreEvent};
    use serde_json::{Value, json};

    use super::super::super::plan::Behavior;
    use super::super::super::world::{Invariant, World};
    use super::super::super::{ID_KEY, NAME, NAMESPACE, VERSION_KEY};
    use super::super::{Checker, SharedIntent};
    use super::*;
    use canary_kube_adapter::desired::OWNER_LABEL;

    const EPOCH: i64 = 1_767_225_600;

    fn event<K: kube::Resource<DynamicType = ()>>(
        kind: EventKind,
        namespace: Option<&str>,
        name: &str,
        object: Value,
    ) -> StoreEvent {
        StoreEvent {
            key: ResourceKey::of::<K>(),
            kind,
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
            object: Arc::new(object),
            resource_version: 1,
            previous: None,
            committed_at: std::time::Instant::now(),
        }
    }

    fn at(second: i64) -> String {
        k8s_openapi::jiff::Timestamp::from_second(EPOCH + second)
            .map(|t| t.to_string())
            .unwrap_or_default()
    }

    fn daemon_set(max_unavailable: &str) -> StoreEvent {
        event::<DaemonSet>(
            EventKind::Modified,
            Some(NAMESPACE),
            NAME,
            json!({
                "metadata": {"name": NAME, "namespace": NAMESPACE},
                "spec": {
                    "selector": {},
                    "updateStrategy": {"rollingUpdate": {"maxUnavailable": max_unavailable}},
                    "template": {"metadata": {"annotations": {VERSION_KEY: "v2", ID_KEY: "id"}}}
                }
            }),
        )
    }

    /// The agent pod on `node`, of `version`, created at `created` (seconds), ready.
    fn agent(node: &str, version: &str, created: i64, kind: EventKind) -> StoreEvent {
        let name = format!("agent-{node}");
        event::<Pod>(
            kind,
            Some(NAMESPACE),
            &name,
            json!({
                "metadata": {
                    "name": name, "namespace": NAMESPACE, "uid": format!("{node}-{version}"),
                    "creationTimestamp": at(created),
                    "labels": {OWNER_LABEL: NAME},
                    "annotations": {VERSION_KEY: version, ID_KEY: "id"}
                },
                "spec": {"nodeName": node, "containers": []},
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [{
                        "name": "agent", "image": "agent", "imageID": "", "restartCount": 0,
                        "ready": true
                    }]
                }
            }),
        )
    }

    /// `node` Ready, or NotReady since `since` (seconds).
    fn node(name: &str, not_ready_since: Option<i64>) -> StoreEvent {
        let ready = match not_ready_since {
            Some(since) => {
                json!({"type": "Ready", "status": "False", "lastTransitionTime": at(since)})
            }
            None => json!({"type": "Ready", "status": "True", "lastTransitionTime": at(0)}),
        };
        event::<Node>(
            EventKind::Modified,
            None,
            name,
            json!({"metadata": {"name": name}, "status": {"conditions": [ready]}}),
        )
    }

    /// v2 breaks its node: node-a's canary created at 0 s, its node NotReady at `broke` s;
    /// `baseline_broken`: an old node turns NotReady too. Then, `after` seconds later, the
    /// old pod on node-b is taken down (or, `widen`, the DaemonSet widened).
    async fn run(broke: i64, baseline_broken: bool, after: u64, widen: bool) -> Vec<Invariant> {
        let world = World::new();
        let intent = SharedIntent::default();
        if let Ok(mut intent) = intent.lock() {
            intent.versions.push(("v1".to_owned(), Behavior::Healthy));
            intent
                .versions
                .push(("v2".to_owned(), Behavior::BreaksNode(broke as u64)));
        }
        let mut checker = Checker::new(world.clone(), intent, 8.0);
        checker.apply(&node("node-a", None));
        checker.apply(&node("node-b", None));
        checker.apply(&node("node-c", None));
        checker.apply(&daemon_set("1"));
        checker.apply(&agent("node-b", "v1", -100, EventKind::Added));
        checker.apply(&agent("node-c", "v1", -100, EventKind::Added));
        checker.apply(&agent("node-a", "v2", 0, EventKind::Added));
        tokio::time::advance(Duration::from_secs(broke as u64)).await;
        checker.apply(&node("node-a", Some(broke)));
        if baseline_broken {
            checker.apply(&node("node-c", Some(broke)));
        }
        tokio::time::advance(Duration::from_secs(after)).await;
        if widen {
            checker.apply(&daemon_set("10%"));
        } else {
            checker.apply(&agent("node-b", "v1", -100, EventKind::Deleted));
        }
        world
            .violations()
            .into_iter()
            .map(|v| v.invariant)
            .filter(|i| *i == Invariant::NodeBreakageStopsTheRelease)
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_that_goes_on_after_breaking_its_node_is_caught() {
        assert_eq!(
            run(30, false, 60, false).await,
            [Invariant::NodeBreakageStopsTheRelease],
            "an old pod deleted a minute after the canary's node broke"
        );
        assert_eq!(
            run(30, false, 60, true).await,
            [Invariant::NodeBreakageStopsTheRelease],
            "a widening a minute after the canary's node broke"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_race_the_margin_and_the_baseline_excuse_it() {
        assert!(
            run(30, false, 10, false).await.is_empty(),
            "a deletion issued before the controller could see the node (8 s stale + 5 s)"
        );
        assert!(
            run(3, false, 60, false).await.is_empty(),
            "a node NotReady 3 s after its pod's creation: within the clock-skew margin, \
             the gate may not blame the release"
        );
        assert!(
            run(30, true, 60, false).await.is_empty(),
            "an old node broken at the same time: one against one is no evidence to the gate"
        );
    }
}
