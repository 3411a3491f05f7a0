//! Round trips of an unmodified `kube::Client` through the in-process simulator.

use std::time::Duration;

use canary_sim::{FaultAction, FaultRule, Sim, Trigger, Verb};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

fn fixture_daemonset(file: &str) -> DaemonSet {
    let path = format!(
        "{}/../../testdata/daemonsets/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_saphyr::from_str(&text).unwrap()
}

fn small_daemonset(name: &str) -> DaemonSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "main:1"}]}}
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn daemonset_crud_and_patches() {
    let sim = Sim::builder().nodes(2).build().unwrap();
    let api: Api<DaemonSet> = Api::namespaced(sim.client(), "kube-system");
    let ds = fixture_daemonset("nvidia-device-plugin.yaml");
    let name = ds.metadata.name.clone().unwrap();
    let created = api.create(&PostParams::default(), &ds).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    let merge = json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "10%"}}}});
    let patched = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&merge))
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));

    let guarded: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/generation", "value": 1},
        {"op": "replace", "path": "/spec/minReadySeconds", "value": 5}
    ]))
    .unwrap();
    let err = api
        .patch(&name, &PatchParams::default(), &Patch::Json::<()>(guarded))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "{err:?}"
    );

    let mut stale = created.clone();
    stale.spec.as_mut().unwrap().min_ready_seconds = Some(9);
    let err = api
        .replace(&name, &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.is_conflict()),
        "{err:?}"
    );

    // The simulated DaemonSet controller writes this status too: a read-modify-write may meet
    // its write (409) and is tried again, as any client of the status does.
    let mut attempts = 0;
    let after = loop {
        let mut status = api.get_status(&name).await.unwrap();
        status.status.as_mut().unwrap().number_ready = 2;
        status.spec.as_mut().unwrap().min_ready_seconds = Some(77);
        match api
            .replace_status(&name, &PostParams::default(), &status)
            .await
        {
            Err(kube::Error::Api(s)) if s.is_conflict() && attempts < 20 => attempts += 1,
            answer => break answer.unwrap(),
        }
    };
    assert_eq!(after.status.unwrap().number_ready, 2);
    assert_eq!(
        after.spec.unwrap().min_ready_seconds,
        None,
        "status write ignores spec"
    );

    let status_patch = json!({"status": {"numberUnavailable": 1}});
    let after = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status_patch))
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().number_unavailable, Some(1));
    assert_eq!(after.metadata.generation, Some(2));

    api.delete(&name, &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt(&name).await.unwrap().is_none());

    let requests = sim.requests();
    assert_eq!(requests.count(Verb::Patch, "daemonsets"), 2);
    assert_eq!(requests.count(Verb::Patch, "daemonsets/status"), 1);
    assert_eq!(requests.count(Verb::Update, "daemonsets"), 1);
    let writes: Vec<(Verb, String, Option<String>)> = sim
        .request_log()
        .into_iter()
        .filter(|r| r.verb.is_write() && r.resource.starts_with("daemonsets"))
        .map(|r| (r.verb, r.resource, r.name))
        .collect();
    assert_eq!(writes.first().map(|w| w.0), Some(Verb::Create));
    assert_eq!(
        writes.last(),
        Some(&(Verb::Delete, "daemonsets".to_owned(), Some(name.clone())))
    );
}

#[tokio::test]
async fn server_side_apply_of_a_lease() {
    let sim = Sim::builder().nodes(0).build().unwrap();
    let leases: Api<Lease> = Api::namespaced(sim.client(), "default");
    let lease = |holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "leader"}, "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
    };
    let mine = PatchParams::apply("instance-a");
    let created = leases
        .patch("leader", &mine, &Patch::Apply(&lease("a")))
        .await
        .unwrap();
    assert_eq!(created.spec.unwrap().holder_identity.as_deref(), Some("a"));

    let theirs = PatchParams::apply("instance-b");
    let err = leases
        .patch("leader", &theirs, &Patch::Apply(&lease("b")))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.is_conflict()),
        "{err:?}"
    );

    let taken = leases
        .patch(
            "leader",
            &theirs.clone().force(),
            &Patch::Apply(&lease("b")),
        )
        .await
        .unwrap();
    assert_eq!(taken.spec.unwrap().holder_identity.as_deref(), Some("b"));
    let managers: Vec<_> = taken
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(
        managers,
        ["instance-a", "instance-b"],
        "a still co-owns leaseDurationSeconds"
    );
}

