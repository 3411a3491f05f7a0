//! Observe mode for KubeVirt, wired to the metrics: the phase of virt-operator's own upgrade of
//! virt-handler as `canary_*` metrics with `mode="observed"`, plus the KubeVirt versions.
//!
//! The derivation lives in [`canary_kubevirt`]; this module feeds its reports
//! through the same [`bridge`] the controller uses (so the series are the controller's, with
//! `mode="observed"`), exports `canary_kubevirt_version_info`, observes each derivation pass in
//! `canary_reconcile_duration_seconds{mode="observed"}`, drops the series of DaemonSets that
//! disappear, and raises the readiness flag once the caches have listed. Invariant: nothing here
//! writes to the cluster.

use crate::metrics::{Metrics, Mode, RolloutKey, bridge};
use anyhow::Context;
use canary_kube_adapter::Health;
use canary_kubevirt::{self as kubevirt, ObserveConfig, Snapshot};
use prometheus::{IntGaugeVec, Opts};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

/// `canary_kubevirt_version_info{namespace,name,target_version,observed_version} 1`: one series
/// per KubeVirt object, replaced when a version changes (so the label set stays bounded).
#[derive(Clone)]
pub struct KubeVirtVersionInfo {
    gauge: IntGaugeVec,
}

impl KubeVirtVersionInfo {
    /// Registers the gauge in `metrics`' registry.
    pub fn register(metrics: &Metrics) -> Result<Self, prometheus::Error> {
        let gauge = IntGaugeVec::new(
            Opts::new(
                "kubevirt_version_info",
                "KubeVirt versions per KubeVirt object, always 1: target_version is being rolled out (status.targetKubeVirtVersion), observed_version is the last one virt-operator finished (status.observedKubeVirtVersion).",
            ),
            &["namespace", "name", "target_version", "observed_version"],
        )?;
        metrics.registry().register(Box::new(gauge.clone()))?;
        Ok(Self { gauge })
    }

    /// Replaces every series with the versions in `snapshot`.
    pub fn update(&self, snapshot: &Snapshot) {
        self.gauge.reset();
        for kv in &snapshot.kubevirts {
            self.gauge
                .with_label_values(&[
                    kv.namespace.as_str(),
                    kv.name.as_str(),
                    kv.target_version.as_str(),
                    kv.observed_version.as_str(),
                ])
                .set(1);
        }
    }
}

/// Observes KubeVirt with `client` until `shutdown` completes, exporting into `metrics` and
/// marking `health` started (ready) once the caches are synced. The reports of `config.observer` feed the
/// bridge (each derivation pass is one observed reconcile) and `config.snapshot` drives the
/// version info; namespace and clock are the
/// caller's. Fails at start when KubeVirt objects cannot be listed (the root of the error is a
/// [`canary_kubevirt::ObserveError`]).
pub async fn run(
    client: kube::Client,
    metrics: Arc<Metrics>,
    health: Health,
    config: ObserveConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let info = KubeVirtVersionInfo::register(&metrics)
        .context("cannot register canary_kubevirt_version_info")?;
    let bridge = tokio::spawn(bridge::run(
        config.observer.reports(),
        metrics.clone(),
        Mode::Observed,
    ));
    let snapshots = tokio::spawn(follow_snapshots(
        config.snapshot.subscribe(),
        metrics,
        info,
        health,
    ));
    // Keep the typed error as the root of the chain, so callers can tell a missing KubeVirt CRD.
    let result = kubevirt::run(client, config, shutdown)
        .await
        .map_err(anyhow::Error::from);
    bridge.abort();
    snapshots.abort();
    result
}

async fn follow_snapshots(
    mut snapshots: tokio::sync::watch::Receiver<Snapshot>,
    metrics: Arc<Metrics>,
    info: KubeVirtVersionInfo,
    health: Health,
) {
    let mut known = BTreeSet::new();
    loop {
        let snapshot = snapshots.borrow_and_update().clone();
        if snapshot.synced {
            health.set_started();
        }
        info.update(&snapshot);
        let present: BTreeSet<(String, String)> = snapshot
            .daemon_sets
            .iter()
            .map(|ds| (ds.namespace.clone(), ds.name.clone()))
            .collect();
        for (namespace, name) in known.difference(&present) {
            metrics.forget(&RolloutKey {
                namespace: namespace.clone(),
                name: name.clone(),
                mode: Mode::Observed,
            });
        }
        known = present;
        if snapshots.changed().await.is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_kubevirt::KubeVirtVersions;

    #[test]
    fn version_info_keeps_one_series_per_kubevirt() {
        let metrics = Metrics::new().unwrap();
        let info = KubeVirtVersionInfo::register(&metrics).unwrap();
        let snapshot = |target: &str| Snapshot {
            synced: true,
            kubevirts: vec![KubeVirtVersions {
                namespace: "kubevirt".into(),
                name: "kubevirt".into(),
                target_version: target.into(),
                observed_version: "v1.5.0".into(),
            }],
            ..Snapshot::default()
        };
        info.update(&snapshot("v1.5.0"));
        info.update(&snapshot("v1.6.0"));
        let text = metrics.encode().unwrap();
        let series: Vec<&str> = text
            .lines()
            .filter(|line| line.starts_with("canary_kubevirt_version_info{"))
            .collect();
        assert_eq!(
            series,
            [
                r#"canary_kubevirt_version_info{name="kubevirt",namespace="kubevirt",observed_version="v1.5.0",target_version="v1.6.0"} 1"#
            ]
        );
        info.update(&Snapshot::default());
        assert!(
            !metrics
                .encode()
                .unwrap()
                .contains("canary_kubevirt_version_info{")
        );
    }
}
