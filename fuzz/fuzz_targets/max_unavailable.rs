//! Fuzz target `max_unavailable`: see [`canary_fuzz::max_unavailable`] for the input and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| canary_fuzz::max_unavailable(data));
