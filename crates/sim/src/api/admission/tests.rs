//! The validation of custom resources over HTTP: every kind of check on a test CRD
//! (`widgets.yaml`), ratcheting, the 422's body, and a refused write that changes nothing. The
//! messages were kube-apiserver v1.35.4's for the same CRD, objects and patches
//! (`cargo xtask cluster up`, 2026-12-07; `kubectl patch` printed these causes).

use http::Method;
use serde_json::{Value, json};

use crate::api::ApiServer;
use crate::api::tests::call_raw;
use crate::clock::SimClock;
use crate::faults::Faults;
use crate::registry::ResourceKey;
use crate::store::Store;

const WIDGETS: &str = "/apis/test.dev/v1/namespaces/default/widgets";
const MERGE: &str = "application/merge-patch+json";

struct Answer {
    code: u16,
    warnings: Vec<String>,
    body: Value,
}

async fn call(
    api: &ApiServer,
    method: Method,
    uri: &str,
    content_type: &str,
    body: &str,
) -> Answer {
    let (code, headers, body) = call_raw(api, method, uri, content_type, body).await;
    let warnings = headers
        .get_all(http::header::WARNING)
        .iter()
        .map(|value| value.to_str().unwrap().to_owned())
        .collect();
    Answer {
        code,
        warnings,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    }
}

/// Registers the CRD of `yaml` (a CustomResourceDefinition manifest) on `api`.
async fn register(api: &ApiServer, yaml: &str) {
    let crd: Value = serde_saphyr::from_str(yaml).unwrap();
    let answer = call(
        api,
        Method::POST,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        &crd.to_string(),
    )
    .await;
    assert_eq!(answer.code, 201, "{}", answer.body);
}

/// A server with the test CRD registered.
async fn server() -> ApiServer {
    let api = ApiServer::new(Store::new(SimClock::new()), Faults::new(0));
    register(&api, include_str!("widgets.yaml")).await;
    api
}

