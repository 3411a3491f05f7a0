//! Property tests over a simulated monotone rollout.
//!
//! A small model of one DaemonSet on `nodes` nodes: the live template and `maxUnavailable`,
//! generation / observedGeneration, and one pod per node. Three actors take turns in an order
//! proptest chooses: the controller (build an observation the way the adapter does, call
//! `decide`, apply the write), the DaemonSet controller (observe the generation, replace old
//! pods within the `maxUnavailable` budget, unavailable ones first, percentages rounded up), and
//! the kubelet (new pods become ready after a delay; on "bad" nodes the new version
//! crash-loops forever). After the chosen schedule, a fair round-robin drains the rollout.
//!
//! Checked on every controller pass: never widen while no updated pod is ready; never widen or
//! finish with a crash-looping updated pod (default strategy); never a start write when the
//! object did not change; at most three writes per rollout plus the TLS steps (two writes per
//! step in the default strategy, whose TLS re-rolls are supervised canaries). Checked at the
//! end: the rollout ended `successful` (done, every pod updated, resting `maxUnavailable`,
//! generation recorded) or, with a bad node, `failed` with `CanaryCrashLooping`.

use std::collections::BTreeSet;
use std::time::Duration;

use canary_state_machine::{
    Compatibility, CrashLoopSeen, Decision, FailureReason, LiveMaxUnavailable, MaxUnavailable,
    Observation, Phase, PreviousPass, Strategy, TemplateEdit, TlsFacts, WriteKind, decide,
};
use proptest::prelude::*;
use proptest::strategy::Strategy as _;

const OLD: u32 = 1;
const NEW: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Template {
    target: u32,
    tls_flag: bool,
    cert_volume: bool,
}

#[derive(Debug, Clone)]
struct Pod {
    template: Template,
    ready: bool,
    crash_looping: bool,
    age: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Actor {
    Controller,
    DaemonSetController,
    Kubelet,
}

#[derive(Debug, Clone)]
struct Params {
    compatibility: Compatibility,
    nodes: u32,
    ready_delay: u32,
    bad_nodes: BTreeSet<u32>,
    tls: bool,
    schedule: Vec<Actor>,
}

struct Model {
    params: Params,
    strategy: Strategy,
    live: Template,
    live_metadata_target: u32,
    live_max: LiveMaxUnavailable,
    generation: i64,
    observed_generation: i64,
    recorded: Option<i64>,
    pods: Vec<Pod>,
    desired: Template,
    previous: Option<PreviousPass>,
    last: Option<Decision>,
    writes: Vec<WriteKind>,
}

impl Model {
    fn new(params: Params) -> Self {
        let strategy = match params.compatibility {
            Compatibility::KubeVirt => Strategy::kubevirt(),
            Compatibility::Fixed => Strategy::default(),
        };
        let old = Template {
            target: OLD,
            tls_flag: false,
            cert_volume: params.tls,
        };
        let pods = (0..params.nodes)
            .map(|_| Pod {
                template: old,
                ready: true,
                crash_looping: false,
                age: 0,
            })
            .collect();
        Model {
            strategy,
            live: old,
            live_metadata_target: OLD,
            live_max: LiveMaxUnavailable::Int(1),
            generation: 1,
            observed_generation: 1,
            recorded: Some(1),
            pods,
            desired: Template { target: NEW, ..old },
            previous: None,
            last: None,
            writes: Vec::new(),
            params,
        }
    }

    fn step(&mut self, actor: Actor) -> Result<(), TestCaseError> {
        match actor {
            Actor::Controller => self.reconcile(),
            Actor::DaemonSetController => {
                self.daemonset_controller();
                Ok(())
            }
            Actor::Kubelet => {
                self.kubelet();
                Ok(())
            }
        }
    }

    /// The desired template after the TLS preamble (spec section 6 (a) and (b)).
    fn desired_after_preamble(&self) -> Template {
        let mut desired = self.desired;
        if self.live.tls_flag {
            desired.tls_flag = true;
        }
        if !self.live.cert_volume {
            desired.cert_volume = false;
        }
        desired
    }

    fn is_updated(&self, pod: &Pod) -> bool {
        match self.params.compatibility {
            // Annotations only (the target).
            Compatibility::KubeVirt => pod.template.target == self.desired.target,
            // Annotations and the current controller-revision-hash.
            Compatibility::Fixed => {
                pod.template.target == self.desired.target && pod.template == self.live
            }
        }
    }

