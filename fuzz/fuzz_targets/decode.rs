//! Fuzz target `decode`: see [`canary_fuzz::decode`] for the input and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| canary_fuzz::decode(data));