fn widget(spec: Value) -> Value {
    json!({"apiVersion": "test.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

/// One merge patch of `widget_patches.yaml`: on the status subresource or not, and the message
/// of the 422 it earns (`None`: accepted).
#[derive(serde::Deserialize)]
struct WidgetPatch {
    #[serde(default)]
    status: bool,
    patch: String,
    refusal: Option<String>,
}

/// The checks of the test CRD, one patch each, with kube-apiserver's answers.
fn widget_patches() -> Vec<WidgetPatch> {
    let text = include_str!("widget_patches.yaml");
    let patches: Vec<WidgetPatch> = serde_saphyr::from_str(text).unwrap();
    // Every row read: none lost to the YAML.
    assert_eq!(patches.len(), text.matches("\n- patch: ").count());
    patches
}

#[tokio::test]
async fn each_check_refuses_with_the_api_servers_message() {
    let api = server().await;
    let created = call(
        &api,
        Method::POST,
        WIDGETS,
        "application/json",
        &widget(json!({"name": "ok", "frozen": "x", "pair": {"a": 1, "b": 2}})).to_string(),
    )
    .await;
    assert_eq!(created.code, 201, "{}", created.body);
    for WidgetPatch {
        status,
        patch,
        refusal,
    } in widget_patches()
    {
        let uri = if status {
            format!("{WIDGETS}/w/status")
        } else {
            format!("{WIDGETS}/w")
        };
        let before = call(&api, Method::GET, &format!("{WIDGETS}/w"), "", "")
            .await
            .body;
        let answer = call(&api, Method::PATCH, &uri, MERGE, &patch).await;
        match refusal {
            None => assert_eq!(answer.code, 200, "{patch}: {}", answer.body),
            Some(message) => {
                assert_eq!(answer.code, 422, "{patch}: {}", answer.body);
                assert_eq!(answer.body["message"], message, "{patch}");
                let after = call(&api, Method::GET, &format!("{WIDGETS}/w"), "", "")
                    .await
                    .body;
                assert_eq!(after, before, "{patch}: a refused patch changed the object");
            }
        }
    }
}

/// The body kube-apiserver answered `kubectl patch` of the example CanaryDaemonSet with
/// `{"spec":{"strategy":{"driver":"Canary"}}}`, as `kubectl -v=8` showed it.
#[tokio::test]
async fn a_refusal_is_the_api_servers_status_with_its_causes() {
    let api = ApiServer::new(Store::new(SimClock::new()), Faults::new(0));
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let crd = std::fs::read_to_string(format!("{root}/deploy/crd/canarydaemonsets.yaml")).unwrap();
    register(&api, &crd).await;
    let example =
        std::fs::read_to_string(format!("{root}/deploy/examples/node-agent.yaml")).unwrap();
    let object = example
        .split("\n---\n")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .find(|doc| doc["kind"] == "CanaryDaemonSet")
        .unwrap();
    let uri = "/apis/canary.daemonset.dev/v1alpha1/namespaces/node-agent-example/canarydaemonsets";
    let created = call(
        &api,
        Method::POST,
        uri,
        "application/json",
        &object.to_string(),
    )
    .await;
    assert_eq!(created.code, 201, "{}", created.body);
    let refused = call(
        &api,
        Method::PATCH,
        &format!("{uri}/node-exporter"),
        MERGE,
        r#"{"spec":{"strategy":{"driver":"Canary"}}}"#,
    )
    .await;
    let expected: Value = serde_json::from_str(
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"CanaryDaemonSet.canary.daemonset.dev \"node-exporter\" is invalid: [spec.strategy.driver: Unsupported value: \"Canary\": supported values: \"MaxUnavailable\", \"Pods\", \u003cnil\u003e: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]","reason":"Invalid","details":{"name":"node-exporter","group":"canary.daemonset.dev","kind":"CanaryDaemonSet","causes":[{"reason":"FieldValueNotSupported","message":"Unsupported value: \"Canary\": supported values: \"MaxUnavailable\", \"Pods\"","field":"spec.strategy.driver"},{"reason":"FieldValueInvalid","message":"Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation","field":"\u003cnil\u003e"}]},"code":422}"#,
    )
    .unwrap();
    assert_eq!(refused.code, 422);
    assert_eq!(refused.body, expected);
}

#[tokio::test]
async fn a_refused_create_stores_nothing_and_a_dry_run_is_refused_alike() {
    let api = server().await;
    let bad = widget(json!({"name": "Bad", "frozen": "x"})).to_string();
    let message = "Widget.test.dev \"w\" is invalid: spec.name: Invalid value: \"Bad\": spec.name in body should match '^[a-z]+$'";
    let dry = call(
        &api,
        Method::POST,
        &format!("{WIDGETS}?dryRun=All"),
        "application/json",
        &bad,
    )
    .await;
    assert_eq!(
        (dry.code, dry.body["message"].as_str()),
        (422, Some(message))
    );
    let refused = call(&api, Method::POST, WIDGETS, "application/json", &bad).await;
    assert_eq!(
        (refused.code, refused.body["message"].as_str()),
        (422, Some(message))
    );
    let read = call(&api, Method::GET, &format!("{WIDGETS}/w"), "", "").await;
    assert_eq!(read.code, 404, "nothing was stored");
    // A replace (PUT) is validated the same way, against the stored object.
    let created = call(
        &api,
        Method::POST,
        WIDGETS,
        "application/json",
        &widget(json!({"name": "ok", "frozen": "x"})).to_string(),
    )
    .await;
    assert_eq!(created.code, 201, "{}", created.body);
    let mut replaced = created.body.clone();
    replaced["spec"]["frozen"] = json!("y");
    let put = call(
        &api,
        Method::PUT,
        &format!("{WIDGETS}/w"),
        "application/json",
        &replaced.to_string(),
    )
    .await;
    assert_eq!(
        put.body["message"],
        "Widget.test.dev \"w\" is invalid: spec.frozen: Invalid value: \"y\": frozen is immutable"
    );
}

/// An object stored before its CRD tightened (here put in the store directly, as a test plants
/// one): a write that leaves its bad values alone passes, a rule that fails on an unchanged
/// value is a warning, even beside a refusal; a change of the bad value is refused. What
/// kube-apiserver answered for the same object after the same CRD change.
#[tokio::test]
async fn unchanged_values_are_ratcheted_on_update() {
    let api = server().await;
    let key = ResourceKey::new("test.dev", "v1", "widgets");
    let mut planted = widget(
        json!({"name": "Bad1", "size": 12, "plain": 5, "frozen": "x", "pair": {"a": 1, "b": 2}}),
    );
    planted["metadata"]["namespace"] = json!("default");
    api.store().create_value(&key, planted).unwrap();
    let warning = r#"299 - "spec.size: Invalid value: 12: size is a bit too big""#;
    let steps: [(&str, &str, u16, Option<&str>); 7] = [
        ("/status", r#"{"status":{"count":1}}"#, 200, None),
        ("", r#"{"metadata":{"labels":{"x":"y"}}}"#, 200, None),
        ("", r#"{"spec":{"ratio":0.5}}"#, 200, None),
        (
            "",
            r#"{"spec":{"name":"Bad2"}}"#,
            422,
            Some(
                "Widget.test.dev \"w\" is invalid: spec.name: Invalid value: \"Bad2\": spec.name in body should match '^[a-z]+$'",
            ),
        ),
        (
            "",
            r#"{"spec":{"size":13}}"#,
            422,
            Some(
                "Widget.test.dev \"w\" is invalid: spec.size: Invalid value: 13: size is a bit too big",
            ),
        ),
        (
            "",
            r#"{"spec":{"plain":6}}"#,
            422,
            Some(
                "Widget.test.dev \"w\" is invalid: [spec.plain: Invalid value: \"integer\": spec.plain in body must be of type string: \"integer\", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]",
            ),
        ),
        (
            "/status",
            r#"{"status":{"count":-1}}"#,
            422,
            Some(
                "Widget.test.dev \"w\" is invalid: status.count: Invalid value: -1: count in body should be greater than or equal to 0",
            ),
        ),
    ];
    for (subresource, patch, code, message) in steps {
        let answer = call(
            &api,
            Method::PATCH,
            &format!("{WIDGETS}/w{subresource}"),
            MERGE,
            patch,
        )
        .await;
        assert_eq!(answer.code, code, "{patch}: {}", answer.body);
        if let Some(message) = message {
            assert_eq!(answer.body["message"], message, "{patch}");
        }
        // Blocking errors stop the rules, so no rule is ratcheted then.
        let warned = code == 200 || !patch.contains("size") && !patch.contains("plain");
        let expected: Vec<&str> = if warned { vec![warning] } else { vec![] };
        assert_eq!(answer.warnings, expected, "{patch}");
    }
}
