//! Image pre-pull (issue 50, `spec.prePull`): while the rollout waits (the canary soaks, a
//! pause step of the Pods driver holds), the nodes replaced next pull the new images, so that
//! their agent's replacement does not pay the pull inside its downtime.
//!
//! **Mechanism: one short-lived pod per node**, pinned by `spec.nodeName` (no scheduler, no
//! DaemonSet of our own to steer), whose containers are the new template's images (init
//! containers' too), one container each, with `command` set to a path no image has
//! ([`NO_SUCH_COMMAND`]) and `restartPolicy: Never`. The kubelet pulls each image before it
//! creates the container (`EnsureImageExists`), then the start fails (`StartError`, exit
//! 128) and the pod ends `Failed`: the pull is what matters, and the image's own entrypoint
//! never runs, so an agent image (privileged code that would touch the host) does nothing, and
//! an image without a shell (distroless) needs no helper binary. A pre-pull DaemonSet was not
//! chosen: its node set is a selector, so pinning "the next step's nodes" would mean
//! labelling nodes (a node write per node, and RBAC on nodes); and the DaemonSet controller
//! would replace its ended pods for ever.
//!
//! The pods carry [`PRE_PULL_LABEL`] (the CanaryDaemonSet's name) and none of the template's
//! labels, and a controller owner reference to the CanaryDaemonSet: so the DaemonSet
//! controller never adopts them (its selector does not match, and they have a controller),
//! the pod index never counts them (it watches [`crate::desired::OWNER_LABEL`]), the
//! neighbours gate leaves them out (by the label), and deleting the CanaryDaemonSet removes
//! them (garbage collection). A pass lists them by the label (only while a window is open, or
//! until a list found none after it closed: a restarted controller lists once and cleans up
//! what a predecessor left), and plans with [`plan_pre_pull`]: at most `maxConcurrent`
//! pulling at once, a finished pod kept as the record of its node until the window ends, all
//! of them deleted then. Pre-pull is best effort: a refused request is logged and retried by
//! the next pass, and never fails, holds or delays the rollout. A refusal for want of
//! permission (403: the install grants no `pods: create` unless asked, docs/operations.md)
//! is also the `PrePullBlocked` condition and one Warning event each time it turns true
//! ([`PrePullOutcome`]): a log line alone would go unseen.

use std::collections::BTreeMap;
use std::time::Duration;

use canary_state_machine::{OUTSIDE_TEXT_BYTES, PrePullPod, cut, plan_pre_pull};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::plan::Plan;
use super::{Pass, describe_api_error};
use crate::Error;
use crate::observer::PrePullStanding;

/// The label of a pre-pull pod: the name of the CanaryDaemonSet it pulls for.
pub const PRE_PULL_LABEL: &str = "canary.daemonset.dev/pre-pull";

/// The annotation of a pre-pull pod: a hash of the images it pulls (a pod of an earlier target
/// is deleted, not counted as its node's record).
pub const PRE_PULL_IMAGES_ANNOTATION: &str = "canary.daemonset.dev/pre-pull-images";

/// The command of every pre-pull container: a path no image has, so the kubelet pulls the
/// image and its start fails, whatever the image holds (a shell or not).
pub const NO_SUCH_COMMAND: &str = "/.daemonset-canary-pre-pull-never-runs";

/// The simulator's pull-time annotation (canary-sim, docs/simulator.md "Image pulls"), copied
/// from the template so that a simulated pre-pull takes the time the agent's own pull would.
/// A no-op on a real cluster.
const SIM_PULL_ANNOTATION: &str = "sim.canary.daemonset.dev/pull";

/// How soon a pass with pods still pulling comes back to fill the freed slots (their status
/// changes trigger no pass: the pod watch only sees the DaemonSet's own pods).
pub(super) const PRE_PULL_RECHECK: Duration = Duration::from_secs(5);

