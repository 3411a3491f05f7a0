//! The daemonset-canary crate's integration tests, one binary (linking one test binary against
//! kube, tokio and the simulator, not eleven, is most of what the test step saves): the CLI and
//! its verbs, the demo and its goldens, the examples, logs, the metrics endpoint and Prometheus,
//! the KubeVirt observe mode, the README walkthrough, the controller against `sim serve`, and the
//! scenarios. The end-to-end suite (`e2e`, a real control plane), the chaos scenarios (`chaos`,
//! the same control plane under faults) and the deterministic simulation (`simulation`) keep
//! binaries of their own: `cargo xtask e2e`, `cargo xtask chaos` and `cargo xtask soak` run them
//! by name.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

#[path = "../support/mod.rs"]
mod support;

mod analysis;
mod analysis_always;
mod bad_patches;
mod cli;
mod demo;
mod events;
mod examples;
mod health;
mod logs;
mod metrics_endpoint;
mod notifications;
mod observe_kubevirt;
mod prometheus;
mod readme_walkthrough;
mod restarts;
mod run_against_sim;
mod scenario;
mod sim_serve;
mod tenant;
