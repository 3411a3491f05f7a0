//! A stand-in for virt-operator's handling of virt-handler, for tests of observe mode: it makes
//! the reference writes (spec sections 3 to 5 and 7) through a real `kube::Client`, deciding with
//! the reference predicates, the state machine in KubeVirt mode and the adapter's patch builder.
//!
//! It differs from an observer on purpose: it reads fresh objects with GET/LIST (no caches),
//! compares the whole desired metadata (`object_meta_modified`, as `resourcemerge` does), and
//! records the generations it writes in the KubeVirt status.

use std::collections::BTreeMap;

use canary_kube_adapter::desired::{RollingUpdateWrite, set_max_unavailable};
use canary_kube_adapter::meta::object_meta_modified;
use canary_kube_adapter::patch::daemon_set_patch;
use canary_kubevirt::{
    KUBEVIRT_GENERATION_ANNOTATION, KubeVirtView, MANAGED_BY_LABEL, kubevirt_api_resource,
    managed_by_selector,
};
use canary_predicates::{
    AnnotationKeys, CountRule, OwnerMatch, Target, count_pods_owned_by, daemonset_is_up_to_date,
    observe_daemon_set,
};
use canary_state_machine::{Decision, Observation, Phase, Strategy, decide, decide_create};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// Namespace of KubeVirt and virt-handler.
pub const NAMESPACE: &str = "kubevirt";
/// The KubeVirt object's name.
pub const KUBEVIRT: &str = "kubevirt";
/// The DaemonSet's name.
pub const HANDLER: &str = "virt-handler";
/// The simulator's pod behaviour annotation (copied from the template to the pods).
pub const BEHAVIOR_ANNOTATION: &str = "sim.canary.daemonset.dev/behavior";

/// The stand-in operator; every write it makes is counted in `writes`.
pub struct StandIn {
    kubevirts: Api<DynamicObject>,
    daemon_sets: Api<DaemonSet>,
    pods: Api<Pod>,
    /// What the template's pods do in the simulator (`healthy`, `crashloop`, ...).
    behavior: String,
    /// Every phase it decided, one per pass, in order.
    pub phases: Vec<Phase>,
    /// API writes made (creates and patches, status included).
    pub writes: u64,
    /// DaemonSet writes made (create and patches).
    pub daemon_set_writes: u64,
}

fn target(version: &str) -> Target {
    Target {
        version: version.to_owned(),
        registry: "quay.io/kubevirt".to_owned(),
        deployment_id: format!("deploy-{version}"),
    }
}

impl StandIn {
    /// A stand-in talking to the cluster through `client`.
    pub fn new(client: &Client) -> Self {
        Self {
            kubevirts: Api::namespaced_with(client.clone(), NAMESPACE, &kubevirt_api_resource()),
            daemon_sets: Api::namespaced(client.clone(), NAMESPACE),
            pods: Api::all(client.clone()),
            behavior: "healthy".to_owned(),
            phases: Vec::new(),
            writes: 0,
            daemon_set_writes: 0,
        }
    }

    /// Creates the KubeVirt object at `version` (targets in its status) and virt-handler
    /// through the create path (which records the generation at once, quirk 10).
    pub async fn install(&mut self, version: &str) {
        let object = DynamicObject::new(KUBEVIRT, &kubevirt_api_resource())
            .within(NAMESPACE)
            .data(json!({"spec": {"productVersion": version}}));
        self.kubevirts
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        self.writes += 1;
        self.set_targets(version).await;
        let kv = self.kubevirt().await;
        let decision = decide_create(&Strategy::kubevirt(), HANDLER, version);
        assert!(decision.write.is_some() && decision.action.record_generation);
        let created = self
            .daemon_sets
            .create(&PostParams::default(), &self.desired(&kv))
            .await
            .unwrap();
        self.writes += 1;
        self.daemon_set_writes += 1;
        self.record_generation(&kv, created.metadata.generation.unwrap())
            .await;
    }

    /// What a KubeVirt upgrade does before virt-operator syncs the DaemonSet: a spec edit
    /// (a new KubeVirt generation) and the new targets in the status.
    pub async fn upgrade(&mut self, version: &str, behavior: &str) {
        self.behavior = behavior.to_owned();
        let spec = json!({"spec": {"productVersion": version}});
        self.kubevirts
            .patch(KUBEVIRT, &PatchParams::default(), &Patch::Merge(&spec))
            .await
            .unwrap();
        self.writes += 1;
        self.set_targets(version).await;
    }

    async fn set_targets(&mut self, version: &str) {
        let target = target(version);
        let status = json!({"status": {
            "targetKubeVirtVersion": target.version,
            "targetKubeVirtRegistry": target.registry,
            "targetDeploymentID": target.deployment_id,
        }});
        self.merge_status(status).await;
    }

