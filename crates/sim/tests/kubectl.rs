//! The real `kubectl` against the simulator served over HTTP.
//!
//! Runs the kubectl named by `KUBECTL` (what `cargo xtask ci` sets: the one it builds from the
//! pinned Kubernetes release into `target/cluster/bin/`), else `kubectl` on PATH; the test fails,
//! never skips, without one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

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
        let dir = std::env::temp_dir().join(format!("canary-sim-kubectl-{}", std::process::id()));
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

    async fn ok(&self, args: &[&str]) -> String {
        let (success, stdout, stderr) = self.run(args).await;
        assert!(success, "kubectl {args:?} failed:\n{stdout}\n{stderr}");
        stdout
    }
}

fn stored(sim: &Sim) -> DaemonSet {
    sim.store()
        .get::<DaemonSet>(Some("kube-system"), NAME)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_the_simulator() {
    // Fast kubelets: the cluster model runs in real time here, and rollouts should take
    // well under a second per pod.
    let kubelet = KubeletConfig {
        start_latency: Duration::from_millis(50),
        ready_delay: Duration::from_millis(100),
        termination_grace: Duration::from_millis(50),
        ..KubeletConfig::default()
    };
    let sim = Sim::builder()
        .cluster_config(ClusterConfig {
            kubelet,
            ..ClusterConfig::default()
        })
        .nodes(3)
        .build()
        .unwrap();
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

    let rolled = kubectl
        .ok(&[
            "rollout",
            "status",
            &format!("ds/{NAME}"),
            "-n",
            "kube-system",
            "--timeout=60s",
        ])
        .await;
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
    let rolled = kubectl
        .ok(&[
            "rollout",
            "status",
            &format!("ds/{NAME}"),
            "-n",
            "kube-system",
            "--timeout=60s",
        ])
        .await;
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
