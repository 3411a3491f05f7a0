//! The daemonset-canary binary's building blocks: metrics, the HTTP server and logging.
//!
//! They live in a library so that integration tests drive them directly; `main.rs` only parses the
//! command line and wires them together. Invariant: nothing here decides anything about a rollout;
//! decisions belong to `canary-state-machine`, I/O with the cluster to `canary-kube-adapter`.
//!
//! The command line (`main.rs`, module `cli`): `run` (the controller), `demo` (a rollout on the
//! embedded simulator, [`scenario`]), `crd`, `status NAME` ([`status_view`]) and `sim serve`.
//!
//! # Example
//!
//! Record a phase change and read it back as the Prometheus text that `/metrics` serves:
//!
//! ```
//! use daemonset_canary::metrics::{Metrics, Mode, RolloutKey};
//!
//! let metrics = Metrics::new()?;
//! let key = RolloutKey {
//!     namespace: "kube-system".into(),
//!     name: "node-agent".into(),
//!     mode: Mode::Driven,
//! };
//! metrics.enter_phase(&key, "canary", 1_767_225_600.0, Some(("started", 2.0)));
//! let text = metrics.encode()?;
//! assert!(text.contains(
//!     r#"canary_rollout_phase{mode="driven",name="node-agent",namespace="kube-system",phase="canary"} 1"#
//! ));
//! # Ok::<(), prometheus::Error>(())
//! ```

pub mod bridge;
pub mod demo;
pub mod kubevirt_observe;
pub mod metrics;
pub mod scenario;
pub mod server;
pub mod status_view;
pub mod telemetry;
