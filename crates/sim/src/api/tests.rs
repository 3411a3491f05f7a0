//! Request-level tests of the API server: paths, verbs, status codes and bodies.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::ApiServer;
use crate::clock::SimClock;
use crate::faults::{FaultAction, FaultRule, Faults, Trigger, Verb};
use crate::store::Store;

fn server() -> ApiServer {
    ApiServer::new(Store::new(SimClock::new()), Faults::new(0))
}

/// Sends one request and answers its status code, headers and body (the admission tests use
/// it too).
pub(super) async fn call_raw(
    api: &ApiServer,
    method: Method,
    uri: &str,
    content_type: &str,
    body: &str,
) -> (u16, http::HeaderMap, Bytes) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(Bytes::from(body.to_owned()))
        .unwrap();
    let response = api.handle(request).await;
    let code = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (code, headers, body)
}

/// `GET uri`.
async fn get(api: &ApiServer, uri: &str) -> (u16, Value) {
    send(api, (Method::GET, "application/json"), uri, "").await
}

/// The kinds of request the tests send with a body: method and content type.
const POST_JSON: (Method, &str) = (Method::POST, "application/json");
const PUT_JSON: (Method, &str) = (Method::PUT, "application/json");
const DELETE_JSON: (Method, &str) = (Method::DELETE, "application/json");
const MERGE_PATCH: (Method, &str) = (Method::PATCH, "application/merge-patch+json");
const JSON_PATCH: (Method, &str) = (Method::PATCH, "application/json-patch+json");
const STRATEGIC_PATCH: (Method, &str) = (Method::PATCH, "application/strategic-merge-patch+json");

/// Sends `body` to `uri` as `kind` says and reads the answer as JSON (`null` when it is not):
/// one call for every request, so that a test spells out only what it is about.
async fn send(api: &ApiServer, kind: (Method, &str), uri: &str, body: &str) -> (u16, Value) {
    let (method, content_type) = kind;
    let (code, _, body) = call_raw(api, method, uri, content_type, body).await;
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

const DS_PATH: &str = "/apis/apps/v1/namespaces/default/daemonsets";

fn ds_body(name: &str) -> String {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "main", "image": "main:1"}, {"name": "sidecar", "image": "side:1"}]}}
        }
    })
    .to_string()
}

async fn create_ds(api: &ApiServer, name: &str) -> Value {
    let (code, body) = send(api, POST_JSON, DS_PATH, &ds_body(name)).await;
    assert_eq!(code, 201, "{body}");
    body
}

fn ds_uri(name: &str) -> String {
    format!("{DS_PATH}/{name}")
}

