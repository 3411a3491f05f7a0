//! Fuzz target `lease`: see [`canary_fuzz::lease`] for the input and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| canary_fuzz::lease(data));
