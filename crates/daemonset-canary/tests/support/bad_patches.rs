//! The bad patches of issue 52's trial, and more: `kubectl patch` commands a user could type
//! against the example CanaryDaemonSet (`deploy/examples/node-agent.yaml`), each with what
//! `kubectl` printed when kube-apiserver v1.35.4 refused it (`cargo xtask cluster up`, the CRD of
//! `daemonset-canary crd`, 2026-12-07), word for word.
//!
//! One table, two checks: `tests/it/bad_patches.rs` runs it against `sim serve` and
//! `tests/e2e.rs` against the real control plane; both must print exactly this. Rows whose
//! errors are on sibling fields are left out: the real server lists those in Go's map order,
//! which changes from one write to the next.

/// How the patch is sent.
#[derive(Clone, Copy, Debug)]
pub enum PatchKind {
    /// `kubectl patch --type=merge`.
    Merge,
    /// `kubectl patch --type=json`.
    Json,
    /// `kubectl patch --type=merge --subresource=status`.
    Status,
}

impl PatchKind {
    /// kubectl's flags for it.
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            Self::Merge => &["--type=merge"],
            Self::Json => &["--type=json"],
            Self::Status => &["--type=merge", "--subresource=status"],
        }
    }
}

/// One bad patch.
pub struct BadPatch {
    /// What is wrong, in the user's words.
    pub what: &'static str,
    /// How it is sent.
    pub kind: PatchKind,
    /// The patch (`kubectl patch -p`).
    pub patch: &'static str,
    /// kubectl's stderr when the real API server refused it.
    pub refusal: &'static str,
}

/// The name and namespace of the example CanaryDaemonSet the patches are sent to.
pub const TARGET: (&str, &str) = ("node-exporter", "node-agent-example");

