//! Work in progress: see the crate README.
