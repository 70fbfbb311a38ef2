#!/bin/sh
# The GPU check of issue 21, for a machine with an NVIDIA GPU and its driver (run from the
# repository root):
#   1. GPT-2 tiny and the CNN compiled for `hetero-cpu-gpu` (round-robin: ops on the CPU
#      and on both GPU devices, so tensors cross between them), run with `--gpu` (both GPU
#      devices on this machine's GPU 0 when it has one) and without, each output compared
#      with onnxruntime's reference within 1e-4;
#   2. each run again with `--repeat 20` for its time, and `--profile --gpu` on GPT-2 tiny;
#   3. `tessera calibrate` of the GPU device on the standard set and on GPT-2 tiny.
#
# Usage: benches/gpu/check.sh [TESSERA] [OUT]
#   TESSERA  the tessera binary (default target/release/tessera)
#   OUT      a scratch folder (default build/gpu-check)
# The kernels' math calls libdevice: set TESSERA_LIBDEVICE (or CUDA_HOME) where the CUDA
# toolkit is not installed in a standard place. Needs python3 (no packages) to compare.
#
# On a machine without the toolchain (the lent device machines): the release binary is
# 257 MB, 195 MB stripped, 40 MB as `strip` then `zstd -19` (under a 64 MiB carry);
# carry it with MLIR's runner utilities (libmlir_c_runner_utils.so, libomp.so, in a
# folder's lib/, named by TESSERA_LLVM_PREFIX) and libdevice.10.bc (PyPI's
# nvidia-cuda-nvcc-cu12 wheel has it under nvidia/cuda_nvcc/nvvm/libdevice/), then
# `zstd -d` the binary and pass it as TESSERA.
set -u
T=${1:-target/release/tessera}
OUT=${2:-build/gpu-check}
mkdir -p "$OUT"
status=0
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv

compare() { # compare GOT.npy WANT.npy WHAT
  python3 - "$1" "$2" "$3" <<'PY' || status=1
import struct, sys, ast
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<H', b[8:10])[0]
    h = ast.literal_eval(b[10:10 + n].decode())
    assert h['descr'] == '<f4', h
    data = b[10 + n:]
    return struct.unpack('<%df' % (len(data) // 4), data)
got, want = load(sys.argv[1]), load(sys.argv[2])
d = max(abs(a - b) for a, b in zip(got, want)) if len(got) == len(want) else float('inf')
print('%s: max |diff| %.3g against onnxruntime: %s' % (sys.argv[3], d, 'ok' if d < 1e-4 else 'FAIL'))
sys.exit(0 if d < 1e-4 else 1)
PY
}

for m in gpt2_tiny:input_ids:1x16 cnn:image:2x3x32x32; do
  name=${m%%:*}; rest=${m#*:}; input=${rest%%:*}; shape=${rest#*:}
  dir=testdata/models/onnx/$name
  shapes="--input-shape $input=$shape"
  echo "== $name"
  # shellcheck disable=SC2086
  "$T" compile "$dir/model.onnx" $shapes --target hetero-cpu-gpu --strategy round-robin \
    -o "$OUT/$name" >/dev/null || { status=1; continue; }
  for where in gpu cpu; do
    flag=""; [ "$where" = gpu ] && flag="--gpu"
    # shellcheck disable=SC2086
    "$T" run "$OUT/$name" --input "$input=$dir/input_0_$input.npy" $flag \
      --output-dir "$OUT/$name.$where" || { status=1; continue; }
    compare "$OUT/$name.$where/logits.npy" "$dir/output_0_logits.npy" "$name on $where"
    # shellcheck disable=SC2086
    "$T" run "$OUT/$name" --input "$input=$dir/input_0_$input.npy" $flag --repeat 20 \
      --output-dir "$OUT/$name.$where" 2>&1 | grep -i "median\|ms" || status=1
  done
done

echo "== profile (GPT-2 tiny, GPU parts on the GPU)"
"$T" run "$OUT/gpt2_tiny" --input input_ids=testdata/models/onnx/gpt2_tiny/input_0_input_ids.npy \
  --gpu --profile --repeat 10 2>&1 | tail -25 || status=1

echo "== calibrate gpu0 (standard set, then GPT-2 tiny)"
"$T" calibrate --target hetero-cpu-gpu --device gpu0 --repeat 10 -o "$OUT/gpu0-standard.toml" || status=1
"$T" calibrate --target hetero-cpu-gpu --device gpu0 --repeat 10 -o "$OUT/gpu0-gpt2.toml" \
  testdata/models/onnx/gpt2_tiny/model.onnx --input-shape input_ids=1x16 || status=1
grep -A3 "^\[\[scale\]\]" "$OUT/gpu0-standard.toml" | head -40
echo "check: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
