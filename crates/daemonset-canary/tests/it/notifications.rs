//! Notifications (issue 51) as a user meets them: the controller run with a receivers file
//! against `sim serve`, local receivers on loopback (tiny HTTP servers in this test). One
//! notification per event with the right body for a successful and a failed rollout; a
//! receiver that answers 500 once is tried again; a receiver that is down or hangs delays no
//! rollout and is tried again; an unknown receiver is a Warning event, not a failure.
use crate::support;

use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::{Compatibility, Driver};
use daemonset_canary::demo::scenario::manifest_for;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NAMESPACE: &str = "default";

/// How a receiver answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ok,
    /// 500 to its first request, 200 after.
    FailFirst,
    /// Reads the request and never answers.
    Hang,
}

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Received {
    headers: BTreeMap<String, String>,
    body: serde_json::Value,
}

/// A receiver on a loopback port, recording what it gets.
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start(answer: Answer) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&got);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let record = Arc::clone(&record);
                std::thread::spawn(move || serve(stream, answer, &record));
            }
        });
        Receiver { port, got }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

/// One connection: each request read whole, recorded, answered as `answer` says.
fn serve(stream: TcpStream, answer: Answer, record: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = BTreeMap::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
            }
        }
        let length: usize = headers
            .get("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let first = {
            let mut got = record.lock().unwrap();
            got.push(Received {
                headers,
                body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
            });
            got.len() == 1
        };
        let status = match answer {
            Answer::Hang => {
                std::thread::sleep(Duration::from_secs(3600));
                return;
            }
            Answer::FailFirst if first => "500 Internal Server Error",
            _ => "200 OK",
        };
        let _ = write!(
            writer,
            "HTTP/1.1 {status}\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok"
        );
    }
}

/// `name`'s manifest at `version` with `behavior`, subscribed to `subscriptions`, no canary
/// soak (the test is about notifications, not soaks).
fn manifest(
    name: &str,
    version: &str,
    behavior: &str,
    subscriptions: serde_json::Value,
) -> CanaryDaemonSet {
    let text = manifest_for(
        Compatibility::Fixed,
        Driver::MaxUnavailable,
        None,
        version,
        behavior,
    )
    .to_string()
    .replace("node-agent", name);
    let mut manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    manifest["spec"]["health"] = serde_json::json!({"canarySoak": "0s"});
    if !subscriptions.is_null() {
        manifest["spec"]["notifications"] = subscriptions;
    }
    serde_json::from_value(manifest).unwrap()
}

