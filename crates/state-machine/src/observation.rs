//! What the caller saw in the cluster during one pass: the input of [`decide`](crate::decide).

use std::time::Duration;

use crate::max_unavailable::LiveMaxUnavailable;
use crate::phase::{FailureReason, Phase};

/// TLS migration facts (spec section 6), given only when TLS migration is enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TlsFacts {
    /// The **live** DaemonSet carries the TLS-support label.
    pub supported: bool,
    /// The live pod template already has the TLS flag.
    pub live_has_flag: bool,
    /// The desired template still mounts the old client-certificate secret, after the preamble
    /// (which drops it from desired once the live template lost it).
    pub desired_has_cert_volume: bool,
}

/// The first crash-looping **updated** pod, per the crash-loop policy the caller applies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CrashLoopSeen {
    /// Pod name, for messages.
    pub pod: String,
    /// Why it counts as crash-looping, e.g. `"CrashLoopBackOff"` or `"restartCount 1"`.
    pub reason: String,
}

/// The live DaemonSet's pod template or update strategy was changed by someone other than the
/// controller since its last write (a hand edit, `kubectl rollout undo`, another tool).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct DriftSeen {
    /// What changed, for messages, e.g. `"image of container agent: agent:v2 → agent:v1"`.
    pub what: String,
}

/// What the previous pass decided, read back from status (the controller's only memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PreviousPass {
    /// The phase recorded by the previous pass.
    pub phase: Phase,
    /// The failure reason recorded with it, when `phase` is `Failed`.
    ///
    /// Used by the sticky-failure rule: `None` with `Failed` is treated as a sticky failure.
    pub failure: Option<FailureReason>,
    /// The updated-and-ready count recorded by the previous pass.
    pub updated_ready: u32,
    /// Time since the phase started or since `updated_ready` last changed, whichever is later.
    pub since_progress: Duration,
    /// The previous pass found the DaemonSet drifted (its `Drifted` condition), so a drift
    /// event is not repeated.
    pub drifted: bool,
}

