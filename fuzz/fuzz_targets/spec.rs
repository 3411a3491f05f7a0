//! Fuzz target `spec`: see [`canary_fuzz::spec`] for the input and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| canary_fuzz::spec(data));
