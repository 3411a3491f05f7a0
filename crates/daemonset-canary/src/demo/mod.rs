//! The demo: a rollout on the embedded simulator driven by the real controller ([`scenario`]),
//! recorded as a timeline and shown as text, JSON lines ([`timeline`]) and an SVG plot ([`plot`]);
//! a rollout with analysis is judged by the simulator's stand-in Prometheus ([`prometheus`]). The
//! CanaryDaemonSet it applies is built in [`manifest`].

pub mod manifest;
pub mod plot;
pub mod prometheus;
pub mod scenario;
pub mod timeline;
