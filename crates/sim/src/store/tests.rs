//! The store's semantics: server fields, generation, status subresource, conflicts, deletion,
//! watch history.

use super::*;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn store() -> Store {
    Store::new(SimClock::new())
}

/// `name` in namespace `default`.
fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("default".into()),
        ..Default::default()
    }
}

fn daemonset(name: &str) -> DaemonSet {
    DaemonSet {
        metadata: meta(name),
        spec: Some(DaemonSetSpec {
            min_ready_seconds: Some(0),
            ..Default::default()
        }),
        status: None,
    }
}

fn rv<K: kube::Resource>(obj: &K) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap()
}

fn pod(name: &str, node: Option<&str>) -> Pod {
    Pod {
        metadata: meta(name),
        spec: Some(PodSpec {
            node_name: node.map(Into::into),
            ..Default::default()
        }),
        status: None,
    }
}

#[test]
fn create_sets_server_fields() {
    let store = store();
    let created = store.create(&daemonset("a")).unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.generation, Some(1));
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert_eq!(
        meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
        Some(crate::clock::DEFAULT_EPOCH_SECONDS)
    );
    assert_eq!(rv(&created), 1);
    let again = store.create(&daemonset("a")).unwrap_err();
    assert_eq!(again.code(), 409);
    assert_eq!(again.reason(), "AlreadyExists");
    assert_eq!(store.get::<DaemonSet>(Some("default"), "a"), Some(created));
}

#[test]
fn generate_name_gives_distinct_deterministic_names() {
    let make = || {
        let store = store();
        let mut p = pod("", None);
        p.metadata.name = None;
        p.metadata.generate_name = Some("agent-".into());
        (0..20)
            .map(|_| store.create(&p).unwrap().metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    let names = make();
    let unique: std::collections::BTreeSet<_> = names.iter().collect();
    assert_eq!(unique.len(), 20);
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("agent-") && n.len() == 11)
    );
    assert_eq!(names, make());
}

#[test]
fn namespaced_kind_requires_namespace() {
    let store = store();
    let mut ds = daemonset("a");
    ds.metadata.namespace = None;
    assert_eq!(store.create(&ds).unwrap_err().code(), 422);
}

#[test]
fn generation_moves_only_on_spec_changes() {
    let store = store();
    let mut ds = store.create(&daemonset("a")).unwrap();
    ds.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
    let ds = store.update(&ds).unwrap();
    assert_eq!(ds.metadata.generation, Some(1), "metadata-only write");
    let mut with_status = ds.clone();
    with_status.status = Some(DaemonSetStatus {
        number_ready: 3,
        ..Default::default()
    });
    let ds = store.update_status(&with_status).unwrap();
    assert_eq!(ds.metadata.generation, Some(1), "status write");
    assert_eq!(ds.status.as_ref().map(|s| s.number_ready), Some(3));
    let mut changed = ds.clone();
    changed.spec.as_mut().unwrap().min_ready_seconds = Some(10);
    let ds = store.update(&changed).unwrap();
    assert_eq!(ds.metadata.generation, Some(2), "spec write");
}

#[test]
fn status_subresource_isolation() {
    let store = store();
    let ds = store.create(&daemonset("a")).unwrap();
    let mut main = ds.clone();
    main.status = Some(DaemonSetStatus {
        number_ready: 7,
        ..Default::default()
    });
    let after_main = store.update(&main).unwrap();
    assert_eq!(after_main.status, ds.status, "main resource ignores status");
    let mut status_write = after_main.clone();
    status_write.spec.as_mut().unwrap().min_ready_seconds = Some(99);
    status_write.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
    status_write.status = Some(DaemonSetStatus {
        number_ready: 5,
        ..Default::default()
    });
    let after_status = store.update_status(&status_write).unwrap();
    assert_eq!(
        after_status.spec, ds.spec,
        "status subresource ignores spec"
    );
    assert_eq!(after_status.metadata.labels, None);
    assert_eq!(after_status.status.map(|s| s.number_ready), Some(5));
}

