//! The binary as a user runs it, over real sockets: `sim serve` in one process, `run
//! --kubeconfig --leader-election` in another; a CanaryDaemonSet is installed and upgraded and
//! reaches `successful`; `/readyz`, `/metrics` answer; SIGTERM stops the controller with exit 0
//! and releases its lease.
use crate::support;
use support::rollout::{event_reasons, set_spec, until_rolled_out};
use support::{KillOnDrop, free_port};

use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::Compatibility;
use daemonset_canary::demo::scenario::{NAME, NAMESPACE, manifest};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const IDENTITY: &str = "replica-under-test";

/// The status line and the body of `GET path` on the loopback `port`.
fn http_get(port: u16, path: &str) -> Option<(String, String)> {
    let raw = support::http_get(&format!("127.0.0.1:{port}"), path, Duration::from_secs(5))?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_owned(), body.to_owned()))
}

/// Waits until the CanaryDaemonSet's status describes spec generation `generation` and is
/// `successful` with every pod updated and ready.
async fn wait_successful(api: &Api<CanaryDaemonSet>, generation: Option<i64>, what: &str) {
    let status = until_rolled_out(api, generation, 3).await;
    assert_eq!(status.desired, 3, "{what}: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_completes_a_rollout_against_sim_serve_and_stops_cleanly() {
    let sim = support::serve_sim("run", &["--nodes", "3"]);
    let (kubeconfig, dir) = (&sim.kubeconfig, &sim.dir);
    let client = support::client(kubeconfig).await;
    // What a user does first: install the CRD (here through the API, as kubectl would).
    support::install_crd(&client).await;

    let metrics_port = free_port();
    let run = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["run", "--leader-election", "--lease-namespace", "default"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
        .env("POD_NAME", IDENTITY)
        .env("CANARY_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("run.log")).unwrap())
        .spawn()
        .unwrap();
    let mut run = KillOnDrop(run);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((status, _)) = http_get(metrics_port, "/readyz")
            && status.contains(" 200 ")
        {
            break;
        }
        assert!(Instant::now() < deadline, "/readyz not 200 after 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let v1: CanaryDaemonSet =
        serde_json::from_value(manifest(Compatibility::Fixed, "v1", "healthy")).unwrap();
    let created = api.create(&PostParams::default(), &v1).await.unwrap();
    wait_successful(&api, created.metadata.generation, "installing v1").await;

    let v2 = manifest(Compatibility::Fixed, "v2", "healthy");
    let generation = set_spec(&api, &v2).await;
    wait_successful(&api, generation, "upgrading to v2").await;

    // `status` shows the end of the upgrade the way a user reads it.
    let status = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["status", NAME, "-n", NAMESPACE, "--nodes", "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(shown.contains("✔ successful"), "{shown}");
    assert!(shown.contains("3/3 updated and ready"), "{shown}");
    assert!(shown.contains("Target:          v2"), "{shown}");
    // The per-node ledger: every node on the DaemonSet's second revision.
    assert!(shown.contains("3 nodes: 3 updated"), "{shown}");
    assert_eq!(shown.matches(" #2 ").count(), 3, "{shown}");

    let (_, metrics) = http_get(metrics_port, "/metrics").unwrap();
    assert!(metrics.contains("canary_leader 1"), "{metrics}");
    assert!(
        metrics.contains(r#"canary_rollout_phase{mode="driven",name="node-agent",namespace="default",phase="successful"} 1"#),
        "{metrics}"
    );
    let lease: Lease = Api::namespaced(client.clone(), "default")
        .get("daemonset-canary")
        .await
        .unwrap();
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some(IDENTITY));

    // SIGTERM: finish, release the lease, exit 0.
    support::sigterm(&run.0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "run did not stop within 20 s of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let log = std::fs::read_to_string(dir.join("run.log")).unwrap_or_default();
    assert_eq!(exit.code(), Some(0), "run log:\n{log}");
    let lease: Lease = Api::namespaced(client, "default")
        .get("daemonset-canary")
        .await
        .unwrap();
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert_ne!(
        holder.as_deref(),
        Some(IDENTITY),
        "the lease was not released"
    );
}

/// Resident memory of process `pid`, in KiB (`VmRSS` of /proc).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The metrics endpoints against clients that never finish their request: the process keeps
/// serving (a header-read timeout frees each slot), its memory stays bounded by the
/// connection cap, and SIGTERM still ends it promptly. Before: 1,000 such clients took RSS to
/// 289 MB and one kept the process alive 45 s after SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_neither_exhaust_nor_hold_the_process() {
    let sim = support::serve_sim("slow", &[]);
    let kubeconfig = &sim.kubeconfig;
    let client = support::client(kubeconfig).await;
    support::install_crd(&client).await;
    let metrics_port = free_port();
    let run = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut run = KillOnDrop(run);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !http_get(metrics_port, "/readyz").is_some_and(|(status, _)| status.contains(" 200 ")) {
        assert!(Instant::now() < deadline, "/readyz not 200 after 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let baseline = rss_kib(run.0.id());

    // Far more clients than the connection cap (64), each sending half a request and then
    // nothing: 300 keep the test short (each slot is freed after the 5 s header timeout).
    let mut slow = Vec::new();
    for _ in 0..300 {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", metrics_port)) {
            use std::io::Write;
            let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
            slow.push(stream);
        }
    }
    // A scrape still gets through once the header timeout frees slots.
    let answered = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(40);
        while Instant::now() < deadline {
            if let Some((status, _)) = http_get(metrics_port, "/metrics")
                && status.contains(" 200 ")
            {
                return true;
            }
        }
        false
    })
    .await
    .unwrap();
    assert!(answered, "no scrape answered behind 300 slow clients");
    let grown = rss_kib(run.0.id()).saturating_sub(baseline);
    assert!(
        grown < 64 * 1024,
        "resident memory grew by {grown} KiB behind 300 slow clients"
    );

    // SIGTERM with slow clients still connected: the stop waits at most a few seconds.
    let mut fresh = Vec::new();
    for _ in 0..10 {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", metrics_port)) {
            use std::io::Write;
            let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\n");
            fresh.push(stream);
        }
    }
    support::sigterm(&run.0);
    let stopped = Instant::now();
    let exit = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(15),
            "run still alive 15 s after SIGTERM with slow clients connected"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(exit.code(), Some(0));
    drop(slow);
    drop(fresh);
}

/// `daemonset-canary VERB node-agent -n default` as a user types it.
fn verb(kubeconfig: &std::path::Path, verb: &str) -> std::process::Output {
    verb_with(kubeconfig, &[verb])
}

/// A verb with its flags (`["promote", "--full"]`) on the CanaryDaemonSet.
fn verb_with(kubeconfig: &std::path::Path, words: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(words)
        .args([NAME, "-n", NAMESPACE, "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .unwrap()
}

/// Asserts that a verb was refused (exit code not 0) saying `expected` on stderr.
fn refused(output: &std::process::Output, expected: &str) {
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "not refused: {said}");
    assert!(said.contains(expected), "{said}");
}

/// Asserts that a verb succeeded saying `expected` on stdout.
fn accepted(output: &std::process::Output, expected: &str) {
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(said.contains(expected), "{said}");
}

/// The `promote` verb as a user types it: refused while nothing is paused, then, on a
/// Pods-driver rollout held by `{pause: {}}`, it ends the pause and the rollout finishes; `get`
/// lists it. `promote --full` is refused at rest, and skips two pauses at once. Meanwhile
/// `status --watch`, off a terminal, prints a view per change with the current step marked,
/// and ends when the object is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_ends_a_pause_and_is_refused_when_nothing_is_paused() {
    let (sim, client, _run) = support::controller_on_sim("promote", &["--nodes", "3"], &[]).await;
    let kubeconfig = &sim.kubeconfig;
    let promote = || verb(kubeconfig, "promote");

    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let held = |version: &str| {
        let mut manifest = daemonset_canary::demo::scenario::manifest_for(
            Compatibility::Fixed,
            canary_state_machine::Driver::Pods,
            None,
            version,
            "healthy",
        );
        manifest["spec"]["strategy"]["steps"] = serde_json::json!([{"nodes": "1"}, {"pause": {}}]);
        manifest
    };
    let v1: CanaryDaemonSet = serde_json::from_value(held("v1")).unwrap();
    let created = api.create(&PostParams::default(), &v1).await.unwrap();
    wait_successful(&api, created.metadata.generation, "installing v1").await;
    refused(
        &promote(),
        "promote refused: the rollout is not paused (phase successful)",
    );

    let mut watching = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["status", NAME, "-n", NAMESPACE, "--watch", "--kubeconfig"])
        .arg(kubeconfig)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let watched = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let watched = watched.clone();
        let mut stdout = watching.stdout.take().unwrap();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut chunk = [0u8; 4096];
            while let Ok(read @ 1..) = stdout.read(&mut chunk) {
                watched
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..read]));
            }
        })
    };
    let _watching = KillOnDrop(watching);

    let generation = set_spec(&api, &held("v2")).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.get(NAME).await.unwrap().status.and_then(|s| s.phase)
        != Some(canary_state_machine::Phase::Paused)
    {
        assert!(Instant::now() < deadline, "v2 never paused");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Held: nothing moves on its own.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = api.get(NAME).await.unwrap().status.unwrap();
    assert_eq!((status.phase_name(), status.updated), (Some("paused"), 1));

    accepted(&promote(), "promoted: step 2 of 3 (a pause) ends");
    wait_successful(&api, generation, "v2 after the promotion").await;

    // `get -A` lists it on one line, the steps all done.
    let listed = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .args(["get", "-A", "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&listed.stdout);
    let line = shown.lines().nth(1).unwrap_or_default();
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cells[..6],
        [NAMESPACE, NAME, "successful", "3/3", "3/3", "v2"],
        "{shown}"
    );

    // Two pauses in a row: one `promote --full` skips both.
    let full = || verb_with(kubeconfig, &["promote", "--full"]);
    refused(
        &full(),
        "promote refused: there is no rollout under way (phase successful)",
    );
    let mut twice = held("v3");
    twice["spec"]["strategy"]["steps"] =
        serde_json::json!([{"nodes": "1"}, {"pause": {}}, {"pause": {}}]);
    let generation = set_spec(&api, &twice).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.get(NAME).await.unwrap().status.and_then(|s| s.phase)
        != Some(canary_state_machine::Phase::Paused)
    {
        assert!(Instant::now() < deadline, "v3 never paused");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    accepted(&full(), "fully promoted from step 2 of 4");
    wait_successful(&api, generation, "v3 after the full promotion").await;

    // The watch saw each step of v2 as the current one, and ends with the object.
    api.delete(NAME, &Default::default()).await.unwrap();
    reader.join().unwrap();
    let watched = watched.lock().unwrap().clone();
    for seen in [
        "▶ 1. nodes 1",
        "▶ 2. pause until promoted",
        "✓ 2. pause until promoted",
        "Phase:           ✔ successful",
        "deleted",
    ] {
        assert!(watched.contains(seen), "{seen:?} never shown:\n{watched}");
    }
    let views = watched.lines().filter(|l| l.starts_with("--- ")).count();
    assert!(views >= 4, "{views} views printed:\n{watched}");
}

/// The `pause` and `resume` verbs as a user types them, with the Pods driver: see
/// [`pause_holds`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_holds_a_rollout_with_no_write_until_resume() {
    pause_holds(canary_state_machine::Driver::Pods).await;
}

/// The same with the MaxUnavailable driver, whose one write for the hold puts the DaemonSet
/// on `OnDelete` (the DaemonSet controller replaces no pod) with the old template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_holds_a_max_unavailable_rollout_on_on_delete_until_resume() {
    pause_holds(canary_state_machine::Driver::MaxUnavailable).await;
}