#[tokio::test]
async fn discovery_documents() {
    let api = server();
    let (code, version) = get(&api, "/version?timeout=5s").await;
    assert_eq!((code, version["major"].as_str()), (200, Some("1")));
    let (_, core) = get(&api, "/api").await;
    assert_eq!(core["versions"], json!(["v1"]));
    let (_, groups) = get(&api, "/apis").await;
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    for group in [
        "apps",
        "coordination.k8s.io",
        "events.k8s.io",
        "apiextensions.k8s.io",
    ] {
        assert!(names.contains(&group), "{group} in {names:?}");
    }
    let (_, v1) = get(&api, "/api/v1").await;
    let resources: Vec<&str> = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for name in ["pods", "pods/status", "nodes", "namespaces", "events"] {
        assert!(resources.contains(&name), "{name} in {resources:?}");
    }
    let (_, apps) = get(&api, "/apis/apps/v1").await;
    let ds = apps["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "daemonsets")
        .unwrap();
    assert_eq!(ds["shortNames"], json!(["ds"]));
    assert_eq!(ds["namespaced"], json!(true));
    let (code, status) = get(&api, "/apis/nope/v1").await;
    assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")));
    let (code, _) = get(&api, "/openapi/v2").await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn create_get_list_with_selectors() {
    let api = server();
    let created = create_ds(&api, "a").await;
    create_ds(&api, "b").await;
    assert_eq!(created["metadata"]["generation"], 1);
    assert_eq!(
        created["metadata"]["namespace"], "default",
        "namespace from the path"
    );
    let (code, got) = get(&api, &ds_uri("a")).await;
    assert_eq!((code, &got), (200, &created));
    let (_, list) = get(&api, &format!("{DS_PATH}?labelSelector=app%3Db&limit=500")).await;
    assert_eq!(list["kind"], "DaemonSetList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["items"][0]["metadata"]["name"], "b");
    assert_eq!(list["metadata"]["resourceVersion"], "2");
    let (_, all) = get(
        &api,
        "/apis/apps/v1/daemonsets?fieldSelector=metadata.name%3Da",
    )
    .await;
    assert_eq!(all["items"].as_array().unwrap().len(), 1);
    let (code, missing) = get(&api, &ds_uri("zzz")).await;
    assert_eq!((code, missing["reason"].as_str()), (404, Some("NotFound")));
    assert_eq!(missing["kind"], "Status");
    let (code, exists) = send(&api, POST_JSON, DS_PATH, &ds_body("a")).await;
    assert_eq!(
        (code, exists["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );
}

/// `limit` and `continue` as kube-apiserver serves them: pages in order, the first page's
/// `resourceVersion` throughout, `remainingItemCount` without a selector, an object created
/// between pages still listed, a bad token a 400, a compacted one a 410.
#[tokio::test]
async fn lists_page_with_limit_and_continue() {
    let api = server();
    for name in ["a", "b", "c", "d", "e"] {
        create_ds(&api, name).await;
    }
    let names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let (code, first) = get(&api, &format!("{DS_PATH}?limit=2")).await;
    assert_eq!(code, 200, "{first}");
    assert_eq!(names(&first), ["a", "b"]);
    assert_eq!(first["metadata"]["resourceVersion"], "5");
    assert_eq!(first["metadata"]["remainingItemCount"], 3);
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    create_ds(&api, "f").await;
    let (_, second) = get(&api, &format!("{DS_PATH}?limit=2&continue={token}")).await;
    assert_eq!(names(&second), ["c", "d"]);
    assert_eq!(
        second["metadata"]["resourceVersion"], "5",
        "the first page's"
    );
    let token = second["metadata"]["continue"].as_str().unwrap().to_owned();
    let (_, last) = get(&api, &format!("{DS_PATH}?limit=2&continue={token}")).await;
    assert_eq!(names(&last), ["e", "f"]);
    assert!(last["metadata"].get("continue").is_none(), "{last}");
    // With a selector the rest is not counted; without a limit nothing is paged.
    let (_, selected) = get(&api, &format!("{DS_PATH}?limit=1&labelSelector=app%21%3Dz")).await;
    assert_eq!(names(&selected), ["a"]);
    assert!(selected["metadata"]["continue"].is_string());
    assert!(selected["metadata"].get("remainingItemCount").is_none());
    let (_, all) = get(&api, DS_PATH).await;
    assert_eq!(names(&all).len(), 6);
    let (code, bad) = get(&api, &format!("{DS_PATH}?limit=2&continue=garbage")).await;
    assert_eq!((code, bad["reason"].as_str()), (400, Some("BadRequest")));
    let (code, _) = get(&api, &format!("{DS_PATH}?limit=x")).await;
    assert_eq!(code, 400);
    api.store().compact();
    let (code, gone) = get(&api, &format!("{DS_PATH}?limit=2&continue={token}")).await;
    assert_eq!((code, gone["reason"].as_str()), (410, Some("Expired")));
}

#[tokio::test]
async fn protobuf_bodies_are_unsupported_media() {
    let api = server();
    let (code, status) = send(
        &api,
        (Method::POST, "application/vnd.kubernetes.protobuf"),
        "/api/v1/namespaces",
        "k8s\0",
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
}

#[tokio::test]
async fn pods_select_by_node_name() {
    let api = server();
    for (name, node) in [("p1", "node-1"), ("p2", "node-2")] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}});
        let (code, _) = send(
            &api,
            POST_JSON,
            "/api/v1/namespaces/default/pods",
            &pod.to_string(),
        )
        .await;
        assert_eq!(code, 201);
    }
    let (_, list) = get(&api, "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-2").await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["p2"]);
    let (_, pod) = get(&api, "/api/v1/namespaces/default/pods/p1").await;
    assert_eq!(pod["status"]["phase"], "Pending");
}

#[tokio::test]
async fn replace_with_stale_resource_version_conflicts() {
    let api = server();
    let created = create_ds(&api, "a").await;
    let mut first = created.clone();
    first["spec"]["minReadySeconds"] = json!(5);
    let (code, updated) = send(&api, PUT_JSON, &ds_uri("a"), &first.to_string()).await;
    assert_eq!(code, 200);
    assert_eq!(updated["metadata"]["generation"], 2);
    let mut stale = created;
    stale["spec"]["minReadySeconds"] = json!(9);
    let (code, status) = send(&api, PUT_JSON, &ds_uri("a"), &stale.to_string()).await;
    assert_eq!((code, status["reason"].as_str()), (409, Some("Conflict")));
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("the object has been modified")
    );
}

#[tokio::test]
async fn json_patch_with_failed_test_is_422_and_changes_nothing() {
    let api = server();
    create_ds(&api, "a").await;
    let patch = r#"[{"op":"test","path":"/metadata/generation","value":1},
        {"op":"replace","path":"/spec/updateStrategy/rollingUpdate/maxUnavailable","value":"10%"}]"#;
    let (code, patched) = send(&api, JSON_PATCH, &ds_uri("a"), patch).await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        patched["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        "10%"
    );
    assert_eq!(patched["metadata"]["generation"], 2);
    let (code, status) = send(&api, JSON_PATCH, &ds_uri("a"), patch).await;
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")));
    let (_, after) = get(&api, &ds_uri("a")).await;
    assert_eq!(after["metadata"]["generation"], 2);
    assert_eq!(
        after["metadata"]["resourceVersion"],
        patched["metadata"]["resourceVersion"]
    );
}

