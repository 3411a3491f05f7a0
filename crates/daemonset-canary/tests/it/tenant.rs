//! What one CanaryDaemonSet's author can make the controller do (issue 47), tried as a user
//! would: `sim serve`, `run --kubeconfig`, and a local HTTP server standing in for a hostile
//! Prometheus that counts the requests it gets.
//!
//! - Huge errors: 20 objects whose Prometheus answers every query with a JSON error of 1 MiB
//!   (refused at the 64 KiB answer cap) or just under 64 KiB (read, and cut): the status,
//!   events and log hold only cut text, and the controller's memory stays flat.
//! - Addresses: `run --allow-analysis-address` allows one server; an object naming another
//!   one, or the allowed one behind `user@`, or with a `#`, ends in `InvalidSpec` naming the
//!   flag, and the servers receive no request but the allowed object's.
//! - Claims: a second CanaryDaemonSet naming a DaemonSet another one drives (the case:
//!   the first held on its canary by an approval gate, the second a `workloadRef` with one
//!   `nodes: 100%` step) fails with `DaemonSetClaimed` and no pod is deleted; on a DaemonSet
//!   someone else owns, the claim is an annotation, and it passes on when the first is deleted.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::{Compatibility, Driver};
use daemonset_canary::demo::scenario::{NAMESPACE, manifest_for};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support;

/// A stand-in Prometheus: answers every request with `body_for(path)` as an HTTP 422 JSON
/// error, and counts the requests.
struct Hostile {
    requests: AtomicUsize,
    /// The request line of each request (`POST /path HTTP/1.1`).
    lines: Mutex<Vec<String>>,
}

impl Hostile {
    /// Serves on a loopback port until the test process ends; returns it and its port.
    fn start() -> (Arc<Self>, u16) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hostile = Arc::new(Hostile {
            requests: AtomicUsize::new(0),
            lines: Mutex::default(),
        });
        let served = Arc::clone(&hostile);
        let big = error_json(1 << 20);
        let under_cap = error_json(60 << 10);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                served.requests.fetch_add(1, Ordering::SeqCst);
                let big = big.clone();
                let under_cap = under_cap.clone();
                let served = Arc::clone(&served);
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut request = [0u8; 8192];
                    let read = stream.read(&mut request).unwrap_or(0);
                    let head = String::from_utf8_lossy(&request[..read]);
                    let line = head.lines().next().unwrap_or_default().to_owned();
                    served.lines.lock().unwrap().push(line);
                    let body = if head.contains(" /big/") {
                        &big
                    } else {
                        &under_cap
                    };
                    let _ = write!(
                        stream,
                        "HTTP/1.1 422 Unprocessable Entity\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(body.as_bytes());
                });
            }
        });
        (hostile, port)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

/// Prometheus' error JSON with an `error` of about `bytes` bytes.
fn error_json(bytes: usize) -> String {
    let text = "query failed because ".repeat(bytes / 21);
    json!({"status": "error", "errorType": "execution", "error": text}).to_string()
}

/// A Pods-driver object `name` (and its DaemonSet) at `version`, whose analysed pause asks
/// `metrics` metrics of the Prometheus at `address` every 2 s, and never ends by itself.
pub(crate) fn analysed_object(
    name: &str,
    version: &str,
    address: &str,
    metrics: usize,
) -> serde_json::Value {
    let mut manifest = manifest_for(Compatibility::Fixed, Driver::Pods, None, version, "healthy");
    manifest["metadata"]["name"] = json!(name);
    let labels = json!({"app.kubernetes.io/name": name});
    manifest["spec"]["template"]["metadata"]["labels"] = labels.clone();
    manifest["spec"]["template"]["spec"]["selector"]["matchLabels"] = labels.clone();
    manifest["spec"]["template"]["spec"]["template"]["metadata"]["labels"] = labels;
    manifest["spec"]["strategy"]["steps"] = json!([{"nodes": "1"}, {"pause": {"duration": "1h"}}]);
    let metrics: Vec<_> = (0..metrics)
        .map(|i| {
            json!({
                "name": format!("metric-{i}"),
                "query": format!("max(agent_error_ratio{{metric=\"{i}\"}})"),
                "max": 0.05,
                "inconclusiveLimit": 1000
            })
        })
        .collect();
    manifest["spec"]["analysis"] = json!({
        "prometheus": {"address": address, "timeout": "5s"},
        "interval": "2s",
        "metrics": metrics
    });
    manifest
}

