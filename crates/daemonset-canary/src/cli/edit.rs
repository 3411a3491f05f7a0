//! The verbs that change what is rolled out, as `kubectl rollout restart` and `kubectl set
//! image` change a Deployment: `restart NAME` and `set image NAME CONTAINER=IMAGE...`. They
//! edit the spec (the pod template), not a mark: the controller rolls the new template out as
//! it rolls out any spec change, through the steps, canary first, and a GitOps tool sees the
//! change as it sees a `kubectl set image` (the marks of `verb.rs` are for what must not show
//! as a spec change).
//!
//! - `restart`: the pod template's annotation `kubectl.kubernetes.io/restartedAt` set to now,
//!   as `kubectl rollout restart` sets it: every pod is replaced, canary first. With a
//!   `workloadRef` the template is the owner's DaemonSet's; the annotation goes there, as
//!   `kubectl rollout restart daemonset/NAME` would write it, and the controller replaces the
//!   pods of that new revision canary first, as it does for any change of the owner's.
//! - `set image`: the named containers' (or init containers') images, in one JSON Patch that
//!   tests each container's name at its index, so a concurrent edit fails it rather than
//!   changing another container. Refused with a `workloadRef`: the image is the owner's to set.

use super::object::ObjectArgs;
use super::verb::{Target, field_manager, find};
use super::{Connection, describe};
use anyhow::{Context, bail};
use canary_kube_adapter::CanaryDaemonSet;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};

/// The annotation `kubectl rollout restart` sets on a pod template.
pub use canary_kube_adapter::crd::RESTARTED_AT;

/// Arguments of `restart`.
#[derive(Debug, clap::Args)]
pub struct RestartArgs {
    #[command(flatten)]
    object: ObjectArgs,
}

/// Arguments of `set image`.
#[derive(Debug, clap::Args)]
pub struct SetImageArgs {
    #[command(flatten)]
    object: ObjectArgs,
    /// `CONTAINER=IMAGE`, one or more.
    #[arg(required = true, value_name = "CONTAINER=IMAGE", value_parser = parse_image)]
    images: Vec<(String, String)>,
}

fn parse_image(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((container, image)) if !container.is_empty() && !image.is_empty() => {
            Ok((container.to_owned(), image.to_owned()))
        }
        _ => Err(format!("{text:?} is not CONTAINER=IMAGE")),
    }
}

async fn patch_params(connection: &Connection) -> PatchParams {
    PatchParams {
        field_manager: Some(field_manager(connection).await),
        ..PatchParams::default()
    }
}

/// Restarts every pod through the steps, canary first.
pub async fn restart(args: RestartArgs) -> anyhow::Result<()> {
    let target = find(&args.object).await?;
    let now = Timestamp::now().to_string();
    // The annotation in a DaemonSetSpec's pod template: the DaemonSet's `spec`, or the
    // CanaryDaemonSet's `spec.template.spec`.
    let daemon_set_spec =
        serde_json::json!({"template": {"metadata": {"annotations": {RESTARTED_AT: now}}}});
    let params = patch_params(&target.connection).await;
    let client = target.connection.client.clone();
    let url = &target.connection.url;
    match &target.cds.spec.workload_ref {
        Some(workload) => {
            Api::<DaemonSet>::namespaced(client, &target.namespace)
                .patch(
                    &workload.name,
                    &params,
                    &Patch::Strategic(&serde_json::json!({"spec": daemon_set_spec})),
                )
                .await
                .map_err(|error| anyhow::anyhow!(describe(&error, url)))?;
            println!(
                "{} restarted: daemonset {} (its owner's template) marked restartedAt {now}; the controller replaces its pods through the steps, canary first",
                target.which, workload.name
            );
        }
        None => {
            let patch = serde_json::json!({"spec": {"template": {"spec": daemon_set_spec}}});
            Api::<CanaryDaemonSet>::namespaced(client, &target.namespace)
                .patch(&target.name, &params, &Patch::Merge(&patch))
                .await
                .map_err(|error| anyhow::anyhow!(describe(&error, url)))?;
            println!(
                "{} restarted: every pod is replaced through the steps, canary first",
                target.which
            );
        }
    }
    Ok(())
}

/// Sets the images of the named containers.
pub async fn set_image(args: SetImageArgs) -> anyhow::Result<()> {
    let target = find(&args.object).await?;
    let operations = image_patch(&target, &args.images)?;
    let params = patch_params(&target.connection).await;
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::Value::Array(operations)).context("the image patch")?;
    Api::<CanaryDaemonSet>::namespaced(target.connection.client.clone(), &target.namespace)
        .patch(&target.name, &params, &Patch::<()>::Json(patch))
        .await
        .map_err(|error| anyhow::anyhow!(describe(&error, &target.connection.url)))?;
    let set: Vec<String> = args
        .images
        .iter()
        .map(|(container, image)| format!("{container}={image}"))
        .collect();
    let target_spec = &target.cds.spec.target;
    // An explicit version is what pods are judged by: the new image rolls out as a template
    // change, but the status keeps naming that version until the spec says another.
    let note = match &target_spec.from_container {
        Some(_) => String::new(),
        None => format!(
            " (spec.target.version stays {:?}: change it too if the release has a new version)",
            target_spec.version
        ),
    };
    println!(
        "{} image updated: {}; the controller rolls it out through the steps, canary first{note}",
        target.which,
        set.join(", ")
    );
    Ok(())
}

/// The JSON Patch operations that set each container's image, each after a test of the
/// container's name at its index.
fn image_patch(
    target: &Target,
    images: &[(String, String)],
) -> anyhow::Result<Vec<serde_json::Value>> {
    let Some(template) = &target.cds.spec.template else {
        bail!(
            "{}: set image refused: the DaemonSet belongs to spec.workloadRef's owner (Helm, Argo CD, Flux); set the image where it is defined",
            target.which
        );
    };
    let pod = template.spec.template.spec.as_ref();
    let lists = [
        (
            "containers",
            pod.map(|p| p.containers.as_slice()).unwrap_or_default(),
        ),
        (
            "initContainers",
            pod.and_then(|p| p.init_containers.as_deref())
                .unwrap_or_default(),
        ),
    ];
    let mut operations = Vec::new();
    for (container, image) in images {
        let found = lists.iter().find_map(|(list, containers)| {
            containers
                .iter()
                .position(|c| &c.name == container)
                .map(|index| format!("/spec/template/spec/template/spec/{list}/{index}"))
        });
        let Some(path) = found else {
            let names: Vec<&str> = lists
                .iter()
                .flat_map(|(_, containers)| containers.iter().map(|c| c.name.as_str()))
                .collect();
            bail!(
                "{}: no container {container:?} in the template (it has {})",
                target.which,
                names.join(", ")
            );
        };
        operations.push(
            serde_json::json!({"op": "test", "path": format!("{path}/name"), "value": container}),
        );
        operations.push(
            serde_json::json!({"op": "replace", "path": format!("{path}/image"), "value": image}),
        );
    }
    Ok(operations)
}