#[tokio::test]
async fn merge_patch_generation_and_resource_version_precondition() {
    let api = server();
    let created = create_ds(&api, "a").await;
    let (_, labelled) = send(
        &api,
        MERGE_PATCH,
        &ds_uri("a"),
        r#"{"metadata":{"labels":{"extra":"x"}}}"#,
    )
    .await;
    assert_eq!(labelled["metadata"]["generation"], 1, "metadata-only");
    assert_eq!(labelled["metadata"]["labels"]["extra"], "x");
    let stale = json!({"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "spec": {"minReadySeconds": 3}});
    let (code, _) = send(&api, MERGE_PATCH, &ds_uri("a"), &stale.to_string()).await;
    assert_eq!(
        code, 409,
        "resourceVersion in a merge patch is a precondition"
    );
    let (_, spec) = send(
        &api,
        MERGE_PATCH,
        &ds_uri("a"),
        r#"{"spec":{"minReadySeconds":3}}"#,
    )
    .await;
    assert_eq!(spec["metadata"]["generation"], 2);
    let (code, _) = send(&api, MERGE_PATCH, &ds_uri("missing"), "{}").await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name() {
    let api = server();
    create_ds(&api, "a").await;
    let patch = r#"{"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"main"},{"name":"sidecar"}],
        "containers":[{"image":"main:2","name":"main"}]}}}}"#;
    let (code, patched) = send(&api, STRATEGIC_PATCH, &ds_uri("a"), patch).await;
    assert_eq!(code, 200, "{patched}");
    let containers: Vec<(&str, &str)> = patched["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["image"].as_str().unwrap()))
        .collect();
    assert_eq!(containers, [("main", "main:2"), ("sidecar", "side:1")]);
    assert_eq!(
        patched["metadata"]["annotations"]["deprecated.daemonset.template.generation"],
        "2"
    );
    let (code, _) = send(&api, (Method::PATCH, "text/plain"), &ds_uri("a"), "{}").await;
    assert_eq!(code, 415);
}