/// A paused CanaryDaemonSet whose template changes holds for 20 s with no DaemonSet write
/// (past the hold's own, with the MaxUnavailable driver) and no pod replaced; `resume` lets the
/// rollout run to the end; each verb is refused when it would change nothing; each is
/// announced by one event.
async fn pause_holds(driver: canary_state_machine::Driver) {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::Pod;

    let (sim, client, _run) =
        support::controller_on_sim(&format!("pause-{driver}"), &["--nodes", "3"], &[]).await;
    let kubeconfig = &sim.kubeconfig;
    let verb = |name: &str| verb(kubeconfig, name);
    let manifest = |version: &str| {
        let mut manifest = daemonset_canary::demo::scenario::manifest_for(
            Compatibility::Fixed,
            driver,
            None,
            version,
            "healthy",
        );
        if driver == canary_state_machine::Driver::Pods {
            // No timed pause step: the hold is the only pause.
            manifest["spec"]["strategy"]["steps"] =
                serde_json::json!([{"nodes": "1"}, {"nodes": "100%"}]);
        }
        manifest
    };
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let v1: CanaryDaemonSet = serde_json::from_value(manifest("v1")).unwrap();
    let created = api.create(&PostParams::default(), &v1).await.unwrap();
    wait_successful(&api, created.metadata.generation, "installing v1").await;

    refused(
        &verb("resume"),
        "resume refused: it is not paused on request",
    );

    accepted(&verb("pause"), "paused (was successful)");
    refused(
        &verb("pause"),
        "pause refused: it is paused on request already",
    );

    // A new version while paused: the controller does not write it.
    let v2_generation = set_spec(&api, &manifest("v2")).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = api.get(NAME).await.unwrap().status.unwrap_or_default();
        if status.observed_generation >= v2_generation
            && status.phase_name() == Some("paused")
            && status.held == Some(true)
        {
            break;
        }
        assert!(Instant::now() < deadline, "v2 never held: {status:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let generation = |ds: DaemonSet| ds.metadata.generation;
    let uids = |list: kube::core::ObjectList<Pod>| {
        let mut uids: Vec<String> = list
            .items
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect();
        uids.sort();
        uids
    };
    let params = kube::api::ListParams::default();
    let held = daemon_sets.get(NAME).await.unwrap();
    if driver == canary_state_machine::Driver::MaxUnavailable {
        let spec = held.spec.clone().unwrap_or_default();
        let image = spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.containers[0].image.clone());
        assert_eq!(
            spec.update_strategy.and_then(|u| u.type_).as_deref(),
            Some("OnDelete"),
            "held: the DaemonSet controller replaces no pod"
        );
        assert!(
            image.is_some_and(|i| i.ends_with(":v1")),
            "v2 is not written while paused"
        );
    }
    let written = generation(held);
    let before = uids(pods.list(&params).await.unwrap());
    assert_eq!(before.len(), 3);
    let held_until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < held_until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            generation(daemon_sets.get(NAME).await.unwrap()),
            written,
            "the DaemonSet was written while paused"
        );
        assert_eq!(
            uids(pods.list(&params).await.unwrap()),
            before,
            "a pod was deleted while paused"
        );
        let status = api.get(NAME).await.unwrap().status.unwrap_or_default();
        assert_eq!(status.phase_name(), Some("paused"), "{status:?}");
    }

    accepted(&verb("resume"), "resumed");
    wait_successful(&api, v2_generation, "v2 after resume").await;
    let status = api.get(NAME).await.unwrap().status.unwrap_or_default();
    assert_eq!(status.held, None, "{status:?}");
    assert_eq!(status.target_version.as_deref(), Some("v2"));

    let reasons = event_reasons(&client).await;
    for reason in ["Paused", "Resumed"] {
        assert_eq!(
            reasons.iter().filter(|r| *r == reason).count(),
            1,
            "{reason} once: {reasons:?}"
        );
    }
    // The event names who asked: the verb's field manager, as managedFields records it.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), NAMESPACE);
    let paused = events
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|event| event.reason.as_deref() == Some("Paused"))
        .and_then(|event| event.note)
        .unwrap_or_default();
    assert!(paused.ends_with("(asked by daemonset-canary)"), "{paused}");
}

