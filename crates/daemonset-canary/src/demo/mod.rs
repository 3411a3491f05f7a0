//! The demo: a rollout on the embedded simulator driven by the real controller ([`scenario`]),
//! recorded as a timeline and shown as text, JSON lines ([`timeline`]) and an SVG plot ([`plot`]).

pub mod plot;
pub mod scenario;
pub mod timeline;