/// The controller's peak resident memory (`VmHWM`), in KiB.
pub(crate) fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_prometheus_errors_are_cut_and_memory_stays_flat() {
    const OBJECTS: usize = 20;
    const METRICS: usize = 4;
    let sim = support::serve_sim("tenant-huge", &["--nodes", "2", "--speed", "4"]);
    let client = support::client_with_crd(&sim.kubeconfig).await;
    let (hostile, port) = Hostile::start();
    let log_path = sim.dir.join("run.log");
    let run = support::spawn_run_allowing(
        &sim.kubeconfig,
        Stdio::from(std::fs::File::create(&log_path).unwrap()),
        &[&format!("http://127.0.0.1:{port}")],
    );
    let pid = run.0.id();
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let address = |i: usize| {
        // Half behind the answer cap, half just under it (read whole, then cut).
        let path = if i.is_multiple_of(2) { "big" } else { "under" };
        format!("http://127.0.0.1:{port}/{path}")
    };
    let name = |i: usize| format!("agent-{i:02}");
    for i in 0..OBJECTS {
        let object = analysed_object(&name(i), "v1", &address(i), METRICS);
        let object: CanaryDaemonSet = serde_json::from_value(object).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    wait_all(&api, OBJECTS, "installed", |s| {
        s.get("phase").and_then(|p| p.as_str()) == Some("successful")
    })
    .await;
    let idle_peak = peak_kib(pid);
    for i in 0..OBJECTS {
        let spec = analysed_object(&name(i), "v2", &address(i), METRICS)["spec"].clone();
        api.patch(
            &name(i),
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap();
    }
    // Every object measuring: each metric's last measurement carries the (cut) error.
    wait_all(&api, OBJECTS, "measuring", |s| {
        s.pointer("/analysis/measurements")
            .and_then(|m| m.as_array())
            .is_some_and(|m| m.len() == METRICS)
    })
    .await;
    let requests_then = hostile.requests();
    let peak_then = peak_kib(pid);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let requests_later = hostile.requests();
    let peak_later = peak_kib(pid);
    eprintln!(
        "controller VmHWM: {idle_peak} KiB idle with {OBJECTS} objects, {peak_then} KiB once all measure, {peak_later} KiB after {} more requests of 1 MiB or 60 KiB errors",
        requests_later - requests_then
    );
    assert!(
        requests_later >= requests_then + OBJECTS * METRICS,
        "the objects kept measuring: {requests_then} then {requests_later} requests"
    );
    assert!(
        peak_later <= peak_then + 16 * 1024,
        "memory grew from {peak_then} KiB to {peak_later} KiB"
    );

    // The status: under 64 KiB, each detail a few hundred bytes, and saying it was cut.
    let raw = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        NAMESPACE,
        &kube::api::ApiResource::erase::<CanaryDaemonSet>(&()),
    );
    let mut saw_cut = false;
    let mut saw_cap = false;
    for i in 0..OBJECTS {
        let object = raw.get(&name(i)).await.unwrap();
        let status = &object.data["status"];
        let size = status.to_string().len();
        assert!(size < 64 << 10, "{}: a status of {size} bytes", name(i));
        for m in status["analysis"]["measurements"].as_array().unwrap() {
            let detail = m["detail"].as_str().unwrap_or_default();
            assert!(
                detail.len() <= 600,
                "{}: a detail of {}",
                name(i),
                detail.len()
            );
            saw_cut |= detail.contains("[cut from");
            saw_cap |= detail.contains("larger than 64 KiB");
        }
        if let Some(message) = status["message"].as_str() {
            assert!(message.len() <= 1024, "a message of {}", message.len());
        }
    }
    assert!(saw_cut && saw_cap, "both kinds of answer were measured");

    // Events: every note under the API server's 1 KiB.
    let events: Api<Event> = Api::namespaced(client.clone(), NAMESPACE);
    for event in events.list(&ListParams::default()).await.unwrap() {
        let note = event.message.unwrap_or_default();
        assert!(note.len() < 1024, "an event note of {} bytes", note.len());
    }

    // The log: no line carries an answer (the issue saw 5.7 GB of logs in 90 s).
    drop(run);
    let log = std::fs::read_to_string(&log_path).unwrap();
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4096, "a log line of {longest} bytes");
    eprintln!(
        "run log: {} bytes in {} lines, longest {longest}",
        log.len(),
        log.lines().count()
    );
}

