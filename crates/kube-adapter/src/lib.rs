//! The Kubernetes side of daemonset-canary: the `CanaryDaemonSet` resource and its reconcile loop.
//!
//! Work in progress.
pub mod crd;
pub mod desired;
mod error;
pub mod meta;
pub mod patch;

pub use error::Error;
pub mod clock;
pub mod controller;
pub mod index;
pub mod observer;
pub mod reconcile;
pub mod status;