/// The `retry` verb as a user types it: refused while nothing failed; after a crash-looping
/// version failed, it starts the rollout again from its first step with no template change
/// (the `Retried` event, `status.retry`), and a pod that still crash-loops fails it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_runs_a_failed_rollout_again_without_a_template_change() {
    use k8s_openapi::api::apps::v1::DaemonSet;

    let (sim, client, _run) = support::controller_on_sim("retry", &["--nodes", "3"], &[]).await;
    let kubeconfig = &sim.kubeconfig;
    let retry = || verb(kubeconfig, "retry");
    let manifest = |version: &str, behavior: &str| {
        daemonset_canary::demo::scenario::manifest_for(
            Compatibility::Fixed,
            canary_state_machine::Driver::Pods,
            None,
            version,
            behavior,
        )
    };
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let v1: CanaryDaemonSet = serde_json::from_value(manifest("v1", "healthy")).unwrap();
    let created = api.create(&PostParams::default(), &v1).await.unwrap();
    wait_successful(&api, created.metadata.generation, "installing v1").await;
    refused(
        &retry(),
        "retry refused: the rollout is not failed (phase successful)",
    );

    let generation = set_spec(&api, &manifest("v2", "crashloop")).await;
    let failed = || async {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let status = api.get(NAME).await.unwrap().status.unwrap_or_default();
            if status.observed_generation >= generation && status.phase_name() == Some("failed") {
                return status;
            }
            assert!(Instant::now() < deadline, "v2 never failed: {status:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let first = failed().await;
    assert_eq!(first.reason_name(), Some("CanaryCrashLooping"));
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let written = daemon_sets.get(NAME).await.unwrap().metadata.generation;

    accepted(
        &retry(),
        "retried: the rollout of v2 (failed: CanaryCrashLooping) starts again",
    );
    // Acted on once: recorded in the status, announced once, and the pod still crash-loops,
    // so the rollout fails again; the template was not written again.
    let deadline = Instant::now() + Duration::from_secs(60);
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), NAMESPACE);
    let params = kube::api::ListParams::default();
    loop {
        let status = api.get(NAME).await.unwrap().status.unwrap_or_default();
        let reasons: Vec<String> = events
            .list(&params)
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|event| event.reason)
            .collect();
        let retried = reasons.iter().filter(|r| *r == "Retried").count();
        if status.retry.is_some() && status.phase_name() == Some("failed") && retried == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the retry was not acted on: {status:?} {reasons:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        daemon_sets.get(NAME).await.unwrap().metadata.generation,
        written,
        "a retry writes no template"
    );
}

