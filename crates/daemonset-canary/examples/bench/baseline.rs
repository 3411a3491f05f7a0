//! The reference's pod counting against ours, on the same cached pods.
//!
//! The reference (spec section 2) counts a DaemonSet's pods by scanning every pod in its
//! informer cache and matching the controller owner by name, twice per reconcile (once for
//! "updated", once for "updated and ready"). We read the DaemonSet's group from an index keyed
//! by owner ([`OwnerIndex`]) and count it once. Both sides use the same pods: the real
//! kube-proxy pod of `testdata/pods/daemonset-pod-healthy.yaml`, one per node and DaemonSet.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use canary_kube_adapter::index::{OwnerIndex, WatchedPod};
use canary_predicates::{
    AnnotationKeys, CountRule, CrashLoopPolicy, OwnerMatch, PodCounts, PodSummary, Target,
    UpdatedRule, count_pods_owned_by,
};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::Event;

/// Per-reconcile counting cost on one cluster shape, both ways.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BaselineFigures {
    /// Nodes of the cluster.
    pub nodes: u32,
    /// DaemonSets whose pods are cached (one pod per node each).
    pub daemon_sets: u32,
    /// The reference: two scans of every cached pod, by owner name (nanoseconds per reconcile).
    pub reference_ns: f64,
    /// Ours: the owner's group from the index, counted once (nanoseconds per reconcile).
    pub ours_ns: f64,
    /// Ours again, and ours with an index holding only this DaemonSet's pods, measured against
    /// each other (nanoseconds per reconcile): the ratio shows what other DaemonSets' pods cost.
    pub ours_among_others_ns: f64,
    /// See `ours_among_others_ns`.
    pub ours_alone_ns: f64,
}

impl BaselineFigures {
    /// Our cost among every DaemonSet's pods over our cost with this DaemonSet's pods alone.
    pub fn independence(&self) -> f64 {
        self.ours_among_others_ns / self.ours_alone_ns
    }

    /// How many times cheaper ours is.
    pub fn speedup(&self) -> f64 {
        self.reference_ns / self.ours_ns
    }
}

fn template_pod() -> Result<Pod> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/pods/daemonset-pod-healthy.yaml"
    );
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    serde_saphyr::from_str(&text).with_context(|| format!("cannot parse {path}"))
}

fn target() -> Target {
    Target {
        version: "v2".into(),
        registry: "registry.example".into(),
        deployment_id: "4f3c2a".into(),
    }
}

/// Pod of DaemonSet `ds` on node `node`: every other one on the target, all ready.
fn pod(template: &Pod, ds: u32, node: u32, keys: &AnnotationKeys) -> Pod {
    let mut pod = template.clone();
    let meta = &mut pod.metadata;
    meta.name = Some(format!("agent-{ds}-{node}"));
    meta.uid = Some(format!("pod-{ds}-{node}"));
    let on_target = if node.is_multiple_of(2) {
        target()
    } else {
        Target::default()
    };
    meta.annotations = Some(on_target.annotations(keys));
    if let Some(owner) = meta.owner_references.as_mut().and_then(|o| o.first_mut()) {
        owner.name = format!("agent-{ds}");
        owner.uid = format!("ds-uid-{ds}");
    }
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(format!("node-{node}"));
    }
    pod
}

/// Measures both ways on `nodes` nodes with `daemon_sets` DaemonSets, for about `budget`.
pub fn measure(nodes: u32, daemon_sets: u32, budget: Duration) -> Result<BaselineFigures> {
    let template = template_pod()?;
    let keys = AnnotationKeys::default();
    let cache: Vec<Pod> = (0..daemon_sets)
        .flat_map(|ds| (0..nodes).map(move |node| (ds, node)))
        .map(|(ds, node)| pod(&template, ds, node, &keys))
        .collect();
    let index = indexed(&cache);
    let alone = indexed(cache.get(..nodes as usize).unwrap_or_default());

    let target = target();
    let crash_loop = CrashLoopPolicy::default();
    let rule = CountRule {
        target: &target,
        keys: &keys,
        updated: &UpdatedRule::Annotations,
        crash_loop: &crash_loop,
        skip_terminating: true,
    };
    let name = "agent-0";
    let reference = || {
        let by_name = OwnerMatch::NameOnly { name };
        let updated = count_pods_owned_by(black_box(&cache), &by_name, &rule);
        let ready = count_pods_owned_by(black_box(&cache), &by_name, &rule);
        (updated.updated, ready.updated_ready)
    };
    let ours_in = |index: &OwnerIndex<PodSummary>| {
        let owner = OwnerMatch::Uid {
            name,
            uid: "ds-uid-0",
        };
        let group = canary_kube_adapter::index::pod_group("kube-system", name);
        let counts: PodCounts = index.with_group(black_box(&group), |group| {
            count_pods_owned_by(group.map(|p| &**p), &owner, &rule)
        });
        (counts.updated, counts.updated_ready)
    };
    let ours = || ours_in(&index);
    // Same answer both ways, or the ratio compares different work.
    ensure!(
        reference() == ours(),
        "the two countings disagree: {:?} vs {:?}",
        reference(),
        ours()
    );
    ensure!(ours().0 == nodes.div_ceil(2), "unexpected updated count");

    ensure!(
        ours_in(&alone) == ours(),
        "the single-DaemonSet index disagrees"
    );

    let (reference_ns, ours_ns) = interleaved(budget, reference, ours);
    let (ours_among_others_ns, ours_alone_ns) = interleaved(budget, ours, || ours_in(&alone));
    Ok(BaselineFigures {
        nodes,
        daemon_sets,
        reference_ns,
        ours_ns,
        ours_among_others_ns,
        ours_alone_ns,
    })
}

/// An index fed `pods` the way the watcher feeds it (one complete list).
fn indexed(pods: &[Pod]) -> OwnerIndex<PodSummary> {
    let index = OwnerIndex::<PodSummary>::new();
    index.apply(&Event::Init);
    for pod in pods {
        index.apply(&Event::InitApply(WatchedPod::from(pod.clone())));
    }
    index.apply(&Event::InitDone);
    index
}

/// Median nanoseconds per call of `a` and `b`, measured in alternating rounds so that noise from
/// the shared machine hits both alike.
fn interleaved<A: FnMut() -> R, B: FnMut() -> R, R>(
    budget: Duration,
    mut a: A,
    mut b: B,
) -> (f64, f64) {
    const ROUNDS: usize = 15;
    let per_round = budget / (2 * ROUNDS as u32);
    let mut times_a = Vec::with_capacity(ROUNDS);
    let mut times_b = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        times_a.push(time_round(per_round, &mut a));
        times_b.push(time_round(per_round, &mut b));
    }
    (median(&mut times_a), median(&mut times_b))
}

fn time_round<R>(budget: Duration, f: &mut impl FnMut() -> R) -> f64 {
    let start = Instant::now();
    let mut calls = 0u64;
    while calls == 0 || start.elapsed() < budget {
        black_box(f());
        calls += 1;
    }
    start.elapsed().as_nanos() as f64 / calls as f64
}

/// The median of `values` (sorted in place); 0 when empty.
pub fn median(values: &mut [f64]) -> f64 {
    percentile(values, 0.5)
}

/// The `q` quantile of `values` (nearest rank, sorted in place); 0 when empty.
pub fn percentile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = (q * values.len() as f64).ceil() as usize;
    values
        .get(rank.clamp(1, values.len().max(1)) - 1)
        .copied()
        .unwrap_or(0.0)
}
