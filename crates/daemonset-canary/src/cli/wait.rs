//! `daemonset-canary wait NAME [--for successful|paused] [--timeout 10m]`: waits for a rollout
//! to end, for CI pipelines and scripts. Exit 0 when it got there, 1 when it cannot any more
//! (failed, rolled back, crash-looping at rest: the reason on stderr), 2 when the timeout
//! passed first.
//!
//! What it reads is the status the controller wrote for the object's current generation: a
//! status whose `observedGeneration` is behind `metadata.generation` speaks of the previous
//! spec, so a `wait` right after `kubectl apply` never takes the last rollout's success for this
//! one (`kubectl wait --for=condition=Ready` does not compare them). The verdict is the kstatus
//! conditions' (`Ready`, `Stalled`), the phase for a status written before them.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::describe;
use super::object::ObjectArgs;
use canary_kube_adapter::CanaryDaemonSet;
use canary_kube_adapter::status::{READY, STALLED};
use canary_state_machine::{ConditionReason, Phase, parse_duration};
use kube::{Api, ResourceExt};

/// What to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Goal {
    /// The spec's target rolled out and verified (`Ready`): phase `successful`.
    Successful,
    /// The rollout holds in a pause (a pause step, or a hold on request): phase `paused`.
    Paused,
}

/// Arguments of `wait`.
#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    #[command(flatten)]
    object: ObjectArgs,
    /// What to wait for.
    #[arg(long = "for", value_enum, default_value = "successful")]
    goal: Goal,
    /// How long to wait at most (`30s`, `10m`, `1h30m`); exit 2 when it passes.
    #[arg(long, default_value = "10m", value_parser = parse_timeout)]
    timeout: Duration,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// Exit code: the goal was reached.
const REACHED: u8 = 0;
/// Exit code: the rollout cannot reach it any more.
const UNREACHABLE: u8 = 1;
/// Exit code: the timeout passed first.
const TIMED_OUT: u8 = 2;

/// Where an object stands against a goal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// There: what it says.
    Reached(String),
    /// It cannot get there without a change (a new spec, a retry): why.
    Unreachable(String),
    /// Not yet: what it waits for.
    Waiting(String),
}

/// Where `cds` stands against `goal`.
pub fn outcome(cds: &CanaryDaemonSet, goal: Goal) -> Outcome {
    let generation = cds.metadata.generation;
    let Some(status) = cds.status.as_ref() else {
        return Outcome::Waiting("the controller has not acted on it yet".to_owned());
    };
    let Some(phase) = status.phase else {
        // No phase, but a message: it waits for something it names (the DaemonSet of a
        // workloadRef that does not exist yet).
        return Outcome::Waiting(match status.message.as_deref() {
            Some(message) if !message.is_empty() => {
                daemonset_canary::format::one_line(message).into_owned()
            }
            _ => "the controller has not acted on it yet".to_owned(),
        });
    };
    if generation.is_some() && status.observed_generation < generation {
        return Outcome::Waiting(format!(
            "the controller has not acted on generation {} yet (the status is of {})",
            generation.unwrap_or_default(),
            status
                .observed_generation
                .map_or_else(|| "none".to_owned(), |g| g.to_string())
        ));
    }
    let condition = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    let ready = condition(READY).map(|c| c.status == "True");
    let stalled = condition(STALLED).filter(|c| c.status == "True");
    let version = status.target_version.as_deref().unwrap_or("the target");
    let pods = format!(
        "{}/{} pods updated and ready",
        status.updated_ready, status.desired
    );
    // Stalled by a gate a person opens is a pause, not an end.
    let gated = stalled.is_some_and(|c| {
        c.reason == ConditionReason::HeldOnRequest.as_str()
            || c.reason == ConditionReason::AwaitingPromotion.as_str()
    });
    let said = |reason: &str, message: &str| {
        if message.is_empty() {
            reason.to_owned()
        } else {
            format!("{reason}: {message}")
        }
    };
    match stalled {
        Some(c) if !gated => {
            return Outcome::Unreachable(format!("phase {phase}, {}", said(&c.reason, &c.message)));
        }
        _ => {}
    }
    let message = status.message.clone().unwrap_or_default();
    match (phase, goal) {
        (Phase::Failed, _) => Outcome::Unreachable(format!(
            "phase failed, {}",
            said(status.reason_name().unwrap_or("Failed"), &message)
        )),
        (Phase::RolledBack, _) => Outcome::Unreachable(format!(
            "phase rolledBack: {version} was rolled back ({pods})"
        )),
        (Phase::Successful, Goal::Successful) if ready != Some(false) => {
            Outcome::Reached(format!("successful: {version}, {pods}"))
        }
        (Phase::Successful, Goal::Paused) => Outcome::Unreachable(format!(
            "the rollout of {version} ended (successful) without a pause"
        )),
        (Phase::Paused, Goal::Paused) => Outcome::Reached(format!(
            "paused: {}",
            stalled.map_or_else(|| pods.clone(), |c| said(&c.reason, &c.message))
        )),
        _ => Outcome::Waiting(format!(
            "phase {phase}{}",
            stalled
                .or_else(|| condition(canary_kube_adapter::status::RECONCILING))
                .filter(|c| !c.message.is_empty())
                .map_or_else(String::new, |c| format!(", {}", c.message))
        )),
    }
}

