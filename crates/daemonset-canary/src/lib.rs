//! The daemonset-canary binary's building blocks: metrics, the HTTP server and logging.
//!
//! They live in a library so that integration tests drive them directly; `main.rs` only parses the
//! command line and wires them together. Invariant: nothing here decides anything about a rollout;
//! decisions belong to `canary-state-machine`, I/O with the cluster to `canary-kube-adapter`.

pub mod bridge;
pub mod demo;
pub mod kubevirt_observe;
pub mod metrics;
pub mod scenario;
pub mod server;
pub mod status_view;
pub mod telemetry;
