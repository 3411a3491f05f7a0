//! The pure decision core of a DaemonSet canary upgrade: one [`Observation`] in, one
//! [`Decision`] out.
//!
//! A DaemonSet rests at `maxUnavailable: 1`. When its desired state changes, the new template
//! goes out with `maxUnavailable: 1` so Kubernetes replaces exactly one pod, the canary. Once an
//! updated pod is ready the rollout widens to `10%`; once every desired pod is updated and ready
//! it reverts to 1 and records the DaemonSet generation. Phases:
//! `started → canary → increasing → waiting → successful`, any of them `→ failed`.
//!
//! This crate decides each step of that and nothing else. It does no I/O and depends on no
//! Kubernetes crate: it speaks in counts, flags and its own small types. The caller (for
//! example `canary-kube-adapter`) observes the cluster, calls [`decide`], applies the at most
//! one [`DaemonSetWrite`], records the generation when told, and stores the phase.
//!
//! Two tables, chosen by [`Strategy::compatibility`]:
//! - [`Strategy::kubevirt`] reproduces KubeVirt virt-operator's table (spec sections 3, 4 and 6)
//!   row by row, quirks included: desired = 0 stays in `canary`, more updated-and-ready pods
//!   than desired is an `UnexpectedState` error, done comes in the same pass as the revert, the
//!   crash check runs only while no updated pod is ready, failures are re-evaluated every pass,
//!   and TLS steps record the generation so their re-roll runs unsupervised.
//! - [`Strategy::default`] keeps the phases and the three writes per rollout and fixes those
//!   quirks; each fix is documented where it is made, with the KubeVirt issue it answers, and
//!   `docs/phases.md` has the quirk-by-quirk table.
//!
//! # Invariants
//!
//! - At most one DaemonSet write per decision; a rollout costs three (start, widen, finish),
//!   two on a single node, plus the TLS steps.
//! - Only [`Observation::object_changed`] starts a canary: an unknown generation alone never
//!   restarts it.
//! - The rollout never widens while no updated pod is ready; in the default strategy never
//!   with a crash-looping updated pod either.
//! - No flag set (object unchanged, generation known, `maxUnavailable` at rest) means a quiet
//!   decision: `successful`, done, no write.
//! - [`decide`] never panics, whatever the input; an invalid strategy gives a `failed`
//!   decision with reason `InvalidStrategy`.
//!
//! # Example
//!
//! ```
//! use canary_state_machine::{
//!     decide, LiveMaxUnavailable, MaxUnavailable, Observation, Phase, Strategy, WriteKind,
//! };
//!
//! let strategy = Strategy::default();
//! // The target changed: start the canary at maxUnavailable 1, without recording the generation.
//! let start = decide(&strategy, &Observation {
//!     name: "node-agent".into(),
//!     object_changed: true,
//!     desired_pods: 3,
//!     ..Observation::default()
//! });
//! assert_eq!(start.phase, Phase::Started);
//! let write = start.write.expect("row 1 writes");
//! assert_eq!((write.kind, write.max_unavailable), (WriteKind::Start, Some(MaxUnavailable::ONE)));
//! assert!(!start.action.record_generation && !start.done);
//!
//! // One updated pod is ready: widen to 10% and record the generation.
//! let widen = decide(&strategy, &Observation {
//!     name: "node-agent".into(),
//!     generation_known: false,
//!     desired_pods: 3,
//!     updated_pods: 1,
//!     updated_ready_pods: 1,
//!     live_max_unavailable: LiveMaxUnavailable::Int(1),
//!     ..Observation::default()
//! });
//! assert_eq!(widen.phase, Phase::Increasing);
//! assert_eq!(widen.write.and_then(|w| w.max_unavailable), Some(MaxUnavailable::TEN_PERCENT));
//! assert!(widen.action.record_generation);
//!
//! // At rest with a known generation: nothing to do.
//! let quiet = decide(&strategy, &Observation::default());
//! assert!(quiet.action.quiet && quiet.done && quiet.write.is_none());
//! assert_eq!(quiet.phase.as_str(), "successful");
//! ```

mod analysis;
mod condition;
mod decide;
mod decision;
mod duration;
pub mod health;
pub mod lifecycle;
mod max_unavailable;
mod observation;
mod outside_text;
mod phase;
mod pods;
mod prepull;
mod strategy;
mod verb;

pub use analysis::{
    AnalysisError, AnalysisVerdict, MAX_METRICS, Measurement, MetricCheck, MetricTally,
    PLACEHOLDERS, RenderError, StepAnalysis, TemplateValues, Verdict, judge, placeholders,
    regex_alternation, render, validate_metrics, verdict,
};
pub use condition::{
    ConditionReason, ConditionType, ConditionVerdict, Gate, Standing, awaiting_workload, kstatus,
};
pub use decide::{
    ANALYSIS_CANARY, ANALYSIS_WIDENED, SURGE_SETTLE_RECHECK, SyncFlags, analysis_step,
    at_canary_value, decide, decide_create, tls_step,
};
pub use decision::{DaemonSetWrite, Event, EventType, TemplateEdit, WriteKind, event_reason};
pub use duration::{DURATION_RULE, InvalidDuration, MAX_DURATION, parse_duration};
pub use health::{
    HealthCause, HealthFacts, HealthPolicy, HealthVerdict, NeighbourFacts, NeighbourNode,
    NeighbourPod, NeighbourPolicy, NeighbourTally, NodePod, NodeSeen, OnUnhealthy, Stamp,
    UnhealthyNode,
};
pub use lifecycle::{
    Decision, DriverAction, MaxUnavailableAction, Revision, RollbackDecision, RollbackObservation,
    RollbackReason, UndoTarget, decide_rollback, go_back, retried_event, rolled_back_event,
    verb_refused,
};
pub use max_unavailable::{LiveMaxUnavailable, MaxUnavailable, MaxUnavailableError};
pub use observation::{CrashLoopSeen, DriftSeen, Observation, PreviousPass, TlsFacts};
pub use outside_text::{
    EVENT_NOTE_BYTES, MIN_CUT_BYTES, OUTSIDE_TEXT_BYTES, SHORT_TEXT_BYTES, cut,
};
pub use phase::{FailureReason, ParseFailureReasonError, ParsePhaseError, Phase};
pub use pods::{
    Deferral, Deletion, LISTED_NODES, MAX_STEPS, NodeHealth, NodeStanding, NodeState, NodeTally,
    PodDecision, PodObservation, PodState, PodsAction, Promotion, Step, StepPlan, StepPosition,
    decide_pods, pre_pull_nodes,
};
pub use prepull::{PrePullPlan, PrePullPod, plan_pre_pull};
pub use strategy::{
    Compatibility, DEFAULT_PROGRESS_DEADLINE, DriftPolicy, Driver, OnFailure,
    ParseCompatibilityError, ParseDriverError, Strategy, StrategyError,
};
pub use verb::{Verb, VerbContext, undo_revision};

/// The README's examples, compiled and run as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
