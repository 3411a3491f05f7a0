//! Controller CPU time and peak memory, with the controller in a process of its own.
//!
//! `daemonset-canary sim serve` runs the cluster; `daemonset-canary run --kubeconfig` runs the
//! controller against it over loopback, in real time. The harness creates the CanaryDaemonSets,
//! installs `v1`, rolls out `v2`, and reads the controller process's `/proc/<pid>/status`
//! (VmHWM: peak resident memory; RssAnon sampled for its peak without the executable's mapped
//! code, RssFile) and `/proc/<pid>/stat` (utime + stime). The real control plane has its own
//! measurement, `bench real` (real.rs), which uses the process helpers here.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use canary_kube_adapter::CanaryDaemonSet;
use canary_state_machine::Compatibility;
use daemonset_canary::demo::scenario;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// What the controller process cost.
#[derive(Debug, Clone)]
pub struct ProcessFigures {
    /// Which cluster (always canary-sim's `sim serve` here).
    pub target: &'static str,
    /// Nodes of the cluster.
    pub nodes: u32,
    /// CanaryDaemonSets rolled out at once.
    pub daemon_sets: u32,
    /// CPU seconds (user + system) of the controller for install and rollout.
    pub cpu_total: f64,
    /// CPU seconds of the `v2` rollout alone.
    pub cpu_rollout: f64,
    /// Peak resident memory of the controller (VmHWM), bytes.
    pub peak_memory: u64,
    /// Peak of its anonymous resident memory (RssAnon, sampled every 20 ms): the heap, what the
    /// controller keeps and decodes, without the pages mapped from its executable.
    pub peak_anonymous: u64,
    /// Its resident pages mapped from files (RssFile, at the end): the executable's code,
    /// shared and reclaimable, which grows with the binary rather than with the cluster.
    pub file_resident: u64,
    /// Wall time of the `v2` rollout (real time: the served simulator runs on the wall clock).
    pub rollout_wall: Duration,
    /// The command that ran the controller.
    pub controller: String,
}

/// A child process killed when dropped.
pub struct Owned(pub Child);

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs one measurement: `binary` (the daemonset-canary executable) serves canary-sim,
/// `controller_binary` (the executable the image ships, possibly built without the simulator)
/// runs the controller.
pub async fn run(
    binary: &Path,
    controller_binary: &Path,
    nodes: u32,
    daemon_sets: u32,
) -> Result<ProcessFigures> {
    let dir = std::env::temp_dir().join(format!(
        "canary-bench-{}-{nodes}-{daemon_sets}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let kubeconfig = dir.join("kubeconfig");
    let _ = std::fs::remove_file(&kubeconfig);
    let _sim = Owned(
        Command::new(binary)
            .args([
                "sim",
                "serve",
                "--nodes",
                &nodes.to_string(),
                "--kubeconfig",
            ])
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {} sim serve", binary.display()))?,
    );
    wait_for_file(&kubeconfig, Duration::from_secs(120)).await?;
    let client = client(&kubeconfig).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &canary_kube_adapter::crd()?)
        .await
        .context("cannot create the CanaryDaemonSet CRD")?;
    let namespace = scenario::NAMESPACE.to_owned();
    let (controller, command) = start_controller(controller_binary, &kubeconfig)?;
    let pid = controller.0.id();
    let anonymous = AnonymousPeak::sample(pid);

    let api: Api<CanaryDaemonSet> = Api::namespaced(client.clone(), &namespace);
    let names: Vec<String> = (0..daemon_sets)
        .map(|i| format!("{}-{i}", scenario::NAME))
        .collect();
    for name in &names {
        let object: CanaryDaemonSet = serde_json::from_value(named(
            scenario::manifest(Compatibility::Fixed, "v1", "healthy"),
            name,
            &namespace,
        ))?;
        api.create(&PostParams::default(), &object)
            .await
            .context("cannot create a CanaryDaemonSet")?;
    }
    wait_successful(&api, &names, nodes, "v1").await?;
    let cpu_before = cpu_seconds(pid)?;
    let started = Instant::now();
    for name in &names {
        let spec = named(
            scenario::manifest(Compatibility::Fixed, "v2", "healthy"),
            name,
            &namespace,
        )["spec"]
            .clone();
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": spec})),
        )
        .await
        .context("cannot move a CanaryDaemonSet to v2")?;
    }
    wait_successful(&api, &names, nodes, "v2").await?;
    let rollout_wall = started.elapsed();
    let cpu_total = cpu_seconds(pid)?;
    let peak_memory = status_kib(pid, "VmHWM")? * 1024;
    let file_resident = status_kib(pid, "RssFile")? * 1024;
    let peak_anonymous = anonymous.stop().await;
    drop(controller);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ProcessFigures {
        target: "canary-sim",
        nodes,
        daemon_sets,
        cpu_total,
        cpu_rollout: cpu_total - cpu_before,
        peak_memory,
        peak_anonymous,
        file_resident,
        rollout_wall,
        controller: command,
    })
}

