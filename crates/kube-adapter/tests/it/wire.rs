//! Wire-format checks against a tower-test mock API server: the exact DaemonSet patch (method,
//! URI, content type, field manager, ops in order), the status write, the event, and the
//! requests that must NOT happen (quiet pass, conflict).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use canary_kube_adapter::clock::Clock;
use canary_kube_adapter::crd::{
    CanaryDaemonSet, CanaryDaemonSetSpec, CanaryDaemonSetStatus, TargetSpec,
};
use canary_kube_adapter::desired::{
    RollingUpdateWrite, desired_daemon_set, set_max_unavailable, target_of,
};
use canary_kube_adapter::index::OwnerIndex;
use canary_kube_adapter::observer::Observer;
use canary_kube_adapter::reconcile::{Caches, Context, Requeue, error_policy, reconcile};
use canary_kube_adapter::workload::WorkloadWatches;
use canary_state_machine::{MaxUnavailable, WriteKind};
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use kube::Client;
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::runtime::reflector;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tower_test::mock::{Handle, SendResponse, pair};

use crate::support::template;

/// The paths the start of a canary writes to, in the order it does.
const DAEMON_SET: &str = "/apis/apps/v1/namespaces/ns/daemonsets/agent";
const REVISIONS: &str = "/apis/apps/v1/namespaces/ns/controllerrevisions";
const STATUS: &str =
    "/apis/canary.daemonset.dev/v1alpha1/namespaces/ns/canarydaemonsets/agent/status";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";

type MockHandle = Handle<Request<Body>, Response<Body>>;

fn cds(version: &str) -> CanaryDaemonSet {
    let mut cds = CanaryDaemonSet::new(
        "agent",
        CanaryDaemonSetSpec::with_template(
            template(json!({
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "agent", "image": "agent:v1"}]}
                }
            })),
            TargetSpec {
                version: version.into(),
                from_container: None,
                registry: "reg".into(),
                deployment_id: Some("id".into()),
            },
        ),
    );
    cds.metadata.namespace = Some("ns".into());
    cds.metadata.uid = Some("cds-uid".into());
    cds.metadata.generation = Some(1);
    cds
}

/// The live DaemonSet as the controller would have left it for `cds` at rest.
fn live_for(cds: &CanaryDaemonSet, generation: i64) -> DaemonSet {
    let (keys, target) = target_of(cds).unwrap();
    let mut ds = desired_daemon_set(cds, &keys, &target).unwrap();
    set_max_unavailable(
        &mut ds,
        MaxUnavailable::ONE,
        RollingUpdateWrite::KeepMaxSurge,
    );
    ds.metadata.generation = Some(generation);
    ds.metadata.uid = Some("ds-uid".into());
    ds.metadata.resource_version = Some("100".into());
    ds.status = Some(DaemonSetStatus {
        desired_number_scheduled: 3,
        number_available: Some(3),
        observed_generation: Some(generation),
        ..Default::default()
    });
    ds
}

