//! Fuzz target `sim_patch`: see [`canary_fuzz::sim_patch`] for the input and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| canary_fuzz::sim_patch(data));