    fn observe(&self) -> Observation {
        let desired = self.desired_after_preamble();
        let updated: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|pod| self.is_updated(pod))
            .collect();
        Observation {
            name: "agent".into(),
            version: format!("v{}", desired.target),
            object_changed: self.live_metadata_target != desired.target,
            generation_known: self.recorded == Some(self.generation),
            desired_pods: self.params.nodes,
            updated_pods: updated.len() as u32,
            updated_ready_pods: updated.iter().filter(|pod| pod.ready).count() as u32,
            old_pods: (self.pods.len() - updated.len()) as u32,
            crash_loop: updated
                .iter()
                .find(|pod| pod.crash_looping)
                .map(|_| CrashLoopSeen {
                    pod: "agent-x".into(),
                    reason: "CrashLoopBackOff".into(),
                }),
            live_max_unavailable: self.live_max.clone(),
            surge: false,
            surge_unsettled_nodes: None,
            surge_canary_alone: None,
            rollout_observed: self.observed_generation >= self.generation,
            // The model never has more updated pods than nodes, nor hand edits.
            daemon_set_rolled_out: false,
            drift: None,
            tls: self.params.tls.then_some(TlsFacts {
                supported: true,
                live_has_flag: self.live.tls_flag,
                desired_has_cert_volume: desired.cert_volume,
            }),
            previous: self.previous,
            ..Observation::default()
        }
    }

    fn reconcile(&mut self) -> Result<(), TestCaseError> {
        let observation = self.observe();
        let decision = decide(&self.strategy, &observation);
        let fixed = self.params.compatibility == Compatibility::Fixed;
        if let Some(write) = decision.write {
            prop_assert!(
                write.kind != WriteKind::Start || observation.object_changed,
                "start write without a changed object: {observation:?}"
            );
            if write.kind == WriteKind::Widen {
                prop_assert!(
                    observation.updated_ready_pods > 0,
                    "widened with no ready canary"
                );
            }
            if fixed && write.kind != WriteKind::Start {
                prop_assert!(
                    observation.crash_loop.is_none(),
                    "{:?} with a crash-looping pod",
                    write.kind
                );
            }
            self.apply(
                write.max_unavailable,
                write.template_edit,
                decision.action.record_generation,
            );
            self.writes.push(write.kind);
        }
        self.remember(&observation, &decision);
        self.last = Some(decision);
        Ok(())
    }

    fn apply(&mut self, max: Option<MaxUnavailable>, edit: Option<TemplateEdit>, record: bool) {
        let mut template = self.desired_after_preamble();
        match edit {
            Some(TemplateEdit::InsertTlsFlag) => template.tls_flag = true,
            Some(TemplateEdit::DetachCertSecret) => template.cert_volume = false,
            None => {}
        }
        // None: rollingUpdate as desired has it, i.e. maxUnavailable left to the API default.
        let live_max = max.map_or(LiveMaxUnavailable::Unset, MaxUnavailable::to_live);
        if template != self.live || live_max != self.live_max {
            self.generation += 1;
        }
        self.live = template;
        self.live_max = live_max;
        self.live_metadata_target = template.target;
        if record {
            self.recorded = Some(self.generation);
        }
    }

    /// What the adapter stores in status: one second per controller pass.
    fn remember(&mut self, observation: &Observation, decision: &Decision) {
        let moved = self.previous.is_none_or(|previous| {
            previous.phase != decision.phase
                || previous.updated_ready != observation.updated_ready_pods
        });
        let since_progress = match self.previous {
            Some(previous) if !moved => previous.since_progress + Duration::from_secs(1),
            _ => Duration::ZERO,
        };
        self.previous = Some(PreviousPass {
            phase: decision.phase,
            failure: decision.failure,
            updated_ready: observation.updated_ready_pods,
            since_progress,
            drifted: false,
        });
    }

    fn budget(&self) -> u32 {
        let nodes = self.params.nodes;
        match &self.live_max {
            LiveMaxUnavailable::NoRollingUpdate => 0,
            LiveMaxUnavailable::Unset => 1,
            LiveMaxUnavailable::Int(value) => u32::try_from(*value).unwrap_or(0),
            LiveMaxUnavailable::Str(text) => {
                let percent: u32 = text.trim_end_matches('%').parse().unwrap();
                (nodes * percent).div_ceil(100)
            }
        }
    }

