//! Compiles the importer's own `onnx/proto/onnx.proto` (the same file, with protox and prost, as
//! `onnx/build.rs` does), so the structured ONNX target encodes models with exactly the messages
//! the importer decodes.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../onnx/proto/onnx.proto");
    let fds = protox::compile(["onnx.proto"], ["../onnx/proto"])?;
    prost_build::Config::new().bytes(["."]).compile_fds(fds)?;
    Ok(())
}
