//! libFuzzer entry of the `placement_json` kind: see `tessera_fuzz::placement_json`.
#![no_main]

#[global_allocator]
static ALLOC: tessera_fuzz::LimitedAlloc = tessera_fuzz::LimitedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera_fuzz::placement_json(data));
