use std::collections::BTreeMap;

use super::*;
use crate::cluster::effects::{NODE_CONDITIONS_ANNOTATION, NOT_READY_MESSAGE};
use crate::cluster::kubelet::{BEHAVIOR_ANNOTATION, PULL_ANNOTATION};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

fn wall() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn s(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

fn node(name: &str) -> Node {
    nodes::new_node(name, 0, wall())
}

/// Pod `name` on `node` running `agent:v2`, with `annotations`, Ready or not: as the player
/// reads it from the API server.
fn pod(name: &str, node: &str, annotations: &[(&str, &str)], ready: bool) -> PodLite {
    let mut pod = canary_testkit::bare_pod("ns", name, node, "agent:v2", annotations);
    pod.metadata.uid = Some(format!("uid-{name}"));
    let ready = if ready { "True" } else { "False" };
    let conditions = serde_json::json!([{"type": "Ready", "status": ready}]);
    pod.status =
        Some(serde_json::from_value(serde_json::json!({ "conditions": conditions })).unwrap());
    serde_json::from_value(serde_json::to_value(pod).unwrap()).unwrap()
}

fn owned(mut pod: PodLite, uid: &str) -> PodLite {
    pod.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: "DaemonSet".to_owned(),
        name: "cni".to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    pod
}

/// `type=status reason` of each condition the actions patch.
fn patched_conditions(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::NodeConditions { conditions, .. } => Some(conditions),
            _ => None,
        })
        .flatten()
        .map(|c| {
            format!(
                "{}={} {}",
                c.type_,
                c.status,
                c.reason.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// `namespace/name key=value` of each pod annotation the actions write.
fn annotated(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::AnnotatePod {
                namespace,
                name,
                key,
                value,
            } => Some(format!("{namespace}/{name} {key}={value:?}")),
            _ => None,
        })
        .collect()
}

/// `reason: message` of each event the actions write.
fn events(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::PodEvent(event) => Some(format!(
                "{}: {}",
                event.reason.as_deref().unwrap_or_default(),
                event.message.as_deref().unwrap_or_default()
            )),
            _ => None,
        })
        .collect()
}

/// Applies the node conditions the actions patch to the player's node, as the watch brings
/// them back.
fn echo(player: &mut Player, name: &str, actions: &[Action]) -> Vec<Action> {
    let mut current = player
        .nodes
        .get(name)
        .map(|e| e.node.clone())
        .unwrap_or_default();
    for action in actions {
        if let Action::NodeConditions { node, conditions } = action
            && node == name
        {
            for condition in conditions {
                nodes::set_condition(
                    &mut current,
                    &condition.type_,
                    &condition.status,
                    condition.reason.as_deref().unwrap_or_default(),
                    condition.message.as_deref().unwrap_or_default(),
                    wall(),
                );
            }
        }
    }
    player.node_applied(current, s(0), wall())
}

#[test]
fn breaks_node_writes_not_ready_after_its_delay_from_the_first_ready_seen_and_undoes_it() {
    let mut player = Player::new(s(2));
    assert!(player.node_applied(node("node-1"), s(0), wall()).is_empty());
    let behavior = [(BEHAVIOR_ANNOTATION, "breaks-node=30s")];
    assert!(
        player
            .pod_applied(&pod("driver", "node-1", &behavior, false), s(3), wall())
            .is_empty()
    );
    assert!(
        player
            .pod_applied(&pod("driver", "node-1", &behavior, true), s(10), wall())
            .is_empty()
    );
    assert_eq!(player.next_due(), Some(s(40)));
    assert!(player.fire(s(39), wall()).is_empty());
    let broken = player.fire(s(40), wall());
    assert_eq!(patched_conditions(&broken), ["Ready=False KubeletNotReady"]);
    let message = match broken.first() {
        Some(Action::NodeConditions { conditions, .. }) => conditions[0].message.clone(),
        _ => None,
    };
    assert_eq!(message.as_deref(), Some(NOT_READY_MESSAGE));
    // The watch brings the node back as written: nothing more to do.
    assert!(echo(&mut player, "node-1", &broken).is_empty());
    // A later update of the pod (still Ready) arms nothing again.
    assert!(
        player
            .pod_applied(&pod("driver", "node-1", &behavior, true), s(50), wall())
            .is_empty()
    );
    assert_eq!(player.next_due(), None);
    let mended = player.pod_deleted("ns", "driver", wall());
    assert_eq!(patched_conditions(&mended), ["Ready=True KubeletReady"]);
}

