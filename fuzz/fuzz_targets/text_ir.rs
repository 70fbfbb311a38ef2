//! libFuzzer entry of the `text_ir` kind: see `tessera_fuzz::text_ir`.
#![no_main]

#[global_allocator]
static ALLOC: tessera_fuzz::LimitedAlloc = tessera_fuzz::LimitedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera_fuzz::text_ir(data));
