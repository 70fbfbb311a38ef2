//! libFuzzer entry of the `onnx_structured` kind: see `tessera_fuzz::onnx_structured`.
#![no_main]

#[global_allocator]
static ALLOC: tessera_fuzz::LimitedAlloc = tessera_fuzz::LimitedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera_fuzz::onnx_structured(data));
