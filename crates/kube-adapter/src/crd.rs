//! The `CanaryDaemonSet` custom resource (`canary.daemonset.dev/v1alpha1`).
//!
//! The spec says which DaemonSet to own and which target its pods must reach; the status is the
//! controller's only memory, so everything a restarted controller needs to resume lives there.

use std::collections::BTreeMap;

use canary_state_machine::{
    Compatibility, DriftPolicy, Driver, FailureReason, OnFailure, OnUnhealthy, Phase,
};
use k8s_openapi::api::apps::v1::DaemonSetSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::api::{ApiResource, DynamicObject};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Error;

/// The CEL rule every maxUnavailable field of the spec must satisfy: a positive count (`"1"`) or
/// a percentage from 1 to 100 (`"10%"`). Zero is rejected because a rollout at zero never moves;
/// a count has at most 9 digits, so it always fits the DaemonSet's 32-bit field.
pub const MAX_UNAVAILABLE_RULE: &str = "self.matches('^([1-9][0-9]{0,8}|([1-9][0-9]?|100)%)$')";

/// A DNS-1123 subdomain (what a DaemonSet's name must be), as Kubernetes' `IsDNS1123Subdomain`.
pub const DNS1123_SUBDOMAIN_RULE: &str =
    "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')";

/// A qualified name (what an annotation key must be): an optional DNS subdomain prefix and `/`,
/// then a name of at most 63 characters, as Kubernetes' `IsQualifiedName`.
pub const QUALIFIED_NAME_RULE: &str = "self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')";

/// The owned DaemonSet's effective name (`spec.daemonSetName`, else the object's name) may not
/// change: a new name would create a second DaemonSet with the same selector and orphan the
/// first, two agents on every node.
pub const DAEMON_SET_NAME_IMMUTABLE_RULE: &str = "(has(self.spec.daemonSetName) ? self.spec.daemonSetName : self.metadata.name) == (has(oldSelf.spec.daemonSetName) ? oldSelf.spec.daemonSetName : oldSelf.metadata.name)";

/// The object's name becomes the value of the `canary.daemonset.dev/owner` label.
pub const NAME_IS_A_LABEL_VALUE_RULE: &str = "size(self.metadata.name) <= 63";

/// The annotation that promotes a Pods-driver rollout: a new non-empty value ends the current
/// pause step once (`full@STAMP`: skips every remaining step and pause, see
/// [`promotion_asked`]); the status remembers the value acted on (`status.promotion`).
/// `kubectl annotate cds NAME canary.daemonset.dev/promote=$(date +%s) --overwrite`.
pub const PROMOTE_ANNOTATION: &str = canary_state_machine::Verb::Promote.annotation();

/// The prefix of a [`PROMOTE_ANNOTATION`] value that asks for a full promotion.
pub const FULL_PROMOTION_PREFIX: &str = "full@";

/// What a [`PROMOTE_ANNOTATION`] value asks for: `full@STAMP` a full promotion, anything else
/// the end of the current pause step.
pub fn promotion_asked(mark: &str) -> canary_state_machine::Promotion {
    if mark.starts_with(FULL_PROMOTION_PREFIX) {
        canary_state_machine::Promotion::Full
    } else {
        canary_state_machine::Promotion::Step
    }
}

/// The annotation that holds a rollout on request (the `pause` verb): while it is set to
/// anything but empty or `false`, no pod is replaced and the template is not written (the
/// MaxUnavailable driver puts a rollout under way on `OnDelete` until then); removing it
/// resumes. The status records that the hold was acted on (`status.held`).
/// `kubectl annotate cds NAME canary.daemonset.dev/paused=true`, and `canary.daemonset.dev/paused-` to resume.
pub const PAUSE_ANNOTATION: &str = canary_state_machine::Verb::Pause.annotation();

/// The annotation `kubectl rollout restart` sets on a pod template, and `daemonset-canary
/// restart` on the CanaryDaemonSet's: a `kubectl rollout restart` of a managed DaemonSet is
/// taken into the spec and rolled out canary first, not reverted as drift.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// The annotation that retries a failed rollout (the `retry` verb, both drivers): a new
/// non-empty value starts it again from its first step, toward the same revision, once; the
/// status remembers the value acted on (`status.retry`), whatever the phase was.
/// `kubectl annotate cds NAME canary.daemonset.dev/retry=$(date +%s) --overwrite`.
pub const RETRY_ANNOTATION: &str = canary_state_machine::Verb::Retry.annotation();

