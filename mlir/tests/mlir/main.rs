//! tessera-mlir's tests, in one binary (MLIR links statically, so each test binary is large):
//! the lowering goldens (`goldens`) and the ONNX backend node tests through the compiled
//! path (`onnx_nodes`).

#[path = "../../../onnx/tests/common/mod.rs"]
mod common;
mod define;
#[path = "../../../passes/tests/filecheck/mod.rs"]
mod filecheck;
mod goldens;
mod onnx_nodes;
