//! What watches see while a scenario runs ([`Recorder`]): every phase the CanaryDaemonSet's
//! status goes through and every pod of the node agent that ever existed. A poll can miss a
//! phase that lasts one pass, and a pod that lives between two polls; a watch sees every
//! update the API server stores.

use crate::harness::{E2e, image_and_ready, version_of};
use daemonset_canary::demo::scenario::NAME;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use std::time::Duration;

/// One pod of the node agent as a watch saw it.
#[derive(Clone, Debug)]
pub struct PodRecord {
    pub name: String,
    pub node: String,
    pub version: String,
    /// Whether it was ever seen Ready.
    pub ever_ready: bool,
}

/// What watches saw while a scenario ran: every phase the CanaryDaemonSet's status went
/// through (in order, consecutive repeats merged: a status write is an update event, so
/// unlike a poll no phase is missed however short), and every pod of the node agent that
/// ever existed. Its watches end when it is dropped.
pub struct Recorder {
    phases: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    pods: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, PodRecord>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Recorder {
    /// The phases seen so far, starting with the phase the object had when the recording
    /// started.
    pub fn phases(&self) -> Vec<String> {
        self.phases.lock().unwrap().clone()
    }

    /// Every pod seen so far that ran `version`.
    pub fn pods_on(&self, version: &str) -> Vec<PodRecord> {
        self.pods
            .lock()
            .unwrap()
            .values()
            .filter(|p| p.version == version)
            .cloned()
            .collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl E2e {
    /// Starts recording the CanaryDaemonSet's phases and the node agent's pods ([`Recorder`]);
    /// returns once both watches have listed.
    pub async fn record(&self) -> Recorder {
        use futures::StreamExt;
        use kube::runtime::watcher;
        let phases = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let pods = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
        let (listed_tx, mut listed_rx) = tokio::sync::mpsc::channel::<()>(2);
        let canaries = watcher(
            self.canaries(),
            watcher::Config::default().fields(&format!("metadata.name={NAME}")),
        );
        let seen = phases.clone();
        let listed = listed_tx.clone();
        let canary_task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(canaries);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        let _ = listed.send(()).await;
                    }
                    Ok(watcher::Event::Apply(cds) | watcher::Event::InitApply(cds)) => {
                        if let Some(phase) =
                            cds.status.and_then(|s| s.phase_name().map(str::to_owned))
                        {
                            let mut seen = seen.lock().unwrap();
                            if seen.last() != Some(&phase) {
                                seen.push(phase);
                            }
                        }
                    }
                    _ => {}
                }
            }
        });
        let pod_api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let pod_stream = watcher(
            pod_api,
            watcher::Config::default().labels(&format!("app.kubernetes.io/name={NAME}")),
        );
        let records = pods.clone();
        let pod_task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(pod_stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        let _ = listed_tx.send(()).await;
                    }
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        let Some(uid) = pod.metadata.uid.clone() else {
                            continue;
                        };
                        let ready = image_and_ready(&pod).1;
                        let mut records = records.lock().unwrap();
                        let record = records.entry(uid).or_insert_with(|| PodRecord {
                            name: pod.metadata.name.clone().unwrap_or_default(),
                            node: String::new(),
                            version: version_of(&pod),
                            ever_ready: false,
                        });
                        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                            record.node = node;
                        }
                        record.ever_ready |= ready;
                    }
                    _ => {}
                }
            }
        });
        for _ in 0..2 {
            tokio::time::timeout(Duration::from_secs(30), listed_rx.recv())
                .await
                .expect("the recorder's watches did not list within 30 s");
        }
        Recorder {
            phases,
            pods,
            tasks: vec![canary_task, pod_task],
        }
    }
}