/// The annotation that aborts a rollout (the `abort` verb): a new non-empty value rolls the
/// DaemonSet back to the last revision that finished `successful`, once; the status remembers
/// the value acted on (`status.history.abort`).
/// `kubectl annotate cds NAME canary.daemonset.dev/abort=$(date +%s) --overwrite`.
pub const ABORT_ANNOTATION: &str = canary_state_machine::Verb::Abort.annotation();

/// The annotation that rolls out an earlier revision (the `undo` verb): `N@STAMP` rolls out
/// revision `N`, `previous@STAMP` the one before the current; a new value is acted on once and
/// remembered (`status.history.undo`). The rollout is supervised like any other (canary first).
/// `kubectl annotate cds NAME canary.daemonset.dev/undo=1@$(date +%s) --overwrite`.
pub const UNDO_ANNOTATION: &str = canary_state_machine::Verb::Undo.annotation();

/// The revisions remembered by default (`spec.revisionHistoryLimit`).
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;

/// Whether `cds` asks for a hold ([`PAUSE_ANNOTATION`] set to anything but empty or `false`).
pub fn hold_requested(cds: &CanaryDaemonSet) -> bool {
    use kube::ResourceExt;
    cds.annotations()
        .get(PAUSE_ANNOTATION)
        .is_some_and(|value| !value.is_empty() && value != "false")
}

/// A spec has either a template (the controller owns the DaemonSet) or a workload reference
/// (someone else owns it), never both.
pub const TEMPLATE_OR_WORKLOAD_RULE: &str = "has(self.spec.template) != has(self.spec.workloadRef)";

/// A referenced DaemonSet is only ever driven pod by pod: its template is not the controller's.
pub const WORKLOAD_NEEDS_PODS_DRIVER_RULE: &str = "!has(self.spec.workloadRef) || (has(self.spec.strategy) && has(self.spec.strategy.driver) && self.spec.strategy.driver == 'Pods')";

/// The Pods driver is not the reference's: it cannot run with the reference's table.
pub const PODS_DRIVER_NOT_KUBEVIRT_RULE: &str = "!(has(self.driver) && self.driver == 'Pods' && has(self.compatibility) && self.compatibility == 'KubeVirt')";

/// A step is either `{nodes: ...}` (with an optional `maxUnavailable`) or `{pause: ...}`.
pub const STEP_IS_NODES_OR_PAUSE_RULE: &str =
    "has(self.nodes) != has(self.pause) && (!has(self.maxUnavailable) || has(self.nodes))";

/// A duration as `kubectl` users write them: `30s`, `10m`, `1h30m` (hours, minutes, seconds);
/// its home is beside the parser that reads it again.
pub use canary_state_machine::DURATION_RULE;

/// When both maxUnavailable values are pod counts, the canary one may not be the larger.
pub const CANARY_NOT_ABOVE_FAST_RULE: &str = "!(self.canaryMaxUnavailable.matches('^[0-9]+$') && self.fastMaxUnavailable.matches('^[0-9]+$')) || int(self.canaryMaxUnavailable) <= int(self.fastMaxUnavailable)";

