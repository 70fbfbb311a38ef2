//! The MLIR pass pipelines, per device lowering. Strings are `mlir-opt --pass-pipeline`
//! syntax and run in-process (see [`crate::Mlir::run_pipeline`]).

/// Tensors to the LLVM dialect for the CPU: bufferize (function boundaries with identity
/// layouts), free what is no longer used, linalg to loops, everything to LLVM.
pub const CPU: &str = "builtin.module(convert-math-to-funcs,one-shot-bufferize{bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},buffer-deallocation-pipeline,convert-bufferization-to-memref,func.func(convert-linalg-to-loops),convert-scf-to-cf,expand-strided-metadata,lower-affine,finalize-memref-to-llvm,convert-math-to-llvm,convert-math-to-libm,convert-arith-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,convert-index-to-llvm,reconcile-unrealized-casts)";

/// The same for a program with MPI calls: `buffer-deallocation-pipeline` rejects them, so
/// buffers live until the process ends; `convert-shard-to-mpi` turns `shard.all_reduce` into
/// `mpi.allreduce`; `symbol-dce` drops the (private) `shard.grid`; `convert-to-llvm` lowers the MPI dialect (for the
/// implementation the module's `dlti.map` names); tensor-level `arith` casts of the
/// messages become linalg first.
pub const CPU_MPI: &str = "builtin.module(func.func(convert-shard-to-mpi),convert-elementwise-to-linalg,convert-math-to-funcs,one-shot-bufferize{bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},convert-bufferization-to-memref,func.func(convert-linalg-to-loops),convert-scf-to-cf,expand-strided-metadata,lower-affine,finalize-memref-to-llvm,convert-math-to-llvm,convert-math-to-libm,convert-to-llvm,reconcile-unrealized-casts,symbol-dce)";

/// NVIDIA GPUs: bufferize, map linalg's parallel loops to GPU blocks and threads, outline
/// kernels, lower them to NVVM and serialize them as PTX text (`cubin-format=isa`: no CUDA
/// toolkit needed). The host side stays in the GPU dialect's runtime calls.
pub const NVPTX: &str = "builtin.module(one-shot-bufferize{bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},convert-bufferization-to-memref,func.func(convert-linalg-to-parallel-loops,gpu-map-parallel-loops,convert-parallel-loops-to-gpu),gpu-kernel-outlining,lower-affine,convert-scf-to-cf,gpu-lower-to-nvvm-pipeline{cubin-chip=sm_80 cubin-features=+ptx80 cubin-format=isa})";

/// Devices without a toolchain here (chiplets, plugins' lowerings): bufferize and lower
/// linalg to affine loops on memrefs, the form a vendor backend takes.
pub const LOOPS: &str = "builtin.module(one-shot-bufferize{bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},buffer-deallocation-pipeline,convert-bufferization-to-memref,func.func(convert-linalg-to-affine-loops),canonicalize)";

/// The target pipeline of a device lowering (`cpu`, `nvptx`, anything else).
pub fn for_lowering(lowering: &str) -> &'static str {
    match lowering {
        "cpu" => CPU,
        "nvptx" => NVPTX,
        _ => LOOPS,
    }
}