/// One pass's view of the DaemonSet, its pods and the controller's memory.
///
/// `Default` is an unchanged, known, empty DaemonSet resting with `maxUnavailable` unset, so
/// tests and callers can spell only what matters with `..Observation::default()`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Observation {
    /// The DaemonSet name, used in messages (`"daemonSet <name> rollout failed"`).
    pub name: String,
    /// The target version, used in messages (`"started rollout of v1.9.4"`): each rollout's
    /// events and messages say which version it rolls out. Empty when unknown.
    pub version: String,
    /// Desired metadata/spec differs from the live DaemonSet (the reference's `specChanged`).
    /// The only flag that starts a canary.
    pub object_changed: bool,
    /// The live `metadata.generation` equals the generation the controller recorded.
    pub generation_known: bool,
    /// Live `status.desiredNumberScheduled`.
    pub desired_pods: u32,
    /// Pods of the live DaemonSet that run the target (per the caller's updated rule).
    pub updated_pods: u32,
    /// Updated pods that are also ready.
    pub updated_ready_pods: u32,
    /// Pods of the live DaemonSet on an earlier template: those a rollout still replaces. A
    /// DaemonSet just created, or a node that joined, has pods missing (desired above
    /// updated) but none old: the MaxUnavailable driver's canary soak holds the DaemonSet
    /// controller only while some are old (issue 46).
    pub old_pods: u32,
    /// The first crash-looping updated pod, if any.
    pub crash_loop: Option<CrashLoopSeen>,
    /// `maxUnavailable` exactly as the live DaemonSet has it (with `surge`, its `maxSurge`
    /// while `maxUnavailable` is 0: the step value either way).
    pub live_max_unavailable: LiveMaxUnavailable,
    /// The DaemonSet replaces pods by surge (`spec.strategy.surge`, issue 50): a new pod starts
    /// beside the old one, and the canary soak writes its hold (`OnDelete`, under which the
    /// DaemonSet controller deletes the younger of two pods on a node: the new one) only once
    /// the canary has its node to itself ([`surge_canary_alone`](Self::surge_canary_alone)).
    pub surge: bool,
    /// With [`surge`](Self::surge), while the canary soaks: the canary's pod (the oldest
    /// updated pod) is the only live pod of its node, the DaemonSet controller having deleted
    /// the old one beside it once the canary was available (issue 50). Only then does the
    /// soak's `OnDelete` keep the canary; the nodes surging meanwhile lose their new pod and
    /// keep their old one. `None` when not counted (the caller walks the pods only during a
    /// surge soak).
    pub surge_canary_alone: Option<bool>,
    /// With [`surge`](Self::surge): the nodes where a hold's `OnDelete` would keep a pod that
    /// is not ready and delete a younger one (issue 50). Without surge the DaemonSet controller
    /// keeps only the oldest pod of a node; while surging it deletes an old pod that is not
    /// ready at once, but a pass may see the moment before it does (an old pod that has just
    /// turned not ready, a rollback's crash-looping pod beside the surged good one), and a
    /// revert whose pod is not ready beside a ready younger one stays so. The hold waits for
    /// none to be left ([`decide`](crate::decide)). `None` when not counted: the caller counts
    /// only when a pass would write the hold under surge (it walks the DaemonSet's pods).
    pub surge_unsettled_nodes: Option<u32>,
    /// Live `status.observedGeneration >= metadata.generation`: the DaemonSet controller has
    /// caught up with the last write, so its counts describe the current template. Only the
    /// default strategy reads it.
    pub rollout_observed: bool,
    /// The DaemonSet's own status says every desired pod runs its current template and is
    /// available, with no misscheduled pod left over (`updatedNumberScheduled` and
    /// `numberAvailable` at `desiredNumberScheduled`, observed). Only the default strategy reads
    /// it: more updated pods than desired (spec quirk 2) resolve into a finish once it holds.
    pub daemon_set_rolled_out: bool,
    /// Someone else changed the live template or update strategy; `None` when it is as the
    /// controller last wrote it (or when the caller cannot tell). Only the default strategy
    /// reads it ([`Strategy::drift_policy`](crate::Strategy::drift_policy)).
    pub drift: Option<DriftSeen>,
    /// TLS migration facts; `None` when TLS migration is off.
    pub tls: Option<TlsFacts>,
    /// The previous pass, from status; `None` on the first pass.
    pub previous: Option<PreviousPass>,
    /// A retry was asked for and not yet acted on (the `retry` verb): a failed rollout
    /// forgets its failure and is decided again as one that has just started. Ignored unless
    /// failed.
    pub retry: bool,
    /// The rollout is held on request (the `pause` verb, `canary.daemonset.dev/paused`): the
    /// DaemonSet controller must replace no pod, so a rollout under way is put on `OnDelete`
    /// (one [`WriteKind::Hold`](crate::WriteKind::Hold) write) and nothing else is written
    /// until the hold ends. The phase shows `paused`; the progress deadline does not run.
    pub held: bool,
    /// The previous pass acted on the hold already (the status records it): `Paused` is not
    /// announced again, and when the hold is gone `Resumed` is announced once and the
    /// DaemonSet goes back to `RollingUpdate`.
    pub hold_recorded: bool,
    /// The live DaemonSet's update strategy is `OnDelete`: the hold's write is in (the caller
    /// reports a hand-made `OnDelete` as [`drift`](Self::drift)).
    pub live_on_hold: bool,
    /// The health gates' facts (issue 46: the unhealthy nodes and their pods, the canary's
    /// ready time for the soak); `None` without gates.
    pub health: Option<crate::health::HealthFacts>,
    /// The analysis (`spec.analysis`, issue 46) of the stretch the rollout is in
    /// ([`analysis_step`](crate::analysis_step): the canary, or the widened rollout); `None`
    /// without analysis. The widen waits until the canary's passes; a failure fails the rollout.
    pub analysis: Option<crate::analysis::StepAnalysis>,
}

impl Default for Observation {
    /// Unchanged, generation known, DaemonSet controller caught up, no pods, `maxUnavailable`
    /// unset, no TLS, no previous pass, not held: a DaemonSet at rest.
    fn default() -> Self {
        Observation {
            name: String::new(),
            version: String::new(),
            object_changed: false,
            generation_known: true,
            desired_pods: 0,
            updated_pods: 0,
            updated_ready_pods: 0,
            old_pods: 0,
            crash_loop: None,
            live_max_unavailable: LiveMaxUnavailable::Unset,
            surge: false,
            surge_unsettled_nodes: None,
            surge_canary_alone: None,
            rollout_observed: true,
            daemon_set_rolled_out: false,
            drift: None,
            tls: None,
            previous: None,
            retry: false,
            held: false,
            hold_recorded: false,
            live_on_hold: false,
            health: None,
            analysis: None,
        }
    }
}