/// Desired state of a canary-managed DaemonSet.
// printcolumn(..) repeats `type_ = "string"` on purpose: one column each.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "canary.daemonset.dev",
    version = "v1alpha1",
    kind = "CanaryDaemonSet",
    namespaced,
    status = "CanaryDaemonSetStatus",
    shortname = "cds",
    category = "all",
    derive = "PartialEq",
    doc = "A DaemonSet rolled out the KubeVirt way: one canary pod, then 10%, then back to 1.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.readyRatio",
        description = "updated-and-ready / desired pods"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.targetVersion",
        description = "the version rolled out (spec.target.version, or the tag of spec.target.fromContainer's image)"
    ),
    printcolumn(
        name = "MaxUnavailable",
        type_ = "string",
        json_path = ".status.currentMaxUnavailable",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = kube::core::Rule::new(DAEMON_SET_NAME_IMMUTABLE_RULE).message("the DaemonSet's name (spec.daemonSetName, else metadata.name) is immutable: renaming it would create a second DaemonSet beside the first; create a new CanaryDaemonSet instead"),
    validation = kube::core::Rule::new(NAME_IS_A_LABEL_VALUE_RULE).message("metadata.name must be at most 63 characters: it becomes the value of the canary.daemonset.dev/owner label"),
    validation = kube::core::Rule::new(TEMPLATE_OR_WORKLOAD_RULE).message("set exactly one of spec.template (the controller owns the DaemonSet) and spec.workloadRef (Helm, Argo CD or Flux owns it)"),
    validation = kube::core::Rule::new(WORKLOAD_NEEDS_PODS_DRIVER_RULE).message("spec.workloadRef needs spec.strategy.driver: Pods (the controller never writes a referenced DaemonSet's template)")
)]
#[serde(rename_all = "camelCase")]
pub struct CanaryDaemonSetSpec {
    /// The DaemonSet to own: metadata labels/annotations and an `apps/v1` DaemonSetSpec.
    /// Exactly one of `template` and `workloadRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<DaemonSetTemplate>,
    /// A DaemonSet someone else owns (a Helm release, an Argo CD or Flux application), driven
    /// pod by pod (`strategy.driver: Pods`) without ever writing its template. It must have
    /// `updateStrategy: OnDelete`. Exactly one of `template` and `workloadRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_ref: Option<WorkloadRef>,
    /// Name of the owned DaemonSet (default: the CanaryDaemonSet's name). A DNS-1123
    /// subdomain; immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = kube::core::Rule::new(DNS1123_SUBDOMAIN_RULE).message("spec.daemonSetName must be a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"))]
    pub daemon_set_name: Option<String>,
    /// Take over an existing DaemonSet of that name that no controller owns (default false).
    /// Adopting rewrites its template and strategy, so it must be asked for; without it an
    /// existing unowned DaemonSet is left alone and the status says how to opt in.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
    /// The install-strategy target injected as annotations on the DaemonSet and its pods.
    pub target: TargetSpec,
    /// Override of the three install-strategy annotation keys (default: KubeVirt's keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_keys: Option<AnnotationKeysSpec>,
    /// How the rollout proceeds.
    #[serde(default)]
    pub strategy: StrategySpec,
    /// KubeVirt's TLS migration steps (off by default).
    #[serde(default)]
    pub tls_migration: TlsMigrationSpec,
    /// How many rolled-out templates to remember as ControllerRevisions owned by this object
    /// (for `history`, `undo` and rollbacks; default 10). The current and the last successful
    /// revisions are always kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub revision_history_limit: Option<i32>,
    /// Prometheus queries that judge the release from its first updated pod to the end of
    /// the rollout, on either driver (docs/analysis.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisSpec>,
    /// The health gates (docs/health.md): a release that breaks its node stops on one node.
    /// Unset: the defaults (a 10m window, `[NetworkUnavailable]`, a 30s canary soak in `Fixed`
    /// compatibility and none in `KubeVirt`, `onUnhealthy: Fail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthSpec>,
    /// Receivers told of this rollout's events (docs/notifications.md): each a receiver the
    /// controller's administrator defined, by name, and the events it is told of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8))]
    pub notifications: Option<Vec<crate::notify::NotificationSubscription>>,
}

/// Node condition types that make a node unhealthy when `True`, each once; `Ready` is always
/// judged (not `True` is unhealthy), so it is not one of them.
pub const NODE_CONDITIONS_RULE: &str = "self.all(c, c.matches('^[A-Za-z][A-Za-z0-9]*$') && c != 'Ready' && self.exists_one(d, d == c))";

/// The health gates (issue 46): what makes a node unhealthy, how long after its update it is
/// judged, how long the canary soaks, and what evidence against the release leads to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HealthSpec {
    /// How long after its agent pod was replaced a node is watched (default `10m`, at most
    /// `24h`): a node healthy at its update that turns unhealthy within it fails the rollout
    /// (`NodeUnhealthy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 24))]
    #[x_kube(validation = kube::core::Rule::new(DURATION_RULE).message("a duration such as 30s, 10m or 1h30m"))]
    pub window: Option<String>,
    /// Node condition types that make a node unhealthy when `True`, beside `Ready` not `True`
    /// (default `[NetworkUnavailable]`; for example node-problem-detector's `KernelDeadlock`
    /// or `ReadonlyFilesystem`). `[]`: `Ready` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 63)))]
    #[x_kube(validation = kube::core::Rule::new(NODE_CONDITIONS_RULE).message("health.nodeConditions: node condition types such as NetworkUnavailable or KernelDeadlock, each once (Ready is always judged)"))]
    pub node_conditions: Option<Vec<String>>,
    /// How long the canary's pod is ready before the rollout widens (MaxUnavailable driver)
    /// or takes its next nodes step (Pods driver): default `30s` in `Fixed` compatibility,
    /// `0s` in `KubeVirt` (the reference's timing); at most `24h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 24))]
    #[x_kube(validation = kube::core::Rule::new(DURATION_RULE).message("a duration such as 0s, 30s or 2m"))]
    pub canary_soak: Option<String>,
    /// What evidence against the release leads to: `Fail` (default; the failure follows
    /// `strategy.onFailure`) or `Hold` (paused as the `pause` verb does, for a person to
    /// decide: `resume` goes on, `abort` rolls back).
    #[serde(default)]
    pub on_unhealthy: OnUnhealthy,
    /// The neighbours gate: pods beside the agent that lose readiness or restart after its
    /// update fail the rollout (`NeighboursDisrupted`). Unset: on, 2 pods, 50%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbours: Option<NeighboursSpec>,
}

