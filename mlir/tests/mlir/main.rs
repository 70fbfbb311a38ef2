//! tessera-mlir's tests, in one binary (MLIR links statically, so each test binary is large):
//! the lowering goldens (`goldens`), the ONNX backend node tests through the compiled
//! path (`onnx_nodes`), two module rewrites the MPI program uses (`define`, `dealloc`),
//! the CPU code generation schedule (`schedule`), the CPU library's runtime functions
//! (`runtime`) and the NVIDIA pipeline's launches and buffers (`gpu`).

#[path = "../../../onnx/tests/common/mod.rs"]
mod common;
mod dealloc;
mod define;
#[path = "../../../passes/tests/filecheck/mod.rs"]
mod filecheck;
mod goldens;
mod gpu;
mod onnx_nodes;
mod runtime;
mod schedule;
