//! libFuzzer entry of the `onnx` kind: see `tessera_fuzz::onnx`.
#![no_main]

#[global_allocator]
static ALLOC: tessera_fuzz::LimitedAlloc = tessera_fuzz::LimitedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera_fuzz::onnx(data));