/// When a node's neighbours count as disrupted (`spec.health.neighbours`, docs/health.md).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NeighboursSpec {
    /// The gate judges at all (default `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The fewest disrupted neighbours that make a node's disrupted (default 2, 1 to 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub min_pods: Option<u32>,
    /// The smallest disrupted share of a node's neighbours, in percent (default 50, 1 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub min_percent: Option<u32>,
}

/// A DaemonSet in the CanaryDaemonSet's namespace, owned by someone else.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    /// The DaemonSet's name.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = kube::core::Rule::new(DNS1123_SUBDOMAIN_RULE).message("workloadRef.name must be a DNS-1123 subdomain"))]
    pub name: String,
}

/// The DaemonSet template: metadata plus spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSetTemplate {
    /// Labels and annotations of the DaemonSet object itself.
    #[serde(default)]
    pub metadata: TemplateMetadata,
    /// The DaemonSet spec. The controller owns `updateStrategy.rollingUpdate.maxUnavailable`.
    pub spec: DaemonSetSpec,
}

/// Labels and annotations to set on the owned DaemonSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels of the DaemonSet.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations of the DaemonSet.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The target every pod must reach to count as updated. The version is given either as
/// `version` or as `fromContainer`, the name of the template's container whose image tag is the
/// version (so that changing the image is the whole upgrade).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.version) != has(self.fromContainer)").message("set exactly one of target.version and target.fromContainer"))]
pub struct TargetSpec {
    /// The version, written out. Exactly one of `version` and `fromContainer`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[x_kube(validation = kube::core::Rule::new("self != ''").message("target.version must not be empty"))]
    pub version: String,
    /// The name of a container of the template whose image tag is the version
    /// (`quay.io/prometheus/node-exporter:v1.9.1` gives `v1.9.1`). Exactly one of `version` and
    /// `fromContainer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self != ''").message("target.fromContainer must not be empty"))]
    pub from_container: Option<String>,
    /// Registry (default: empty).
    #[serde(default)]
    pub registry: String,
    /// Deployment id (default: a stable hash of the template, so every template change is a new
    /// target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_id: Option<String>,
}

/// The three install-strategy annotation keys.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationKeysSpec {
    /// Key carrying the version.
    #[schemars(length(min = 1, max = 317))]
    #[x_kube(validation = kube::core::Rule::new(QUALIFIED_NAME_RULE).message("annotation keys must be qualified names such as example.com/version"))]
    pub version: String,
    /// Key carrying the registry.
    #[schemars(length(min = 1, max = 317))]
    #[x_kube(validation = kube::core::Rule::new(QUALIFIED_NAME_RULE).message("annotation keys must be qualified names such as example.com/registry"))]
    pub registry: String,
    /// Key carrying the deployment id.
    #[schemars(length(min = 1, max = 317))]
    #[x_kube(validation = kube::core::Rule::new(QUALIFIED_NAME_RULE).message("annotation keys must be qualified names such as example.com/id"))]
    pub id: String,
}

/// Crash-loop detection policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CrashLoopPolicyName {
    /// Any past restart or terminated state of a container fails the canary (reference).
    KubeVirt,
    /// Waiting reasons such as CrashLoopBackOff, or a restart count at the threshold (default).
    #[default]
    Strict,
}

/// Crash-loop detection settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CrashLoopSpec {
    /// Policy (default `Strict`).
    #[serde(default)]
    pub policy: CrashLoopPolicyName,
    /// Strict only: restarts that count as a crash loop (default 3, from 1 to 1000).
    #[serde(default = "default_restart_threshold")]
    #[schemars(range(min = 1, max = 1000))]
    pub restart_threshold: i32,
    /// Strict only: also watch init containers (default true).
    #[serde(default = "default_true")]
    pub include_init_containers: bool,
}

impl Default for CrashLoopSpec {
    fn default() -> Self {
        Self {
            policy: CrashLoopPolicyName::default(),
            restart_threshold: default_restart_threshold(),
            include_init_containers: true,
        }
    }
}

