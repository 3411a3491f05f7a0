//! The install-strategy Job runner: the part of a kubelet KWOK cannot play for virt-operator.
//!
//! Job: virt-operator learns what a KubeVirt version installs from an install strategy, a
//! ConfigMap it does not write itself: it creates a Job running its own image with
//! `virt-operator --dump-install-strategy` (pkg/virt-operator/strategy_job.go), whose container
//! computes the strategy for the Job's `TARGET_DEPLOYMENT_CONFIG` and creates the ConfigMap. A
//! KWOK pod runs nothing, so [`serve`] runs that container here: for every install-strategy Job
//! not done yet, the locally built virt-operator with the Job's command and environment, as the
//! Job's ServiceAccount (`kubevirt-operator`, the same identity as the operator); then it
//! reports the Job's pod as the kubelet would report an exited container: `Succeeded` with exit
//! code 0 (or `Failed` with exit code 1 and the error when the dump failed), so the Job
//! controller completes the Job and virt-operator garbage-collects it.
//!
//! Invariants: a Job is served once per pod; the runner never edits the strategy nor any object
//! but the Job's pod status; it logs what it did to `target/cluster/logs/virt-operator-jobs.log`.

use super::{NAMESPACE, operator_kubeconfig};
use crate::cluster::{Cluster, Layout};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

/// The label virt-operator puts on install-strategy Jobs (and ConfigMaps).
const STRATEGY_LABEL: &str = "kubevirt.io/install-strategy";