/// How often the object is read again.
const POLL: Duration = Duration::from_secs(1);

/// Waits; the exit code says how it ended.
pub async fn run(args: WaitArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let (connection, cds) = args.object.find().await?;
    let namespace = cds.namespace().unwrap_or_default();
    let which = super::object::which(&namespace, &args.object.name);
    let api: Api<CanaryDaemonSet> = Api::namespaced(connection.client.clone(), &namespace);
    let mut current = Some(cds);
    let mut last_said = String::new();
    loop {
        match current.as_ref().map(|cds| outcome(cds, args.goal)) {
            Some(Outcome::Reached(what)) => {
                println!("{which} {what}");
                return Ok(ExitCode::from(REACHED));
            }
            Some(Outcome::Unreachable(why)) => {
                eprintln!("error: {which} will not get there: {why}");
                return Ok(ExitCode::from(UNREACHABLE));
            }
            Some(Outcome::Waiting(what)) if what != last_said => {
                eprintln!("waiting: {what}");
                last_said = what;
            }
            Some(Outcome::Waiting(_)) => {}
            None => {
                eprintln!("error: {which} was deleted");
                return Ok(ExitCode::from(UNREACHABLE));
            }
        }
        if started.elapsed() >= args.timeout {
            eprintln!(
                "error: timed out after {} waiting for {which} ({last_said})",
                humantime(args.timeout)
            );
            return Ok(ExitCode::from(TIMED_OUT));
        }
        tokio::time::sleep(POLL.min(args.timeout.saturating_sub(started.elapsed()))).await;
        // A failed read is retried until the timeout: an API server restart is no verdict.
        match api.get_opt(&args.object.name).await {
            Ok(found) => current = found,
            Err(error) => {
                let said = describe(&error, &connection.url);
                if said != last_said {
                    eprintln!("waiting: {said}");
                    last_said = said;
                }
            }
        }
    }
}