/// The versions the pods of the DaemonSet run (by image tag), counted, terminating pods left
/// out.
async fn pod_versions(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
) -> std::collections::BTreeMap<String, usize> {
    let mut versions = std::collections::BTreeMap::new();
    for pod in pods
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
    {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let image = pod
            .spec
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.image)
            .unwrap_or_default();
        let tag = image.rsplit(':').next().unwrap_or_default().to_owned();
        *versions.entry(tag).or_default() += 1;
    }
    versions
}

/// Waits for `phase` (on the object's current generation), and returns the status; meanwhile
/// the most pods seen at once on `watched` (a version), in `most`.
async fn wait_phase(
    api: &Api<CanaryDaemonSet>,
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    phase: &str,
    watched: &str,
    most: &mut usize,
) -> canary_kube_adapter::crd::CanaryDaemonSetStatus {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let cds = api.get(NAME).await.unwrap();
        let status = cds.status.clone().unwrap_or_default();
        let on_watched = pod_versions(pods).await.get(watched).copied().unwrap_or(0);
        *most = (*most).max(on_watched);
        if status.observed_generation >= cds.metadata.generation
            && status.phase_name() == Some(phase)
        {
            return status;
        }
        assert!(Instant::now() < deadline, "never {phase}: {status:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Going back, as a user does it, on both drivers' shared path (the Pods driver here):
/// `onFailure: Rollback` rolls a crash-looping version back to the last successful one with
/// at most the canary's pod ever on the bad version (`failed`, `rollingBack`, `rolledBack`);
/// `abort` in mid-rollout (held in a pause step) does the same; `undo --to-revision N` rolls
/// out revision N, supervised (it stops at the pause step like any rollout); `history` lists
/// every revision with its outcome; the verbs are refused when they cannot apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_abort_undo_and_history() {
    use k8s_openapi::api::core::v1::Pod;

    let (sim, client, _run) = support::controller_on_sim("rollback", &["--nodes", "3"], &[]).await;
    let kubeconfig = &sim.kubeconfig;
    let run_verb = |args: &[&str]| verb_with(kubeconfig, args);
    let manifest = |version: &str, behavior: &str| {
        let mut manifest = daemonset_canary::demo::scenario::manifest_for(
            Compatibility::Fixed,
            canary_state_machine::Driver::Pods,
            None,
            version,
            behavior,
        );
        manifest["spec"]["strategy"]["onFailure"] = serde_json::json!("Rollback");
        manifest["spec"]["strategy"]["steps"] = serde_json::json!([{"nodes": "1"}, {"pause": {}}]);
        manifest
    };
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let v1: CanaryDaemonSet = serde_json::from_value(manifest("v1", "healthy")).unwrap();
    let created = api.create(&PostParams::default(), &v1).await.unwrap();
    wait_successful(&api, created.metadata.generation, "installing v1").await;
    refused(
        &run_verb(&["abort"]),
        "abort refused: the rollout has ended successfully; nothing to abort",
    );
    refused(
        &run_verb(&["undo"]),
        "undo refused: no revision before the current one",
    );

    // A crash-looping v2: failed, rolled back to v1; only the canary ever ran v2.
    set_spec(&api, &manifest("v2", "crashloop")).await;
    let mut on_v2 = 0;
    let status = wait_phase(&api, &pods, "rolledBack", "v2", &mut on_v2).await;
    assert_eq!(
        pod_versions(&pods).await,
        [("v1".to_owned(), 3)].into(),
        "every pod back on v1"
    );
    assert!(
        on_v2 <= 1,
        "{on_v2} pods ran v2 at once; only the canary should"
    );
    let history = status.history.clone().unwrap();
    assert_eq!(
        history.stable.as_ref().map(|s| s.version.as_str()),
        Some("v1")
    );
    assert_eq!(history.rollback.map(|r| r.reason), Some("OnFailure".into()));
    // The rollback stays recorded until the spec changes: the controller refuses an abort as
    // one already in progress, and so does the CLI (one verb table).
    refused(
        &run_verb(&["abort"]),
        "abort refused: a rollback is already in progress",
    );

    // A healthy v3, aborted while it waits in its pause step: back on v1.
    set_spec(&api, &manifest("v3", "healthy")).await;
    let mut on_v3 = 0;
    wait_phase(&api, &pods, "paused", "v3", &mut on_v3).await;
    accepted(
        &run_verb(&["abort"]),
        "aborted (was paused): rolling back to revision",
    );
    let mut on_v3_after = 0;
    wait_phase(&api, &pods, "rolledBack", "v3", &mut on_v3_after).await;
    assert_eq!(pod_versions(&pods).await, [("v1".to_owned(), 3)].into());
    assert!(
        on_v3.max(on_v3_after) <= 1,
        "only v3's canary ran: {on_v3_after}"
    );

    // `history`: v2 failed, v3 aborted, v1 successful (renumbered as the newest).
    let listed = run_verb(&["history"]);
    let table = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(listed.status.success(), "{table}");
    let row = |version: &str| support::history_row(&table, version);
    assert!(row("v2").contains("failed"), "{table}");
    assert!(row("v3").contains("aborted"), "{table}");
    assert!(row("v1").contains("successful (stable)"), "{table}");
    let v3_revision = row("v3")
        .split_whitespace()
        .next()
        .unwrap()
        .trim_end_matches('*')
        .to_owned();

    // `undo --to-revision` of v3: a rollout like any other, held by its pause step.
    refused(
        &run_verb(&["undo", "--to-revision", "99"]),
        "undo refused: revision 99 is not in the history",
    );
    accepted(
        &run_verb(&["undo", "--to-revision", &v3_revision]),
        &format!("rolling out revision {v3_revision} (v3)"),
    );
    let mut ignored = 0;
    wait_phase(&api, &pods, "paused", "v3", &mut ignored).await;
    accepted(&run_verb(&["promote"]), "promoted");
    wait_phase(&api, &pods, "successful", "v3", &mut ignored).await;
    assert_eq!(pod_versions(&pods).await, [("v3".to_owned(), 3)].into());

    // Each verb acted on once: one event each.
    let reasons = event_reasons(&client).await;
    for (reason, times) in [
        ("RollingBack", 1),
        ("Aborted", 1),
        ("RolledBack", 2),
        ("UndoStarted", 1),
    ] {
        assert_eq!(
            reasons.iter().filter(|r| *r == reason).count(),
            times,
            "{reason}: {reasons:?}"
        );
    }
}

/// Two undos in one spec generation, with the MaxUnavailable driver: each is a rollout of its
/// own, and each is announced as such, with its own revision. kube's event recorder folds an
/// event into an earlier one with the same reason and objects, keeping the first note; the
/// controller used to give a spec generation one recorder, so the second undo showed as
/// `UndoStarted (x2): rolling out revision 2 (v1)` whatever it rolled out (found on the real
/// API server, `e2e::verbs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_undos_in_one_spec_are_each_announced_with_their_revision() {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::events::v1::Event;

    let (sim, client, _run) =
        support::controller_on_sim("undo-events", &["--nodes", "3"], &[]).await;
    let kubeconfig = &sim.kubeconfig;
    let agent = |version: &str| {
        daemonset_canary::demo::scenario::manifest_for(
            Compatibility::Fixed,
            canary_state_machine::Driver::MaxUnavailable,
            None,
            version,
            "healthy",
        )
    };
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let v1: CanaryDaemonSet = serde_json::from_value(agent("v1")).unwrap();
    let created = api.create(&PostParams::default(), &v1).await.unwrap();
    wait_successful(&api, created.metadata.generation, "installing v1").await;
    let generation = set_spec(&api, &agent("v2")).await;
    wait_successful(&api, generation, "v2").await;
    let undo_to = |words: &[&str], version: &'static str| {
        let output = verb_with(kubeconfig, words);
        accepted(&output, &format!("({version}), canary first"));
        let pods = pods.clone();
        let api = api.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let status = api.get(NAME).await.unwrap().status.unwrap_or_default();
                if status.phase_name() == Some("successful")
                    && pod_versions(&pods).await == [(version.to_owned(), 3)].into()
                {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "no undo to {version}: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    // v1 is revision 1: the one before the current (v2), then v2 again by number.
    undo_to(&["undo"], "v1").await;
    undo_to(&["undo", "--to-revision", "2"], "v2").await;

    let notes: Vec<String> = Api::<Event>::namespaced(client.clone(), NAMESPACE)
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|event| event.reason.as_deref() == Some("UndoStarted"))
        .filter_map(|event| event.note)
        .collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    for said in ["revision 1 (v1)", "revision 2 (v2)"] {
        assert!(notes.iter().any(|n| n.contains(said)), "{said}: {notes:?}");
    }
}

