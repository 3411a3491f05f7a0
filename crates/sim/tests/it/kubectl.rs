//! The real `kubectl` against the simulator served over HTTP.
//!
//! Runs the kubectl named by `KUBECTL` (what `cargo xtask ci` sets: the one it builds from the
//! pinned Kubernetes release into `target/cluster/bin/`), else `kubectl` on PATH; the test fails,
//! never skips, without one.

use std::path::{Path, PathBuf};
use std::process::Command;

use std::time::Duration;

use canary_sim::cluster::{ClusterConfig, KubeletConfig};
use canary_sim::{ServedSim, Sim};
use k8s_openapi::api::apps::v1::DaemonSet;

const NAME: &str = "nvidia-device-plugin-daemonset";

fn kubectl_binary() -> PathBuf {
    if let Some(named) = std::env::var_os("KUBECTL") {
        return PathBuf::from(named);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("kubectl"))
        .find(|candidate| candidate.exists());
    on_path.unwrap_or_else(|| {
        panic!("no kubectl: set KUBECTL, or build one with `cargo xtask cluster build` and put target/cluster/bin on PATH (`cargo xtask ci` does)")
    })
}

struct Kubectl {
    binary: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn new(served: &ServedSim) -> Self {
        // One directory per served simulator: tests run in parallel in this process.
        let dir = std::env::temp_dir().join(format!(
            "canary-sim-kubectl-{}-{}",
            std::process::id(),
            served.addr.port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        served.write_kubeconfig(&kubeconfig).unwrap();
        Self {
            binary: kubectl_binary(),
            kubeconfig,
        }
    }

    /// Runs kubectl (blocking, on a blocking thread) and returns (success, stdout, stderr).
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let binary = self.binary.clone();
        let kubeconfig = self.kubeconfig.clone();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        tokio::task::spawn_blocking(move || {
            let output = Command::new(&binary)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .arg("--request-timeout=20s")
                .args(&args)
                .env("HOME", kubeconfig.parent().unwrap_or(Path::new("/tmp")))
                .output()
                .unwrap();
            (
                output.status.success(),
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        })
        .await
        .unwrap()
    }

    /// `kubectl rollout status` of the fixture DaemonSet; its output.
    async fn rollout_status(&self) -> String {
        let target = format!("ds/{NAME}");
        self.ok(&[
            "rollout",
            "status",
            &target,
            "-n",
            "kube-system",
            "--timeout=60s",
        ])
        .await
    }

    /// Installs the project's CanaryDaemonSet CRD from deploy/.
    async fn apply_project_crd(&self) {
        let crd = format!(
            "{}/../../deploy/crd/canarydaemonsets.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        self.ok(&["apply", "-f", &crd]).await;
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (success, stdout, stderr) = self.run(args).await;
        assert!(success, "kubectl {args:?} failed:\n{stdout}\n{stderr}");
        stdout
    }
}

/// Writes `text` to `<label>.yaml` in a directory of this test process.
fn write_manifest(label: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("canary-sim-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{label}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// `builder` with `nodes` nodes and fast kubelets: the cluster model runs in real time here,
/// and rollouts should take well under a second per pod.
fn fast_sim(builder: canary_sim::SimBuilder, nodes: u32) -> Sim {
    builder
        .cluster_config(ClusterConfig {
            kubelet: KubeletConfig {
                start_latency: Duration::from_millis(50),
                ready_delay: Duration::from_millis(100),
                termination_grace: Duration::from_millis(50),
                ..KubeletConfig::default()
            },
            ..ClusterConfig::default()
        })
        .nodes(nodes)
        .build()
        .unwrap()
}

fn stored(sim: &Sim) -> DaemonSet {
    sim.store()
        .get::<DaemonSet>(Some("kube-system"), NAME)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_the_simulator() {
    let sim = fast_sim(Sim::builder(), 3);
    let served = sim.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let kubectl = Kubectl::new(&served);
    let fixture = format!(
        "{}/../../testdata/daemonsets/nvidia-device-plugin.yaml",
        env!("CARGO_MANIFEST_DIR")
    );

    let out = kubectl
        .ok(&["apply", "--validate=false", "-f", &fixture])
        .await;
    assert!(out.contains("created"), "{out}");
    assert_eq!(stored(&sim).metadata.generation, Some(1));
    let out = kubectl
        .ok(&["apply", "--validate=false", "-f", &fixture])
        .await;
    assert!(
        out.contains("unchanged") || out.contains("configured"),
        "{out}"
    );

    let rolled = kubectl.rollout_status().await;
    assert!(rolled.contains("successfully rolled out"), "{rolled}");
    let out = kubectl.ok(&["get", "nodes,ds,pods", "-A"]).await;
    assert!(out.contains("node-1") && out.contains("node-3"), "{out}");
    assert!(out.contains(NAME), "{out}");
    assert_eq!(out.matches("pod/").count(), 3, "one pod per node: {out}");

    let yaml = kubectl
        .ok(&["get", "ds", NAME, "-n", "kube-system", "-o", "yaml"])
        .await;
    assert!(
        yaml.contains("kind: DaemonSet")
            && yaml.contains("nvcr.io/nvidia/k8s-device-plugin:v0.20.0"),
        "{yaml}"
    );

    let patch = r#"{"spec":{"updateStrategy":{"rollingUpdate":{"maxUnavailable":"10%"}}}}"#;
    kubectl
        .ok(&[
            "patch",
            "ds",
            NAME,
            "-n",
            "kube-system",
            "--type",
            "merge",
            "-p",
            patch,
        ])
        .await;
    let seen = kubectl
        .ok(&[
            "get",
            "ds",
            NAME,
            "-n",
            "kube-system",
            "-o",
            "jsonpath={.spec.updateStrategy.rollingUpdate.maxUnavailable}",
        ])
        .await;
    assert_eq!(seen.trim(), "10%");
    assert_eq!(stored(&sim).metadata.generation, Some(2));

    kubectl
        .ok(&[
            "set",
            "image",
            &format!("ds/{NAME}"),
            "-n",
            "kube-system",
            "nvidia-device-plugin-ctr=example/plugin:v2",
        ])
        .await;
    let rolled = kubectl.rollout_status().await;
    assert!(rolled.contains("successfully rolled out"), "{rolled}");
    let images = kubectl
        .ok(&[
            "get",
            "pods",
            "-n",
            "kube-system",
            "-o",
            "jsonpath={.items[*].spec.containers[0].image}",
        ])
        .await;
    assert_eq!(
        images.split_whitespace().collect::<Vec<_>>(),
        ["example/plugin:v2"; 3],
        "every pod replaced"
    );
    let ds = stored(&sim);
    let containers = ds.spec.unwrap().template.spec.unwrap().containers;
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].image.as_deref(), Some("example/plugin:v2"));
    assert_eq!(
        containers[0].volume_mounts.as_ref().map(Vec::len),
        Some(1),
        "strategic merge kept the mounts"
    );

    kubectl
        .ok(&["label", "ds", NAME, "-n", "kube-system", "tier=node"])
        .await;
    let labels = stored(&sim).metadata.labels.unwrap();
    assert_eq!(labels.get("tier").map(String::as_str), Some("node"));

    let described = kubectl
        .ok(&["describe", "ds", NAME, "-n", "kube-system"])
        .await;
    assert!(
        described.contains("Desired Number of Nodes Scheduled"),
        "{described}"
    );

    let (success, _, stderr) = kubectl
        .run(&["get", "ds", "missing", "-n", "kube-system"])
        .await;
    assert!(!success);
    assert!(stderr.contains("Error from server (NotFound)"), "{stderr}");

    kubectl
        .ok(&["delete", "ds", NAME, "-n", "kube-system"])
        .await;
    assert!(
        sim.store()
            .get::<DaemonSet>(Some("kube-system"), NAME)
            .is_none()
    );
}

/// The lines of `output` whose first column is `name`, split into columns.
fn row<'a>(output: &'a str, name: &str) -> Vec<&'a str> {
    output
        .lines()
        .find(|line| line.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{output}"))
        .split_whitespace()
        .collect()
}

fn header(output: &str) -> Vec<&str> {
    output
        .lines()
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// What `kubectl get` and `kubectl describe` print on the served simulator: the API server's
/// Table columns for built-in kinds and for a CRD's printer columns, and the events a
/// controller publishes through `events.k8s.io/v1` (kube-runtime's Recorder), which kubectl
/// reads through core `v1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_prints_server_tables_and_recorded_events() {
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};

    // The real time as the epoch: kubectl renders ages the server computes from it.
    let sim = fast_sim(Sim::builder().epoch(k8s_openapi::jiff::Timestamp::now()), 2);
    let served = sim.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let kubectl = Kubectl::new(&served);
    let root = format!("{}/../..", env!("CARGO_MANIFEST_DIR"));
    let fixture = format!("{root}/testdata/daemonsets/nvidia-device-plugin.yaml");
    kubectl
        .ok(&["apply", "--validate=false", "-f", &fixture])
        .await;
    kubectl.rollout_status().await;

    let nodes = kubectl.ok(&["get", "nodes"]).await;
    assert_eq!(
        header(&nodes),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{nodes}"
    );
    assert_eq!(row(&nodes, "node-1")[1..3], ["Ready", "<none>"], "{nodes}");

    let daemonsets = kubectl.ok(&["get", "ds", "-n", "kube-system"]).await;
    assert_eq!(
        header(&daemonsets),
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "NODE SELECTOR",
            "AGE"
        ],
        "{daemonsets}"
    );
    assert_eq!(
        row(&daemonsets, NAME)[1..7],
        ["2", "2", "2", "2", "2", "<none>"],
        "{daemonsets}"
    );

    let pods = kubectl
        .ok(&["get", "pods", "-n", "kube-system", "-o", "wide"])
        .await;
    assert_eq!(
        header(&pods)[..7],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"],
        "{pods}"
    );
    let pod_rows: Vec<&str> = pods.lines().skip(1).collect();
    assert_eq!(pod_rows.len(), 2, "{pods}");
    for line in &pod_rows {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[1..4], ["1/1", "Running", "0"], "{pods}");
        assert!(
            cells[5].starts_with("10.") && cells[6].starts_with("node-"),
            "{pods}"
        );
    }
    // includeObject=Metadata: kubectl reads the namespace and labels from the rows' objects.
    let labelled = kubectl.ok(&["get", "pods", "-A", "--show-labels"]).await;
    assert_eq!(header(&labelled)[0], "NAMESPACE", "{labelled}");
    assert!(
        labelled.contains("controller-revision-hash=") && labelled.contains("kube-system"),
        "{labelled}"
    );
    // includeObject=Object: --sort-by evaluates its path on the whole object.
    let sorted = kubectl
        .ok(&[
            "get",
            "pods",
            "-n",
            "kube-system",
            "--sort-by=.spec.nodeName",
            "-o",
            "wide",
        ])
        .await;
    let nodes_in_order: Vec<&str> = sorted
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(6).unwrap_or_default())
        .collect();
    assert_eq!(nodes_in_order, ["node-1", "node-2"], "{sorted}");

    // The CanaryDaemonSet CRD's printer columns.
    kubectl.apply_project_crd().await;
    let cds = write_manifest(
        "cds",
        r#"apiVersion: canary.daemonset.dev/v1alpha1
kind: CanaryDaemonSet
metadata: {name: agent, namespace: default}
spec:
  target: {version: v1.9.4}
  template:
    metadata: {labels: {app: agent}}
    spec:
      selector: {matchLabels: {app: agent}}
      template:
        metadata: {labels: {app: agent}}
        spec: {containers: [{name: agent, image: example/agent:v1.9.4}]}
"#,
    );
    kubectl
        .ok(&["apply", "--validate=false", "-f", cds.to_str().unwrap()])
        .await;
    kubectl
        .ok(&[
            "patch",
            "cds",
            "agent",
            "-n",
            "default",
            "--subresource=status",
            "--type=merge",
            "-p",
            // As the controller writes it: the VERSION column reads status.targetVersion.
            r#"{"status":{"phase":"canary","readyRatio":"1/2","currentMaxUnavailable":"1","targetVersion":"v1.9.4"}}"#,
        ])
        .await;
    let listed = kubectl.ok(&["get", "cds", "-n", "default"]).await;
    assert_eq!(
        header(&listed),
        ["NAME", "PHASE", "READY", "VERSION", "AGE"],
        "{listed}"
    );
    let cells = row(&listed, "agent");
    assert_eq!(cells[1..4], ["canary", "1/2", "v1.9.4"], "{listed}");
    assert!(cells[4].ends_with('s'), "an age such as 0s: {listed}");
    let wide = kubectl
        .ok(&["get", "cds", "-n", "default", "-o", "wide"])
        .await;
    assert!(header(&wide).contains(&"MAXUNAVAILABLE"), "{wide}");

    // Events published the way the controller publishes them.
    let uid = sim
        .store()
        .get_value(
            &canary_sim::ResourceKey::new("canary.daemonset.dev", "v1alpha1", "canarydaemonsets"),
            Some("default"),
            "agent",
        )
        .and_then(|o| o["metadata"]["uid"].as_str().map(str::to_owned))
        .unwrap();
    let recorder = Recorder::new(
        sim.client(),
        Reporter {
            controller: "daemonset-canary".into(),
            instance: None,
        },
    );
    let regarding = ObjectReference {
        api_version: Some("canary.daemonset.dev/v1alpha1".into()),
        kind: Some("CanaryDaemonSet".into()),
        name: Some("agent".into()),
        namespace: Some("default".into()),
        uid: Some(uid),
        ..ObjectReference::default()
    };
    let started = Event {
        type_: EventType::Normal,
        reason: "RolloutStarted".into(),
        note: Some("started rollout of v1.9.4".into()),
        action: "Rollout".into(),
        secondary: None,
    };
    recorder.publish(&started, &regarding).await.unwrap();

    let events = kubectl.ok(&["get", "events", "-n", "default"]).await;
    assert_eq!(
        header(&events),
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{events}"
    );
    assert!(
        events.contains("RolloutStarted")
            && events.contains("canarydaemonset/agent")
            && events.contains("started rollout of v1.9.4"),
        "{events}"
    );
    let described = kubectl
        .ok(&["describe", "cds", "agent", "-n", "default"])
        .await;
    let events_section = described
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section:\n{described}"));
    assert!(
        events_section.contains("RolloutStarted")
            && events_section.contains("daemonset-canary")
            && events_section.contains("started rollout of v1.9.4"),
        "{described}"
    );
}