/// Rollout strategy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(CANARY_NOT_ABOVE_FAST_RULE).message("canaryMaxUnavailable must not be larger than fastMaxUnavailable"))]
#[x_kube(validation = kube::core::Rule::new(PODS_DRIVER_NOT_KUBEVIRT_RULE).message("driver Pods needs compatibility Fixed: KubeVirt compatibility supports only the MaxUnavailable driver"))]
pub struct StrategySpec {
    /// `KubeVirt` or `Fixed` (default).
    #[serde(default)]
    pub compatibility: Compatibility,
    /// maxUnavailable while the canary runs and at rest (default `"1"`).
    #[serde(default = "default_canary_max_unavailable")]
    #[schemars(length(min = 1, max = 12))]
    #[x_kube(validation = kube::core::Rule::new(MAX_UNAVAILABLE_RULE).message("a positive count such as \"1\" or a percentage from \"1%\" to \"100%\""))]
    pub canary_max_unavailable: String,
    /// maxUnavailable once the canary is ready (default `"10%"`).
    #[serde(default = "default_fast_max_unavailable")]
    #[schemars(length(min = 1, max = 12))]
    #[x_kube(validation = kube::core::Rule::new(MAX_UNAVAILABLE_RULE).message("a positive count such as \"1\" or a percentage from \"1%\" to \"100%\""))]
    pub fast_max_unavailable: String,
    /// Crash-loop detection. Unset: the `KubeVirt` policy in `KubeVirt` compatibility (the
    /// reference's rule), `Strict` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash_loop: Option<CrashLoopSpec>,
    /// A rollout without progress for this long fails (default 600; 0 disables; at most 30
    /// days; ignored in `KubeVirt` compatibility, which has no deadline).
    #[serde(default = "default_progress_deadline_seconds")]
    #[schemars(range(min = 0, max = 2_592_000))]
    pub progress_deadline_seconds: i64,
    /// What a change of the DaemonSet made by someone else (a hand edit, `kubectl rollout
    /// undo`) leads to: `Revert` (default) writes the desired template back, canary first;
    /// `Report` leaves it, with a `Drifted` condition. Ignored in `KubeVirt` compatibility.
    #[serde(default)]
    pub drift_policy: DriftPolicy,
    /// What a failed rollout leads to (a crash-looping pod, a progress deadline): `Hold`
    /// (default) stays `failed` until the spec changes or a retry; `Rollback` rolls back in
    /// place to the last revision that finished `successful`, canary first (`rollingBack`,
    /// then `rolledBack`). Ignored with `workloadRef` (the template is not ours to write).
    #[serde(default)]
    pub on_failure: OnFailure,
    /// `MaxUnavailable` (default: the DaemonSet controller replaces pods, steered through
    /// maxUnavailable, the reference's way) or `Pods` (the DaemonSet is `OnDelete` and the
    /// controller deletes old pods node by node, through `steps`). `Pods` needs `Fixed`
    /// compatibility.
    #[serde(default)]
    pub driver: Driver,
    /// Pods driver: the steps (default `[{nodes: "1"}, {nodes: "100%"}]`). A rollout always
    /// ends with every node updated: a last `{nodes: "100%"}` is added when missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub steps: Vec<StepSpec>,
    /// Pods driver: the first nodes step takes its nodes from the nodes this selector matches
    /// first, then from the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_node_selector: Option<LabelSelector>,
    /// Pods driver: a node label (for example `topology.kubernetes.io/zone`); nodes steps after
    /// the first go zone by zone, never disrupting two zones at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 317))]
    #[x_kube(validation = kube::core::Rule::new(QUALIFIED_NAME_RULE).message("topologyKey must be a label key such as topology.kubernetes.io/zone"))]
    pub topology_key: Option<String>,
}

/// One step of the Pods driver: `{nodes: "10%"}` (optionally with `maxUnavailable`) or
/// `{pause: {duration: "10m"}}` / `{pause: {}}` (until promoted).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(STEP_IS_NODES_OR_PAUSE_RULE).message("a step is either {nodes: ...} (with an optional maxUnavailable) or {pause: ...}"))]
pub struct StepSpec {
    /// How many nodes run the new revision at the end of the step: a count (`"1"`) or a
    /// percentage of the nodes (`"10%"`), deferred nodes left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 12))]
    #[x_kube(validation = kube::core::Rule::new(MAX_UNAVAILABLE_RULE).message("a positive node count such as \"1\" or a percentage from \"1%\" to \"100%\""))]
    pub nodes: Option<String>,
    /// Pods unavailable at once during this step (default: `canaryMaxUnavailable` in the first
    /// nodes step, `fastMaxUnavailable` after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 12))]
    #[x_kube(validation = kube::core::Rule::new(MAX_UNAVAILABLE_RULE).message("a positive count such as \"1\" or a percentage from \"1%\" to \"100%\""))]
    pub max_unavailable: Option<String>,
    /// Hold: for `duration`, or until promoted (the `canary.daemonset.dev/promote` annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseSpec>,
}

