//! Fuzz target `tls_plan`: see [`canary_fuzz::tls_plan`] for the input and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| canary_fuzz::tls_plan(data));