/// At rest at `v1`, its template remembered as revision 1 of the history (an object without a
/// history is adopted into it once, and a live template the history does not name is recorded:
/// one LIST and one write each, see `reconcile/history.rs`).
fn at_rest_status(generation: i64) -> CanaryDaemonSetStatus {
    let cds = cds("v1");
    let (keys, target) = target_of(&cds).unwrap();
    let desired = desired_daemon_set(&cds, &keys, &target).unwrap();
    let revision = canary_kube_adapter::crd::RevisionRef {
        name: canary_kube_adapter::history::revision_name("agent", &desired).unwrap(),
        revision: 1,
        version: "v1".into(),
        template_hash: None,
    };
    CanaryDaemonSetStatus {
        phase: "successful".parse().ok(),
        recorded_daemon_set_generation: Some(generation),
        history: Some(canary_kube_adapter::crd::HistoryStatus {
            current: Some(revision.clone()),
            stable: Some(revision),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn context(client: Client, live: DaemonSet, observer: Observer) -> Arc<Context> {
    let (store, mut writer) = reflector::store::<DaemonSet>();
    writer.apply_watcher_event(&watcher::Event::Apply(live));
    let pods = OwnerIndex::new();
    pods.apply(&watcher::Event::InitDone);
    let revisions = OwnerIndex::new();
    revisions.apply(&watcher::Event::InitDone);
    let nodes = OwnerIndex::new();
    nodes.apply(&watcher::Event::InitDone);
    let reporter = Reporter {
        controller: "daemonset-canary".into(),
        instance: None,
    };
    let caches = Caches {
        daemon_sets: store,
        daemon_sets_ready: Arc::new(AtomicBool::new(true)),
        pods,
        revisions,
        nodes,
        workloads: Arc::new(WorkloadWatches::new(
            client.clone(),
            observer.clone(),
            canary_kube_adapter::Health::default(),
            tokio::sync::mpsc::unbounded_channel().0,
        )),
        canary_daemon_sets: kube::runtime::reflector::store::<CanaryDaemonSet>().0,
        neighbours: canary_kube_adapter::neighbours::NeighbourIndex::new(),
    };
    Arc::new(Context::new(
        client,
        caches,
        reporter,
        Clock::system(),
        observer,
        "daemonset-canary".into(),
        Requeue::default(),
    ))
}

async fn body_json(request: Request<Body>) -> Value {
    let bytes = request.into_body().collect_bytes().await.unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Answers a request with `body` as JSON (through a `Value`, as the API server's own bytes
/// would be, whatever `body`'s type).
fn respond(
    handle_response: tower_test::mock::SendResponse<Response<Body>>,
    status: StatusCode,
    body: &impl serde::Serialize,
) {
    let body = serde_json::to_value(body).unwrap();
    handle_response.send_response(
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
}

/// The next request, asserted to be `method` on `path`.
async fn expect(
    handle: &mut MockHandle,
    method: Method,
    path: &str,
) -> (Request<Body>, SendResponse<Response<Body>>) {
    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(request.method(), method);
    assert_eq!(request.uri().path(), path);
    (request, send)
}

/// The reconcile pass a test drives, running.
type Pass = JoinHandle<Result<Action, canary_kube_adapter::Error>>;

/// A pass toward `v2` of a CanaryDaemonSet whose DaemonSet is at rest on `v1` (generation 3),
/// started against a mock API server: the mock's handle, the object, the context, the observer
/// and the pass.
fn pass_to_v2() -> (
    MockHandle,
    Arc<CanaryDaemonSet>,
    Arc<Context>,
    Observer,
    Pass,
) {
    let (service, handle) = pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let mut new = cds("v2");
    new.status = Some(at_rest_status(3));
    let observer = Observer::default();
    let ctx = context(client, live_for(&cds("v1"), 3), observer.clone());
    let new = Arc::new(new);
    let task = tokio::spawn(reconcile(new.clone(), ctx.clone()));
    (handle, new, ctx, observer, task)
}

async fn no_more_requests(handle: &mut MockHandle) {
    // Timeout (client still alive) or None (client dropped): either way, no request.
    if let Ok(Some((request, _))) =
        tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await
    {
        panic!("unexpected request: {} {}", request.method(), request.uri());
    }
}

#[tokio::test]
async fn start_of_canary_is_one_json_patch_then_the_history_then_one_status_write_then_the_event() {
    let (mut handle, new, _ctx, observer, task) = pass_to_v2();
    let live = live_for(&cds("v1"), 3);

    // 1. The DaemonSet patch.
    let (request, send) = expect(&mut handle, Method::PATCH, DAEMON_SET).await;
    assert!(
        request
            .uri()
            .query()
            .unwrap_or("")
            .contains("fieldManager=daemonset-canary"),
        "{}",
        request.uri()
    );
    assert_eq!(
        request.headers()["content-type"],
        "application/json-patch+json"
    );
    let ops = body_json(request).await;
    let ops = ops.as_array().unwrap();
    let paths: Vec<_> = ops
        .iter()
        .map(|op| {
            format!(
                "{} {}",
                op["op"].as_str().unwrap(),
                op["path"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        paths,
        [
            "test /metadata/generation",
            "add /metadata/labels",
            "add /metadata/annotations",
            "add /metadata/ownerReferences",
            "replace /spec"
        ]
    );
    assert_eq!(ops[0]["value"], json!(3));
    assert_eq!(
        ops[2]["value"]["kubevirt.io/install-strategy-version"],
        "v2"
    );
    assert_eq!(ops[3]["value"][0]["kind"], "CanaryDaemonSet");
    assert_eq!(ops[3]["value"][0]["controller"], true);
    assert_eq!(
        ops[4]["value"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        json!(1)
    );
    assert_eq!(
        ops[4]["value"]["template"]["metadata"]["annotations"]["kubevirt.io/install-strategy-version"],
        "v2"
    );
    let mut patched = live.clone();
    patched.metadata.generation = Some(4);
    respond(send, StatusCode::OK, &patched);

    // 2. The history: the revisions listed (none yet), the new one created, owned by the
    // CanaryDaemonSet, holding the desired DaemonSet and the target version.
    let (request, send) = expect(&mut handle, Method::GET, REVISIONS).await;
    assert!(
        request
            .uri()
            .query()
            .is_some_and(|q| q.contains("canary.daemonset.dev%2Fhistory%3Dagent")),
        "{}",
        request.uri()
    );
    respond(
        send,
        StatusCode::OK,
        &json!({"apiVersion": "apps/v1", "kind": "ControllerRevisionList", "metadata": {}, "items": []}),
    );
    let (request, send) = expect(&mut handle, Method::POST, REVISIONS).await;
    let revision = body_json(request).await;
    assert_eq!(revision["revision"], json!(1));
    assert_eq!(
        revision["metadata"]["ownerReferences"][0]["kind"],
        "CanaryDaemonSet"
    );
    assert_eq!(
        revision["metadata"]["annotations"]["canary.daemonset.dev/version"],
        "v2"
    );
    assert_eq!(
        revision["data"]["metadata"]["annotations"]["kubevirt.io/install-strategy-version"],
        "v2"
    );
    respond(send, StatusCode::CREATED, &revision);

    // 3. The status, by merge patch on the status subresource; the start is not recorded.
    let (request, send) = expect(&mut handle, Method::PATCH, STATUS).await;
    assert_eq!(
        request.headers()["content-type"],
        "application/merge-patch+json"
    );
    let body = body_json(request).await;
    assert_eq!(body["status"]["phase"], "started");
    assert_eq!(body["status"]["recordedDaemonSetGeneration"], json!(3));
    assert_eq!(body["status"]["currentMaxUnavailable"], "1");
    assert_eq!(body["status"]["history"]["current"]["revision"], json!(1));
    let mut stored = (*new).clone();
    stored.status = serde_json::from_value(body["status"].clone()).unwrap();
    respond(send, StatusCode::OK, &stored);

    // 4. The event.
    let (request, send) = expect(&mut handle, Method::POST, EVENTS).await;
    let event = body_json(request).await;
    assert_eq!(event["reason"], "RolloutStarted");
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["regarding"]["kind"], "CanaryDaemonSet");
    assert_eq!(event["related"]["kind"], "DaemonSet");
    respond(send, StatusCode::CREATED, &event);

    let action = task.await.unwrap().unwrap();
    assert_eq!(action, Action::requeue(Requeue::default().in_progress));
    no_more_requests(&mut handle).await;
    assert_eq!(observer.stats().daemon_set_writes(WriteKind::Start), 1);
    assert_eq!(observer.stats().status_writes(), 1);
}

#[tokio::test]
async fn quiet_pass_makes_no_request() {
    let (service, mut handle) = pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let mut cds = cds("v1");
    let live = live_for(&cds, 5);
    let ctx = context(client, live, Observer::default());
    // Status exactly as this pass would write it, so nothing changes.
    let first = {
        let mut with_status = cds.clone();
        with_status.status = Some(at_rest_status(5));
        with_status
    };
    cds = first;
    let task = tokio::spawn(reconcile(Arc::new(cds.clone()), ctx.clone()));
    // The status differs from the minimal one above (counts, conditions): one status write.
    let (request, send) = handle.next_request().await.unwrap();
    assert!(
        request.uri().path().ends_with("/status"),
        "{}",
        request.uri()
    );
    let body = body_json(request).await;
    assert_eq!(body["status"]["phase"], "successful");
    assert_eq!(body["status"]["desired"], json!(3));
    let mut stored = cds.clone();
    stored.status = serde_json::from_value(body["status"].clone()).unwrap();
    respond(send, StatusCode::OK, &stored);
    let action = task.await.unwrap().unwrap();
    assert_eq!(action, Action::requeue(Requeue::default().resync));

    // Second pass with that status stored: no request at all.
    cds.status = serde_json::from_value(body["status"].clone()).unwrap();
    let task = tokio::spawn(reconcile(Arc::new(cds), ctx));
    assert_eq!(
        task.await.unwrap().unwrap(),
        Action::requeue(Requeue::default().resync)
    );
    no_more_requests(&mut handle).await;
}

#[tokio::test]
async fn failed_test_op_is_a_conflict_retried_quickly_without_status_write() {
    let (mut handle, new, ctx, observer, task) = pass_to_v2();
    let old = cds("v1");

    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(
        request.headers()["content-type"],
        "application/json-patch+json"
    );
    respond(
        send,
        StatusCode::UNPROCESSABLE_ENTITY,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422, "reason": "Invalid",
                "message": "the server rejected our request due to an error in our request"}),
    );
    // A 422 is told apart by the server's generation: it moved, so the test op failed.
    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(
        (request.method(), request.uri().path()),
        (&Method::GET, "/apis/apps/v1/namespaces/ns/daemonsets/agent")
    );
    respond(send, StatusCode::OK, &live_for(&old, 4));
    let error = task.await.unwrap().unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert_eq!(
        error_policy(new, &error, ctx),
        Action::requeue(Requeue::default().conflict)
    );
    no_more_requests(&mut handle).await;
    assert_eq!(observer.stats().write_conflicts(), 1);
    assert_eq!(observer.stats().total_daemon_set_writes(), 0);
    assert_eq!(observer.stats().status_writes(), 0);
}

#[tokio::test]
async fn a_refused_write_fails_the_rollout_with_the_servers_message_and_backs_off() {
    let (mut handle, _new, _ctx, observer, task) = pass_to_v2();
    let old = cds("v1");

    let (_patch, send) = handle.next_request().await.unwrap();
    let message =
        "DaemonSet.apps \"agent\" is invalid: spec.selector: Invalid value: {}: field is immutable";
    respond(
        send,
        StatusCode::UNPROCESSABLE_ENTITY,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422, "reason": "Invalid",
                "message": message}),
    );
    // The generation did not move: the change itself was refused.
    let (_get, send) = handle.next_request().await.unwrap();
    respond(send, StatusCode::OK, &live_for(&old, 3));
    let (status_write, send) = handle.next_request().await.unwrap();
    assert_eq!(status_write.method(), Method::PATCH);
    let body = body_json(status_write).await;
    respond(
        send,
        StatusCode::OK,
        &json!({"metadata": {"name": "agent", "namespace": "ns"}}),
    );
    assert_eq!(body["status"]["reason"], "WriteRejected");
    let shown = body["status"]["message"].as_str().unwrap();
    assert!(
        shown.contains("422 Invalid: DaemonSet.apps \"agent\" is invalid: spec.selector"),
        "{shown}"
    );
    assert!(!shown.contains("Status {"), "no debug dump: {shown}");
    // The Warning event.
    let (event, send) = handle.next_request().await.unwrap();
    let event = body_json(event).await;
    respond(send, StatusCode::OK, &event);
    assert_eq!(event["reason"], "WriteRejected");
    let action = task.await.unwrap().unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(1)),
        "the first retry"
    );
    assert_eq!(observer.stats().write_failures(), 1);
    assert_eq!(observer.stats().write_conflicts(), 0);
}

#[tokio::test]
async fn other_errors_back_off_exponentially() {
    let (service, _handle) = pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let cds = Arc::new(cds("v1"));
    let ctx = context(client, live_for(&cds, 1), Observer::default());
    let error = canary_kube_adapter::Error::InvalidSpec("x".into());
    let delays: Vec<_> = (0..4)
        .map(|_| error_policy(cds.clone(), &error, ctx.clone()))
        .collect();
    assert_eq!(
        delays,
        [1, 2, 4, 8].map(|s| Action::requeue(Duration::from_secs(s))),
    );
}