/// What kubectl meets writing a CanaryDaemonSet with fields the CRD does not declare:
/// `kubectl apply` refused (kubectl's default `--validate=strict`, which it leaves to the server
/// once `/openapi/v3` says the server validates); with `--validate=false` the fields pruned and
/// the schema's defaults filled; a warning per field for `kubectl patch` (the API server's
/// default, `Warn`); server-side apply refused. Each output is the one a kube-apiserver v1.35
/// gave for the same commands (2026-12-05).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_meets_the_crd_schema_pruning_defaulting_and_field_validation() {
    let sim = fast_sim(Sim::builder(), 1);
    let served = sim.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let kubectl = Kubectl::new(&served);
    kubectl.apply_project_crd().await;
    // `canaryMaxUnavailable` one level too high, as a user may write it.
    let manifest = write_manifest(
        "typo",
        r#"apiVersion: canary.daemonset.dev/v1alpha1
kind: CanaryDaemonSet
metadata: {name: agent, namespace: default}
spec:
  canaryMaxUnavailable: "10%"
  strategy: {fastMaxUnavailable: "20%"}
  target: {fromContainer: agent}
  template:
    spec:
      selector: {matchLabels: {app: agent}}
      template:
        metadata: {labels: {app: agent}}
        spec: {containers: [{name: agent, image: example/agent:v1}]}
"#,
    );
    let manifest = manifest.to_str().unwrap();
    let (strict, _, error) = kubectl.run(&["apply", "-f", manifest]).await;
    assert!(!strict);
    assert_eq!(
        error.trim(),
        format!(
            "Error from server (BadRequest): error when creating \"{manifest}\": CanaryDaemonSet \
             in version \"v1alpha1\" cannot be handled as a CanaryDaemonSet: strict decoding \
             error: unknown field \"spec.canaryMaxUnavailable\""
        )
    );
    // `--validate=false` sends `fieldValidation=Ignore`: pruned without a word.
    let (applied, _, stderr) = kubectl
        .run(&["apply", "--validate=false", "-f", manifest])
        .await;
    assert!(applied && !stderr.contains("Warning"), "{stderr}");
    let stored_object = |sim: &Sim| {
        sim.store()
            .get_value(
                &canary_sim::ResourceKey::new(
                    "canary.daemonset.dev",
                    "v1alpha1",
                    "canarydaemonsets",
                ),
                Some("default"),
                "agent",
            )
            .unwrap()
    };
    let spec = |sim: &Sim| stored_object(sim)["spec"].clone();
    // The managed fields name what was stored, not what was pruned: the `f:spec` of each
    // manager's entry.
    let managed_spec_fields = |sim: &Sim| -> Vec<String> {
        let object = stored_object(sim);
        let entries = object["metadata"]["managedFields"].as_array().cloned();
        entries
            .unwrap_or_default()
            .iter()
            .filter_map(|entry| entry["fieldsV1"]["f:spec"].as_object().cloned())
            .flat_map(|fields| fields.keys().cloned().collect::<Vec<_>>())
            .collect()
    };
    let stored = spec(&sim);
    assert_eq!(stored.get("canaryMaxUnavailable"), None, "{stored}");
    let fields = managed_spec_fields(&sim);
    assert!(
        fields.contains(&"f:strategy".to_owned())
            && !fields.contains(&"f:canaryMaxUnavailable".to_owned()),
        "{fields:?}"
    );
    assert_eq!(
        stored["strategy"],
        serde_json::json!({
            "canaryMaxUnavailable": "1",
            "compatibility": "Fixed",
            "driftPolicy": "Revert",
            "driver": "MaxUnavailable",
            "fastMaxUnavailable": "20%",
            "onFailure": "Hold",
            "progressDeadlineSeconds": 600,
        })
    );

    let (patched, _, warnings) = kubectl
        .run(&[
            "patch",
            "cds",
            "agent",
            "-n",
            "default",
            "--type=merge",
            "-p",
            r#"{"spec":{"foo":1,"strategy":{"fastMaxUnavailable":"30%"}}}"#,
        ])
        .await;
    assert!(patched, "{warnings}");
    assert_eq!(warnings.trim(), r#"Warning: unknown field "spec.foo""#);
    assert_eq!(
        sim.faults().warnings(),
        [r#"canarydaemonsets: 299 - "unknown field \"spec.foo\"""#]
    );
    let stored = spec(&sim);
    assert_eq!(stored.get("foo"), None, "{stored}");
    let fields = managed_spec_fields(&sim);
    assert!(!fields.contains(&"f:foo".to_owned()), "{fields:?}");
    assert_eq!(stored["strategy"]["fastMaxUnavailable"], "30%");

    let (refused, _, error) = kubectl
        .run(&["apply", "--server-side", "--validate=false", "-f", manifest])
        .await;
    assert!(!refused);
    assert_eq!(
        error.trim(),
        "Error from server: failed to create typed patch object (default/agent; \
         canary.daemonset.dev/v1alpha1, Kind=CanaryDaemonSet): .spec.canaryMaxUnavailable: \
         field not declared in schema"
    );
}