#[tokio::test]
async fn status_subresource_isolation_over_http() {
    let api = server();
    create_ds(&api, "a").await;
    let (code, after) = send(
        &api,
        MERGE_PATCH,
        &format!("{}/status", ds_uri("a")),
        r#"{"spec":{"minReadySeconds":42},"status":{"numberReady":2}}"#,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(after["status"]["numberReady"], 2);
    assert!(
        after["spec"]["minReadySeconds"].is_null(),
        "status ignores spec"
    );
    assert_eq!(after["metadata"]["generation"], 1);
    let (_, main) = send(
        &api,
        MERGE_PATCH,
        &ds_uri("a"),
        r#"{"status":{"numberReady":9}}"#,
    )
    .await;
    assert_eq!(
        main["status"]["numberReady"], 2,
        "main resource ignores status"
    );
    let (code, _) = send(&api, MERGE_PATCH, &format!("{}/scale", ds_uri("a")), "{}").await;
    assert_eq!(code, 404);
    let (code, _) = get(
        &api,
        "/apis/apps/v1/namespaces/default/controllerrevisions/x/status",
    )
    .await;
    assert_eq!(code, 404, "no status subresource on controllerrevisions");
}

#[tokio::test]
async fn server_side_apply_owns_fields_and_detects_conflicts() {
    let api = server();
    let base = "/apis/coordination.k8s.io/v1/namespaces/default/leases/leader";
    let apply = |manager: &str, force: bool| {
        format!(
            "{base}?fieldManager={manager}{}",
            if force { "&force=true" } else { "" }
        )
    };
    let lease = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: leader\nspec:\n  holderIdentity: a\n  leaseDurationSeconds: 15\n";
    let yaml = "application/apply-patch+yaml";
    let (code, created) = send(&api, (Method::PATCH, yaml), &apply("mgr", false), lease).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["holderIdentity"], "a");
    assert_eq!(created["metadata"]["managedFields"][0]["manager"], "mgr");

    let take = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"leader"},"spec":{"holderIdentity":"b"}}"#;
    let (code, status) = send(&api, (Method::PATCH, yaml), &apply("other", false), take).await;
    assert_eq!((code, status["reason"].as_str()), (409, Some("Conflict")));
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains(r#"conflict with "mgr": .spec.holderIdentity"#),
        "{message}"
    );

    let (code, forced) = send(&api, (Method::PATCH, yaml), &apply("other", true), take).await;
    assert_eq!(code, 200);
    assert_eq!(forced["spec"]["holderIdentity"], "b");
    assert_eq!(
        forced["spec"]["leaseDurationSeconds"], 15,
        "still owned by mgr"
    );
    let managers: Vec<&str> = forced["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["mgr", "other"]);

    let nothing = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"leader"},"spec":{}}"#;
    let (_, dropped) = send(&api, (Method::PATCH, yaml), &apply("mgr", false), nothing).await;
    assert!(
        dropped["spec"].get("leaseDurationSeconds").is_none(),
        "a field its only manager stops applying is removed: {dropped}"
    );
    assert_eq!(dropped["spec"]["holderIdentity"], "b");

    let (code, _) = send(&api, (Method::PATCH, yaml), base, lease).await;
    assert_eq!(code, 400, "apply needs a fieldManager");
}

#[tokio::test]
async fn updates_record_their_manager() {
    let api = server();
    create_ds(&api, "a").await;
    let (_, patched) = send(
        &api,
        MERGE_PATCH,
        &format!("{}?fieldManager=kubectl-patch", ds_uri("a")),
        r#"{"spec":{"minReadySeconds":4}}"#,
    )
    .await;
    let entries = patched["metadata"]["managedFields"].as_array().unwrap();
    let patcher = entries
        .iter()
        .find(|e| e["manager"] == "kubectl-patch")
        .unwrap();
    assert_eq!(patcher["operation"], "Update");
    assert_eq!(
        patcher["fieldsV1"],
        json!({"f:spec": {"f:minReadySeconds": {}}})
    );
}

