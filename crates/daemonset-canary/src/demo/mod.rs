//! The demo's presentation: recording a rollout's timeline and showing it as text, JSON lines and an
//! SVG plot. The demo's driver (simulator + controller) feeds it samples.

pub mod plot;
pub mod timeline;