/// What a pass's pre-pull did ([`Pass::pre_pull`]).
#[derive(Debug, Default)]
pub(super) struct PrePullOutcome {
    /// Come back soon: pods are still pulling, or a request failed (not for want of
    /// permission: that is not fixed within seconds, the usual requeue tries again).
    pub recheck: bool,
    /// For the `PrePullBlocked` condition.
    pub standing: PrePullStanding,
}

impl Pass<'_> {
    /// Brings the pre-pull pods in line with `wanted` (the nodes to pre-pull, `None` outside
    /// a window) for the images of `template_of`: creates and deletes them. Best effort:
    /// errors are logged and told in the outcome, never returned.
    pub(super) async fn pre_pull(
        &self,
        plan: &Plan,
        template_of: &DaemonSet,
        wanted: Option<Vec<String>>,
    ) -> PrePullOutcome {
        let outcome = self.pre_pull_pods(plan, template_of, wanted).await;
        match plan.pre_pull {
            None => PrePullOutcome {
                standing: PrePullStanding::Off,
                ..outcome
            },
            Some(_) => outcome,
        }
    }

    async fn pre_pull_pods(
        &self,
        plan: &Plan,
        template_of: &DaemonSet,
        wanted: Option<Vec<String>>,
    ) -> PrePullOutcome {
        let window = plan.pre_pull.and(wanted);
        // Outside a window, a list only while pods may be left: once per term with pre-pull
        // on (a predecessor's leftovers), after this term created some otherwise.
        let created = self.ctx.memory.pre_pull_created(self.cds);
        let may_be_left = match created {
            Some(created) => created,
            None => plan.pre_pull.is_some(),
        };
        if window.is_none() && !may_be_left {
            return PrePullOutcome::default();
        }
        match self.sync_pre_pull(plan, template_of, window).await {
            Ok((pulling, created)) => PrePullOutcome {
                recheck: pulling,
                standing: if created {
                    PrePullStanding::Created
                } else {
                    PrePullStanding::Unknown
                },
            },
            Err(error) => {
                let described = describe_api_error(&error);
                let forbidden =
                    matches!(&error, Error::Kube(kube::Error::Api(status)) if status.code == 403);
                warn!(namespace = %self.namespace, name = %self.cds.name_any(), error = %described, forbidden, "image pre-pull: the next pass tries again");
                if forbidden {
                    let message = format!(
                        "image pre-pull refused, the rollout goes on without it (grant pods: create in this namespace, docs/operations.md): {described}"
                    );
                    PrePullOutcome {
                        recheck: false,
                        standing: PrePullStanding::Forbidden(
                            cut(&message, OUTSIDE_TEXT_BYTES).into_owned(),
                        ),
                    }
                } else {
                    // Back soon rather than at the next resync: pods left pulling or to
                    // clean up.
                    PrePullOutcome {
                        recheck: true,
                        standing: PrePullStanding::Unknown,
                    }
                }
            }
        }
    }

    async fn sync_pre_pull(
        &self,
        plan: &Plan,
        template_of: &DaemonSet,
        window: Option<Vec<String>>,
    ) -> Result<(bool, bool), Error> {
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let name = self.cds.name_any();
        let listed = api
            .list(&ListParams::default().labels(&format!("{PRE_PULL_LABEL}={name}")))
            .await?;
        let images = images_of(template_of);
        let images_hash = images_hash(&images);
        let own_uid = self.cds.metadata.uid.as_deref().unwrap_or_default();
        let existing: Vec<PrePullPod> = listed
            .items
            .iter()
            .filter(|pod| {
                pod.owner_references()
                    .iter()
                    .any(|owner| owner.uid == own_uid)
            })
            .filter_map(|pod| {
                Some(PrePullPod {
                    name: pod.metadata.name.clone()?,
                    node: pod.spec.as_ref()?.node_name.clone().unwrap_or_default(),
                    finished: finished(pod),
                    current: pod.annotations().get(PRE_PULL_IMAGES_ANNOTATION)
                        == Some(&images_hash),
                })
            })
            .collect();
        let bound = plan.pre_pull.unwrap_or(1);
        // No image to pull (a template without containers): nothing to pre-pull.
        let window = window.filter(|_| !images.is_empty());
        let pre_pull = plan_pre_pull(window.as_deref(), &existing, bound);
        for pod in &pre_pull.delete {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            match api.delete(pod, &params).await {
                Ok(_) => {
                    debug!(namespace = %self.namespace, name = %name, pod = %pod, "pre-pull pod deleted")
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error.into()),
            }
        }
        // Pods kept count as much as pods created: a replica that took over a window finds
        // its predecessor's records and creates none.
        if pre_pull.leaves_pods(existing.len()) {
            self.ctx.memory.note_pre_pull(self.cds);
        }
        let params = PostParams {
            field_manager: Some(self.ctx.field_manager.clone()),
            ..PostParams::default()
        };
        for node in &pre_pull.create {
            let pod = self.pre_pull_pod(template_of, node, &images, &images_hash)?;
            api.create(&params, &pod).await?;
            info!(namespace = %self.namespace, name = %name, node = %node, images = images.len(), "pre-pulling the new images");
        }
        if window.is_none() && pre_pull.delete.len() == existing.len() {
            self.ctx.memory.pre_pull_cleared(self.cds);
        }
        Ok((pre_pull.pulling > 0, !pre_pull.create.is_empty()))
    }

    /// The pre-pull pod of `node`: `images` as containers that never run, pinned to the node.
    fn pre_pull_pod(
        &self,
        template_of: &DaemonSet,
        node: &str,
        images: &[String],
        images_hash: &str,
    ) -> Result<Pod, Error> {
        let owner = self
            .cds
            .controller_owner_ref(&())
            .ok_or(Error::MissingField("metadata.uid"))?;
        let template = template_of.spec.as_ref().map(|spec| &spec.template);
        let pod_spec = template.and_then(|t| t.spec.as_ref());
        let mut annotations = BTreeMap::from([(
            PRE_PULL_IMAGES_ANNOTATION.to_owned(),
            images_hash.to_owned(),
        )]);
        if let Some(pull) = template
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(SIM_PULL_ANNOTATION))
        {
            annotations.insert(SIM_PULL_ANNOTATION.to_owned(), pull.clone());
        }
        let tiny = BTreeMap::from([
            ("cpu".to_owned(), Quantity("1m".to_owned())),
            ("memory".to_owned(), Quantity("8Mi".to_owned())),
        ]);
        let containers = images
            .iter()
            .enumerate()
            .map(|(index, image)| Container {
                name: format!("pull-{index}"),
                image: Some(image.clone()),
                command: Some(vec![NO_SUCH_COMMAND.to_owned()]),
                image_pull_policy: Some("IfNotPresent".to_owned()),
                resources: Some(ResourceRequirements {
                    requests: Some(tiny.clone()),
                    limits: Some(tiny.clone()),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            })
            .collect();
        Ok(Pod {
            metadata: ObjectMeta {
                generate_name: Some(pre_pull_prefix(&self.ds_name)),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    PRE_PULL_LABEL.to_owned(),
                    self.cds.name_any(),
                )])),
                annotations: Some(annotations),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.to_owned()),
                containers,
                restart_policy: Some("Never".to_owned()),
                termination_grace_period_seconds: Some(0),
                automount_service_account_token: Some(false),
                enable_service_links: Some(false),
                // The agent's: the same registries, and the same taints borne (a NoExecute
                // taint would evict a pod that does not tolerate it).
                image_pull_secrets: pod_spec.and_then(|s| s.image_pull_secrets.clone()),
                tolerations: pod_spec.and_then(|s| s.tolerations.clone()),
                priority_class_name: pod_spec.and_then(|s| s.priority_class_name.clone()),
                ..PodSpec::default()
            }),
            status: None,
        })
    }
}