#[tokio::test]
async fn custom_resources_through_a_dynamic_api() {
    let sim = Sim::builder().nodes(0).build().unwrap();
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "kubevirts");
    let api: Api<DynamicObject> = Api::namespaced_with(sim.client(), "kubevirt", &resource);
    let kv =
        DynamicObject::new("kubevirt", &resource).data(json!({"spec": {"imageTag": "v1.5.0"}}));
    api.create(&PostParams::default(), &kv).await.unwrap();
    let status = json!({"status": {"phase": "Deployed"}});
    api.patch_status("kubevirt", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let got = api.get("kubevirt").await.unwrap();
    assert_eq!(got.data["status"]["phase"], "Deployed");
    assert_eq!(got.data["spec"]["imageTag"], "v1.5.0");
}

async fn next_event<S>(stream: &mut S) -> Event<DaemonSet>
where
    S: futures::Stream<Item = Result<Event<DaemonSet>, watcher::Error>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(30), stream.try_next())
        .await
        .expect("a watch event in time")
        .expect("no watch error")
        .expect("the stream goes on")
}

fn applied_name(event: &Event<DaemonSet>) -> Option<String> {
    match event {
        Event::Apply(ds) | Event::InitApply(ds) => ds.metadata.name.clone(),
        _ => None,
    }
}

async fn watcher_sees_changes(config: watcher::Config) {
    let sim = Sim::builder().nodes(2).build().unwrap();
    let api: Api<DaemonSet> = Api::namespaced(sim.client(), "default");
    api.create(&PostParams::default(), &small_daemonset("first"))
        .await
        .unwrap();
    sim.cluster().settle().await.unwrap();
    let mut events = watcher(api.clone(), config).boxed();
    assert!(matches!(next_event(&mut events).await, Event::Init));
    assert_eq!(
        applied_name(&next_event(&mut events).await).as_deref(),
        Some("first")
    );
    assert!(matches!(next_event(&mut events).await, Event::InitDone));
    api.create(&PostParams::default(), &small_daemonset("second"))
        .await
        .unwrap();
    // The DaemonSet controller's status writes arrive too; wait for the ones asked about.
    loop {
        if applied_name(&next_event(&mut events).await).as_deref() == Some("second") {
            break;
        }
    }
    api.delete("first", &DeleteParams::default()).await.unwrap();
    loop {
        if let Event::Delete(ds) = next_event(&mut events).await {
            assert_eq!(ds.metadata.name.as_deref(), Some("first"));
            break;
        }
    }
}

use kube::runtime::watcher::watcher;

#[tokio::test(start_paused = true)]
async fn watcher_list_then_watch() {
    watcher_sees_changes(watcher::Config::default()).await;
}

#[tokio::test(start_paused = true)]
async fn watcher_streaming_list() {
    watcher_sees_changes(watcher::Config::default().streaming_lists()).await;
}

#[tokio::test(start_paused = true)]
async fn watcher_recovers_from_410_and_ended_streams() {
    let sim = Sim::builder().nodes(0).build().unwrap();
    let api: Api<DaemonSet> = Api::namespaced(sim.client(), "default");
    api.create(&PostParams::default(), &small_daemonset("a"))
        .await
        .unwrap();
    // Every watch ends after one event, and the first resume is answered with 410 Gone.
    sim.faults().add(FaultRule::new(
        Some(Verb::Watch),
        Some("daemonsets"),
        FaultAction::EndWatchAfterEvents(1),
    ));
    sim.faults().add(
        FaultRule::new(
            Some(Verb::Watch),
            Some("daemonsets"),
            FaultAction::GoneOnResume,
        )
        .when(Trigger::Nth(1)),
    );
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut seen = Vec::new();
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            for name in ["b", "c", "d"] {
                tokio::time::sleep(Duration::from_secs(5)).await;
                api.create(&PostParams::default(), &small_daemonset(name))
                    .await
                    .unwrap();
            }
        })
    };
    while seen.len() < 4 {
        let event = tokio::time::timeout(Duration::from_secs(120), events.next())
            .await
            .expect("progress")
            .expect("stream");
        if let Ok(event) = event
            && let Some(name) = applied_name(&event)
            && !seen.contains(&name)
        {
            seen.push(name);
        }
    }
    writer.await.unwrap();
    seen.sort();
    assert_eq!(seen, ["a", "b", "c", "d"]);
    assert!(
        sim.requests().count(Verb::Watch, "daemonsets") >= 3,
        "the watcher re-watched"
    );
}