#[tokio::test]
async fn crd_registration_serves_custom_resources_with_status() {
    let api = server();
    let crd = serde_json::to_string(&crate::crds::kubevirt()).unwrap();
    let (code, _) = send(
        &api,
        POST_JSON,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd,
    )
    .await;
    assert_eq!(code, 201);
    let (_, discovery) = get(&api, "/apis/kubevirt.io/v1").await;
    assert_eq!(discovery["resources"][1]["name"], "kubevirts/status");
    let uri = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts";
    let kv = r#"{"apiVersion":"kubevirt.io/v1","kind":"KubeVirt","metadata":{"name":"kubevirt"},"spec":{"x":1},"status":{"phase":"Deployed"}}"#;
    let (code, created) = send(&api, POST_JSON, uri, kv).await;
    assert_eq!(code, 201);
    assert!(
        created["status"].is_null(),
        "status is dropped on create with a status subresource"
    );
    let (code, _) = send(
        &api,
        MERGE_PATCH,
        &format!("{uri}/kubevirt/status"),
        r#"{"status":{"phase":"Deployed"}}"#,
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = send(&api, STRATEGIC_PATCH, &format!("{uri}/kubevirt"), "{}").await;
    assert_eq!(code, 415, "custom resources refuse strategic merge");
    let (_, got) = get(&api, &format!("{uri}/kubevirt")).await;
    assert_eq!(got["status"]["phase"], "Deployed");
}

#[tokio::test]
async fn delete_semantics_over_http() {
    let api = server();
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"nodeName":"n","containers":[]}}"#;
    send(&api, POST_JSON, "/api/v1/namespaces/default/pods", pod).await;
    let uri = "/api/v1/namespaces/default/pods/p";
    let (code, terminating) = send(&api, DELETE_JSON, uri, "").await;
    assert_eq!(code, 200);
    assert_eq!(terminating["metadata"]["deletionGracePeriodSeconds"], 30);
    let (code, _) = send(
        &api,
        DELETE_JSON,
        uri,
        r#"{"preconditions":{"uid":"not-the-uid"}}"#,
    )
    .await;
    assert_eq!(code, 409);
    let (code, _) = send(
        &api,
        DELETE_JSON,
        &format!("{uri}?gracePeriodSeconds=0"),
        "",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(get(&api, uri).await.0, 404);
}

async fn watch_lines(api: &ApiServer, uri: &str) -> Vec<Value> {
    let (code, _, body) = call_raw(api, Method::GET, uri, "application/json", "").await;
    assert_eq!(code, 200);
    body.split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).unwrap())
        .collect()
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["type"].as_str().unwrap(),
                e["object"]["metadata"]["name"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn watch_from_resource_version_then_timeout() {
    let api = server();
    create_ds(&api, "a").await;
    create_ds(&api, "b").await;
    let store = api.store().clone();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        store
            .delete_value(
                &crate::ResourceKey::new("apps", "v1", "daemonsets"),
                Some("default"),
                "a",
                &Default::default(),
            )
            .unwrap();
    });
    let events = watch_lines(
        &api,
        &format!("{DS_PATH}?watch=true&resourceVersion=1&timeoutSeconds=5"),
    )
    .await;
    writer.await.unwrap();
    assert_eq!(kinds(&events), ["ADDED b", "DELETED a"]);
    assert_eq!(events[1]["object"]["metadata"]["resourceVersion"], "3");
}

