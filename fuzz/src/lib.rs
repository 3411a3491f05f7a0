//! The fuzz targets' bodies: one function per target in `fuzz_targets/`, each taking the raw
//! input libFuzzer generates.
//!
//! Every input parser and decider of the project gets arbitrary input here: the
//! `CanaryDaemonSet` spec and stored objects (JSON), `maxUnavailable` strings, the annotation,
//! readiness, crash-loop and ownership predicates, the TLS planner, analysis templates and
//! Prometheus answers, the state machine's
//! `decide`, the leader-election rules, and the simulator's patch functions. Each function checks the properties the code
//! documents, as assertions, beyond "no panic": a failed assertion is a crash for libFuzzer.
//!
//! Invariants of this crate: a target never reads the clock, the file system or the network,
//! so an input replays identically; and it never asserts more than the code under test
//! documents (a property that is not promised is not checked).
//!
//! The bodies live in a library, not in the target files, so that `cargo test` in `fuzz/` can
//! replay a crashing input, and so that one body can be shared by the target and a regression
//! test while a fix is written.

mod analysis;
mod decide;
mod lease;
mod predicates;
mod sim_patch;
mod spec;
mod tls_plan;

pub use analysis::analysis;
pub use decide::decide;
pub use lease::lease;
pub use predicates::{max_unavailable, predicates};
pub use sim_patch::sim_patch;
pub use spec::{decode, spec};
pub use tls_plan::tls_plan;

/// Splits `data` at the first NUL byte (used by the targets that take two documents); without
/// one, both halves are the whole input, so a single seed file drives both.
pub(crate) fn two_parts(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, data),
    }
}
