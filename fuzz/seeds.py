#!/usr/bin/env python3
"""Regenerates the fuzz seed corpora, testdata/fuzz/<kind>/seeds/, from the repository's files.

    python3 fuzz/seeds.py

- onnx: the small models of testdata/models/onnx/, and one ONNX backend node test per
  operator set among those tessera passes (from the cache the conformance test generates,
  target/onnx-node-tests, when it is there);
- onnx_structured: deterministic random bytes (the target builds a model from any bytes);
- text_ir: the .tir files of testdata/ (ir, verify, passes, mlir);
- target_toml: targets/builtin/, testdata/targets/ and the example plugin's target;
- calibration_toml: the README's example and variants for the hetero-cpu-gpu target;
- placement_json: testdata/placement/ and, when target/debug/tessera is built, the problems
  `tessera compile --emit-placement-problem` writes for the MLP on three built-in targets;
- npy: the small .npy files of testdata/ and, with numpy, one file per dtype and layout.

Needs the onnx Python package (`make deps`) for the node tests, numpy for the .npy variants.
"""

import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "fuzz"


def seeds(kind):
    d = OUT / kind / "seeds"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def copy(files, dest, limit=16384):
    for f in sorted(files):
        if f.stat().st_size <= limit:
            name = str(f.relative_to(ROOT)).replace("/", "_")
            shutil.copy(f, dest / name)


def onnx_seeds():
    d = seeds("onnx")
    copy((ROOT / "testdata/models/onnx").glob("*/model.onnx"), d, limit=32768)
    cache = ROOT / "target/onnx-node-tests/node"
    passing = ROOT / "testdata/onnx-conformance/expected-pass.txt"
    if not cache.is_dir():
        print("seeds: no target/onnx-node-tests (run the conformance test once); node tests skipped")
        return
    import onnx

    seen = set()
    for line in passing.read_text().splitlines():
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        model = cache / name / "model.onnx"
        if not model.is_file() or model.stat().st_size > 2048:
            continue
        ops = tuple(sorted({n.op_type for n in onnx.load(str(model)).graph.node}))
        if ops in seen:
            continue
        seen.add(ops)
        shutil.copy(model, d / f"{name}.onnx")


def structured_seeds():
    d = seeds("onnx_structured")
    for i in range(32):
        r = random.Random(i)
        (d / f"random-{i:02}").write_bytes(r.randbytes(64 + 32 * (i % 8)))


def text_seeds():
    d = seeds("text_ir")
    files = []
    for sub in ["ir", "verify", "passes", "mlir"]:
        files += (ROOT / "testdata" / sub).rglob("*.tir")
    copy(files, d, limit=8192)


def target_seeds():
    d = seeds("target_toml")
    copy(list((ROOT / "targets/builtin").glob("*.toml"))
         + list((ROOT / "testdata/targets").glob("*.toml"))
         + list((ROOT / "plugins/example").glob("*.toml")), d)


CALIBRATIONS = {
    "readme.toml": """[[measurement]]
device = "gpu0"                               # a device name, or a device kind ("gpu")
op = "matmul"                                 # an IR op name
operands = ["f32[8, 512]", "f32[512, 512]"]   # optional: absent matches any shapes
seconds = 12.5e-6

[[measurement]]
device = "gpu"
op = "softmax"
seconds = 3e-6
""",
    "mlp.toml": """[[measurement]]
device = "cpu"
op = "matmul"
operands = ["f32[8, 16]", "f32[16, 4]"]
seconds = 1e-6

[[measurement]]
device = "gpu0"
op = "softmax"
operands = ["f32[8,4]"]
seconds = 0

[[measurement]]
device = "gpu"
op = "matmul"
seconds = 2.5e-7
""",
    "empty.toml": "",
    "integer-seconds.toml": '[[measurement]]\ndevice = "cpu"\nop = "add"\nseconds = 1\n',
}


def calibration_seeds():
    d = seeds("calibration_toml")
    for name, text in CALIBRATIONS.items():
        (d / name).write_text(text)


def placement_seeds():
    d = seeds("placement_json")
    copy([f for f in (ROOT / "testdata/placement").glob("*.json") if not f.name.endswith(".plan.json")], d)
    tessera = ROOT / "target/debug/tessera"
    if not tessera.is_file():
        print("seeds: no target/debug/tessera; generated placement problems skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for target in ["mcm-2x2", "hetero-cpu-gpu", "mcm-ring4"]:
            out = d / f"mlp-{target}.json"
            subprocess.run([str(tessera), "compile", "testdata/models/onnx/mlp/model.onnx",
                            "--input-shape", "x=4x32", "--target", target,
                            "--emit-placement-problem", str(out), "-o", f"{tmp}/{target}"],
                           cwd=ROOT, check=True, capture_output=True)


def npy_seeds():
    d = seeds("npy")
    copy([f for f in (ROOT / "testdata").rglob("*.npy") if "fuzz" not in f.parts], d, limit=2048)
    try:
        import numpy as np
    except ImportError:
        print("seeds: no numpy; generated .npy variants skipped")
        return
    x = np.arange(6).reshape(2, 3)
    variants = {
        "f2": x.astype("<f2"), "f4-be": x.astype(">f4"), "f8": x.astype("<f8"),
        "i1": x.astype("i1"), "i2-be": x.astype(">i2"), "i4": x.astype("<i4"),
        "i8": x.astype("<i8"), "u1": x.astype("u1"), "b1": (x % 2).astype("?"),
        "v2": x.astype("<u2").view("V2"), "fortran": np.asfortranarray(x.astype("<f4")),
        "scalar": np.float32(1.5), "empty": np.zeros((0, 3), "<f4"),
        "rank5": np.zeros((1, 2, 1, 2, 1), "<i4"),
    }
    for name, a in variants.items():
        np.save(d / f"gen-{name}.npy", a)


def main():
    onnx_seeds()
    structured_seeds()
    text_seeds()
    target_seeds()
    calibration_seeds()
    placement_seeds()
    npy_seeds()
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file() and "seeds" in f.parts)
    print(f"seeds: {sum(1 for f in OUT.rglob('*') if f.is_file() and 'seeds' in f.parts)} files, {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
