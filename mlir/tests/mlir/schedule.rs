//! `schedule::apply`: the CPU code generation schedule written for a module and applied to
//! it. Contractions are split where their tile does not divide them, tiled and vectorized
//! (the block of C hoisted out of the `k` loop); depthwise convolutions of stride 1 are
//! vectorized along their rows; a convolution in reduction form and an elementwise generic
//! are left alone; large contractions' outer tiles are parallel only when the pipeline has
//! threads. What the
//! scheduled code computes is checked elsewhere: every model against onnxruntime and the
//! ONNX node tests against the interpreter, through the same pipeline.

use tessera_mlir::{Mlir, schedule};

use crate::filecheck::{Check, check};

/// An einsum's diagonal (`iij,jk->ik`, not a projected permutation: left alone), a 20×64 by
/// 64×50 matmul (rows 16 + 4, lanes 32 + 18), two convolutions in reduction form (the
/// lowering writes them as im2col products), an elementwise generic, a 128×256 by 256×512 matmul (67 MFLOP), and two depthwise convolutions as the
/// lowering writes them: two taps at stride 1 along rows of 150, one tap at stride 2; and
/// the 128×256 by 256×512 matmul again from a filled C, as the lowering writes products;
/// and a filled product whose A an elementwise generic of its function computes.
const MODULE: &str = "#mm_a = affine_map<(d0, d1, d2) -> (d0, d1)>
#mm_b = affine_map<(d0, d1, d2) -> (d1, d2)>
#mm_c = affine_map<(d0, d1, d2) -> (d0, d2)>
#cv_i = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5, d3 + d6)>
#cv_d = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 * 2, d3 + d6 * 2)>
#cv_f = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>
#cv_o = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#dg_a = affine_map<(d0, d1, d2) -> (d0, d0, d2)>
#dg_b = affine_map<(d0, d1, d2) -> (d2, d1)>
#dg_c = affine_map<(d0, d1, d2) -> (d0, d1)>
#dw_i = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#dw_w = affine_map<(d0, d1, d2, d3) -> (d1)>
module {
  func.func @diag(%a: tensor<4x4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x16xf32>) -> tensor<4x16xf32> {
    %r = linalg.generic {indexing_maps = [#dg_a, #dg_b, #dg_c], iterator_types = [\"parallel\", \"parallel\", \"reduction\"]} ins(%a, %b : tensor<4x4x8xf32>, tensor<8x16xf32>) outs(%c : tensor<4x16xf32>) {
    ^bb0(%x: f32, %y: f32, %z: f32):
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %z, %p : f32
      linalg.yield %s : f32
    } -> tensor<4x16xf32>
    return %r : tensor<4x16xf32>
  }
  func.func @mm(%a: tensor<20x64xf32>, %b: tensor<64x50xf32>, %c: tensor<20x50xf32>) -> tensor<20x50xf32> {
    %r = linalg.generic {indexing_maps = [#mm_a, #mm_b, #mm_c], iterator_types = [\"parallel\", \"reduction\", \"parallel\"]} ins(%a, %b : tensor<20x64xf32>, tensor<64x50xf32>) outs(%c : tensor<20x50xf32>) {
    ^bb0(%x: f32, %y: f32, %z: f32):
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %z, %p : f32
      linalg.yield %s : f32
    } -> tensor<20x50xf32>
    return %r : tensor<20x50xf32>
  }
  func.func @conv(%i: tensor<1x3x10x10xf32>, %f: tensor<4x3x3x3xf32>, %o: tensor<1x4x8x8xf32>, %o2: tensor<1x4x6x6xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x6x6xf32>) {
    %r = linalg.generic {indexing_maps = [#cv_i, #cv_f, #cv_o], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\", \"reduction\", \"reduction\", \"reduction\"]} ins(%i, %f : tensor<1x3x10x10xf32>, tensor<4x3x3x3xf32>) outs(%o : tensor<1x4x8x8xf32>) {
    ^bb0(%x: f32, %y: f32, %z: f32):
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %z, %p : f32
      linalg.yield %s : f32
    } -> tensor<1x4x8x8xf32>
    %d = linalg.generic {indexing_maps = [#cv_d, #cv_f, #cv_o], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\", \"reduction\", \"reduction\", \"reduction\"]} ins(%i, %f : tensor<1x3x10x10xf32>, tensor<4x3x3x3xf32>) outs(%o2 : tensor<1x4x6x6xf32>) {
    ^bb0(%x: f32, %y: f32, %z: f32):
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %z, %p : f32
      linalg.yield %s : f32
    } -> tensor<1x4x6x6xf32>
    return %r, %d : tensor<1x4x8x8xf32>, tensor<1x4x6x6xf32>
  }
  func.func @add(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = [\"parallel\", \"parallel\"]} ins(%a : tensor<4x4xf32>) outs(%b : tensor<4x4xf32>) {
    ^bb0(%x: f32, %z: f32):
      %s = arith.addf %z, %x : f32
      linalg.yield %s : f32
    } -> tensor<4x4xf32>
    return %r : tensor<4x4xf32>
  }
  func.func @big(%a: tensor<128x256xf32>, %b: tensor<256x512xf32>, %c: tensor<128x512xf32>) -> tensor<128x512xf32> {
    %r = linalg.generic {indexing_maps = [#mm_a, #mm_b, #mm_c], iterator_types = [\"parallel\", \"reduction\", \"parallel\"]} ins(%a, %b : tensor<128x256xf32>, tensor<256x512xf32>) outs(%c : tensor<128x512xf32>) {
    ^bb0(%x: f32, %y: f32, %z: f32):
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %z, %p : f32
      linalg.yield %s : f32
    } -> tensor<128x512xf32>
    return %r : tensor<128x512xf32>
  }
  func.func @dw(%x: tensor<1x2x6x152xf32>, %w: tensor<2xf32>, %v: tensor<2xf32>) -> (tensor<1x2x4x150xf32>, tensor<1x2x2x9xf32>) {
    %a = tensor.extract_slice %x[0, 0, 0, 0] [1, 2, 4, 150] [1, 1, 1, 1] : tensor<1x2x6x152xf32> to tensor<1x2x4x150xf32>
    %b = tensor.extract_slice %x[0, 0, 1, 2] [1, 2, 4, 150] [1, 1, 1, 1] : tensor<1x2x6x152xf32> to tensor<1x2x4x150xf32>
    %e = tensor.empty() : tensor<1x2x4x150xf32>
    %r = linalg.generic {indexing_maps = [#dw_i, #dw_w, #dw_i, #dw_w, #dw_i], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\"]} ins(%a, %w, %b, %v : tensor<1x2x4x150xf32>, tensor<2xf32>, tensor<1x2x4x150xf32>, tensor<2xf32>) outs(%e : tensor<1x2x4x150xf32>) {
    ^bb0(%p: f32, %q: f32, %s: f32, %t: f32, %o: f32):
      %m = arith.mulf %p, %q : f32
      %n = arith.mulf %s, %t : f32
      %z = arith.addf %m, %n : f32
      linalg.yield %z : f32
    } -> tensor<1x2x4x150xf32>
    %c = tensor.extract_slice %x[0, 0, 0, 0] [1, 2, 2, 9] [1, 1, 2, 2] : tensor<1x2x6x152xf32> to tensor<1x2x2x9xf32>
    %f = tensor.empty() : tensor<1x2x2x9xf32>
    %d = linalg.generic {indexing_maps = [#dw_i, #dw_w, #dw_i], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\"]} ins(%c, %w : tensor<1x2x2x9xf32>, tensor<2xf32>) outs(%f : tensor<1x2x2x9xf32>) {
    ^bb0(%p: f32, %q: f32, %o: f32):
      %m = arith.mulf %p, %q : f32
      linalg.yield %m : f32
    } -> tensor<1x2x2x9xf32>
    return %r, %d : tensor<1x2x4x150xf32>, tensor<1x2x2x9xf32>
  }
  func.func @filled(%a: tensor<128x256xf32>, %b: tensor<256x512xf32>) -> tensor<128x512xf32> {
    %z = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<128x512xf32>
    %c = linalg.fill ins(%z : f32) outs(%e : tensor<128x512xf32>) -> tensor<128x512xf32>
    %r = linalg.generic {indexing_maps = [#mm_a, #mm_b, #mm_c], iterator_types = [\"parallel\", \"reduction\", \"parallel\"]} ins(%a, %b : tensor<128x256xf32>, tensor<256x512xf32>) outs(%c : tensor<128x512xf32>) {
    ^bb0(%x: f32, %y: f32, %z2: f32):
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %z2, %p : f32
      linalg.yield %s : f32
    } -> tensor<128x512xf32>
    return %r : tensor<128x512xf32>
  }
  func.func @fed(%a: tensor<32x64xf32>, %b: tensor<64x64xf32>) -> tensor<32x64xf32> {
    %z = arith.constant 0.0 : f32
    %ea = tensor.empty() : tensor<32x64xf32>
    %a2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = [\"parallel\", \"parallel\"]} ins(%a : tensor<32x64xf32>) outs(%ea : tensor<32x64xf32>) {
    ^bb0(%x: f32, %o: f32):
      %s = arith.addf %x, %x : f32
      linalg.yield %s : f32
    } -> tensor<32x64xf32>
    %e = tensor.empty() : tensor<32x64xf32>
    %c = linalg.fill ins(%z : f32) outs(%e : tensor<32x64xf32>) -> tensor<32x64xf32>
    %r = linalg.generic {indexing_maps = [#mm_a, #mm_b, #mm_c], iterator_types = [\"parallel\", \"reduction\", \"parallel\"]} ins(%a2, %b : tensor<32x64xf32>, tensor<64x64xf32>) outs(%c : tensor<32x64xf32>) {
    ^bb0(%x: f32, %y: f32, %z2: f32):
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %z2, %p : f32
      linalg.yield %s : f32
    } -> tensor<32x64xf32>
    return %r : tensor<32x64xf32>
  }
}
";

fn here(s: &str) -> Check {
    Check::Here(s.to_string())
}
fn next(s: &str) -> Check {
    Check::Next(s.to_string())
}
fn not(s: &str) -> Check {
    Check::Not(s.to_string())
}

/// The schedule and the module it made, with threads or without.
fn scheduled(parallel: bool) -> (String, String) {
    let mlir = Mlir::new();
    let mut m = mlir.parse(MODULE, "schedule").expect("parses");
    let body = schedule::apply(&mlir, &mut m, parallel, "schedule").expect("applies");
    mlir.verify(&m, "schedule").expect("verifies");
    (schedule::library(&body, None), Mlir::print(&m))
}

#[test]
fn contractions_are_split_tiled_and_vectorized() {
    let (library, module) = scheduled(false);
    check(
        &library,
        &[
            here("transform.named_sequence @tessera_contractions("),
            // 20×50: lanes 32 + 18, the 18 as 16 + 2, then rows 16 + 4 of each; tiles of
            // 8 rows by 32 lanes.
            here("attributes{sym_name = \"mm\"}"),
            here("transform.structured.split %c0_0 after 32 {dimension = 2}"),
            next("%c0_0_0, %c0_0_1 = transform.split_handle %c0_0_s"),
            next("transform.structured.split %c0_0_1 after 16 {dimension = 2}"),
            next("%c0_0_1_0, %c0_0_1_1 = transform.split_handle %c0_0_1_s"),
            here("transform.structured.split %c0_0_0 after 16 {dimension = 0}"),
            here("transform.structured.split %c0_0_1_0 after 16 {dimension = 0}"),
            here("transform.structured.split %c0_0_1_1 after 16 {dimension = 0}"),
            here(
                "tile_using_for %c0_0_0_0 tile_sizes [8, 0, 0] interchange = [2, 0, 1] \
                 : (!transform.any_op) -> (!transform.any_op, !transform.any_op)",
            ),
            here("tile_using_for %c0_0_0_0_t tile_sizes [0, 1, 0]"),
            next("transform.structured.vectorize %c0_0_0_0_t_k"),
            // The rest of the rows, 4 by 32: no row loop.
            here("tile_using_for %c0_0_0_1 tile_sizes [0, 1, 0]"),
            not("\"conv\""),
            not("@add"),
            here("transform.loop.hoist_loop_invariant_subsets"),
            here("lowering_strategy = \"outerproduct\""),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!library.contains("tile_using_forall"), "{library}");
    assert!(!library.contains("\"diag\""), "{library}");
    check(
        &module,
        &[
            // C's tile stays in registers across k: read before the loop, written after.
            here("func.func @mm("),
            here("vector.transfer_read"),
            here("scf.for"),
            here("vector.fma"),
            here("scf.yield"),
            here("vector.transfer_write"),
            here("func.func @conv("),
            next("linalg.generic"),
            not("vector."),
            here("func.func @add("),
            next("linalg.generic"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    check(
        &module,
        &[
            here("func.func @diag("),
            next("linalg.generic"),
            not("vector."),
            here("func.func @mm("),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn only_large_contractions_run_in_parallel_and_only_with_threads() {
    let (library, module) = scheduled(true);
    check(
        &library,
        &[
            here("attributes{sym_name = \"mm\"}"),
            not("tile_using_forall"),
            here("attributes{sym_name = \"big\"}"),
            // 128 rows by 512 lanes: the loops put in the order n, m, k, then tiles of 32
            // lanes by 8 rows across threads, k inside.
            next("%c1_all ="),
            next("%c1_0 = transform.split_handle"),
            next(
                "%c1_0_i = transform.structured.interchange %c1_0 \
                 iterator_interchange = [2, 0, 1]",
            ),
            next(
                "%c1_0_p, %c1_0_forall = transform.structured.tile_using_forall %c1_0_i \
                 tile_sizes [32, 8, 0]",
            ),
            next("transform.structured.tile_using_for %c1_0_p tile_sizes [0, 0, 1]"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // @big's and @filled's.
    assert_eq!(module.matches("scf.forall (").count(), 2, "{module}");
    // Without threads, the same contraction is a loop like the others.
    let (library, _) = scheduled(false);
    assert!(!library.contains("tile_using_forall"), "{library}");
}

#[test]
fn a_module_without_contractions_gets_empty_sequences() {
    let mlir = Mlir::new();
    let text = "module {\n  func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n    return %a : tensor<4xf32>\n  }\n}\n";
    let mut m = mlir.parse(text, "none").expect("parses");
    let body = schedule::apply(&mlir, &mut m, true, "none").expect("applies");
    let threads = schedule::apply_threads(&mlir, &mut m, true, "none").expect("applies");
    assert!(threads.is_empty(), "{threads}");
    assert_eq!(
        Mlir::print(&m),
        Mlir::print(&mlir.parse(text, "none").expect("parses"))
    );
    assert_eq!(
        schedule::library(&body, None),
        "module attributes {transform.with_named_sequence} {\n  \
         transform.named_sequence @tessera_contractions(%root: !transform.any_op \
         {transform.readonly}) {\n    transform.yield\n  }\n}\n"
    );
}

#[test]
fn depthwise_convolutions_are_vectorized_along_their_rows() {
    let (library, module) = scheduled(false);
    check(
        &library,
        &[
            here("attributes{sym_name = \"dw\"}"),
            next("%c2_all ="),
            next("%c2_0, %c2_1 = transform.split_handle %c2_all"),
            // Rows of 150: 128 in vectors of 64, the rest of 22 one vector.
            next("transform.structured.split %c2_0 after 128 {dimension = 3}"),
            here("tile_using_for %c2_0_0 tile_sizes [0, 1, 1, 64]"),
            next("transform.structured.vectorize %c2_0_0_t"),
            next("tile_using_for %c2_0_1 tile_sizes [0, 1, 1, 0]"),
            next("transform.structured.vectorize %c2_0_1_t"),
            // The stride-2 one is left to LLVM.
            not("%c2_1"),
            // Its function gets none of the contractions' clean-up patterns.
            here("%funcs = transform.merge_handles %c0_f, %c1_f, %c3_f, %c4_f {deduplicate}"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    check(
        &module,
        &[
            here("func.func @dw("),
            here("vector.transfer_read"),
            here("vector<1x1x1x64xf32>"),
            here("vector<1x1x1x22xf32>"),
            here("tensor.extract_slice %arg0[0, 0, 0, 0] [1, 2, 2, 9] [1, 1, 2, 2]"),
            next("tensor.empty"),
            next("linalg.generic"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A contraction that starts from a `linalg.fill` gets the fill fused into its tile loops
/// (`transform.structured.fuse`, or `fuse_into_containing_op` into the parallel loop and
/// then `fuse` into the row loop): each block of C starts as a vector of zeros in
/// registers, and no fill of all of C is left. Not when an op of its function computes an
/// operand: `fuse` would pull that op into the loops too.
#[test]
fn a_filled_c_is_zeroed_in_registers() {
    for parallel in [false, true] {
        let (library, module) = scheduled(parallel);
        let tiling = if parallel {
            vec![
                next("%c3_0_fill = transform.get_producer_of_operand %c3_0[2]"),
                next("%c3_0_i = transform.structured.interchange %c3_0"),
                next(
                    "%c3_0_p, %c3_0_forall = transform.structured.tile_using_forall %c3_0_i \
                     tile_sizes [32, 8, 0]",
                ),
                next(
                    "%c3_0_ff, %c3_0_fn = transform.structured.fuse_into_containing_op \
                     %c3_0_fill into %c3_0_forall",
                ),
                next("transform.structured.match ops{[\"linalg.fill\"]} in %c3_0_forall"),
            ]
        } else {
            vec![
                next("%c3_0_fill = transform.get_producer_of_operand %c3_0[2]"),
                next(
                    "%c3_0_t, %c3_0_l0, %c3_0_l1 = transform.structured.fuse %c3_0 tile_sizes \
                     [8, 0, 32] interchange [2, 0, 1]",
                ),
                next("transform.structured.match ops{[\"linalg.fill\"]} in %c3_0_l0"),
            ]
        };
        let mut checks = vec![
            here("attributes{sym_name = \"filled\"}"),
            next("%c3_all ="),
            next("%c3_0 = transform.split_handle %c3_all"),
        ];
        checks.extend(tiling);
        checks.push(next("transform.structured.vectorize %c3_0_fills"));
        check(&library, &checks).unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
        // A computed in the function: the elementwise generic stays outside the loops and
        // the fill with it (`fuse` would compute the generic again in every tile).
        assert!(
            !library.contains("get_producer_of_operand %c4_"),
            "{library}"
        );
        check(
            &library,
            &[
                here("attributes{sym_name = \"fed\"}"),
                here("%c4_1_t, %c4_1_l0, %c4_1_l1 = transform.structured.tile_using_for %c4_1"),
            ],
        )
        .unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
        check(
            &module,
            &[
                here("func.func @fed("),
                here("linalg.generic"),
                here("linalg.fill"),
                here("scf.for"),
            ],
        )
        .unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
        check(
            &module,
            &[
                here("func.func @filled("),
                not("linalg.fill"),
                here("arith.constant dense<0.000000e+00> : vector<8x32xf32>"),
                here("vector.fma"),
                here("return"),
            ],
        )
        .unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
    }
}

/// What the threads sequence gets: a bias over 64×64×64 (2^18 elements, enough in a
/// function with no parallel loop), the same over 4×8×8 (too little), a copy of one long
/// row ending in a unit axis (only its row could be split: it stays whole), a 3×3 max pooling in
/// reduction form over 64 channels; and, for the contraction sequence, a max pooling of
/// two taps in the form the lowering writes (vectorized along rows of 64, its channels on
/// threads).
const THREADS_MODULE: &str = "#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch = affine_map<(d0, d1, d2, d3) -> (d1)>
#pi = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 + d4, d3 + d5)>
#pw = affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>
#po = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>
module {
  func.func @bias(%x: tensor<1x64x64x64xf32>, %b: tensor<64xf32>) -> tensor<1x64x64x64xf32> {
    %e = tensor.empty() : tensor<1x64x64x64xf32>
    %r = linalg.generic {indexing_maps = [#id4, #ch, #id4], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\"]} ins(%x, %b : tensor<1x64x64x64xf32>, tensor<64xf32>) outs(%e : tensor<1x64x64x64xf32>) {
    ^bb0(%p: f32, %q: f32, %o: f32):
      %s = arith.addf %p, %q : f32
      linalg.yield %s : f32
    } -> tensor<1x64x64x64xf32>
    return %r : tensor<1x64x64x64xf32>
  }
  func.func @small(%x: tensor<1x4x8x8xf32>, %b: tensor<4xf32>) -> tensor<1x4x8x8xf32> {
    %e = tensor.empty() : tensor<1x4x8x8xf32>
    %r = linalg.generic {indexing_maps = [#id4, #ch, #id4], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\"]} ins(%x, %b : tensor<1x4x8x8xf32>, tensor<4xf32>) outs(%e : tensor<1x4x8x8xf32>) {
    ^bb0(%p: f32, %q: f32, %o: f32):
      %s = arith.addf %p, %q : f32
      linalg.yield %s : f32
    } -> tensor<1x4x8x8xf32>
    return %r : tensor<1x4x8x8xf32>
  }
  func.func @column(%x: tensor<1x1x300000x1xf32>, %y: tensor<1x1x300000x1xf32>) -> tensor<1x1x300000x1xf32> {
    %r = linalg.copy ins(%x : tensor<1x1x300000x1xf32>) outs(%y : tensor<1x1x300000x1xf32>) -> tensor<1x1x300000x1xf32>
    return %r : tensor<1x1x300000x1xf32>
  }
  func.func @pool(%x: tensor<1x64x34x34xf32>, %w: tensor<3x3xi8>, %o: tensor<1x64x32x32xf32>) -> tensor<1x64x32x32xf32> {
    %r = linalg.generic {indexing_maps = [#pi, #pw, #po], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\", \"reduction\", \"reduction\"]} ins(%x, %w : tensor<1x64x34x34xf32>, tensor<3x3xi8>) outs(%o : tensor<1x64x32x32xf32>) {
    ^bb0(%p: f32, %q: i8, %a: f32):
      %m = arith.maximumf %a, %p : f32
      linalg.yield %m : f32
    } -> tensor<1x64x32x32xf32>
    return %r : tensor<1x64x32x32xf32>
  }
  func.func @taps(%x: tensor<1x16x65x64xf32>) -> tensor<1x16x64x64xf32> {
    %a = tensor.extract_slice %x[0, 0, 0, 0] [1, 16, 64, 64] [1, 1, 1, 1] : tensor<1x16x65x64xf32> to tensor<1x16x64x64xf32>
    %b = tensor.extract_slice %x[0, 0, 1, 0] [1, 16, 64, 64] [1, 1, 1, 1] : tensor<1x16x65x64xf32> to tensor<1x16x64x64xf32>
    %e = tensor.empty() : tensor<1x16x64x64xf32>
    %r = linalg.generic {indexing_maps = [#id4, #id4, #id4], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\"]} ins(%a, %b : tensor<1x16x64x64xf32>, tensor<1x16x64x64xf32>) outs(%e : tensor<1x16x64x64xf32>) {
    ^bb0(%p: f32, %q: f32, %o: f32):
      %m = arith.maximumf %p, %q : f32
      linalg.yield %m : f32
    } -> tensor<1x16x64x64xf32>
    return %r : tensor<1x16x64x64xf32>
  }
}
";

/// With threads, the ops the contraction sequence leaves run their outer loops on threads
/// (`tile_using_forall`, tiled by 1 until there are 16 tiles, the innermost loop whole)
/// when they have work enough; a max pooling in taps form is vectorized along its rows
/// like a depthwise convolution, its channels on threads. Without threads, nothing is.
#[test]
fn large_ops_run_their_outer_loops_on_threads() {
    let mlir = Mlir::new();
    for parallel in [true, false] {
        let mut m = mlir.parse(THREADS_MODULE, "threads").expect("parses");
        let body = schedule::apply(&mlir, &mut m, parallel, "threads").expect("applies");
        let threads = schedule::apply_threads(&mlir, &mut m, parallel, "threads").expect("applies");
        mlir.verify(&m, "threads").expect("verifies");
        let module = Mlir::print(&m);
        let library = schedule::library(&body, Some(&threads));
        let stencil = if parallel {
            vec![
                here("attributes{sym_name = \"taps\"}"),
                next("%c0_all ="),
                next("%c0_0 = transform.split_handle"),
                next(
                    "%c0_0_p, %c0_0_forall = transform.structured.tile_using_forall %c0_0 tile_sizes [0, 1, 0, 0]",
                ),
                next("tile_using_for %c0_0_p tile_sizes [0, 0, 1, 0]"),
                next("transform.structured.vectorize %c0_0_p_t"),
            ]
        } else {
            vec![
                here("attributes{sym_name = \"taps\"}"),
                next("%c0_all ="),
                next("%c0_0 = transform.split_handle"),
                next("tile_using_for %c0_0 tile_sizes [0, 1, 1, 0]"),
                next("transform.structured.vectorize %c0_0_t"),
            ]
        };
        check(&library, &stencil).unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
        check(
            &module,
            &[
                here("func.func @taps("),
                here("vector<1x1x1x64xf32>"),
                here("arith.maximumf"),
            ],
        )
        .unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
        // @small's rows (8 elements) are short: it is vectorized whole, with threads or
        // without, and runs on one.
        // (Its handle's number counts the functions picked before it: @bias's, with threads.)
        let h = if parallel { "%t1_0" } else { "%t0_0" };
        let small = [
            here("attributes{sym_name = \"small\"}"),
            here(&format!("{h} = transform.split_handle")),
            next(&format!("transform.structured.vectorize {h} :")),
        ];
        check(&threads, &small).unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
        check(
            &module,
            &[
                here("func.func @small("),
                here("vector.transfer_read %arg0"),
                not("func.func"),
                here("arith.addf %2, %4 : vector<1x4x8x8xf32>"),
                not("func.func"),
                here("vector.transfer_write"),
            ],
        )
        .unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
        if !parallel {
            assert!(!threads.contains("tile_using_forall"), "{threads}");
            assert_eq!(threads.matches("vectorize").count(), 1, "{threads}");
            assert!(!module.contains("scf.forall"), "{module}");
            continue;
        }
        check(
            &library,
            &[
                here("transform.named_sequence @tessera_threads("),
                next("attributes{sym_name = \"bias\"}"),
                next("ops{[\"linalg.generic\", \"linalg.copy\", \"linalg.fill\"]}"),
                next("%t0_0 = transform.split_handle"),
                next("tile_using_forall %t0_0 tile_sizes [0, 1, 0, 0]"),
                not("tile_using_forall %t1_0"),
                not("\"column\""),
                here("attributes{sym_name = \"pool\"}"),
                here("tile_using_forall %t2_0 tile_sizes [0, 1, 0, 0, 0, 0]"),
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // @bias's, @pool's and @taps's.
        assert_eq!(module.matches("scf.forall (").count(), 3, "{module}");
    }
}

/// An im2col copy of stride 1 (`cols[n, c, kh, kw, oh, ow] = x[n, c, oh + kh, ow + kw]`) is
/// vectorized along its rows: every loop but the row tiled by 1 (the batch and channels an
/// `scf.forall` with threads and work enough), the unit loops folded away, each row one
/// contiguous read and one write; LLVM had vectorized it across rows with gathers and
/// scatters. One of stride 2 (`ow * 2 + kw`) is left to LLVM.
#[test]
fn im2col_copies_of_stride_one_are_vectorized_along_their_rows() {
    let text = "#x = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4 + d2, d5 + d3)>
#s = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4 * 2 + d2, d5 * 2 + d3)>
#o = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4, d5)>
module {
  func.func @cols(%x: tensor<1x64x18x18xf32>) -> tensor<1x64x3x3x16x16xf32> {
    %e = tensor.empty() : tensor<1x64x3x3x16x16xf32>
    %r = linalg.generic {indexing_maps = [#x, #o], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\", \"parallel\", \"parallel\"]} ins(%x : tensor<1x64x18x18xf32>) outs(%e : tensor<1x64x3x3x16x16xf32>) {
    ^bb0(%a: f32, %b: f32):
      linalg.yield %a : f32
    } -> tensor<1x64x3x3x16x16xf32>
    return %r : tensor<1x64x3x3x16x16xf32>
  }
  func.func @strided(%x: tensor<1x4x17x17xf32>) -> tensor<1x4x3x3x8x8xf32> {
    %e = tensor.empty() : tensor<1x4x3x3x8x8xf32>
    %r = linalg.generic {indexing_maps = [#s, #o], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\", \"parallel\", \"parallel\"]} ins(%x : tensor<1x4x17x17xf32>) outs(%e : tensor<1x4x3x3x8x8xf32>) {
    ^bb0(%a: f32, %b: f32):
      linalg.yield %a : f32
    } -> tensor<1x4x3x3x8x8xf32>
    return %r : tensor<1x4x3x3x8x8xf32>
  }
}
";
    let mlir = Mlir::new();
    for parallel in [true, false] {
        let mut m = mlir.parse(text, "cols").expect("parses");
        let body = schedule::apply(&mlir, &mut m, parallel, "cols").expect("applies");
        mlir.verify(&m, "cols").expect("verifies");
        let module = Mlir::print(&m);
        let tiles = if parallel {
            vec![
                here("tile_using_forall %c0_0 tile_sizes [0, 1, 0, 0, 0, 0]"),
                next("tile_using_for %c0_0_p tile_sizes [0, 0, 1, 1, 1, 0]"),
                next("transform.apply_patterns to %c0_0_p_l2"),
                next("transform.apply_patterns.linalg.fold_unit_extent_dims_via_slices"),
                here(
                    "%c0_0_p_row = transform.structured.match ops{[\"linalg.generic\"]} in %c0_0_p_l2",
                ),
                next("transform.structured.vectorize %c0_0_p_row"),
            ]
        } else {
            vec![
                here("tile_using_for %c0_0 tile_sizes [0, 1, 1, 1, 1, 0]"),
                next("transform.apply_patterns to %c0_0_l3"),
                next("transform.apply_patterns.linalg.fold_unit_extent_dims_via_slices"),
                here(
                    "%c0_0_row = transform.structured.match ops{[\"linalg.generic\"]} in %c0_0_l3",
                ),
                next("transform.structured.vectorize %c0_0_row"),
            ]
        };
        let mut expected = vec![here("attributes{sym_name = \"cols\"}")];
        expected.extend(tiles);
        expected.push(not("\"strided\""));
        check(&body, &expected).unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
        check(
            &module,
            &[
                here("func.func @cols("),
                here("vector.transfer_read"),
                here(": tensor<16xf32>, vector<16xf32>"),
                here("vector.transfer_write"),
                not("linalg.generic"),
                here("func.func @strided("),
                next("tensor.empty"),
                next("linalg.generic"),
            ],
        )
        .unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
        assert_eq!(module.contains("scf.forall"), parallel, "{module}");
    }
}

/// An elementwise generic whose rows are 16 long (softmax's quotient over BERT tiny's
/// 16 positions: each element of a row divided by the row's sum) is vectorized whole per
/// 16 rows by the threads sequence, with threads or without: LLVM had vectorized it across
/// rows with gathers and scatters. One with rows of 17 is left to LLVM.
#[test]
fn rows_of_sixteen_are_vectorized_whole() {
    let text = "#r = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#s = affine_map<(d0, d1, d2) -> (d0, d1)>
module {
  func.func @quotient(%x: tensor<8x16x16xf32>, %n: tensor<8x16xf32>) -> tensor<8x16x16xf32> {
    %e = tensor.empty() : tensor<8x16x16xf32>
    %r = linalg.generic {indexing_maps = [#r, #s, #r], iterator_types = [\"parallel\", \"parallel\", \"parallel\"]} ins(%x, %n : tensor<8x16x16xf32>, tensor<8x16xf32>) outs(%e : tensor<8x16x16xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %q = arith.divf %a, %b : f32
      linalg.yield %q : f32
    } -> tensor<8x16x16xf32>
    return %r : tensor<8x16x16xf32>
  }
  func.func @longer(%x: tensor<8x16x17xf32>, %n: tensor<8x16xf32>) -> tensor<8x16x17xf32> {
    %e = tensor.empty() : tensor<8x16x17xf32>
    %r = linalg.generic {indexing_maps = [#r, #s, #r], iterator_types = [\"parallel\", \"parallel\", \"parallel\"]} ins(%x, %n : tensor<8x16x17xf32>, tensor<8x16xf32>) outs(%e : tensor<8x16x17xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %q = arith.divf %a, %b : f32
      linalg.yield %q : f32
    } -> tensor<8x16x17xf32>
    return %r : tensor<8x16x17xf32>
  }
}
";
    let mlir = Mlir::new();
    for parallel in [true, false] {
        let mut m = mlir.parse(text, "rows").expect("parses");
        schedule::apply(&mlir, &mut m, parallel, "rows").expect("applies");
        let threads = schedule::apply_threads(&mlir, &mut m, parallel, "rows").expect("applies");
        mlir.verify(&m, "rows").expect("verifies");
        let module = Mlir::print(&m);
        check(
            &threads,
            &[
                here("attributes{sym_name = \"quotient\"}"),
                here("tile_using_for %t0_0 tile_sizes [1, 0, 0]"),
                next("transform.structured.vectorize %t0_0_t"),
                not("\"longer\""),
            ],
        )
        .unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
        check(
            &module,
            &[
                here("func.func @quotient("),
                here("arith.divf"),
                here(": vector<1x16x16xf32>"),
                not("func.func"),
                here("func.func @longer("),
                next("tensor.empty"),
                next("linalg.generic"),
            ],
        )
        .unwrap_or_else(|e| panic!("parallel {parallel}: {e}"));
    }
}