#[test]
fn stale_resource_version_conflicts() {
    let store = store();
    let first = store.create(&daemonset("a")).unwrap();
    let mut one = first.clone();
    one.metadata.labels = Some([("a".to_owned(), "1".to_owned())].into());
    store.update(&one).unwrap();
    let mut stale = first.clone();
    stale.metadata.labels = Some([("a".to_owned(), "2".to_owned())].into());
    let err = store.update(&stale).unwrap_err();
    assert_eq!((err.code(), err.reason()), (409, "Conflict"));
    stale.metadata.resource_version = None;
    assert!(store.update(&stale).is_ok(), "no precondition, no conflict");
}

#[test]
fn resource_version_is_one_increasing_counter() {
    let store = store();
    let a = store.create(&daemonset("a")).unwrap();
    let p = store.create(&pod("p", None)).unwrap();
    let mut a2 = a.clone();
    a2.spec.as_mut().unwrap().min_ready_seconds = Some(5);
    let a2 = store.update(&a2).unwrap();
    assert!(rv(&a) < rv(&p) && rv(&p) < rv(&a2));
    assert_eq!(store.resource_version(), rv(&a2));
    let unchanged = store.update(&a2).unwrap();
    assert_eq!(rv(&unchanged), rv(&a2), "a no-op write is skipped");
}

#[test]
fn delete_semantics() {
    let store = store();
    store.create(&pod("unbound", None)).unwrap();
    store.delete::<Pod>(Some("default"), "unbound").unwrap();
    assert!(store.get::<Pod>(Some("default"), "unbound").is_none());

    store.create(&pod("bound", Some("node-1"))).unwrap();
    store.delete::<Pod>(Some("default"), "bound").unwrap();
    let terminating = store.get::<Pod>(Some("default"), "bound").unwrap();
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    assert_eq!(
        terminating
            .metadata
            .deletion_timestamp
            .map(|t| t.0.as_second()),
        Some(crate::clock::DEFAULT_EPOCH_SECONDS + 30)
    );
    store.remove_now::<Pod>(Some("default"), "bound").unwrap();
    assert!(store.get::<Pod>(Some("default"), "bound").is_none());

    let mut finalized = daemonset("f");
    finalized.metadata.finalizers = Some(vec!["x/y".into()]);
    store.create(&finalized).unwrap();
    store.delete::<DaemonSet>(Some("default"), "f").unwrap();
    let mut ds = store.get::<DaemonSet>(Some("default"), "f").unwrap();
    assert!(ds.metadata.deletion_timestamp.is_some());
    ds.metadata.finalizers = None;
    store.update(&ds).unwrap();
    assert!(
        store.get::<DaemonSet>(Some("default"), "f").is_none(),
        "removing the last finalizer deletes"
    );
    let err = store.delete::<DaemonSet>(Some("default"), "f").unwrap_err();
    assert_eq!(err.code(), 404);
}

#[tokio::test]
async fn subscribers_see_every_change_in_order() {
    let store = store();
    let mut events = store.subscribe();
    store.create(&daemonset("a")).unwrap();
    store
        .modify::<DaemonSet>(Some("default"), "a", UpdateScope::Status, |ds| {
            ds.status.get_or_insert_with(Default::default).number_ready = 1;
        })
        .unwrap();
    store.delete::<DaemonSet>(Some("default"), "a").unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let e = events.recv().await.unwrap();
        seen.push((e.kind, e.resource_version, e.name));
    }
    assert_eq!(
        seen,
        vec![
            (EventKind::Added, 1, "a".to_owned()),
            (EventKind::Modified, 2, "a".to_owned()),
            (EventKind::Deleted, 3, "a".to_owned()),
        ]
    );
}

