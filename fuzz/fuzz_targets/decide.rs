//! Fuzz target `decide`: see [`canary_fuzz::decide`] for the input and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| canary_fuzz::decide(data));