#[test]
fn conditions_come_from_pods_and_hand_annotations_and_go_with_them() {
    let mut player = Player::new(s(2));
    player.node_applied(node("node-1"), s(0), wall());
    let actions = player.pod_applied(
        &pod(
            "kmod",
            "node-1",
            &[(BEHAVIOR_ANNOTATION, "node-condition=KernelDeadlock")],
            true,
        ),
        s(5),
        wall(),
    );
    assert!(actions.is_empty());
    let set = player.fire(s(5), wall());
    assert_eq!(patched_conditions(&set), ["KernelDeadlock=True DockerHung"]);
    echo(&mut player, "node-1", &set);
    // By hand, on the node, a second one.
    let mut annotated_node = player.nodes["node-1"].node.clone();
    annotated_node.metadata.annotations = Some(BTreeMap::from([(
        NODE_CONDITIONS_ANNOTATION.to_owned(),
        "NetworkUnavailable".to_owned(),
    )]));
    let by_hand = player.node_applied(annotated_node, s(0), wall());
    assert_eq!(
        patched_conditions(&by_hand),
        ["NetworkUnavailable=True NoRouteCreated"]
    );
    echo(&mut player, "node-1", &by_hand);
    let gone = player.pod_deleted("ns", "kmod", wall());
    assert_eq!(
        patched_conditions(&gone),
        ["KernelDeadlock=False KernelHasNoDeadlock"]
    );
}

#[test]
fn breaks_neighbours_annotates_every_other_pod_but_its_controllers() {
    let mut player = Player::new(s(2));
    player.node_applied(node("node-1"), s(0), wall());
    player.node_applied(node("node-2"), s(0), wall());
    let cni = owned(
        pod(
            "cni-new",
            "node-1",
            &[(BEHAVIOR_ANNOTATION, "breaks-neighbours=10s")],
            true,
        ),
        "ds",
    );
    player.pod_applied(&cni, s(0), wall());
    player.pod_applied(
        &owned(pod("cni-old", "node-1", &[], true), "ds"),
        s(0),
        wall(),
    );
    player.pod_applied(&pod("web", "node-1", &[], true), s(0), wall());
    player.pod_applied(&pod("far", "node-2", &[], true), s(0), wall());
    let broken = player.fire(s(10), wall());
    assert_eq!(
        annotated(&broken),
        [format!(
            "ns/web {DISRUPTED_BY_ANNOTATION}=Some(\"ns/cni-new\")"
        )]
    );
    // A pod arriving meanwhile is marked at once; one already marked is left alone.
    let late = player.pod_applied(&pod("late", "node-1", &[], false), s(11), wall());
    assert_eq!(annotated(&late).len(), 1);
    let web_marked = pod(
        "web",
        "node-1",
        &[(DISRUPTED_BY_ANNOTATION, "ns/cni-new")],
        false,
    );
    assert!(player.pod_applied(&web_marked, s(12), wall()).is_empty());
    let healed = player.pod_deleted("ns", "cni-new", wall());
    assert_eq!(
        annotated(&healed),
        [
            format!("ns/late {DISRUPTED_BY_ANNOTATION}=None"),
            format!("ns/web {DISRUPTED_BY_ANNOTATION}=None"),
        ]
    );
}