#[tokio::test(start_paused = true)]
async fn watch_without_resource_version_and_streaming_list() {
    let api = server();
    create_ds(&api, "a").await;
    let events = watch_lines(&api, &format!("{DS_PATH}?watch=true&timeoutSeconds=1")).await;
    assert_eq!(kinds(&events), ["ADDED a"]);
    let events = watch_lines(&api, &format!(
        "{DS_PATH}?&watch=true&timeoutSeconds=130&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0"
    )).await;
    assert_eq!(
        kinds(&events),
        ["ADDED a", "BOOKMARK -", "BOOKMARK -", "BOOKMARK -"]
    );
    assert_eq!(
        events[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert!(
        events[2]["object"]["metadata"]["annotations"].is_null(),
        "periodic bookmark"
    );
    assert_eq!(events[2]["object"]["metadata"]["resourceVersion"], "1");
}

#[tokio::test(start_paused = true)]
async fn watch_label_selector_turns_transitions_into_added_and_deleted() {
    let api = server();
    create_ds(&api, "a").await;
    let store = api.store().clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let key = crate::ResourceKey::new("apps", "v1", "daemonsets");
        for label in ["on", "off"] {
            let patch = json!({"metadata": {"labels": {"watch": label}}});
            store
                .patch_value(
                    &key,
                    Some("default"),
                    "a",
                    crate::UpdateScope::Main,
                    false,
                    |cur| {
                        let mut next = cur.clone();
                        json_patch::merge(&mut next, &patch);
                        Ok(next)
                    },
                )
                .unwrap();
        }
    });
    let events = watch_lines(
        &api,
        &format!(
            "{DS_PATH}?watch=true&resourceVersion=1&timeoutSeconds=5&labelSelector=watch%3Don"
        ),
    )
    .await;
    assert_eq!(kinds(&events), ["ADDED a", "DELETED a"]);
}

#[tokio::test]
async fn watch_resume_past_history_is_410() {
    let api = server();
    create_ds(&api, "a").await;
    create_ds(&api, "b").await;
    api.store().compact();
    let events = watch_lines(&api, &format!("{DS_PATH}?watch=true&resourceVersion=1")).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
}

#[tokio::test(start_paused = true)]
async fn faults_errors_latency_and_watch_limits() {
    let api = server();
    create_ds(&api, "a").await;
    create_ds(&api, "b").await;
    api.faults().add(
        FaultRule::new(
            Some(Verb::Patch),
            Some("daemonsets"),
            FaultAction::too_many_requests(3),
        )
        .when(Trigger::Nth(1)),
    );
    let (code, headers, body) = call_raw(
        &api,
        Method::PATCH,
        &ds_uri("a"),
        "application/merge-patch+json",
        "{}",
    )
    .await;
    assert_eq!(code, 429);
    assert_eq!(headers["retry-after"], "3");
    let status: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(send(&api, MERGE_PATCH, &ds_uri("a"), "{}").await.0, 200);

    api.faults().add(FaultRule::new(
        Some(Verb::Get),
        None,
        FaultAction::Latency(Duration::from_secs(2)),
    ));
    let start = tokio::time::Instant::now();
    assert_eq!(get(&api, &ds_uri("a")).await.0, 200);
    assert_eq!(start.elapsed(), Duration::from_secs(2));

    api.faults().add(FaultRule::new(
        Some(Verb::Watch),
        None,
        FaultAction::EndWatchAfterEvents(1),
    ));
    let events = watch_lines(&api, &format!("{DS_PATH}?watch=true&timeoutSeconds=100")).await;
    assert_eq!(kinds(&events), ["ADDED a"]);
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "ended at once, not at the timeout"
    );

    api.faults().clear();
    api.faults().add(
        FaultRule::new(Some(Verb::Watch), None, FaultAction::GoneOnResume).when(Trigger::Nth(1)),
    );
    let events = watch_lines(
        &api,
        &format!("{DS_PATH}?watch=true&resourceVersion=2&timeoutSeconds=1"),
    )
    .await;
    assert_eq!(events[0]["object"]["code"], 410);
    let events = watch_lines(
        &api,
        &format!("{DS_PATH}?watch=true&resourceVersion=2&timeoutSeconds=1"),
    )
    .await;
    assert!(events.is_empty(), "only the first resume fails: {events:?}");

    let counts = api.faults().requests();
    assert_eq!(counts.count(Verb::Patch, "daemonsets"), 2);
    assert_eq!(counts.count(Verb::Watch, "daemonsets"), 3);
    assert_eq!(counts.writes(), 4, "2 creates + 2 patches");
}
