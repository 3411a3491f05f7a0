//! The simulator's integration tests, one binary: whole rollouts of the cluster model, the kube client and kubectl against the simulated API server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod cluster_rollout;
mod kube_client;
mod kubectl;
mod node_health;
