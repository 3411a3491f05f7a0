//! End-to-end suite on a real control plane: kube-apiserver, kube-controller-manager's DaemonSet
//! controller, kube-scheduler and KWOK nodes, built and started by `cargo xtask e2e` (or `cargo
//! xtask cluster up`), with the real `daemonset-canary run` binary driving the rollouts.
//!
//! Every test is `#[ignore]`: `cargo xtask e2e` runs them with `--ignored` and sets
//! `DAEMONSET_CANARY_E2E_KUBECONFIG` (the cluster), `KUBECTL`, `DAEMONSET_CANARY_E2E_AUDIT_LOG`
//! (the API server's audit log) and `DAEMONSET_CANARY_E2E_LOGS` (where the scenarios' own
//! controllers log). Run by hand with `--ignored` and without them, a test fails and says how to
//! run it; with them set and the cluster unreachable, it fails too. It never skips.
//!
//! Two phases, by module:
//! - [`deployed`]: scenarios against the one controller `cargo xtask e2e` starts as deploy/
//!   installs it (every namespace, leader election, the ServiceAccount's RBAC), on the cluster's
//!   50 nodes; `DAEMONSET_CANARY_E2E_METRICS` and `DAEMONSET_CANARY_E2E_CONTROLLER_LOG` name it.
//! - every other module: isolated scenarios ([`harness::E2e::isolated`]), each with its own
//!   namespace, KWOK nodes and controller processes, once that shared controller is stopped (it
//!   watches every namespace, and would act on theirs).
//!
//! Within a phase the scenarios run in parallel (`cargo xtask e2e --jobs`): each has its own
//! namespace, and counts what the controller did there in the API server's audit log.
//!
//! Adding a scenario: a `#[tokio::test] #[ignore = ...]` function in the module of its area
//! that starts with `E2e::isolated("short-name").start().await` (or `E2e::start` in
//! `deployed`), which gives it its namespace (deleted at the end), a kube client, kubectl, the
//! CLI ([`harness::E2e::verb`]) and the controller's metrics; [`audit`] reads what the API
//! server recorded of the controller's requests.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

#[path = "../support/mod.rs"]
mod support;

mod analysis;
mod audit;
// Surge and image pre-pull with the real DaemonSet controller (issue 50).
mod availability;
mod deployed;
mod failover;
mod harness;
// The node-health gate with the real controller (issue 46).
mod health_gates;
mod kubevirt;
// The simulator's node and neighbour behaviours on KWOK nodes (no controller involved).
mod node_health;
mod nodes;
mod recorder;
mod rollback;
mod tenant;
mod verbs;
mod workload;