/// The 14 bad patches of the trial (the first 14 rows) and 7 more.
pub const BAD_PATCHES: &[BadPatch] = &[
    BadPatch {
        what: "a string for an integer",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"strategy":{"progressDeadlineSeconds":"ten"}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: \n* spec.strategy.progressDeadlineSeconds: Invalid value: \"string\": spec.strategy.progressDeadlineSeconds in body must be of type integer: \"string\"\n* <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation\n",
    },
    BadPatch {
        what: "a negative count",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"strategy":{"progressDeadlineSeconds":-1}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: spec.strategy.progressDeadlineSeconds: Invalid value: -1: spec.strategy.progressDeadlineSeconds in body should be greater than or equal to 0\n",
    },
    BadPatch {
        what: "an unknown enum value",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"strategy":{"driver":"Canary"}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: \n* spec.strategy.driver: Unsupported value: \"Canary\": supported values: \"MaxUnavailable\", \"Pods\"\n* <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation\n",
    },
    BadPatch {
        what: "a bad percentage",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"strategy":{"fastMaxUnavailable":"150%"}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: spec.strategy.fastMaxUnavailable: Invalid value: \"150%\": a positive count such as \"1\" or a percentage from \"1%\" to \"100%\"\n",
    },
    BadPatch {
        what: "a bad duration",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"strategy":{"driver":"Pods","steps":[{"nodes":"1"},{"pause":{"duration":"10 minutes"}}]}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: spec.strategy.steps[1].pause.duration: Invalid value: \"10 minutes\": a duration such as 30s, 10m or 1h30m\n",
    },
    BadPatch {
        what: "a crash-loop threshold below its minimum",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"strategy":{"crashLoop":{"restartThreshold":0}}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: spec.strategy.crashLoop.restartThreshold: Invalid value: 0: spec.strategy.crashLoop.restartThreshold in body should be greater than or equal to 1\n",
    },
    BadPatch {
        what: "a history limit above its maximum",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"revisionHistoryLimit":500}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: spec.revisionHistoryLimit: Invalid value: 500: spec.revisionHistoryLimit in body should be less than or equal to 100\n",
    },
    BadPatch {
        what: "a fraction for an integer",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"revisionHistoryLimit":2.5}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: \n* spec.revisionHistoryLimit: Invalid value: \"number\": spec.revisionHistoryLimit in body must be of type integer: \"number\"\n* <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation\n",
    },
    BadPatch {
        what: "a string for a boolean",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"adopt":"yes"}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: \n* spec.adopt: Invalid value: \"string\": spec.adopt in body must be of type boolean: \"string\"\n* <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation\n",
    },
    BadPatch {
        what: "a maxUnavailable too long",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"strategy":{"canaryMaxUnavailable":"1234567890123"}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: \n* spec.strategy.canaryMaxUnavailable: Too long: may not be more than 12 bytes\n* <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation\n",
    },
    BadPatch {
        what: "a canary wider than the fast step",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"strategy":{"canaryMaxUnavailable":"5","fastMaxUnavailable":"2"}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: spec.strategy: Invalid value: canaryMaxUnavailable must not be larger than fastMaxUnavailable\n",
    },
    BadPatch {
        what: "a renamed DaemonSet",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"daemonSetName":"other"}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: <nil>: Invalid value: the DaemonSet's name (spec.daemonSetName, else metadata.name) is immutable: renaming it would create a second DaemonSet beside the first; create a new CanaryDaemonSet instead\n",
    },
    BadPatch {
        what: "the target removed",
        kind: PatchKind::Json,
        patch: r#"[{"op":"remove","path":"/spec/target"}]"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: \n* spec.target: Required value\n* <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation\n",
    },
    BadPatch {
        what: "a bearer token over http://",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"analysis":{"prometheus":{"address":"http://prometheus.monitoring.svc:9090","bearerTokenSecret":{"name":"prom-token","key":"token"}},"metrics":[{"name":"errors","query":"sum(rate(errors[5m]))","max":0.1}]}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: spec.analysis.prometheus: Invalid value: a bearer token goes over https:// only: it would cross the network in clear text\n",
    },
    BadPatch {
        what: "a negative count in the status",
        kind: PatchKind::Status,
        patch: r#"{"status":{"updated":-1}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: status.updated: Invalid value: -1: updated in body should be greater than or equal to 0\n",
    },
    BadPatch {
        what: "an empty list of metrics",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"analysis":{"prometheus":{"address":"http://p:9090"},"metrics":[]}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: spec.analysis.metrics: Invalid value: 0: spec.analysis.metrics in body should have at least 1 items\n",
    },
    BadPatch {
        what: "a step that is both nodes and pause",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"strategy":{"driver":"Pods","steps":[{"nodes":"1","pause":{}}]}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: spec.strategy.steps[0]: Invalid value: a step is either {nodes: ...} (with an optional maxUnavailable) or {pause: ...}\n",
    },
    BadPatch {
        what: "an enum value in the wrong case",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"strategy":{"compatibility":"kubevirt"}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: \n* spec.strategy.compatibility: Unsupported value: \"kubevirt\": supported values: \"KubeVirt\", \"Fixed\"\n* <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation\n",
    },
    BadPatch {
        what: "a workloadRef beside the template",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"workloadRef":{"name":"agent"}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: \n* <nil>: Invalid value: set exactly one of spec.template (the controller owns the DaemonSet) and spec.workloadRef (Helm, Argo CD or Flux owns it)\n* <nil>: Invalid value: spec.workloadRef needs spec.strategy.driver: Pods (the controller never writes a referenced DaemonSet's template)\n",
    },
    BadPatch {
        what: "a boolean for an int-or-string",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"template":{"spec":{"updateStrategy":{"rollingUpdate":{"maxUnavailable":true}}}}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: \n* spec.template.spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"boolean\": spec.template.spec.updateStrategy.rollingUpdate.maxUnavailable in body must be of type integer,string: \"boolean\"\n* <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation\n",
    },
    BadPatch {
        what: "a fraction above the maximum",
        kind: PatchKind::Merge,
        patch: r#"{"spec":{"strategy":{"progressDeadlineSeconds":3000000.5}}}"#,
        refusal: "The CanaryDaemonSet \"node-exporter\" is invalid: \n* spec.strategy.progressDeadlineSeconds: Invalid value: \"number\": spec.strategy.progressDeadlineSeconds in body must be of type integer: \"number\"\n* spec.strategy.progressDeadlineSeconds: Invalid value: 3.0000005e+06: spec.strategy.progressDeadlineSeconds in body should be less than or equal to 2.592e+06\n* <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation\n",
    },
];