#[test]
fn watch_resume_and_gone() {
    let store = Store::with_limits(SimClock::new(), 3, 16);
    for name in ["a", "b", "c", "d", "e"] {
        store.create(&daemonset(name)).unwrap();
    }
    let key = ResourceKey::of::<DaemonSet>();
    let (replay, _) = store.watch_from(Some(&key), 3).unwrap();
    let names: Vec<_> = replay.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["d", "e"]);
    let (replay, _) = store.watch_from(Some(&key), 2).unwrap();
    assert_eq!(replay.len(), 3);
    let err = store.watch_from(Some(&key), 1).unwrap_err();
    assert_eq!((err.code(), err.reason()), (410, "Expired"));
    store.compact();
    assert_eq!(store.watch_from(None, 4).unwrap_err().code(), 410);
    assert!(store.watch_from(None, 5).unwrap().0.is_empty());
}

#[test]
fn list_filters_by_namespace() {
    let store = store();
    store.create(&daemonset("a")).unwrap();
    let mut other = daemonset("b");
    other.metadata.namespace = Some("kube-system".into());
    store.create(&other).unwrap();
    assert_eq!(store.list::<DaemonSet>(None).len(), 2);
    let names: Vec<_> = store
        .list::<DaemonSet>(Some("kube-system"))
        .into_iter()
        .filter_map(|d| d.metadata.name)
        .collect();
    assert_eq!(names, ["b"]);
    assert!(store.list::<DaemonSet>(Some("defaul")).is_empty());
}

#[test]
fn creating_a_crd_registers_its_resource() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let store = store();
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    let created = store.create(&crd).unwrap();
    let conditions = created.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    let info = store
        .resource_info(&ResourceKey::new("example.com", "v1", "widgets"))
        .unwrap();
    assert!(info.namespaced && info.status_subresource && !info.strategic_merge);
    assert_eq!(info.short_names, ["wd"]);
}

/// A store restored from a saved state continues as a restarted kube-apiserver on the same
/// etcd: the objects are there, `resourceVersion`s and uids continue after the saved ones, a
/// watch from before the restart gets 410 Gone (a fresh watch cache has no history), a watch
/// from the restored version gets every change after it, and CRDs are served again.
#[test]
fn a_restored_store_continues_its_versions_and_answers_old_watches_with_gone() {
    let before = store();
    let first = before.create(&daemonset("a")).unwrap();
    let old_version = rv(&first);
    before.create(&daemonset("b")).unwrap();
    before.create(&widget_crd()).expect("a CRD is stored");
    let saved = before.saved();
    let text = serde_json::to_string(&saved).unwrap();

    let after = store();
    after.restore(serde_json::from_str(&text).unwrap()).unwrap();
    assert_eq!(after.resource_version(), before.resource_version());
    assert_eq!(after.list::<DaemonSet>(None).len(), 2);
    assert!(
        after
            .resource_info(&ResourceKey::new("example.dev", "v1", "widgets"))
            .is_some(),
        "the saved CRD's resource is served"
    );
    assert!(matches!(
        after.watch_from(None, old_version),
        Err(StoreError::Gone { .. })
    ));
    let (replay, _) = after.watch_from(None, after.resource_version()).unwrap();
    assert!(replay.is_empty());
    let c = after.create(&daemonset("c")).unwrap();
    assert_eq!(rv(&c), before.resource_version() + 1);
    assert!(after.restore(saved).is_err(), "only into an empty store");
}

/// Two stores with different salts give different uids to objects created at the same
/// `resourceVersion`; without a salt they are the same (reproducible runs).
#[test]
fn salted_uids_differ_between_stores() {
    let (plain, again, salted) = (store(), store(), store());
    salted.salt_uids(42);
    let uid = |s: &Store| s.create(&daemonset("a")).unwrap().metadata.uid.unwrap();
    let (one, two, three) = (uid(&plain), uid(&again), uid(&salted));
    assert_eq!(one, two);
    assert_ne!(one, three);
    assert_eq!(three.len(), 36);
}

fn widget_crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.dev"},
        "spec": {
            "group": "example.dev",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap()
}
