//! The TLS migration's integration tests, one binary: reference scenarios, the preamble, errors and detach, properties and third-party fixtures. Shared builders in [`common`].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;
mod errors_and_detach;
mod fixtures;
mod preamble;
mod properties;
mod reference_scenarios;