/// `wait` as a CI pipeline runs it, with its three exit codes: 0 once the rollout of the
/// current spec is successful (started before it is), 1 with the reason when it fails (started
/// right after the spec change, while the status still tells of the previous generation's
/// success), 2 when the timeout passes first (a canary that never becomes ready).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_0_on_success_1_on_failure_and_2_on_timeout() {
    let (sim, client, _run) = support::controller_on_sim("wait", &["--nodes", "3"], &[]).await;
    let kubeconfig = sim.kubeconfig.clone();
    let wait = move |timeout: &str| {
        let kubeconfig = kubeconfig.clone();
        let timeout = timeout.to_owned();
        tokio::task::spawn_blocking(move || {
            verb_with(
                &kubeconfig,
                &["wait", "--for", "successful", "--timeout", &timeout],
            )
        })
    };
    let manifest = |version: &str, behavior: &str| {
        daemonset_canary::demo::scenario::manifest_for(
            Compatibility::Fixed,
            canary_state_machine::Driver::MaxUnavailable,
            None,
            version,
            behavior,
        )
    };
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let v1: CanaryDaemonSet = serde_json::from_value(manifest("v1", "healthy")).unwrap();
    api.create(&PostParams::default(), &v1).await.unwrap();
    let done = wait("2m").await.unwrap();
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(
        said.contains("successful: v1, 3/3 pods updated and ready"),
        "{said}"
    );

    // The status still says successful (of generation 1) when wait starts: it waits for 2.
    set_spec(&api, &manifest("v2", "crashloop")).await;
    let failed = wait("2m").await.unwrap();
    let said = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{said}");
    assert!(
        said.contains("will not get there: phase failed, CanaryCrashLooping"),
        "{said}"
    );

    set_spec(&api, &manifest("v3", "never-ready")).await;
    let started = Instant::now();
    let timed_out = wait("3s").await.unwrap();
    let said = String::from_utf8_lossy(&timed_out.stderr);
    assert_eq!(timed_out.status.code(), Some(2), "{said}");
    assert!(said.contains("timed out after 3s"), "{said}");
    assert!(started.elapsed() < Duration::from_secs(20), "{said}");
}

