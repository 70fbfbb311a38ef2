//! The NVIDIA pipeline's launches and buffers, read from the LLVM IR of its host code (no
//! GPU needed): each kernel's loops innermost first and tiled into blocks of threads
//! (`gpu::thread_tile`), not one thread a block; tensor constants copied into buffers the
//! kernels can reach; every buffer from the generic allocation functions that
//! `tessera_mlir::cuda` gives managed memory; kernels as PTX for the device's architecture.

use tessera_mlir::{Mlir, PipelineOptions, pipelines};

/// An elementwise op over 2x3x40x50 with a per-channel constant and an exponential, and a
/// sum over the last dimension.
const MODULE: &str = r#"
func.func @step(%a: tensor<2x3x40x50xf32>, %b: tensor<2x3x40x50xf32>) -> (tensor<2x3x40x50xf32>, tensor<2x3x40xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %e = tensor.empty() : tensor<2x3x40x50xf32>
  %c = linalg.generic {indexing_maps = [affine_map<(n,c,i,j)->(n,c,i,j)>, affine_map<(n,c,i,j)->(n,c,i,j)>, affine_map<(n,c,i,j)->(c)>, affine_map<(n,c,i,j)->(n,c,i,j)>], iterator_types = ["parallel","parallel","parallel","parallel"]} ins(%a, %b, %cst : tensor<2x3x40x50xf32>, tensor<2x3x40x50xf32>, tensor<3xf32>) outs(%e : tensor<2x3x40x50xf32>) {
  ^bb0(%x: f32, %y: f32, %w: f32, %z: f32):
    %s = arith.addf %x, %y : f32
    %t = arith.mulf %s, %w : f32
    linalg.yield %t : f32
  } -> tensor<2x3x40x50xf32>
  %z0 = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<2x3x40xf32>
  %f = linalg.fill ins(%z0 : f32) outs(%e2 : tensor<2x3x40xf32>) -> tensor<2x3x40xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(n,c,i,j)->(n,c,i,j)>, affine_map<(n,c,i,j)->(n,c,i)>], iterator_types = ["parallel","parallel","parallel","reduction"]} ins(%c : tensor<2x3x40x50xf32>) outs(%f : tensor<2x3x40xf32>) {
  ^bb0(%x: f32, %z: f32):
    %s = arith.addf %x, %z : f32
    linalg.yield %s : f32
  } -> tensor<2x3x40xf32>
  return %c, %r : tensor<2x3x40x50xf32>, tensor<2x3x40xf32>
}
"#;

/// The (grid, block) of every `mgpuLaunchKernel` call in LLVM IR, in order.
fn launches(ll: &str) -> Vec<([u64; 3], [u64; 3])> {
    ll.lines()
        .filter_map(|l| {
            let args = l.trim().strip_prefix("call void @mgpuLaunchKernel(")?;
            let n: Vec<u64> = args
                .split(", ")
                .skip(1)
                .take(6)
                .map(|a| {
                    a.trim_start_matches("i64 ")
                        .parse()
                        .unwrap_or_else(|_| panic!("not a constant: {l}"))
                })
                .collect();
            Some(([n[0], n[1], n[2]], [n[3], n[4], n[5]]))
        })
        .collect()
}

