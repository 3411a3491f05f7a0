//! Shared test inputs: a virt-handler-like DaemonSet and the third-party fixtures.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub use canary_testkit::{pod_spec, pod_spec_mut, template_meta_mut};
use canary_tls_migration::TlsConfig;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Container;

pub const CERT_MOUNT_PATH: &str = "/etc/virt-handler/clientcertificates";

/// A DaemonSet shaped like KubeVirt's `components.NewHandlerDaemonSet` of the TLS era:
/// container `virt-handler` with its args, the client-cert secret volume mounted at
/// /etc/virt-handler/clientcertificates, the server certs next to it, the support label.
pub fn virt_handler() -> DaemonSet {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "virt-handler",
            "namespace": "kubevirt",
            "generation": 1,
            "uid": "random-id",
            "labels": {
                "kubevirt.io": "virt-handler",
                "app.kubernetes.io/managed-by": "virt-operator",
                "kubevirt.io/supports-migration-cn-types": "true"
            }
        },
        "spec": {
            "selector": {"matchLabels": {"kubevirt.io": "virt-handler"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"kubevirt.io": "virt-handler", "prometheus.kubevirt.io": "true"}},
                "spec": {
                    "serviceAccountName": "kubevirt-handler",
                    "hostPID": true,
                    "initContainers": [{
                        "name": "virt-launcher",
                        "image": "quay.io/kubevirt/virt-launcher:v1.7.0",
                        "command": ["/bin/sh", "-c"],
                        "args": ["node-labeller.sh"]
                    }],
                    "containers": [{
                        "name": "virt-handler",
                        "image": "quay.io/kubevirt/virt-handler:v1.7.0",
                        "command": ["virt-handler"],
                        "args": [
                            "--port", "8443",
                            "--hostname-override", "$(NODE_NAME)",
                            "--pod-ip-address", "$(MY_POD_IP)",
                            "--max-metric-requests", "3",
                            "--console-server-port", "8186",
                            "--graceful-shutdown-seconds", "315",
                            "-v", "2"
                        ],
                        "volumeMounts": [
                            {"name": "kubevirt-virt-handler-certs", "mountPath": CERT_MOUNT_PATH, "readOnly": true},
                            {"name": "kubevirt-virt-handler-server-certs", "mountPath": "/etc/virt-handler/servercertificates", "readOnly": true},
                            {"name": "libvirt-runtimes", "mountPath": "/var/run/kubevirt-libvirt-runtimes"}
                        ]
                    }],
                    "volumes": [
                        {"name": "kubevirt-virt-handler-certs", "secret": {"secretName": "kubevirt-virt-handler-certs", "optional": true}},
                        {"name": "kubevirt-virt-handler-server-certs", "secret": {"secretName": "kubevirt-virt-handler-server-certs", "optional": true}},
                        {"name": "libvirt-runtimes", "hostPath": {"path": "/var/run/kubevirt-libvirt-runtimes"}}
                    ]
                }
            }
        },
        "status": {
            "currentNumberScheduled": 1, "desiredNumberScheduled": 1, "numberMisscheduled": 0,
            "numberReady": 1, "updatedNumberScheduled": 1, "numberAvailable": 1, "observedGeneration": 1
        }
    }))
    .unwrap()
}

/// virt-handler with the flag already in its args (as after the TLS rollout).
pub fn virt_handler_with_flag() -> DaemonSet {
    let mut ds = virt_handler();
    args_mut(&mut ds, 0).extend(["--migration-cn-types".to_owned(), "migration".to_owned()]);
    ds
}

/// virt-handler with the cert volume and its mount gone (as after the detach rollout).
pub fn virt_handler_without_cert() -> DaemonSet {
    let mut ds = virt_handler();
    let spec = pod_spec_mut(&mut ds);
    spec.volumes
        .as_mut()
        .unwrap()
        .retain(|v| v.name != "kubevirt-virt-handler-certs");
    spec.containers[0]
        .volume_mounts
        .as_mut()
        .unwrap()
        .retain(|m| m.name != "kubevirt-virt-handler-certs");
    ds
}

/// Loads one of the repository's third-party DaemonSet fixtures (testdata/daemonsets/).
pub fn fixture(file: &str) -> DaemonSet {
    let path = format!(
        "{}/../../testdata/daemonsets/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every DaemonSet fixture file name.
pub const FIXTURES: [&str; 5] = [
    "fluentd-elasticsearch.yaml",
    "kube-flannel-ds.yaml",
    "longhorn-manager-live-unavailable.yaml",
    "node-exporter.yaml",
    "nvidia-device-plugin.yaml",
];

pub fn container<'a>(ds: &'a DaemonSet, name: &str) -> &'a Container {
    pod_spec(ds)
        .containers
        .iter()
        .find(|c| c.name == name)
        .unwrap()
}

pub fn args(ds: &DaemonSet, index: usize) -> Vec<String> {
    pod_spec(ds).containers[index]
        .args
        .clone()
        .unwrap_or_default()
}

pub fn args_mut(ds: &mut DaemonSet, index: usize) -> &mut Vec<String> {
    pod_spec_mut(ds).containers[index]
        .args
        .get_or_insert_with(Vec::new)
}

/// How many args of container `index` are exactly `token`.
pub fn count_arg(ds: &DaemonSet, index: usize, token: &str) -> usize {
    args(ds, index).iter().filter(|a| *a == token).count()
}

pub fn volume_names(ds: &DaemonSet) -> Vec<String> {
    pod_spec(ds)
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.clone())
        .collect()
}

/// Every (container name, mount name) pair, across containers and init containers.
pub fn mounts(ds: &DaemonSet) -> Vec<(String, String)> {
    let spec = pod_spec(ds);
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| {
            c.volume_mounts
                .iter()
                .flatten()
                .map(|m| (c.name.clone(), m.name.clone()))
        })
        .collect()
}

/// Mounts whose volume does not exist: the API server rejects such a pod spec.
pub fn dangling_mounts(ds: &DaemonSet) -> Vec<(String, String)> {
    let volumes = volume_names(ds);
    mounts(ds)
        .into_iter()
        .filter(|(_, m)| !volumes.contains(m))
        .collect()
}

/// Both configurations the crate offers.
pub fn both_modes() -> [TlsConfig; 2] {
    [TlsConfig::default(), TlsConfig::reference()]
}
