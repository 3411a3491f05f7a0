//! The predicates' integration tests, one binary: property tests, the reference's quirks, and the third-party fixtures of testdata/.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod fixtures;
mod properties;
mod reference_quirks;