fn humantime(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match (seconds / 60, seconds % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(generation: i64, status: serde_json::Value) -> CanaryDaemonSet {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "canary.daemonset.dev/v1alpha1",
            "kind": "CanaryDaemonSet",
            "metadata": {"name": "agent", "namespace": "ns", "generation": generation},
            "spec": {"target": {"fromContainer": "agent"}, "template": {"spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}},
                             "spec": {"containers": [{"name": "agent", "image": "a:v1"}]}}}}},
            "status": status,
        }))
        .unwrap()
    }

    fn condition(type_: &str, status: &str, reason: &str) -> serde_json::Value {
        serde_json::json!({"type": type_, "status": status, "reason": reason, "message": "",
                           "lastTransitionTime": "2026-12-07T00:00:00Z", "observedGeneration": 2})
    }

    #[test]
    fn the_verdict_of_each_phase() {
        let at = |phase: &str, conditions: Vec<serde_json::Value>| {
            object(
                2,
                serde_json::json!({"phase": phase, "observedGeneration": 2, "desired": 4,
                                   "updated": 4, "updatedReady": 4, "targetVersion": "v2",
                                   "conditions": conditions}),
            )
        };
        let successful = at(
            "successful",
            vec![condition("Ready", "True", "RolloutComplete")],
        );
        assert_eq!(
            outcome(&successful, Goal::Successful),
            Outcome::Reached("successful: v2, 4/4 pods updated and ready".into())
        );
        assert!(matches!(
            outcome(&successful, Goal::Paused),
            Outcome::Unreachable(_)
        ));
        let failed = object(
            2,
            serde_json::json!({"phase": "failed", "reason": "CanaryCrashLooping",
                               "message": "pod agent-x crash-loops", "observedGeneration": 2,
                               "conditions": [condition("Stalled", "True", "CanaryCrashLooping")]}),
        );
        assert_eq!(
            outcome(&failed, Goal::Successful),
            Outcome::Unreachable("phase failed, CanaryCrashLooping".into())
        );
        let rolled_back = at("rolledBack", vec![]);
        assert!(matches!(
            outcome(&rolled_back, Goal::Successful),
            Outcome::Unreachable(why) if why.contains("rolled back")
        ));
        // A crash loop at rest: successful, but not Ready, and Stalled.
        let crashing = at(
            "successful",
            vec![
                condition("Ready", "False", "CrashLoopingAtRest"),
                condition("Stalled", "True", "CrashLoopingAtRest"),
            ],
        );
        assert!(matches!(
            outcome(&crashing, Goal::Successful),
            Outcome::Unreachable(_)
        ));
        // A gate a person opens is waited through for success, and is the goal for paused.
        let held = at(
            "paused",
            vec![condition("Stalled", "True", "AwaitingPromotion")],
        );
        assert!(matches!(
            outcome(&held, Goal::Successful),
            Outcome::Waiting(_)
        ));
        assert!(matches!(outcome(&held, Goal::Paused), Outcome::Reached(_)));
        let canary = at(
            "canary",
            vec![condition("Reconciling", "True", "WaitingForCanary")],
        );
        assert!(matches!(
            outcome(&canary, Goal::Successful),
            Outcome::Waiting(_)
        ));
    }

    /// Right after `kubectl apply`, the status still tells of the previous generation: its
    /// success is not this spec's.
    #[test]
    fn a_status_of_an_earlier_generation_is_waited_past() {
        let stale = object(
            3,
            serde_json::json!({"phase": "successful", "observedGeneration": 2,
                               "conditions": [condition("Ready", "True", "RolloutComplete")]}),
        );
        assert_eq!(
            outcome(&stale, Goal::Successful),
            Outcome::Waiting(
                "the controller has not acted on generation 3 yet (the status is of 2)".into()
            )
        );
        let fresh = object(1, serde_json::Value::Null);
        assert!(matches!(
            outcome(&fresh, Goal::Successful),
            Outcome::Waiting(_)
        ));
    }

    /// A workloadRef whose DaemonSet does not exist yet: `wait` keeps waiting and says for what.
    #[test]
    fn waiting_for_a_daemon_set_says_so() {
        let waiting = object(
            1,
            serde_json::json!({"observedGeneration": 1,
                               "message": "DaemonSet cilium (spec.workloadRef) does not exist in namespace kube-system; the rollout begins once its owner creates it",
                               "conditions": [condition("Reconciling", "True", "WaitingForDaemonSet")]}),
        );
        match outcome(&waiting, Goal::Successful) {
            Outcome::Waiting(why) => assert!(why.contains("DaemonSet cilium"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