/// `generateName` of the pre-pull pods of DaemonSet `ds_name` (kept within the 63 characters
/// a generated name may have with its 5 random ones).
fn pre_pull_prefix(ds_name: &str) -> String {
    let mut prefix: String = ds_name.chars().take(48).collect();
    prefix.push_str("-pre-pull-");
    prefix
}

/// The distinct images of `ds`'s pod template, init containers' first, in order.
pub(crate) fn images_of(ds: &DaemonSet) -> Vec<String> {
    let Some(spec) = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
        return Vec::new();
    };
    let mut images: Vec<String> = Vec::new();
    let all = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for image in all.filter_map(|c| c.image.clone()) {
        if !image.is_empty() && !images.contains(&image) {
            images.push(image);
        }
    }
    images
}

/// A stable short hash of `images` (FNV-1a, hex): the same on every controller version.
fn images_hash(images: &[String]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in images.join("\n").bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// A pre-pull pod is finished once its images are on its node: it ended, or every container
/// left the pull (it has an image ID, runs, or terminated), or a pull failed (`ErrImagePull`,
/// `ImagePullBackOff`, `InvalidImageName`: the replacement will show that error itself, and a
/// slot is not held for it).
fn finished(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return true;
    }
    let Some(containers) = status.container_statuses.as_ref().filter(|c| !c.is_empty()) else {
        return false;
    };
    let pull_failed = containers.iter().any(|c| {
        c.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.as_deref())
            .is_some_and(|r| matches!(r, "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName"))
    });
    pull_failed
        || containers.iter().all(|c| {
            !c.image_id.is_empty()
                || c.state
                    .as_ref()
                    .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateWaiting, ContainerStatus, PodStatus,
    };

    fn with_containers(statuses: Vec<ContainerStatus>, phase: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.to_owned()),
                container_statuses: Some(statuses),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn waiting(reason: &str) -> ContainerStatus {
        ContainerStatus {
            name: "pull-0".to_owned(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.to_owned()),
                    ..ContainerStateWaiting::default()
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }
    }

    #[test]
    fn a_pod_pulls_until_every_image_is_there_or_a_pull_failed() {
        assert!(!finished(&Pod::default()));
        assert!(!finished(&with_containers(
            vec![waiting("ContainerCreating")],
            "Pending"
        )));
        let pulled = ContainerStatus {
            image_id: "sha256:abc".to_owned(),
            ..waiting("ContainerCreating")
        };
        assert!(!finished(&with_containers(
            vec![pulled.clone(), waiting("ContainerCreating")],
            "Pending"
        )));
        assert!(finished(&with_containers(vec![pulled.clone()], "Pending")));
        assert!(finished(&with_containers(
            vec![pulled, waiting("ImagePullBackOff")],
            "Pending"
        )));
        // The start failed after the pull (the command does not exist): the pod ended.
        assert!(finished(&with_containers(Vec::new(), "Failed")));
    }

    #[test]
    fn images_are_distinct_init_containers_first_and_hashed_stably() {
        let ds: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "agent"},
            "spec": {"selector": {}, "template": {"spec": {
                "initContainers": [{"name": "init", "image": "agent-init:v2"}],
                "containers": [
                    {"name": "agent", "image": "agent:v2"},
                    {"name": "sidecar", "image": "agent-init:v2"}
                ]
            }}}
        }))
        .unwrap();
        let images = images_of(&ds);
        assert_eq!(images, ["agent-init:v2", "agent:v2"]);
        assert_eq!(images_hash(&images), images_hash(&images.clone()));
        assert_ne!(images_hash(&images), images_hash(&images[..1]));
        assert_eq!(images_hash(&[]), "cbf29ce484222325");
    }

    #[test]
    fn the_generated_name_fits_whatever_the_daemon_set_name() {
        let long = "a".repeat(253);
        assert!(pre_pull_prefix(&long).len() + 5 <= 63);
        assert_eq!(pre_pull_prefix("agent"), "agent-pre-pull-");
    }
}