#[tokio::test]
async fn nodes_carry_well_known_labels() {
    let sim = Sim::builder().nodes(3).build().unwrap();
    let nodes: Api<Node> = Api::all(sim.client());
    let list = nodes
        .list(&ListParams::default().labels("kubernetes.io/os=linux"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 3);
    for node in list.items {
        let labels = node.metadata.labels.unwrap();
        assert_eq!(
            labels.get("kubernetes.io/hostname"),
            node.metadata.name.as_ref()
        );
        assert!(labels.contains_key("kubernetes.io/arch"));
    }
    assert_eq!(sim.requests().writes(), 0);
}

/// kube-runtime's Recorder writes `events.k8s.io/v1` Events; the simulator stores them once, as
/// the API server does, so the core `v1` API (what `kubectl get events` and `kubectl describe`
/// read) lists and watches the same events, converted.
#[tokio::test]
async fn recorder_events_are_served_through_both_event_apis() {
    use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
    use k8s_openapi::api::events::v1::Event as EventsV1;
    use kube::runtime::events::{Event as Published, EventType, Recorder, Reporter};

    let sim = Sim::builder().nodes(1).build().unwrap();
    let client = sim.client();
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let mut watch = core
        .watch(&kube::api::WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "canary.daemonset.dev".into(),
            instance: Some("replica-1".into()),
        },
    );
    let regarding: ObjectReference = serde_json::from_value(json!({
        "apiVersion": "canary.daemonset.dev/v1alpha1", "kind": "CanaryDaemonSet",
        "name": "agent", "namespace": "default", "uid": "uid-1",
    }))
    .unwrap();
    let published = Published {
        type_: EventType::Normal,
        reason: "RolloutStarted".into(),
        note: Some("started rollout of v2".into()),
        action: "Rollout".into(),
        secondary: None,
    };
    recorder.publish(&published, &regarding).await.unwrap();

    let seen = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let kube::api::WatchEvent::Added(added) = seen else {
        panic!("expected ADDED, got {seen:?}");
    };
    assert_eq!(added.message.as_deref(), Some("started rollout of v2"));

    let selected = core
        .list(&ListParams::default().fields(
            "involvedObject.kind=CanaryDaemonSet,involvedObject.name=agent,involvedObject.uid=uid-1",
        ))
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);
    let event = &selected.items[0];
    assert_eq!(event.reason.as_deref(), Some("RolloutStarted"));
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(event.involved_object.name.as_deref(), Some("agent"));
    assert_eq!(
        event.reporting_component.as_deref(),
        Some("canary.daemonset.dev")
    );
    assert_eq!(event.reporting_instance.as_deref(), Some("replica-1"));
    assert!(event.event_time.is_some());

    // The same event again: the Recorder patches a series onto the events.k8s.io object, and
    // the core view shows the count.
    recorder.publish(&published, &regarding).await.unwrap();
    let core_again = core.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(core_again.len(), 1);
    assert_eq!(core_again[0].series.as_ref().and_then(|s| s.count), Some(2));
    let modern: Api<EventsV1> = Api::namespaced(client.clone(), "default");
    let through_events_api = modern.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(through_events_api.len(), 1);
    assert_eq!(
        through_events_api[0].note.as_deref(),
        Some("started rollout of v2")
    );
    assert_eq!(
        through_events_api[0].metadata.resource_version, core_again[0].metadata.resource_version,
        "one object, one resourceVersion"
    );

    // A core event is readable through events.k8s.io/v1 as well.
    let legacy: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "legacy", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Pulled", "message": "image pulled", "type": "Normal",
        "source": {"component": "kubelet", "host": "node-1"}, "count": 1,
    }))
    .unwrap();
    core.create(&PostParams::default(), &legacy).await.unwrap();
    let converted = modern.get("legacy").await.unwrap();
    assert_eq!(converted.note.as_deref(), Some("image pulled"));
    assert_eq!(
        converted.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("p")
    );
    assert_eq!(
        converted
            .deprecated_source
            .as_ref()
            .and_then(|s| s.component.as_deref()),
        Some("kubelet")
    );
    assert_eq!(converted.deprecated_count, Some(1));
    modern
        .delete("legacy", &DeleteParams::default())
        .await
        .unwrap();
    assert!(core.get_opt("legacy").await.unwrap().is_none());
}
