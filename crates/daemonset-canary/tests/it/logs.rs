//! What `run` logs, as a user reads it: plain lines without colour off a terminal, JSON lines
//! with the object's `namespace` and `name` as fields of their own, one line when there is
//! nothing to do, and one line saying why when the API server goes away (not one per watcher
//! and retry, and nothing from the client library).
use crate::support;
use support::{KillOnDrop, free_port};

use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::Compatibility;
use daemonset_canary::demo::scenario::{NAMESPACE, manifest};
use kube::Api;
use kube::api::PostParams;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `run` against `kubeconfig` with `args`, its stderr into `log`.
fn start_run(kubeconfig: &Path, log: &Path, args: &[&str]) -> KillOnDrop {
    let child = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["run", "--kubeconfig"])
        .arg(kubeconfig)
        .arg(format!("--metrics-addr=127.0.0.1:{}", free_port()))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("CANARY_LOG_LEVEL")
        .env_remove("CANARY_LOG_FORMAT")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// Waits (30 s at most) until the log at `path` has a line containing `needle`; the log.
fn wait_for_line(path: &Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.lines().any(|line| line.contains(needle)) {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} after 30 s:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn plain_logs_are_uncoloured_off_a_terminal_and_an_outage_is_one_line() {
    let mut sim = support::serve_sim("logs-plain", &["--nodes", "2"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        support::install_crd(&support::client(&sim.kubeconfig).await).await;
    });
    let log = sim.dir.join("run.log");
    let _run = start_run(&sim.kubeconfig, &log, &[]);
    let text = wait_for_line(&log, "no CanaryDaemonSet in any namespace yet");
    let url = text
        .split("api=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_owned();

    // The API server goes away for good; every watcher fails on every retry.
    sim.process.0.kill().unwrap();
    let _ = sim.process.0.wait();
    wait_for_line(&log, "watch failed");
    // Several backoff rounds of four watchers (the first retries come within seconds).
    std::thread::sleep(Duration::from_secs(8));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains('\x1b'),
        "ANSI escapes off a terminal:\n{text}"
    );
    let failures: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert_eq!(failures.len(), 1, "one line for the outage:\n{text}");
    assert!(failures[0].contains("watch failed"), "{}", failures[0]);
    assert!(
        failures[0].contains(&format!("cannot reach the API server at {url}"))
            && failures[0].contains("connection refused"),
        "{}",
        failures[0]
    );
    assert!(
        !text.contains("kube_client"),
        "client library noise:\n{text}"
    );
    assert_eq!(
        text.matches("no CanaryDaemonSet").count(),
        1,
        "said once:\n{text}"
    );
}

/// `sim serve` (2 nodes, the CRD installed) and `run --log-format json` against it, started:
/// the server, the run's log file, a runtime, the CanaryDaemonSets' API, the run.
fn json_run_on_sim(
    test: &str,
) -> (
    support::ServedSim,
    std::path::PathBuf,
    tokio::runtime::Runtime,
    Api<CanaryDaemonSet>,
    KillOnDrop,
) {
    let sim = support::serve_sim(test, &["--nodes", "2"]);
    let log = sim.dir.join("run.log");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(support::client_with_crd(&sim.kubeconfig));
    let run = start_run(&sim.kubeconfig, &log, &["--log-format", "json"]);
    wait_for_line(&log, "controller starting");
    let api: Api<CanaryDaemonSet> = Api::namespaced(client, NAMESPACE);
    (sim, log, runtime, api, run)
}

#[test]
fn json_logs_name_the_object_in_fields_of_their_own() {
    let (_sim, log, runtime, api, _run) = json_run_on_sim("logs-json");
    let object: CanaryDaemonSet =
        serde_json::from_value(manifest(Compatibility::Fixed, "v1", "healthy")).unwrap();
    runtime
        .block_on(api.create(&PostParams::default(), &object))
        .unwrap();
    let text = wait_for_line(&log, "daemonSet created");
    let created: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["message"] == "daemonSet created")
        .unwrap();
    assert_eq!(created["namespace"], NAMESPACE, "{created}");
    assert_eq!(created["name"], "node-agent", "{created}");
    assert_eq!(created["level"], "INFO", "{created}");
    assert!(created.get("fields").is_none(), "flattened: {created}");
}