/// Creates `manifest` through `api` and waits until it is `successful`: its generation.
async fn install(api: &Api<CanaryDaemonSet>, manifest: serde_json::Value) -> Option<i64> {
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(manifest).unwrap(),
        )
        .await
        .unwrap();
    wait_successful(api, created.metadata.generation, "installing v1").await;
    created.metadata.generation
}

/// The UIDs of the pods of `pods` that are not being deleted.
async fn live_pod_uids(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
) -> std::collections::BTreeSet<String> {
    pods.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.metadata.uid.unwrap_or_default())
        .collect()
}

/// `restart` replaces every pod through the steps, canary first: held in the untimed pause
/// after the first nodes step, exactly one pod is new (with `kubectl.kubernetes.io/restartedAt`)
/// and the others are the ones from before; after `promote`, every pod is new. `set image`
/// rolls the new image out the same way, and refuses a container the template does not have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_replaces_every_pod_canary_first_and_set_image_rolls_out_the_image() {
    use k8s_openapi::api::core::v1::Pod;

    let (sim, client, _run) = support::controller_on_sim("restart", &["--nodes", "3"], &[]).await;
    let kubeconfig = &sim.kubeconfig;
    let mut manifest = daemonset_canary::demo::scenario::manifest_for(
        Compatibility::Fixed,
        canary_state_machine::Driver::Pods,
        None,
        "v1",
        "healthy",
    );
    manifest["spec"]["strategy"]["steps"] =
        serde_json::json!([{"nodes": "1"}, {"pause": {}}, {"nodes": "100%"}]);
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    install(&api, manifest).await;
    let live = || live_pod_uids(&pods);
    let before = live().await;
    assert_eq!(before.len(), 3);

    accepted(
        &verb(kubeconfig, "restart"),
        "restarted: every pod is replaced through the steps, canary first",
    );
    let mut most = 0;
    wait_phase(&api, &pods, "paused", "v1", &mut most).await;
    let held = live().await;
    assert_eq!(
        (
            held.difference(&before).count(),
            held.intersection(&before).count()
        ),
        (1, 2),
        "held in the pause: one new pod, the canary, and two from before"
    );
    accepted(&verb(kubeconfig, "promote"), "promoted");
    wait_phase(&api, &pods, "successful", "v1", &mut most).await;
    let after = live().await;
    assert_eq!(after.len(), 3);
    assert!(after.is_disjoint(&before), "every pod replaced");
    for pod in pods.list(&Default::default()).await.unwrap().items {
        assert!(
            kube::ResourceExt::annotations(&pod).contains_key("kubectl.kubernetes.io/restartedAt"),
            "{:?}",
            pod.metadata.name
        );
    }

    let set_image = |image: &str| {
        Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
            .args(["set", "image", NAME, image, "-n", NAMESPACE, "--kubeconfig"])
            .arg(kubeconfig)
            .output()
            .unwrap()
    };
    refused(
        &set_image("nope=example.com/x:v2"),
        "no container \"nope\" in the template",
    );
    let container = api
        .get(NAME)
        .await
        .unwrap()
        .spec
        .template
        .unwrap()
        .spec
        .template
        .spec
        .unwrap()
        .containers[0]
        .name
        .clone();
    accepted(
        &set_image(&format!("{container}=quay.io/example/agent:v2")),
        "image updated: agent=quay.io/example/agent:v2; the controller rolls it out through the steps, canary first (spec.target.version stays \"v1\"",
    );
    let mut most = 0;
    wait_phase(&api, &pods, "paused", "v2", &mut most).await;
    assert_eq!(most, 1, "the image went to one canary pod first");
    accepted(&verb(kubeconfig, "promote"), "promoted");
    wait_phase(&api, &pods, "successful", "v2", &mut most).await;
    assert_eq!(pod_versions(&pods).await, [("v2".to_owned(), 3)].into());
}

