//! libFuzzer entry of the `calibration_toml` kind: see `tessera_fuzz::calibration_toml`.
#![no_main]

#[global_allocator]
static ALLOC: tessera_fuzz::LimitedAlloc = tessera_fuzz::LimitedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera_fuzz::calibration_toml(data));
