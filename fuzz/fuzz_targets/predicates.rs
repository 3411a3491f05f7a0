//! Fuzz target `predicates`: see [`canary_fuzz::predicates`] for the input and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| canary_fuzz::predicates(data));
