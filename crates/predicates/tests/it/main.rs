//! The predicates' integration tests, one binary: property tests, the reference's quirks, the third-party fixtures of testdata/, and the allocations of `Texts` (counted by this binary's global allocator, `allocation-counter`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod allocations;
mod fixtures;
mod properties;
mod reference_quirks;
mod summary;
