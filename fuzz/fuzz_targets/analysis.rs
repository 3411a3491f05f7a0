//! Fuzz target `analysis`: see [`canary_fuzz::analysis`] for the input and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| canary_fuzz::analysis(data));