/// Waits until the namespace's `default` ServiceAccount exists (pods are admitted then).
pub async fn wait_for_service_account(client: &Client, namespace: &str) -> Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let started = Instant::now();
    while accounts
        .get_opt("default")
        .await
        .context("cannot read ServiceAccounts")?
        .is_none()
    {
        if started.elapsed() > Duration::from_secs(60) {
            bail!("no default ServiceAccount in {namespace} after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// The scenario's manifest renamed to `name` (object, labels and selector), in `namespace`.
pub fn named(mut manifest: Value, name: &str, namespace: &str) -> Value {
    manifest["metadata"]["name"] = json!(name);
    manifest["metadata"]["namespace"] = json!(namespace);
    let labels = json!({"app.kubernetes.io/name": name});
    let template = &mut manifest["spec"]["template"];
    template["metadata"]["labels"] = labels.clone();
    template["spec"]["selector"]["matchLabels"] = labels.clone();
    template["spec"]["template"]["metadata"]["labels"] = labels;
    manifest
}

pub fn start_controller(binary: &Path, kubeconfig: &Path) -> Result<(Owned, String)> {
    let has_run = Command::new(binary)
        .args(["run", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let (program, args): (PathBuf, Vec<String>) = if has_run {
        (
            binary.to_owned(),
            vec![
                "run".into(),
                "--metrics-addr".into(),
                "127.0.0.1:0".into(),
                "--kubeconfig".into(),
            ],
        )
    } else {
        // Before the binary had `run`: this harness's own minimal controller process.
        let me = std::env::current_exe().context("cannot find the harness executable")?;
        (me, vec!["controller".into(), "--kubeconfig".into()])
    };
    let command = format!(
        "{} {} {}",
        program.display(),
        args.join(" "),
        kubeconfig.display()
    );
    let child = Command::new(&program)
        .args(&args)
        .arg(kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {command}"))?;
    Ok((Owned(child), command))
}

/// A client of the cluster `kubeconfig` describes.
pub async fn client(kubeconfig: &Path) -> Result<Client> {
    let file =
        kube::config::Kubeconfig::read_from(kubeconfig).context("cannot read the kubeconfig")?;
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .context("cannot use the kubeconfig")?;
    Client::try_from(config).context("cannot build a client")
}

async fn wait_for_file(path: &Path, limit: Duration) -> Result<()> {
    let started = Instant::now();
    while !path.exists() {
        if started.elapsed() > limit {
            bail!("{} did not appear within {limit:?}", path.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

async fn wait_successful(
    api: &Api<CanaryDaemonSet>,
    names: &[String],
    nodes: u32,
    version: &str,
) -> Result<()> {
    // Generous against the ideal (about a minute and a half for any size, in real time).
    let limit = Duration::from_secs(300 + u64::from(nodes) / 10);
    let started = Instant::now();
    'names: for name in names {
        loop {
            let object = api
                .get(name)
                .await
                .context("cannot read a CanaryDaemonSet")?;
            let status = object.status.unwrap_or_default();
            let current = object.metadata.generation == status.observed_generation;
            match status.phase_name() {
                Some("successful") if current && status.updated_ready == nodes => continue 'names,
                Some("failed") => bail!(
                    "{name} failed at {version}: {}",
                    status.message.unwrap_or_default()
                ),
                _ => {}
            }
            if started.elapsed() > limit {
                bail!("{name} did not reach {version} within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// utime + stime of `pid`, in seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .context("cannot read /proc/<pid>/stat")?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64> {
        Ok(fields
            .get(i)
            .context("short /proc/<pid>/stat")?
            .parse::<u64>()? as f64)
    };
    Ok((ticks(11)? + ticks(12)?) / clock_ticks_per_second())
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The field `name` (in KiB, as the kernel gives it) of `/proc/<pid>/status`.
pub fn status_kib(pid: u32, name: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .context("cannot read /proc/<pid>/status")?;
    let line = status
        .lines()
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(':'))
        })
        .with_context(|| format!("no {name} in /proc/<pid>/status"))?;
    line.split_whitespace()
        .nth(1)
        .with_context(|| format!("malformed {name}"))?
        .parse()
        .with_context(|| format!("malformed {name}"))
}

/// The highest RssAnon of a process, sampled every 20 ms (the kernel keeps no peak of it).
pub struct AnonymousPeak {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<u64>,
}

impl AnonymousPeak {
    /// Starts sampling `pid`.
    pub fn sample(pid: u32) -> Self {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut peak = 0;
            loop {
                if let Ok(kib) = status_kib(pid, "RssAnon") {
                    peak = peak.max(kib * 1024);
                }
                tokio::select! {
                    _ = &mut stopped => return peak,
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
        });
        Self { stop, task }
    }

    /// Stops sampling; the peak.
    pub async fn stop(self) -> u64 {
        let _ = self.stop.send(());
        self.task.await.unwrap_or(0)
    }
}
