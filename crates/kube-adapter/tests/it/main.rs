//! The adapter's integration tests, one binary (linking kube and tokio once, not once per file):
//! the controller against canary-sim ([`sim`], [`trust`], the Pods driver in [`pods_driver`], its analysis gates against a fake Prometheus in
//! [`analysis`]), the exact wire format against a mock
//! API server ([`wire`]) and property tests of every parsed input ([`fuzz_spec`]). (The KubeVirt
//! observe mode's tests are canary-kubevirt's.)
//! Shared builders live in [`support`].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod analysis;
mod fuzz_spec;
mod lease;
mod pods_driver;
mod pre_pull;
mod sim;
mod support;
mod trust;
mod wire;
