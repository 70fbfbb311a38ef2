//! Compiles `proto/onnx.proto` with protox (pure Rust, no system protoc) into prost types.
//! Every `bytes` field decodes as `bytes::Bytes`, so tensor data slices the model's buffer.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let fds = protox::compile(["onnx.proto"], ["proto"])?;
    prost_build::Config::new().bytes(["."]).compile_fds(fds)?;
    Ok(())
}
