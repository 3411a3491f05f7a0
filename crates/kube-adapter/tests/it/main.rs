//! The adapter's integration tests, one binary (linking kube and tokio once, not once per file):
//! the controller against canary-sim ([`sim`], [`trust`], the Pods driver in [`pods_driver`], its analysis gates against a fake Prometheus in
//! [`analysis`]), the exact wire format against a mock
//! API server ([`wire`]), property tests of every parsed input ([`fuzz_spec`]), and the KubeVirt
//! observe mode against a stand-in virt-operator ([`observe_kubevirt`], [`kubevirt_standin`]).
//! Shared builders live in [`support`].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod analysis;
mod fuzz_spec;
mod kubevirt_standin;
mod lease;
mod observe_kubevirt;
mod pods_driver;
mod sim;
mod support;
mod trust;
mod wire;