/// Serves install-strategy Jobs until killed.
pub fn serve(layout: &Layout, cluster: &Cluster) -> Result<()> {
    say(&format!(
        "watching Jobs labelled {STRATEGY_LABEL} in {NAMESPACE}"
    ));
    let mut served: BTreeSet<String> = BTreeSet::new();
    loop {
        if let Err(error) = serve_once(layout, cluster, &mut served) {
            // The API server restarting, a Job deleted under our feet: try again.
            say(&format!("{error:#}"));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn serve_once(layout: &Layout, cluster: &Cluster, served: &mut BTreeSet<String>) -> Result<()> {
    let jobs = list(cluster, "jobs", &format!("-l={STRATEGY_LABEL}"))?;
    for job in jobs {
        let name = job
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if job
            .pointer("/status/completionTime")
            .is_some_and(|t| !t.is_null())
            || job.pointer("/metadata/deletionTimestamp").is_some()
        {
            continue;
        }
        // The pod the Job controller made, once the scheduler placed it and KWOK started it:
        // reporting it done any earlier would race KWOK's own status writes.
        let pods = list(cluster, "pods", &format!("-l=job-name={name}"))?;
        let Some(pod) = pods.into_iter().find(|p| {
            p.pointer("/metadata/deletionTimestamp").is_none()
                && p.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        }) else {
            continue;
        };
        let pod_name = pod
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let uid = pod
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if served.contains(&uid) {
            continue;
        }
        let started = std::time::Instant::now();
        let result = dump(layout, &job);
        match &result {
            Ok(()) => say(&format!(
                "{name}: dumped the install strategy for version {} in {:.1} s",
                job.pointer("/metadata/annotations/kubevirt.io~1install-strategy-version")
                    .and_then(Value::as_str)
                    .unwrap_or("?"),
                started.elapsed().as_secs_f64()
            )),
            Err(error) => say(&format!("{name}: the dump failed: {error:#}")),
        }
        report_exit(
            cluster,
            &pod,
            result.as_ref().err().map(|e| format!("{e:#}")),
        )
        .with_context(|| format!("cannot report the end of pod {pod_name}"))?;
        served.insert(uid);
    }
    Ok(())
}

/// `kubectl get <kind> -n kubevirt <selector> -o json`, its items.
fn list(cluster: &Cluster, kind: &str, selector: &str) -> Result<Vec<Value>> {
    let text = cluster.kubectl(&["get", kind, "-n", NAMESPACE, selector, "-o", "json"])?;
    let listed: Value = serde_json::from_str(&text).context("kubectl get printed no JSON")?;
    Ok(listed
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// Runs the Job's container here: its command (`virt-operator --dump-install-strategy`) with
/// its environment, as the operator's ServiceAccount.
fn dump(layout: &Layout, job: &Value) -> Result<()> {
    let container = job
        .pointer("/spec/template/spec/containers/0")
        .context("the Job has no container")?;
    let command: Vec<&str> = container["command"]
        .as_array()
        .map(|c| c.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if command.first() != Some(&"virt-operator") || !command.contains(&"--dump-install-strategy") {
        bail!("the Job's command is {command:?}, not virt-operator --dump-install-strategy");
    }
    let mut run = Command::new(layout.bin.join("virt-operator"));
    run.args(command.iter().skip(1)).arg(format!(
        "--kubeconfig={}",
        operator_kubeconfig(layout).display()
    ));
    for variable in container["env"].as_array().into_iter().flatten() {
        if let (Some(name), Some(value)) = (variable["name"].as_str(), variable["value"].as_str()) {
            run.env(name, value);
        }
    }
    let output = run
        .output()
        .context("cannot run virt-operator --dump-install-strategy")?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        bail!(
            "virt-operator --dump-install-strategy exited with {}: {}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    Ok(())
}

/// One line of the runner's log, with the time.
fn say(message: &str) {
    eprintln!("{} install-strategy Job runner: {message}", now_rfc3339());
}

/// Reports the pod's container as exited: 0 and `Succeeded`, or 1 and `Failed` with `error`.
fn report_exit(cluster: &Cluster, pod: &Value, error: Option<String>) -> Result<()> {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let finished = now_rfc3339();
    let (phase, code, reason) = match &error {
        None => ("Succeeded", 0, "Completed"),
        Some(_) => ("Failed", 1, "Error"),
    };
    let mut terminated = serde_json::Map::new();
    terminated.insert("exitCode".into(), json!(code));
    terminated.insert("reason".into(), json!(reason));
    terminated.insert(
        "startedAt".into(),
        pod.pointer("/status/containerStatuses/0/state/running/startedAt")
            .cloned()
            .unwrap_or(Value::Null),
    );
    terminated.insert("finishedAt".into(), json!(finished));
    if let Some(message) = error {
        terminated.insert(
            "message".into(),
            json!(message.chars().take(1024).collect::<String>()),
        );
    }
    let statuses: Vec<Value> = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|status| {
            let field = |name: &str| status.get(name).cloned().unwrap_or(Value::Null);
            json!({
                "name": field("name"),
                "image": field("image"),
                "imageID": field("imageID"),
                "containerID": field("containerID"),
                "restartCount": field("restartCount"),
                "ready": false,
                "started": false,
                "lastState": {},
                "state": {"terminated": terminated.clone()},
            })
        })
        .collect();
    let condition = |type_: &str| json!({"type": type_, "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished});
    let patch = json!({"status": {
        "phase": phase,
        "conditions": [condition("Ready"), condition("ContainersReady"),
                       {"type": "Initialized", "status": "True", "lastTransitionTime": finished},
                       {"type": "PodScheduled", "status": "True", "lastTransitionTime": finished}],
        "containerStatuses": statuses,
    }});
    cluster.kubectl(&[
        "patch",
        "pod",
        name,
        "-n",
        NAMESPACE,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ])?;
    Ok(())
}

/// The current UTC time as RFC 3339 seconds (`2026-12-07T00:00:00Z`), from the system clock.
fn now_rfc3339() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    rfc3339(seconds)
}

/// Seconds since the epoch as RFC 3339 UTC (civil-from-days, Howard Hinnant's algorithm).
fn rfc3339(seconds: u64) -> String {
    let days = i64::try_from(seconds / 86_400).unwrap_or_default();
    let rest = seconds % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc_civil_time() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_601_600 + 3_723), "2026-12-07T01:02:03Z");
    }
}