#[test]
fn pulls_are_planned_once_per_node_and_told_to_the_start_stage() {
    let mut player = Player::new(s(2));
    player.node_applied(node("node-1"), s(0), wall());
    let pulling = [(PULL_ANNOTATION, "30s")];
    let first = player.pod_applied(&pod("a", "node-1", &pulling, false), s(0), wall());
    assert_eq!(
        annotated(&first),
        [format!("ns/a {PULL_WAIT_ANNOTATION}=Some(\"30000ms\")")]
    );
    assert_eq!(events(&first), [r#"Pulling: Pulling image "agent:v2""#]);
    // Asked 10 s later, the same image waits for the same pull, 20 s more.
    let second = player.pod_applied(&pod("b", "node-1", &pulling, false), s(10), wall());
    assert_eq!(
        annotated(&second),
        [format!("ns/b {PULL_WAIT_ANNOTATION}=Some(\"20000ms\")")]
    );
    assert!(events(&second).is_empty());
    // The Pulled events when the pull is over (at 32 s: the sandbox at 2 s, then 30 s).
    assert_eq!(player.next_due(), Some(s(32)));
    let pulled = player.fire(s(32), wall());
    assert_eq!(
        events(&pulled),
        [
            r#"Pulled: Successfully pulled image "agent:v2" in 30s (30s including waiting). Image size: 0 bytes."#,
            r#"Pulled: Successfully pulled image "agent:v2" in 0s (20s including waiting). Image size: 0 bytes."#,
        ]
    );
    // Later pods of the image on that node wait for nothing.
    let third = player.pod_applied(&pod("c", "node-1", &pulling, false), s(60), wall());
    assert_eq!(
        annotated(&third),
        [format!("ns/c {PULL_WAIT_ANNOTATION}=Some(\"0ms\")")]
    );
    assert_eq!(
        events(&third),
        [r#"Pulled: Container image "agent:v2" already present on machine"#]
    );
    // A pod told its wait before (by an earlier player) and pods without the annotation are
    // left alone.
    let told = pod(
        "d",
        "node-1",
        &[(PULL_ANNOTATION, "30s"), (PULL_WAIT_ANNOTATION, "0ms")],
        false,
    );
    assert!(player.pod_applied(&told, s(61), wall()).is_empty());
    assert!(
        player
            .pod_applied(&pod("e", "node-1", &[], false), s(61), wall())
            .is_empty()
    );
}

#[test]
fn pods_missing_from_a_new_list_are_gone() {
    let mut player = Player::new(s(2));
    player.node_applied(node("node-1"), s(0), wall());
    let driver = pod(
        "driver",
        "node-1",
        &[(BEHAVIOR_ANNOTATION, "breaks-node=1s")],
        true,
    );
    player.pod_applied(&driver, s(0), wall());
    let broken = player.fire(s(1), wall());
    echo(&mut player, "node-1", &broken);
    let mended = player.keep_only(&HashSet::new(), wall());
    assert_eq!(patched_conditions(&mended), ["Ready=True KubeletReady"]);
    // The same name with another uid is another pod: the first one's effects end.
    player.pod_applied(&driver, s(2), wall());
    let broken = player.fire(s(3), wall());
    echo(&mut player, "node-1", &broken);
    let mut replaced = pod("driver", "node-1", &[], false);
    replaced.metadata.uid = Some("another".to_owned());
    let actions = player.pod_applied(&replaced, s(4), wall());
    assert_eq!(patched_conditions(&actions), ["Ready=True KubeletReady"]);
}

#[test]
fn the_kwok_stages_read_the_annotations_and_texts_of_this_module() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../xtask/src/cluster/kwok-stages.yaml"
    );
    let stages = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    for needed in [
        BEHAVIOR_ANNOTATION,
        PULL_ANNOTATION,
        DISRUPTED_BY_ANNOTATION,
        PULL_WAIT_ANNOTATION,
        NOT_READY_MESSAGE,
    ] {
        assert!(stages.contains(needed), "{path} does not name {needed:?}");
    }
}

#[test]
fn a_pod_seen_before_its_node_gets_its_pull_plan_and_its_effects_when_the_node_comes() {
    let mut player = Player::new(s(2));
    let pulling = pod(
        "agent",
        "node-1",
        &[
            (PULL_ANNOTATION, "10s"),
            (BEHAVIOR_ANNOTATION, "breaks-node=1s"),
        ],
        true,
    );
    assert!(player.pod_applied(&pulling, s(0), wall()).is_empty());
    // The effect comes due before the node is known: shown once it is.
    assert!(player.fire(s(1), wall()).is_empty());
    let actions = player.node_applied(node("node-1"), s(3), wall());
    assert_eq!(
        patched_conditions(&actions),
        ["Ready=False KubeletNotReady"]
    );
    assert_eq!(
        annotated(&actions),
        [format!("ns/agent {PULL_WAIT_ANNOTATION}=Some(\"10000ms\")")]
    );
}