    fn daemonset_controller(&mut self) {
        self.observed_generation = self.generation;
        let budget = self.budget();
        let mut unavailable = self.pods.iter().filter(|pod| !pod.ready).count() as u32;
        for node in 0..self.params.nodes {
            let index = node as usize;
            if self.pods[index].template == self.live {
                continue;
            }
            if self.pods[index].ready {
                if unavailable >= budget {
                    continue;
                }
                unavailable += 1;
            }
            self.pods[index] = Pod {
                template: self.live,
                ready: false,
                crash_looping: false,
                age: 0,
            };
        }
    }

    fn kubelet(&mut self) {
        for (node, pod) in self.pods.iter_mut().enumerate() {
            if pod.ready || pod.crash_looping {
                continue;
            }
            pod.age += 1;
            let bad = pod.template.target == NEW && self.params.bad_nodes.contains(&(node as u32));
            if bad {
                pod.crash_looping = true;
            } else if pod.age >= self.params.ready_delay {
                pod.ready = true;
            }
        }
    }

    fn finished(&self) -> bool {
        self.last
            .as_ref()
            .is_some_and(|last| last.done || last.phase == Phase::Failed)
    }

    fn run(&mut self) -> Result<(), TestCaseError> {
        for actor in self.params.schedule.clone() {
            self.step(actor)?;
        }
        let bound = 20 + 4 * self.params.nodes * (self.params.ready_delay + 2);
        for _ in 0..bound {
            if self.finished() {
                break;
            }
            for actor in [
                Actor::DaemonSetController,
                Actor::Kubelet,
                Actor::Controller,
            ] {
                self.step(actor)?;
            }
        }
        Ok(())
    }

    fn check_outcome(&self) -> Result<(), TestCaseError> {
        let last = self.last.as_ref().expect("at least one controller pass");
        let tls_steps = self
            .writes
            .iter()
            .filter(|kind| **kind == WriteKind::TlsStep)
            .count();
        let per_step = match self.params.compatibility {
            Compatibility::KubeVirt => 1,
            Compatibility::Fixed => 2,
        };
        prop_assert!(
            self.writes.len() <= 3 + per_step * tls_steps,
            "too many writes: {:?}",
            self.writes
        );
        prop_assert!(tls_steps <= 2);
        if !self.params.bad_nodes.is_empty() {
            prop_assert_eq!(last.phase, Phase::Failed, "writes {:?}", &self.writes);
            prop_assert_eq!(last.failure, Some(FailureReason::CanaryCrashLooping));
            return Ok(());
        }
        prop_assert_eq!(last.phase, Phase::Successful, "writes {:?}", &self.writes);
        prop_assert!(last.done);
        prop_assert!(self.live_max.matches(self.strategy.canary_max_unavailable));
        prop_assert_eq!(self.recorded, Some(self.generation));
        prop_assert!(self.pods.iter().all(|pod| pod.template.target == NEW));
        prop_assert_eq!(self.writes.first(), Some(&WriteKind::Start));
        let unsupervised_tls_re_roll =
            self.params.compatibility == Compatibility::KubeVirt && tls_steps > 0;
        if !unsupervised_tls_re_roll {
            // Quirk 16 aside, done means every pod is updated and ready.
            prop_assert!(self.pods.iter().all(|pod| pod.ready));
        }
        if self.params.compatibility == Compatibility::Fixed {
            // Done means observed: every pod runs the live template, TLS included.
            prop_assert!(last.action.quiet);
            prop_assert!(self.pods.iter().all(|pod| pod.template == self.live));
            if self.params.tls {
                prop_assert!(self.live.tls_flag && !self.live.cert_volume);
                prop_assert_eq!(tls_steps, 2);
            }
            if self.params.nodes == 1 {
                prop_assert_eq!(self.writes.len(), 2 + tls_steps);
            }
        }
        Ok(())
    }
}

fn actor() -> impl proptest::strategy::Strategy<Value = Actor> {
    prop_oneof![
        Just(Actor::Controller),
        Just(Actor::DaemonSetController),
        Just(Actor::Kubelet),
    ]
}