#[test]
fn kernels_launch_blocks_of_threads_along_rows_and_reach_their_buffers() {
    let mlir = Mlir::new();
    let mut m = mlir.parse(MODULE, "gpu module").expect("parses");
    let pipeline = pipelines::nvptx(Some("sm_90"));
    mlir.run_pipeline(&mut m, &pipeline, &PipelineOptions::default(), "gpu module")
        .expect("lowers");
    let lowered = Mlir::print(&m);
    let ll = mlir.to_llvm_ir(&m, "gpu module").expect("translates");
    // The elementwise op: rows of 50 on 64 threads along x, 4 rows on y; the grid covers
    // 40 rows in 10 blocks, the 3 channels on z; the batch of 2 is a loop in the kernel.
    // The sum: rows of 40 (its reduced dimension a loop in each thread) tiled the same,
    // in the same function. The fill is fused away or launched alike.
    let l = launches(&ll);
    assert!(!l.is_empty(), "{ll}");
    assert_eq!(l[0], ([1, 10, 3], [64, 4, 1]), "{l:?}");
    for (grid, block) in &l {
        assert!(
            block.iter().product::<u64>() > 1,
            "one thread a block: {l:?}"
        );
        assert!(
            block.iter().product::<u64>() <= 1024 && grid[1] <= 65_535,
            "{l:?}"
        );
    }
    // Buffers come from the generic allocation functions (managed memory on the GPU),
    // never from malloc, and are freed through them.
    assert!(
        ll.contains("@_mlir_memref_to_llvm_alloc(") && ll.contains("@_mlir_memref_to_llvm_free(")
    );
    assert!(!ll.contains("@malloc(") && !ll.contains("@free("), "{ll}");
    // The constant is copied into an allocation before the kernels read it: the global
    // is read by that copy alone (a `memcpy` in the host code), never passed to a launch.
    let global = "@__constant_3xf32";
    let uses: Vec<&str> = ll
        .lines()
        .filter(|l| l.contains(global) && !l.starts_with(global))
        .collect();
    assert!(
        uses.len() == 1 && uses[0].contains("@llvm.memcpy"),
        "{uses:?}\n{ll}"
    );
    // The kernels are PTX for the device's architecture, loaded by the module's
    // constructor through the driver.
    assert!(lowered.contains(".target sm_90"), "{lowered}");
    assert!(ll.contains("@mgpuModuleLoadJIT("), "{ll}");
}

#[test]
fn the_pipeline_runs_in_two_parts_around_the_loop_mapping() {
    let (loops, kernels) = pipelines::gpu_stages(pipelines::NVPTX).expect("split");
    assert!(
        loops.ends_with(",func.func(convert-linalg-to-parallel-loops))"),
        "{loops}"
    );
    assert!(
        kernels.starts_with("builtin.module(gpu-kernel-outlining,"),
        "{kernels}"
    );
    assert!(pipelines::gpu_stages(pipelines::CPU).is_none());
    // Both parts, and the whole string as mlir-opt takes it, parse.
    let mlir = Mlir::new();
    for p in [loops.as_str(), kernels.as_str(), pipelines::NVPTX] {
        mlir.expand_pipeline(p, "nvptx").expect("parses");
    }
}

/// A sum over the middle dimension of 4x300x8: a parallel loop with a sequential loop and a
/// parallel loop inside. The outer loop is not tiled (each of its iterations a block) and
/// the program still lowers; its launch stays within the grid.
#[test]
fn a_reduction_between_parallel_dimensions_lowers() {
    let module = r#"
func.func @step(%a: tensor<4x300x8xf32>) -> tensor<4x8xf32> attributes {llvm.emit_c_interface} {
  %z0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %f = linalg.fill ins(%z0 : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i,k,j)->(i,k,j)>, affine_map<(i,k,j)->(i,j)>], iterator_types = ["parallel","reduction","parallel"]} ins(%a : tensor<4x300x8xf32>) outs(%f : tensor<4x8xf32>) {
  ^bb0(%x: f32, %z: f32):
    %s = arith.addf %x, %z : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}
"#;
    let mlir = Mlir::new();
    let mut m = mlir.parse(module, "gpu module").expect("parses");
    let pipeline = pipelines::nvptx(None);
    mlir.run_pipeline(&mut m, &pipeline, &PipelineOptions::default(), "gpu module")
        .expect("lowers");
    let ll = mlir.to_llvm_ir(&m, "gpu module").expect("translates");
    let l = launches(&ll);
    assert!(!l.is_empty(), "{ll}");
    for (grid, block) in &l {
        assert!(grid[1] <= 65_535 && grid[2] <= 65_535, "{l:?}");
        assert!(block.iter().product::<u64>() <= 1024, "{l:?}");
    }
}
