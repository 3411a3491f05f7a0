//! The KubeVirt observer's integration tests, one binary (linking kube and tokio once): observe
//! mode against canary-sim with a stand-in virt-operator making the reference writes
//! ([`observe`], [`standin`]).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod observe;
mod standin;
