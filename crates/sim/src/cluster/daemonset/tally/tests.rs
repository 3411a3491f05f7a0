//! The tally against the full planners: random changes to random clusters, compared after
//! every change.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::super::{DaemonPod, NodeSlot, Placement, SyncContext, compute_status, plan_sync};
use super::SyncTally;
use crate::cluster::scheduling::NodeFit;
use crate::strategy::TEMPLATE_GENERATION_ANNOTATION;

const HASH: &str = "newhash";

/// xorshift64: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn daemon_set(update: Option<DaemonSetUpdateStrategy>) -> DaemonSet {
    let mut ds = DaemonSet::default();
    ds.metadata.name = Some("agent".to_owned());
    ds.metadata.generation = Some(3);
    ds.metadata.annotations = Some(BTreeMap::from([(
        TEMPLATE_GENERATION_ANNOTATION.to_owned(),
        "2".to_owned(),
    )]));
    ds.spec = Some(DaemonSetSpec {
        update_strategy: update,
        ..DaemonSetSpec::default()
    });
    ds
}

fn rolling(max_unavailable: Option<IntOrString>) -> Option<DaemonSetUpdateStrategy> {
    Some(DaemonSetUpdateStrategy {
        type_: Some("RollingUpdate".to_owned()),
        rolling_update: Some(RollingUpdateDaemonSet {
            max_unavailable,
            max_surge: Some(IntOrString::Int(0)),
        }),
    })
}

/// Every strategy the tally stands in for, an invalid percentage included.
fn daemon_sets() -> Vec<DaemonSet> {
    vec![
        daemon_set(None),
        daemon_set(rolling(Some(IntOrString::Int(3)))),
        daemon_set(rolling(Some(IntOrString::Int(0)))),
        daemon_set(rolling(Some(IntOrString::String("10%".to_owned())))),
        daemon_set(rolling(Some(IntOrString::String("ten".to_owned())))),
        daemon_set(Some(DaemonSetUpdateStrategy {
            type_: Some("OnDelete".to_owned()),
            rolling_update: None,
        })),
    ]
}

fn random_pod(rng: &mut Rng, node: &str, serial: &mut u32) -> DaemonPod {
    *serial += 1;
    let new = rng.chance(50);
    DaemonPod {
        name: format!("agent-{serial:05}"),
        node: node.to_owned(),
        hash: rng
            .chance(90)
            .then(|| if new { HASH } else { "oldhash" }.to_owned()),
        template_generation: rng
            .chance(50)
            .then(|| if new { "2" } else { "1" }.to_owned()),
        created: t(i64::try_from(rng.below(5)).unwrap_or(0)),
        deleting: rng.chance(10),
        terminal: rng.chance(5),
        ready_since: rng.chance(70).then(|| t(0)),
    }
}

fn random_fit(rng: &mut Rng) -> Option<NodeFit> {
    match rng.below(10) {
        0 => None,
        1 => Some(NodeFit {
            should_run: false,
            should_continue_running: rng.chance(50),
        }),
        2 => Some(NodeFit {
            should_run: false,
            should_continue_running: true,
        }),
        _ => Some(NodeFit {
            should_run: true,
            should_continue_running: true,
        }),
    }
}

/// One random change to the slot of `node`: its fit, a pod added, a pod removed, or a pod
/// changed (readiness, deletion, revision).
fn change(rng: &mut Rng, slots: &mut BTreeMap<String, NodeSlot>, node: &str, serial: &mut u32) {
    let slot = slots.entry(node.to_owned()).or_default();
    match rng.below(4) {
        0 => slot.fit = random_fit(rng),
        1 => slot.pods.push(random_pod(rng, node, serial)),
        2 if !slot.pods.is_empty() => {
            let at = rng.below(slot.pods.len() as u64) as usize;
            slot.pods.remove(at);
        }
        _ if !slot.pods.is_empty() => {
            let at = rng.below(slot.pods.len() as u64) as usize;
            slot.pods[at] = DaemonPod {
                name: slot.pods[at].name.clone(),
                ..random_pod(rng, node, serial)
            };
        }
        _ => slot.pods.push(random_pod(rng, node, serial)),
    }
    if slot.fit.is_none() && slot.pods.is_empty() {
        slots.remove(node);
    }
}

#[test]
fn the_tally_plans_and_counts_like_the_full_planners_after_every_change() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for ds in daemon_sets() {
        for nodes in [1_u64, 4, 40] {
            let cx = SyncContext::new(&ds, HASH, t(100));
            assert!(SyncTally::applies(&cx));
            let mut serial = 0;
            let mut slots = BTreeMap::new();
            for i in 0..nodes {
                change(&mut rng, &mut slots, &format!("node-{i:02}"), &mut serial);
            }
            let mut tally = SyncTally::of_all(&cx, &slots);
            for _ in 0..400 {
                let node = format!("node-{:02}", rng.below(nodes + 1));
                change(&mut rng, &mut slots, &node, &mut serial);
                tally.update(&cx, &node, slots.get(&node));
                let placement = Placement { nodes: &slots };
                assert_eq!(tally.plan(&cx, &slots), plan_sync(&cx, &placement));
                assert_eq!(tally.status(&cx), compute_status(&cx, &placement));
            }
        }
    }
}

#[test]
fn a_new_revision_or_min_ready_seconds_or_surge_needs_another_tally() {
    let ds = daemon_set(rolling(Some(IntOrString::Int(1))));
    let tally = SyncTally::new(&SyncContext::new(&ds, HASH, t(0)));
    assert!(tally.is_for(&SyncContext::new(&ds, HASH, t(50))));
    assert!(!tally.is_for(&SyncContext::new(&ds, "otherhash", t(0))));
    let mut regenerated = ds.clone();
    regenerated.metadata.annotations = Some(BTreeMap::from([(
        TEMPLATE_GENERATION_ANNOTATION.to_owned(),
        "3".to_owned(),
    )]));
    assert!(!tally.is_for(&SyncContext::new(&regenerated, HASH, t(0))));

    let mut min_ready = ds.clone();
    if let Some(spec) = min_ready.spec.as_mut() {
        spec.min_ready_seconds = Some(5);
    }
    assert!(!SyncTally::applies(&SyncContext::new(
        &min_ready,
        HASH,
        t(0)
    )));
    let mut surge = daemon_set(rolling(None));
    if let Some(rolling) = surge
        .spec
        .as_mut()
        .and_then(|s| s.update_strategy.as_mut())
        .and_then(|u| u.rolling_update.as_mut())
    {
        rolling.max_surge = Some(IntOrString::String("10%".to_owned()));
    }
    assert!(!SyncTally::applies(&SyncContext::new(&surge, HASH, t(0))));
}