/// Waits (90 s at most) until `name` is in `phase` on its current generation; the time taken.
async fn wait_phase(api: &Api<CanaryDaemonSet>, name: &str, phase: &str) -> Duration {
    let started = Instant::now();
    loop {
        let cds = api.get(name).await.unwrap();
        let status = cds.status.clone().unwrap_or_default();
        if status.observed_generation >= cds.metadata.generation
            && status.phase_name() == Some(phase)
        {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{name} never {phase}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (30 s at most) until `check` holds.
async fn eventually(what: &str, check: impl Fn() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match check() {
            Ok(()) => return,
            Err(why) if Instant::now() > deadline => panic!("{what}: {why}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The bodies a receiver got of `name`'s `event`.
fn of(received: &[Received], name: &str, event: &str) -> Vec<Received> {
    received
        .iter()
        .filter(|r| {
            r.body["name"] == name && r.body["event"] == event
                || r.body["text"].as_str().is_some_and(|t| {
                    t.contains(&format!("*{event}*")) && t.contains(&format!("/{name} "))
                })
        })
        .cloned()
        .collect()
}

/// A counter of the controller's `/metrics`, 0 when absent.
fn counter(metrics_addr: &str, series: &str) -> f64 {
    let text =
        support::http_get(metrics_addr, "/metrics", Duration::from_secs(5)).unwrap_or_default();
    text.lines()
        .find_map(|line| {
            line.strip_prefix(series)
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receivers_get_one_notification_per_event_and_a_down_one_delays_nothing() {
    let sim = support::serve_sim("notifications", &["--nodes", "3"]);
    let client = support::client_with_crd(&sim.kubeconfig).await;
    let generic = Receiver::start(Answer::Ok);
    let slack = Receiver::start(Answer::Ok);
    let flaky = Receiver::start(Answer::FailFirst);
    let hanging = Receiver::start(Answer::Hang);
    let closed = format!("http://127.0.0.1:{}/hook", support::free_port());

    // The admin's Secrets, in the controller's namespace: the Slack URL, the generic
    // receiver's Authorization header.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    for (name, key, value) in [
        ("slack-webhook", "url", slack.url()),
        ("audit-headers", "Authorization", "Bearer s3cret".to_owned()),
    ] {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "stringData": {key: value}
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    let receivers = sim.dir.join("receivers.yaml");
    std::fs::write(
        &receivers,
        format!(
            "receivers:
- name: audit
  url: {}
  headersSecret: audit-headers
- name: slack
  format: slack
  urlSecret: {{name: slack-webhook, key: url}}
- name: flaky
  url: {}
- name: down
  url: {closed}
- name: hanging
  url: {}
  timeout: 2s
",
            generic.url(),
            flaky.url(),
            hanging.url()
        ),
    )
    .unwrap();
    let metrics_addr = format!("127.0.0.1:{}", support::free_port());
    let log = std::fs::File::create(sim.dir.join("run.log")).unwrap();
    let _run = support::KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&sim.kubeconfig)
            .arg(format!("--metrics-addr={metrics_addr}"))
            .arg("--notification-receivers")
            .arg(&receivers)
            .args(["--notification-namespace", NAMESPACE])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );

    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let told = serde_json::json!([
        {"receiver": "audit"},
        {"receiver": "slack", "events": ["Failed", "Succeeded"]},
        {"receiver": "flaky", "events": ["Succeeded"]},
        {"receiver": "nobody-defined-this"}
    ]);
    let unreachable = serde_json::json!([{"receiver": "down"}, {"receiver": "hanging"}]);
    // Three rollouts at once on the same nodes: one told to the working receivers, one to the
    // down and hanging ones, one to none. The last two must take the same time.
    api.create(
        &PostParams::default(),
        &manifest("told", "v1", "healthy", told.clone()),
    )
    .await
    .unwrap();
    api.create(
        &PostParams::default(),
        &manifest("unheard", "v1", "healthy", unreachable),
    )
    .await
    .unwrap();
    api.create(
        &PostParams::default(),
        &manifest("alone", "v1", "healthy", serde_json::Value::Null),
    )
    .await
    .unwrap();
    let (told_took, unheard_took, alone_took) = tokio::join!(
        wait_phase(&api, "told", "successful"),
        wait_phase(&api, "unheard", "successful"),
        wait_phase(&api, "alone", "successful"),
    );
    eprintln!("to successful: told {told_took:?}, unheard {unheard_took:?}, alone {alone_took:?}");
    // A hanging receiver's timeout is 2 s, its back-off 1 s then 2 s: a rollout that waited
    // for it would be seconds late.
    assert!(
        unheard_took.abs_diff(alone_took) < Duration::from_millis(1500),
        "a down receiver delayed the rollout: {unheard_took:?} against {alone_took:?}"
    );

    eventually(
        "one Succeeded to audit and slack, flaky tried twice",
        || {
            let audit = of(&generic.got(), "told", "Succeeded");
            let to_slack = of(&slack.got(), "told", "Succeeded");
            let to_flaky = of(&flaky.got(), "told", "Succeeded");
            if audit.len() == 1 && to_slack.len() == 1 && to_flaky.len() == 2 {
                Ok(())
            } else {
                Err(format!(
                    "audit {audit:?}\nslack {to_slack:?}\nflaky {to_flaky:?}"
                ))
            }
        },
    )
    .await;
    let succeeded = &of(&generic.got(), "told", "Succeeded")[0];
    assert_eq!(
        succeeded.headers.get("authorization").map(String::as_str),
        Some("Bearer s3cret")
    );
    assert_eq!(
        succeeded.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    let body = &succeeded.body;
    assert_eq!(body["reason"], "RolloutCompleted");
    assert_eq!(body["severity"], "Normal");
    assert_eq!(body["namespace"], NAMESPACE);
    assert_eq!(body["daemonSet"], "told");
    assert_eq!(body["version"], "v1");
    assert!(
        body["message"].as_str().unwrap().contains("complete"),
        "{body}"
    );
    let text = slack.got()[0].body.clone();
    assert_eq!(text.as_object().unwrap().len(), 1, "{text}");
    assert!(
        text["text"].as_str().unwrap().starts_with(
            ":white_check_mark: *Succeeded* CanaryDaemonSet default/told (DaemonSet told, v1): "
        ),
        "{text}"
    );

    // A failed rollout: v2 crash-loops on its canary.
    let v2 = manifest("told", "v2", "crashloop", told);
    api.patch(
        "told",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": v2.spec})),
    )
    .await
    .unwrap();
    wait_phase(&api, "told", "failed").await;
    eventually("one Failed to audit and slack", || {
        let audit = of(&generic.got(), "told", "Failed");
        let to_slack = of(&slack.got(), "told", "Failed");
        if audit.len() == 1 && to_slack.len() == 1 {
            Ok(())
        } else {
            Err(format!("audit {audit:?}\nslack {to_slack:?}"))
        }
    })
    .await;
    let failed = of(&generic.got(), "told", "Failed").remove(0).body;
    assert_eq!(failed["severity"], "Warning");
    assert_eq!(failed["version"], "v2");
    assert_eq!(failed["generation"], 2);
    assert!(
        failed["message"].as_str().unwrap().contains("v2"),
        "{failed}"
    );
    // Nothing else: the flaky receiver is subscribed to Succeeded only, and no event was sent
    // twice (a few more passes of the failed object have run meanwhile).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let audit = generic.got();
    assert_eq!(audit.len(), 2, "audit got {audit:#?}");
    assert_eq!(flaky.got().len(), 2);

    // The down and hanging receivers are tried again, and counted.
    eventually("down and hanging retried", || {
        let down = counter(
            &metrics_addr,
            "canary_notifications_total{receiver=\"down\",result=\"retried\"}",
        );
        let hang = counter(
            &metrics_addr,
            "canary_notifications_total{receiver=\"hanging\",result=\"retried\"}",
        );
        if down >= 1.0 && hang >= 1.0 {
            Ok(())
        } else {
            Err(format!("down {down}, hanging {hang}"))
        }
    })
    .await;
    assert!(
        hanging.got().len() >= 2,
        "the hanging receiver was tried again"
    );
    assert_eq!(
        counter(
            &metrics_addr,
            "canary_notifications_total{receiver=\"audit\",result=\"sent\"}"
        ),
        2.0
    );
    assert_eq!(
        counter(
            &metrics_addr,
            "canary_notifications_total{receiver=\"flaky\",result=\"retried\"}"
        ),
        1.0
    );

    // The unknown receiver: a Warning event on the object, the rollouts unaffected.
    let events: serde_json::Value =
        serde_json::from_str(&sim.kubectl_ok(&["get", "events", "-n", NAMESPACE, "-o", "json"]))
            .unwrap();
    let unknown: Vec<&serde_json::Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["reason"] == "NotificationReceiverUnknown" && e["involvedObject"]["name"] == "told"
        })
        .collect();
    assert!(!unknown.is_empty(), "no NotificationReceiverUnknown event");
    assert!(
        unknown[0]["message"]
            .as_str()
            .unwrap()
            .contains("nobody-defined-this")
    );
    // No log line holds a URL or a header value.
    let log = std::fs::read_to_string(sim.dir.join("run.log")).unwrap();
    for secret in ["s3cret".to_owned(), slack.url(), closed, hanging.url()] {
        assert!(!log.contains(&secret), "the log shows {secret}");
    }
}