/// A pause step.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PauseSpec {
    /// How long (`30s`, `10m`, `1h30m`); unset: until promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 24))]
    #[x_kube(validation = kube::core::Rule::new(DURATION_RULE).message("a duration such as 30s, 10m or 1h30m"))]
    pub duration: Option<String>,
}

impl Default for StrategySpec {
    fn default() -> Self {
        Self {
            compatibility: Compatibility::default(),
            canary_max_unavailable: default_canary_max_unavailable(),
            fast_max_unavailable: default_fast_max_unavailable(),
            crash_loop: None,
            progress_deadline_seconds: default_progress_deadline_seconds(),
            drift_policy: DriftPolicy::default(),
            on_failure: OnFailure::default(),
            driver: Driver::default(),
            steps: Vec::new(),
            canary_node_selector: None,
            topology_key: None,
        }
    }
}

/// KubeVirt's TLS migration steps (spec section 6).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsMigrationSpec {
    /// Run the TLS steps (default false).
    #[serde(default)]
    pub enabled: bool,
    /// Label on the DaemonSet that says its image supports the flag.
    #[serde(default = "default_support_label")]
    pub support_label: String,
    /// Value of that label (default `"true"`).
    #[serde(default = "default_support_value")]
    pub support_value: String,
    /// Flag appended to the container's args.
    #[serde(default = "default_flag")]
    pub flag: String,
    /// Value appended after the flag.
    #[serde(default = "default_flag_value")]
    pub flag_value: String,
    /// Volume (and mount) name of the certificate secret to detach.
    #[serde(default = "default_cert_secret_volume")]
    pub cert_secret_volume: String,
    /// Container name to edit (default: the first container, as the reference does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

impl Default for TlsMigrationSpec {
    fn default() -> Self {
        Self {
            enabled: false,
            support_label: default_support_label(),
            support_value: default_support_value(),
            flag: default_flag(),
            flag_value: default_flag_value(),
            cert_secret_volume: default_cert_secret_volume(),
            container: None,
        }
    }
}

/// Observed state; the controller's only memory.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryDaemonSetStatus {
    /// `started`, `canary`, `increasing`, `waiting`, `successful` or `failed`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    #[schemars(with = "Option<String>")]
    pub phase: Option<Phase>,
    /// Machine-readable reason of the phase (a failure reason when failed).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    #[schemars(with = "Option<String>")]
    pub reason: Option<FailureReason>,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `Progressing`, `Available` and `Degraded`.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_is_empty"
    )]
    pub conditions: Vec<Condition>,
    /// The CanaryDaemonSet generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The DaemonSet generation recorded as known (the reference's `SetGeneration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_daemon_set_generation: Option<i64>,
    /// Name of the owned DaemonSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_set_name: Option<String>,
    /// The version rolled out: `spec.target.version`, or the tag of the image of
    /// `spec.target.fromContainer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_version: Option<String>,
    /// `spec.target.registry`; with the version and the deployment id, the target the phase
    /// was decided for (`status::decided_for_another_target`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_registry: Option<String>,
    /// `spec.target.deploymentId`, or the hash of `spec.template` it defaults to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_deployment_id: Option<String>,
    /// Pods the DaemonSet should run (`desiredNumberScheduled`).
    #[serde(default)]
    pub desired: u32,
    /// Pods that reached the target.
    #[serde(default)]
    pub updated: u32,
    /// Updated pods that are ready.
    #[serde(default)]
    pub updated_ready: u32,
    /// `updatedReady/desired`, for the printer column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_ratio: Option<String>,
    /// maxUnavailable of the live DaemonSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_max_unavailable: Option<String>,
    /// When the current phase began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_start_time: Option<Time>,
    /// `updatedReady` when progress was last seen (progress deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_updated_ready: Option<u32>,
    /// When progress was last seen (progress deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_progress_time: Option<Time>,
    /// Hash of the owned DaemonSet's pod template and update strategy as the API server stored
    /// them after the controller's last write: a live DaemonSet that hashes otherwise was
    /// changed by someone else (drift).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_set_template_hash: Option<String>,
    /// Pods driver: the step the rollout is in, from 0 (`stepCount` once every step is done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_index: Option<u32>,
    /// Pods driver: the number of steps (a last `{nodes: 100%}` included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_count: Option<u32>,
    /// Pods driver: when the current step began (a timed pause ends from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_start_time: Option<Time>,
    /// Pods driver: the DaemonSet revision (`controller-revision-hash`) the pods move to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_revision: Option<String>,
    /// Pods driver: the canary's nodes (the first nodes step), at most 10; none in a rollback.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_is_empty"
    )]
    pub canary_nodes: Vec<String>,
    /// Pods driver: nodes left for later (NotReady, cordoned, gone), at most 10.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_is_empty"
    )]
    pub deferred_nodes: Vec<NodeNote>,
    /// Pods driver: how many nodes are deferred.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred_node_count: Option<u32>,
    /// Pods driver: nodes whose updated pod crash-loops, at most 10.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_is_empty"
    )]
    pub failed_nodes: Vec<String>,
    /// Pods driver: how many nodes failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_node_count: Option<u32>,
    /// The nodes the health gates name (`NodeUnhealthy`, or held by `onUnhealthy: Hold`): at
    /// most 10, both drivers; kept while the failure is.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_is_empty"
    )]
    #[schemars(length(max = 10))]
    pub unhealthy_nodes: Vec<UnhealthyNodeNote>,
    /// How many nodes the health gates name in all, when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_node_count: Option<u32>,
    /// When a person last resumed a hold of `onUnhealthy: Hold` that named nodes: the nodes
    /// unhealthy since no later than this were answered (go on) and hold the rollout no more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_answered: Option<Time>,
    /// Pods driver: pods per revision, the target first, at most 5 revisions.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_is_empty"
    )]
    pub revisions: Vec<RevisionPods>,
    /// The last `canary.daemonset.dev/promote` value acted on: a promotion counts once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion: Option<String>,
    /// The rollout is held on request (`canary.daemonset.dev/paused`) and the controller has
    /// acted on it (announced it with the `Paused` event); both drivers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<bool>,
    /// The last `canary.daemonset.dev/retry` value acted on: a retry counts once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
    /// The remembered revisions this object is at, and a rollback in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryStatus>,
    /// The measurements of the stretch of the rollout measured last (`spec.analysis`): a
    /// step of the Pods driver, the canary or the widened rollout of the MaxUnavailable driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisStatus>,
}