/// Waits (120 s at most) until `done` holds for the status of every object of `api`'s
/// namespace, and there are `count` of them.
pub(crate) async fn wait_all(
    api: &Api<CanaryDaemonSet>,
    count: usize,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let list = api.list(&ListParams::default()).await.unwrap();
        let statuses: Vec<serde_json::Value> = list
            .items
            .iter()
            .map(|cds| serde_json::to_value(&cds.status).unwrap())
            .collect();
        let ready = statuses.iter().filter(|s| done(s)).count();
        if list.items.len() == count && ready == count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never {what}: {ready} of {count}; {:#}",
            statuses.first().cloned().unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analysis_addresses_not_allowed_are_refused_and_never_asked() {
    let sim = support::serve_sim("tenant-allow", &["--nodes", "2", "--speed", "4"]);
    let client = support::client_with_crd(&sim.kubeconfig).await;
    let (allowed, allowed_port) = Hostile::start();
    let (other, other_port) = Hostile::start();
    let _run = support::spawn_run_allowing(
        &sim.kubeconfig,
        Stdio::from(std::fs::File::create(sim.dir.join("run.log")).unwrap()),
        &[&format!("http://127.0.0.1:{allowed_port}/ok")],
    );
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let refused = [
        ("other-host", format!("http://127.0.0.1:{other_port}/ok")),
        (
            "userinfo",
            format!("http://127.0.0.1:{allowed_port}@127.0.0.1:{other_port}/ok"),
        ),
        (
            "fragment",
            format!("http://127.0.0.1:{allowed_port}/ok/admin#"),
        ),
        (
            "sibling-path",
            format!("http://127.0.0.1:{allowed_port}/okay"),
        ),
        (
            "dot-dot",
            format!("http://127.0.0.1:{allowed_port}/ok/%2e%2e/admin"),
        ),
    ];
    let ok_address = format!("http://127.0.0.1:{allowed_port}/ok/tenant-a");
    for (name, address) in refused.iter().chain([&("allowed", ok_address.clone())]) {
        let object = analysed_object(name, "v1", address, 1);
        let object: CanaryDaemonSet = serde_json::from_value(object).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    // The allowed object installs v1, then measures v2 in its pause.
    let deadline = Instant::now() + Duration::from_secs(90);
    while api
        .get("allowed")
        .await
        .unwrap()
        .status
        .and_then(|s| s.phase)
        .map(|p| p.as_str())
        != Some("successful")
    {
        assert!(
            Instant::now() < deadline,
            "the allowed object never installed"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let spec = analysed_object("allowed", "v2", &ok_address, 1)["spec"].clone();
    api.patch(
        "allowed",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": spec })),
    )
    .await
    .unwrap();
    while allowed.requests() < 3 {
        assert!(
            Instant::now() < deadline,
            "the allowed address was never asked"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for (name, address) in &refused {
        let status = api.get(name).await.unwrap().status.unwrap_or_default();
        let message = status.message.clone().unwrap_or_default();
        assert_eq!(
            status.reason.map(|r| r.as_str()),
            Some("InvalidSpec"),
            "{name} ({address}): {status:#?}"
        );
        assert!(
            message.contains("spec.analysis.prometheus.address"),
            "{name}: {message}"
        );
        if *name == "other-host" || *name == "sibling-path" {
            assert!(
                message.contains("--allow-analysis-address"),
                "{name}: {message}"
            );
        }
    }
    // Nothing but the allowed object's queries reached either server.
    assert_eq!(other.requests(), 0, "{:?}", other.lines());
    let lines = allowed.lines();
    assert!(
        lines
            .iter()
            .all(|line| line == "POST /ok/tenant-a/api/v1/query HTTP/1.1"),
        "{lines:?}"
    );
    // No DaemonSet of a refused object was created.
    let daemon_sets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(client.clone(), NAMESPACE);
    for (name, _) in &refused {
        assert!(daemon_sets.get_opt(name).await.unwrap().is_none(), "{name}");
    }
}

/// A Pods-driver object `name` (and its own DaemonSet) at `version` with `steps`.
fn pods_object(name: &str, version: &str, steps: serde_json::Value) -> serde_json::Value {
    let mut manifest = analysed_object(name, version, "http://unused.invalid", 1);
    manifest["spec"].as_object_mut().unwrap().remove("analysis");
    manifest["spec"]["strategy"]["steps"] = steps;
    manifest
}

/// A CanaryDaemonSet driving the DaemonSet `daemon_set` it does not own, in one step.
fn workload_object(name: &str, daemon_set: &str, version: &str) -> CanaryDaemonSet {
    serde_json::from_value(json!({
        "apiVersion": "canary.daemonset.dev/v1alpha1",
        "kind": "CanaryDaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "workloadRef": {"name": daemon_set},
            "target": {"version": version},
            "strategy": {"driver": "Pods", "steps": [{"nodes": "100%"}]}
        }
    }))
    .unwrap()
}

/// The UIDs of the pods labelled `app.kubernetes.io/name=app`, and how many run `version`.
async fn pods_of(client: &kube::Client, app: &str, version: &str) -> (Vec<String>, usize) {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let list = pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={app}")))
        .await
        .unwrap();
    let mut uids: Vec<String> = list
        .items
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    uids.sort();
    let on_version = list
        .items
        .iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.as_deref())
                .is_some_and(|image| image.ends_with(&format!(":{version}")))
        })
        .count();
    (uids, on_version)
}

async fn wait_status(
    api: &Api<CanaryDaemonSet>,
    name: &str,
    what: &str,
    done: impl Fn(&canary_kube_adapter::crd::CanaryDaemonSetStatus) -> bool,
) -> canary_kube_adapter::crd::CanaryDaemonSetStatus {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let status = api
            .get_opt(name)
            .await
            .unwrap()
            .and_then(|cds| cds.status)
            .unwrap_or_default();
        if done(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never {what}: {status:#?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_canary_daemon_set_naming_a_claimed_daemon_set_is_refused_and_deletes_nothing() {
    use canary_kube_adapter::claim::CLAIM_ANNOTATION;
    use k8s_openapi::api::apps::v1::DaemonSet;
    let (_sim, client, _run) =
        support::controller_on_sim("tenant-claim", &["--nodes", "4", "--speed", "4"], &[]).await;
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let phase_is = |phase: &'static str| {
        move |s: &canary_kube_adapter::crd::CanaryDaemonSetStatus| {
            s.phase.map(|p| p.as_str()) == Some(phase)
        }
    };

    // The case: the first holds its rollout on the canary with an approval gate.
    let steps = json!([{"nodes": "1"}, {"pause": {}}]);
    let first: CanaryDaemonSet =
        serde_json::from_value(pods_object("first", "v1", steps.clone())).unwrap();
    api.create(&PostParams::default(), &first).await.unwrap();
    wait_status(&api, "first", "installed", phase_is("successful")).await;
    let spec = pods_object("first", "v2", steps)["spec"].clone();
    api.patch(
        "first",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": spec })),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let held = loop {
        let (uids, on_v2) = pods_of(&client, "first", "v2").await;
        if on_v2 == 1 && uids.len() == 4 {
            break uids;
        }
        assert!(
            Instant::now() < deadline,
            "the canary never ran v2: {on_v2} of {}",
            uids.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    wait_status(&api, "first", "paused", phase_is("paused")).await;
    api.create(
        &PostParams::default(),
        &workload_object("second", "first", "v2"),
    )
    .await
    .unwrap();
    let refused = wait_status(&api, "second", "refused", |s| {
        s.reason.map(|r| r.as_str()) == Some("DaemonSetClaimed")
    })
    .await;
    let message = refused.message.unwrap_or_default();
    assert!(
        message.contains("CanaryDaemonSet default/first") || message.contains("/first ("),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        pods_of(&client, "first", "v2").await.0,
        held,
        "a pod of first was deleted"
    );
    let ds = daemon_sets.get("first").await.unwrap();
    assert!(
        !ds.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(CLAIM_ANNOTATION)
    );

    // A DaemonSet someone else owns: the first workloadRef claims it with an annotation, the
    // second is refused, and the claim passes on when the first is deleted.
    let shared: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "shared", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "shared"}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "shared"}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "agent", "image": "registry.example/node-agent:v1"}]
                }
            }
        }
    }))
    .unwrap();
    daemon_sets
        .create(&PostParams::default(), &shared)
        .await
        .unwrap();
    let a = api
        .create(
            &PostParams::default(),
            &workload_object("gitops-a", "shared", "v1"),
        )
        .await
        .unwrap();
    let claim_of = |ds: DaemonSet| {
        ds.metadata
            .annotations
            .unwrap_or_default()
            .get(CLAIM_ANNOTATION)
            .cloned()
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let a_claim = format!("{NAMESPACE}/gitops-a/{}", a.metadata.uid.clone().unwrap());
    while claim_of(daemon_sets.get("shared").await.unwrap()) != a_claim {
        assert!(Instant::now() < deadline, "gitops-a never claimed shared");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let b = api
        .create(
            &PostParams::default(),
            &workload_object("gitops-b", "shared", "v1"),
        )
        .await
        .unwrap();
    let refused = wait_status(&api, "gitops-b", "refused", |s| {
        s.reason.map(|r| r.as_str()) == Some("DaemonSetClaimed")
    })
    .await;
    assert!(refused.message.unwrap_or_default().contains("gitops-a"));
    api.delete("gitops-a", &Default::default()).await.unwrap();
    let b_claim = format!("{NAMESPACE}/gitops-b/{}", b.metadata.uid.clone().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    while claim_of(daemon_sets.get("shared").await.unwrap()) != b_claim {
        assert!(
            Instant::now() < deadline,
            "the claim never passed on to gitops-b"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    wait_status(&api, "gitops-b", "no longer refused", |s| {
        s.reason.map(|r| r.as_str()) != Some("DaemonSetClaimed")
    })
    .await;
}
