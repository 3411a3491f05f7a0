//! The daemonset-canary binary's building blocks: metrics, the HTTP server, logging, the demo
//! and the views it prints.
//!
//! They live in a library so that integration tests drive them directly; `main.rs` only parses the
//! command line and the front ends in its `cli` module wire these together. Invariant: nothing
//! here decides anything about a rollout; decisions belong to `canary-state-machine`, I/O with
//! the cluster to `canary-kube-adapter`.
//!
//! - [`metrics`]: the Prometheus registry, the [`metrics::bridge`] that derives every metric from
//!   the controller's reports, and the KubeVirt observe mode's extras ([`metrics::kubevirt`]).
//! - `demo`: the scenarios on the embedded simulator, their timeline and plot (feature
//!   `simulator`, on by default; the controller image leaves it out).
//! - [`status_view`]: `daemonset-canary status NAME`; [`format`](mod@format): durations, ages, bars.
//! - [`server`]: `/metrics`, `/healthz`, `/readyz`; [`listen`]: listening addresses and what a
//!   failed bind means; [`telemetry`]: logs.
//!
//! The command line (`main.rs`, module `cli`): `run` (the controller), `demo` (a rollout on the
//! embedded simulator, `demo::scenario`), `crd`, `status NAME` ([`status_view`]),
//! `observe-kubevirt` and `sim serve`.
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

#[cfg(feature = "simulator")]
pub mod demo;
pub mod format;
pub mod listen;
pub mod metrics;
pub mod server;
pub mod status_view;
pub mod telemetry;