/// A node the health gates name (`status.unhealthyNodes`, issue 46): what was seen on it and
/// since when. The reason and message are the node's, cut.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyNodeNote {
    /// Node name.
    pub name: String,
    /// The condition that makes it unhealthy (`Ready`, or one of `spec.health.nodeConditions`).
    pub condition: String,
    /// Its status (`False`, `Unknown`, `True`).
    pub status: String,
    /// Its reason, cut.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Its message, cut.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Unhealthy since (the condition's `lastTransitionTime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
}

/// A node and why it is listed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeNote {
    /// Node name.
    pub name: String,
    /// Why: `NotReady`, `cordoned`, `node gone`.
    pub reason: String,
}

/// The pods of one DaemonSet revision.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionPods {
    /// The `controller-revision-hash`.
    pub revision: String,
    /// Pods on it (terminating ones left out).
    pub pods: u32,
    /// Of those, ready.
    pub ready: u32,
}

impl CanaryDaemonSetStatus {
    /// The phase's name, as the status spells it (for messages, logs and tests).
    pub fn phase_name(&self) -> Option<&'static str> {
        self.phase.map(Phase::as_str)
    }

    /// The reason's name, as the status spells it (for messages, logs and tests).
    pub fn reason_name(&self) -> Option<&'static str> {
        self.reason.map(FailureReason::as_str)
    }

    /// The fields a status may leave out, by their JSON names.
    pub const OPTIONAL_FIELDS: [&'static str; 34] = [
        "phase",
        "reason",
        "message",
        "conditions",
        "observedGeneration",
        "recordedDaemonSetGeneration",
        "daemonSetName",
        "targetVersion",
        "targetRegistry",
        "targetDeploymentId",
        "readyRatio",
        "currentMaxUnavailable",
        "phaseStartTime",
        "progressUpdatedReady",
        "lastProgressTime",
        "daemonSetTemplateHash",
        "currentStepIndex",
        "stepCount",
        "stepStartTime",
        "targetRevision",
        "canaryNodes",
        "deferredNodes",
        "deferredNodeCount",
        "failedNodes",
        "failedNodeCount",
        "unhealthyNodes",
        "unhealthyNodeCount",
        "unhealthyAnswered",
        "revisions",
        "promotion",
        "held",
        "retry",
        "history",
        "analysis",
    ];

    /// The JSON merge patch body that makes the stored status equal to this one: absent
    /// fields are sent as `null`, which deletes them, so that for example the message of a
    /// failure does not outlive it.
    pub fn merge_patch(&self) -> Result<serde_json::Value, Error> {
        let mut value = serde_json::to_value(self).map_err(|e| Error::Serialize(e.to_string()))?;
        if let Some(fields) = value.as_object_mut() {
            for name in Self::OPTIONAL_FIELDS {
                fields
                    .entry(name.to_owned())
                    .or_insert(serde_json::Value::Null);
            }
        }
        Ok(serde_json::json!({ "status": value }))
    }
}