    /// Merge-patches the KubeVirt object's status with `status`: one write.
    async fn merge_status(&mut self, status: serde_json::Value) {
        self.kubevirts
            .patch_status(KUBEVIRT, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        self.writes += 1;
    }

    async fn kubevirt(&self) -> KubeVirtView {
        KubeVirtView::from_object(&self.kubevirts.get(KUBEVIRT).await.unwrap()).unwrap()
    }

    /// The reference's `SetGeneration`: upsert the DaemonSet's entry in `status.generations`.
    async fn record_generation(&mut self, kv: &KubeVirtView, generation: i64) {
        let mut records: Vec<_> = kv
            .generations
            .iter()
            .filter(|r| !(r.resource == "daemonsets" && r.name == HANDLER))
            .map(|r| {
                json!({"group": r.group, "resource": r.resource, "namespace": r.namespace,
                       "name": r.name, "lastGeneration": r.last_generation})
            })
            .collect();
        records.push(
            json!({"group": "apps", "resource": "daemonsets", "namespace": NAMESPACE,
                            "name": HANDLER, "lastGeneration": generation, "hash": ""}),
        );
        let status = json!({"status": {"generations": records}});
        self.merge_status(status).await;
    }

    /// The DaemonSet the install strategy asks for, with the operator metadata injected.
    fn desired(&self, kv: &KubeVirtView) -> DaemonSet {
        let keys = AnnotationKeys::default();
        let labels = BTreeMap::from([
            (MANAGED_BY_LABEL.to_owned(), "virt-operator".to_owned()),
            ("kubevirt.io".to_owned(), HANDLER.to_owned()),
            (
                "app.kubernetes.io/component".to_owned(),
                "kubevirt".to_owned(),
            ),
        ]);
        let mut annotations = kv.target.annotations(&keys);
        annotations.insert(
            KUBEVIRT_GENERATION_ANNOTATION.to_owned(),
            kv.generation.unwrap_or_default().to_string(),
        );
        let mut pod_annotations = kv.target.annotations(&keys);
        pod_annotations.insert(BEHAVIOR_ANNOTATION.to_owned(), self.behavior.clone());
        serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": HANDLER, "namespace": NAMESPACE, "labels": labels,
                          "annotations": annotations},
            "spec": {
                "selector": {"matchLabels": {"kubevirt.io": HANDLER}},
                "template": {
                    "metadata": {"labels": labels, "annotations": pod_annotations},
                    "spec": {"containers": [{
                        "name": HANDLER,
                        "image": format!("{}/virt-handler:{}", kv.target.registry, kv.target.version),
                    }]},
                },
            },
        }))
        .unwrap()
    }

    /// One reference pass (`syncDaemonSet`): decide on fresh objects, make the decided write,
    /// record the generation when told. Returns (and remembers) the phase.
    pub async fn sync(&mut self) -> Decision {
        let kv = self.kubevirt().await;
        let cached = self.daemon_sets.get(HANDLER).await.unwrap();
        let mut desired = self.desired(&kv);
        let keys = AnnotationKeys::default();
        let object_changed = !daemonset_is_up_to_date(&cached, &kv.target, &keys)
            || object_meta_modified(&desired.metadata, &cached.metadata);
        let pods = self
            .pods
            .list(&ListParams::default().labels(&managed_by_selector()))
            .await
            .unwrap()
            .items;
        let rule = CountRule::reference(&kv.target, &keys);
        let counts = count_pods_owned_by(&pods, &OwnerMatch::NameOnly { name: HANDLER }, &rule);
        let observation = Observation {
            object_changed,
            generation_known: cached.metadata.generation
                == Some(kv.expected_daemon_set_generation(NAMESPACE, HANDLER)),
            // The reference never waits for the DaemonSet controller to catch up.
            rollout_observed: true,
            ..observe_daemon_set(&cached, &counts)
        };
        let decision = decide(&Strategy::kubevirt(), &observation);
        if let Some(write) = decision.write {
            if let Some(max_unavailable) = write.max_unavailable {
                // The reference replaces the whole `rollingUpdate` (quirk 12).
                set_max_unavailable(
                    &mut desired,
                    max_unavailable,
                    RollingUpdateWrite::ReplaceStruct,
                );
            }
            let patch = daemon_set_patch(&cached, &desired).unwrap();
            let written = self
                .daemon_sets
                .patch(HANDLER, &PatchParams::default(), &Patch::Json::<()>(patch))
                .await
                .unwrap();
            self.writes += 1;
            self.daemon_set_writes += 1;
            if decision.action.record_generation {
                self.record_generation(&kv, written.metadata.generation.unwrap())
                    .await;
            }
        }
        self.phases.push(decision.phase);
        decision
    }
}

/// Consecutive duplicates removed: the phases a rollout went through.
pub fn distinct(phases: impl IntoIterator<Item = Phase>) -> Vec<Phase> {
    let mut out: Vec<Phase> = Vec::new();
    for phase in phases {
        if out.last() != Some(&phase) {
            out.push(phase);
        }
    }
    out
}
