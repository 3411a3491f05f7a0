//! The simulator's integration tests, one binary: whole rollouts of the cluster model, the kube client, kubectl and kube-lease-manager against the simulated API server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster_rollout;
mod kube_client;
mod kubectl;
mod lease_manager;
