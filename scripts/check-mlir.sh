#!/usr/bin/env bash
# Proves the MLIR 22 CPU toolchain works: lowers testdata/mlir/smoke.mlir (linalg.matmul and
# linalg.generic on tensors) with the CPU pipeline from mlir-opt, runs it with mlir-runner,
# and compares the printed result with the expected values. Exits non-zero, loudly, otherwise.
set -euo pipefail

LLVM="${LLVM_PREFIX:-/usr/lib/llvm-22}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INPUT="$ROOT/testdata/mlir/smoke.mlir"
EXPECTED="5 6 11 12"   # [[1,2,3],[4,5,6]] x [[1,0],[0,1],[1,1]] + 1

# A CPU pipeline (notes: MLIR 22 and melior); tessera's own, run in-process, is in
# mlir/src/pipelines.rs.
PIPELINE='builtin.module(one-shot-bufferize{bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},buffer-deallocation-pipeline,convert-bufferization-to-memref,func.func(convert-linalg-to-loops),convert-scf-to-cf,expand-strided-metadata,lower-affine,finalize-memref-to-llvm,convert-math-to-llvm,convert-arith-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,convert-index-to-llvm,reconcile-unrealized-casts)'

fail() {
    echo "check-mlir: FAILED: $*" >&2
    exit 1
}

for tool in mlir-opt mlir-runner; do
    [ -x "$LLVM/bin/$tool" ] || fail "$LLVM/bin/$tool not found (run 'make deps' to install mlir-22-tools)"
done
LIBS=""
for lib in libmlir_c_runner_utils.so libmlir_runner_utils.so; do
    [ -f "$LLVM/lib/$lib" ] || fail "$LLVM/lib/$lib not found (run 'make deps')"
    LIBS="${LIBS:+$LIBS,}$LLVM/lib/$lib"
done

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$LLVM/bin/mlir-opt" "$INPUT" --pass-pipeline="$PIPELINE" -o "$WORK/lowered.mlir" \
    || fail "mlir-opt could not lower $INPUT with the CPU pipeline"
"$LLVM/bin/mlir-runner" "$WORK/lowered.mlir" -e main -entry-point-result=void \
    -shared-libs="$LIBS" >"$WORK/out.txt" 2>&1 \
    || { cat "$WORK/out.txt" >&2; fail "mlir-runner could not run the lowered module"; }

# printMemrefF32 prints a header line ending in "data =" and then the values.
GOT="$(sed -n '/data =/,$p' "$WORK/out.txt" | sed '1s/.*data =//' | tr -c '0-9.e+-' ' ' | xargs)"
if [ "$GOT" != "$EXPECTED" ]; then
    echo "---- mlir-runner output ----" >&2
    cat "$WORK/out.txt" >&2
    fail "expected [$EXPECTED], got [$GOT]"
fi
echo "check-mlir: ok (MLIR $("$LLVM/bin/mlir-opt" --version | sed -n 's/.*LLVM version \([0-9.]*\).*/\1/p' | head -1): matmul + generic lowered, run, printed $GOT)"