/// A JSON value parsed strictly: an object with a key twice is refused (serde_json, jq and
/// Python keep the last one and lose the first without a word).
struct Strict;

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Strict;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value without duplicate keys")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
                Ok(Strict)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
                Ok(Strict)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
                Ok(Strict)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Strict, E> {
                Ok(Strict)
            }
            fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
                Ok(Strict)
            }
            fn visit_unit<E>(self) -> Result<Strict, E> {
                Ok(Strict)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Strict, A::Error> {
                while seq.next_element::<Strict>()?.is_some() {}
                Ok(Strict)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Strict, A::Error> {
                let mut keys = std::collections::HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !keys.insert(key.clone()) {
                        return Err(serde::de::Error::custom(format!("duplicate key {key:?}")));
                    }
                    map.next_value::<Strict>()?;
                }
                Ok(Strict)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// Every JSON line of `run`, through a rollout (phase changes), a failed one and an invalid
/// spec, parses with a strict parser: no key twice. "phase changed" lines carried the line's
/// `message` and a field `message` (issue 52).
#[test]
fn every_json_log_line_has_each_key_once() {
    let (_sim, log, runtime, api, _run) = json_run_on_sim("logs-strict");
    let mut crashing = manifest(Compatibility::Fixed, "v1", "crashloop");
    crashing["spec"]["strategy"]["progressDeadlineSeconds"] = 5.into();
    // An analysis address nobody allowed: InvalidSpec, logged once.
    let mut invalid = daemonset_canary::demo::scenario::manifest_for(
        Compatibility::Fixed,
        canary_state_machine::Driver::Pods,
        None,
        "v1",
        "healthy",
    );
    invalid["metadata"]["name"] = "invalid".into();
    invalid["spec"]["daemonSetName"] = "invalid".into();
    invalid["spec"]["analysis"] =
        daemonset_canary::demo::scenario::error_ratio_analysis("http://192.0.2.1:9090", "10s");
    for object in [crashing, invalid] {
        let object: CanaryDaemonSet = serde_json::from_value(object).unwrap();
        runtime
            .block_on(api.create(&PostParams::default(), &object))
            .unwrap();
    }
    wait_for_line(&log, "nothing is written until the spec changes");
    // The crash-looping object's failure (the invalid one fails too, at once).
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text
            .lines()
            .any(|l| l.contains(r#""to":"failed""#) && l.contains(r#""name":"node-agent""#))
        {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "node-agent never failed:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut phase_changes = 0;
    for line in text.lines() {
        if let Err(error) = serde_json::from_str::<Strict>(line) {
            panic!("{error}: {line}");
        }
        phase_changes += usize::from(line.contains("phase changed"));
    }
    assert!(phase_changes >= 2, "{text}");
    // Each "phase changed" line names the version; the failure is a WARN, with its reason.
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &serde_json::Value| {
            l["message"] == "phase changed" && l["name"] == "node-agent"
        })
        .collect();
    for line in &lines {
        assert_eq!(line["version"], "v1", "{line}");
    }
    let failed = lines.iter().find(|l| l["to"] == "failed").unwrap();
    assert_eq!(failed["level"], "WARN", "{failed}");
    assert!(
        !failed["reason"].as_str().unwrap_or_default().is_empty(),
        "{failed}"
    );
    assert!(
        lines
            .iter()
            .filter(|l| l["to"] != "failed")
            .all(|l| l["level"] == "INFO")
    );
}

/// observe-kubevirt on a cluster without a KubeVirt object says so, once.
#[test]
fn observe_kubevirt_says_once_when_there_is_nothing_to_observe() {
    let sim = support::serve_sim("logs-observe", &["--nodes", "1"]);
    let log = sim.dir.join("observe.log");
    let _observer = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
            .args(["observe-kubevirt", "--kubeconfig"])
            .arg(&sim.kubeconfig)
            .arg(format!("--metrics-addr=127.0.0.1:{}", free_port()))
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for_line(&log, "no KubeVirt object found");
    // Later passes (the simulator's node heartbeats and pods change nothing here) stay quiet.
    std::thread::sleep(Duration::from_secs(2));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.matches("no KubeVirt object found").count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches("observing KubeVirt").count(), 1, "{text}");
}

/// A standby replica says once whom it waits for, rather than nothing: a silent standby looks
/// hung (issue 52).
#[test]
fn a_standby_replica_says_once_that_it_waits_for_the_lease() {
    let sim = support::serve_sim("logs-standby", &["--nodes", "1"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(support::client(&sim.kubeconfig));
    runtime.block_on(support::install_crd(&client));
    let elected = ["--leader-election", "--lease-namespace", "default"];
    let leader_log = sim.dir.join("leader.log");
    let _leader = start_run(&sim.kubeconfig, &leader_log, &elected);
    wait_for_line(&leader_log, "acquired the lease");
    let standby_log = sim.dir.join("standby.log");
    let _standby = start_run(&sim.kubeconfig, &standby_log, &elected);
    wait_for_line(&standby_log, "standing by");
    // Several retries later (every half grace), still one line.
    std::thread::sleep(Duration::from_secs(6));
    let text = std::fs::read_to_string(&standby_log).unwrap();
    assert_eq!(text.matches("standing by").count(), 1, "{text}");
    assert!(!text.contains("acquired the lease"), "{text}");
}