fn params(compatibility: Compatibility) -> impl proptest::strategy::Strategy<Value = Params> {
    (
        1u32..25,
        1u32..4,
        any::<bool>(),
        proptest::collection::vec(actor(), 0..60),
    )
        .prop_flat_map(move |(nodes, ready_delay, tls, schedule)| {
            let bad = proptest::collection::btree_set(0..nodes, 0..=2usize);
            (bad, any::<bool>()).prop_map(move |(mut bad_nodes, healthy)| {
                if healthy {
                    bad_nodes.clear();
                }
                // The reference only checks crashes while no updated pod is ready (quirk 7),
                // so a bad version is only caught when the canary node is bad.
                if compatibility == Compatibility::KubeVirt && !bad_nodes.is_empty() {
                    bad_nodes.insert(0);
                }
                Params {
                    compatibility,
                    nodes,
                    ready_delay,
                    bad_nodes,
                    tls,
                    schedule: schedule.clone(),
                }
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn default_strategy_rollouts_end_successful_or_failed(params in params(Compatibility::Fixed)) {
        let mut model = Model::new(params);
        model.run()?;
        model.check_outcome()?;
    }

    #[test]
    fn kubevirt_rollouts_end_successful_or_failed(params in params(Compatibility::KubeVirt)) {
        let mut model = Model::new(params);
        model.run()?;
        model.check_outcome()?;
    }
}

fn fair(compatibility: Compatibility, nodes: u32, bad_nodes: &[u32]) -> Model {
    fair_with_tls(compatibility, nodes, bad_nodes, false)
}

/// [`fair`], with the TLS migration to do (`tls`) or not.
fn fair_with_tls(compatibility: Compatibility, nodes: u32, bad_nodes: &[u32], tls: bool) -> Model {
    let mut model = Model::new(Params {
        compatibility,
        nodes,
        ready_delay: 1,
        bad_nodes: bad_nodes.iter().copied().collect(),
        tls,
        schedule: Vec::new(),
    });
    model.run().unwrap();
    model
}

#[test]
fn healthy_rollout_writes_one_then_ten_percent_then_one() {
    for compatibility in [Compatibility::KubeVirt, Compatibility::Fixed] {
        let model = fair(compatibility, 10, &[]);
        assert_eq!(
            model.writes,
            [WriteKind::Start, WriteKind::Widen, WriteKind::Finish],
            "{compatibility:?}"
        );
        assert!(model.last.as_ref().unwrap().done);
    }
}

#[test]
fn single_node_rollout_skips_the_widen() {
    for compatibility in [Compatibility::KubeVirt, Compatibility::Fixed] {
        let model = fair(compatibility, 1, &[]);
        assert_eq!(model.writes, [WriteKind::Start, WriteKind::Finish]);
    }
}

#[test]
fn late_crash_fails_the_default_strategy_but_leaves_the_reference_waiting() {
    let fixed = fair(Compatibility::Fixed, 10, &[5]);
    let last = fixed.last.as_ref().unwrap();
    assert_eq!(last.failure, Some(FailureReason::CanaryCrashLooping));
    assert_eq!(fixed.writes, [WriteKind::Start, WriteKind::Widen]);

    // Quirk 7: once the canary is ready the reference never looks at crashes again.
    let reference = fair(Compatibility::KubeVirt, 10, &[5]);
    let last = reference.last.as_ref().unwrap();
    assert_eq!(last.phase, Phase::Waiting);
    assert!(!last.done);
}

#[test]
fn tls_migration_in_the_default_strategy_is_two_supervised_re_rolls() {
    let model = fair_with_tls(Compatibility::Fixed, 10, &[], true);
    use WriteKind::*;
    assert_eq!(
        model.writes,
        [Start, Widen, TlsStep, Widen, TlsStep, Widen, Finish]
    );
    assert!(model.live.tls_flag && !model.live.cert_volume);
    assert!(
        model
            .pods
            .iter()
            .all(|pod| pod.template == model.live && pod.ready)
    );
}

#[test]
fn tls_migration_in_the_reference_reports_done_before_the_re_roll() {
    let model = fair_with_tls(Compatibility::KubeVirt, 10, &[], true);
    assert_eq!(
        model.writes,
        [WriteKind::Start, WriteKind::Widen, WriteKind::TlsStep]
    );
    assert!(model.last.as_ref().unwrap().done);
    let flagged = model
        .pods
        .iter()
        .filter(|pod| pod.template.tls_flag)
        .count();
    assert!(
        flagged < 10,
        "done while only {flagged} of 10 pods run the flag"
    );
    assert!(
        model.live.cert_volume,
        "step 2 waits for a later canary flow"
    );
}