/// The untyped API of CanaryDaemonSets in `namespace` (or all): the controller lists and watches
/// them untyped and decodes each with [`decode`], so that one bad object fails alone.
pub fn dynamic_api(client: &kube::Client, namespace: Option<&str>) -> kube::Api<DynamicObject> {
    crate::scope::api_with(
        client,
        namespace,
        &ApiResource::erase::<CanaryDaemonSet>(&()),
    )
}

/// A stored CanaryDaemonSet that does not decode.
#[derive(Debug, Clone)]
pub struct Undecoded {
    /// A stand-in with the object's metadata and status (when those decode), an empty spec.
    pub stand_in: CanaryDaemonSet,
    /// Why it does not decode, with the path of the field (`spec.strategy...: invalid value`).
    pub why: String,
}

/// Decodes one untyped object, or says why it cannot be decoded.
pub fn decode(object: DynamicObject) -> Result<CanaryDaemonSet, Box<Undecoded>> {
    let stand_in = stand_in(&object);
    let value = serde_json::to_value(&object).map_err(|e| {
        Box::new(Undecoded {
            stand_in: stand_in.clone(),
            why: format!("the object does not serialize: {e}"),
        })
    })?;
    serde_path_to_error::deserialize::<_, CanaryDaemonSet>(value).map_err(|error| {
        Box::new(Undecoded {
            stand_in,
            why: format!(
                "the stored object does not decode: {}: {}",
                error.path(),
                error.inner()
            ),
        })
    })
}

/// A CanaryDaemonSet with the metadata (and, when it decodes, the status) of `object` and an
/// empty spec: what the controller knows of an object it cannot decode, or of a deleted one.
pub fn stand_in(object: &DynamicObject) -> CanaryDaemonSet {
    let template = DaemonSetTemplate {
        metadata: TemplateMetadata::default(),
        spec: DaemonSetSpec::default(),
    };
    let spec = CanaryDaemonSetSpec::with_template(template, TargetSpec::default());
    CanaryDaemonSet {
        metadata: object.metadata.clone(),
        spec,
        status: object
            .data
            .get("status")
            .cloned()
            .and_then(|status| serde_json::from_value(status).ok()),
    }
}

impl CanaryDaemonSet {
    /// Name of the DaemonSet this resource owns.
    pub fn daemon_set_name(&self) -> String {
        self.spec
            .workload_ref
            .as_ref()
            .map(|w| w.name.clone())
            .or_else(|| self.spec.daemon_set_name.clone())
            .or_else(|| self.metadata.name.clone())
            .unwrap_or_default()
    }
}

/// A value of the state machine's vocabulary (a phase, a failure reason) that reads as absent
/// when the stored text is none of its names: a status written by hand, or by a version that
/// knew other names, decodes, and the pass decides as without it (as the text it was).
pub(crate) fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr,
{
    let text = Option::<String>::deserialize(deserializer)?;
    Ok(text.and_then(|text| text.parse().ok()))
}

/// A list a merge patch cleared (`null`) reads as empty, as the API server stores it.
fn null_is_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<Vec<T>>::deserialize(deserializer).map(Option::unwrap_or_default)
}

fn default_restart_threshold() -> i32 {
    3
}
fn default_true() -> bool {
    true
}
fn default_canary_max_unavailable() -> String {
    "1".to_owned()
}
fn default_fast_max_unavailable() -> String {
    "10%".to_owned()
}
fn default_progress_deadline_seconds() -> i64 {
    600
}
fn default_support_label() -> String {
    "kubevirt.io/supports-migration-cn-types".to_owned()
}
fn default_support_value() -> String {
    "true".to_owned()
}
fn default_flag() -> String {
    "--migration-cn-types".to_owned()
}
fn default_flag_value() -> String {
    "migration".to_owned()
}
fn default_cert_secret_volume() -> String {
    "kubevirt-virt-handler-certs".to_owned()
}

mod build;
mod history;
mod schema;
/// `spec.analysis` and `status.analysis`, whose home is the analysis crate with its providers.
pub use canary_analysis::{
    AnalysisSpec, AnalysisStatus, MeasurementStatus, MetricSpec, PrometheusSpec, SecretKeyRef,
};
pub use history::{HistoryStatus, RevisionRef, RollbackStatus};
pub use schema::{INT_OR_STRING_RANGE_RULE, crd, crd_yaml};

#[cfg(test)]
mod tests;
