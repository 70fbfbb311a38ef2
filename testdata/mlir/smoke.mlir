// Smoke test of the MLIR 22 CPU toolchain (scripts/check-mlir.sh): a linalg.matmul and a
// linalg.generic add on small tensors, bufferized, lowered to LLVM and run by mlir-runner,
// which prints the result through printMemrefF32 (libmlir_c_runner_utils).
//
// C = A x B + 1 with A = [[1, 2, 3], [4, 5, 6]] and B = [[1, 0], [0, 1], [1, 1]]:
// A x B = [[4, 5], [10, 11]], so C = [[5, 6], [11, 12]].

#id = affine_map<(i, j) -> (i, j)>

func.func private @printMemrefF32(tensor<*xf32>)

func.func @compute(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x2xf32> {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %empty = tensor.empty() : tensor<2x2xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<2x2xf32>) -> tensor<2x2xf32>
  %prod = linalg.matmul ins(%a, %b : tensor<2x3xf32>, tensor<3x2xf32>)
                        outs(%acc : tensor<2x2xf32>) -> tensor<2x2xf32>
  %out = tensor.empty() : tensor<2x2xf32>
  %sum = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%prod : tensor<2x2xf32>) outs(%out : tensor<2x2xf32>) {
  ^bb0(%x: f32, %unused: f32):
    %y = arith.addf %x, %one : f32
    linalg.yield %y : f32
  } -> tensor<2x2xf32>
  return %sum : tensor<2x2xf32>
}

func.func @main() {
  %a = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %b = arith.constant dense<[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]> : tensor<3x2xf32>
  %c = call @compute(%a, %b) : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %u = tensor.cast %c : tensor<2x2xf32> to tensor<*xf32>
  call @printMemrefF32(%u) : (tensor<*xf32>) -> ()
  return
}