/// `kubectl rollout restart ds/NAME` on a managed DaemonSet (issue 51), the field case: the
/// MaxUnavailable driver's DaemonSet is `RollingUpdate` at the resting `maxUnavailable: 1`, so
/// the DaemonSet controller starts replacing pods at once. The controller takes the restart
/// into the CanaryDaemonSet's template (a `RestartTaken` event, no `DriftDetected`) and rolls
/// it out as a new target, canary first: while the canary soaks, at most the canary and the
/// pod the DaemonSet controller replaced in the window are new; then every pod is replaced
/// and carries the stamp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rollout_restart_is_rolled_out_canary_first_not_reverted() {
    use k8s_openapi::api::core::v1::Pod;

    let (sim, client, _run) =
        support::controller_on_sim("kubectl-restart", &["--nodes", "3"], &[]).await;
    let kubeconfig = &sim.kubeconfig;
    let mut manifest = daemonset_canary::demo::scenario::manifest_for(
        Compatibility::Fixed,
        canary_state_machine::Driver::MaxUnavailable,
        None,
        "v1",
        "healthy",
    );
    // A soak long enough to be seen: the canary alone for 5 s before the rollout widens.
    manifest["spec"]["health"] = serde_json::json!({"canarySoak": "5s"});
    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let installed = install(&api, manifest).await;
    let live = || live_pod_uids(&pods);
    let before = live().await;
    assert_eq!(before.len(), 3);

    let restarted = Command::new("kubectl")
        .args([
            "rollout",
            "restart",
            &format!("ds/{NAME}"),
            "-n",
            NAMESPACE,
            "--kubeconfig",
        ])
        .arg(kubeconfig)
        .output()
        .expect("kubectl must be installed (.ci/run installs it)");
    assert!(
        restarted.status.success(),
        "{}",
        String::from_utf8_lossy(&restarted.stderr)
    );

    // Until successful on the new generation: the most pods replaced while the canary soaks.
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut canary_seen, mut most_in_canary) = (false, 0);
    loop {
        let cds = api.get(NAME).await.unwrap();
        let status = cds.status.clone().unwrap_or_default();
        let replaced = live().await.difference(&before).count();
        if status.phase_name() == Some("canary") && cds.metadata.generation > installed {
            canary_seen = true;
            most_in_canary = most_in_canary.max(replaced);
        }
        if cds.metadata.generation > installed
            && status.observed_generation >= cds.metadata.generation
            && status.phase_name() == Some("successful")
            && status.updated_ready == 3
        {
            break;
        }
        assert!(
            status.phase_name() != Some("failed"),
            "the restart failed: {status:?}"
        );
        assert!(
            Instant::now() < deadline,
            "the restart never completed: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("most pods replaced while the canary soaked: {most_in_canary}");
    assert!(canary_seen, "the restart went out without a canary phase");
    assert!(
        (1..=2).contains(&most_in_canary),
        "while the canary soaked, {most_in_canary} pods were replaced"
    );
    let after = live().await;
    assert_eq!(after.len(), 3);
    assert!(after.is_disjoint(&before), "every pod replaced");

    // The stamp is the spec's now, and every pod carries it.
    let cds = api.get(NAME).await.unwrap();
    let stamp = cds
        .spec
        .template
        .as_ref()
        .unwrap()
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get("kubectl.kubernetes.io/restartedAt"))
        .cloned()
        .expect("the restart was not taken into spec.template");
    for pod in pods.list(&Default::default()).await.unwrap().items {
        assert_eq!(
            kube::ResourceExt::annotations(&pod).get("kubectl.kubernetes.io/restartedAt"),
            Some(&stamp),
            "{:?}",
            pod.metadata.name
        );
    }
    let events: serde_json::Value =
        serde_json::from_str(&sim.kubectl_ok(&["get", "events", "-n", NAMESPACE, "-o", "json"]))
            .unwrap();
    let reasons: Vec<String> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["involvedObject"]["name"] == NAME && e["involvedObject"]["kind"] == "CanaryDaemonSet"
        })
        .map(|e| {
            format!(
                "{}: {}",
                e["reason"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("RestartTaken: ") && r.contains("canary first")),
        "{reasons:#?}"
    );
    assert!(
        !reasons.iter().any(|r| r.starts_with("DriftDetected")),
        "the restart was taken for drift: {reasons:#?}"
    );
}
