//! The state machine's integration tests, one binary: the reference scenarios and quirks, the default table's scenarios, property tests and a rollout model. Shared builders in [`common`].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod analysis_always;
mod analysis_edges;
mod common;
mod fixed_scenarios;
mod fixtures;
mod health;
mod pods;
mod pods_edges;
mod pre_pull;
mod properties;
mod reference_scenarios;
mod rollout_model;
