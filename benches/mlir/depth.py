#!/usr/bin/env python3
"""Compile time against model depth: GPT-2 small's width with 3, 12 and 48 layers.

Makes each model once (PyTorch + transformers, random weights, exported like
testdata/models/make_onnx_models.py's gpt2_small, into
testdata/models/large/gpt2_depth/L<n>/, git-ignored), then times

  tessera compile MODEL --input-shape input_ids=1x16 -o OUT --emit object

for every binary given with --bin NAME=PATH (side by side, in turn, --repeat
times; the median is reported), and writes a markdown table: seconds per depth
and binary, and each depth's time over the 12-layer time.

Run from the repository root with the venv that has torch (model making only):
  /work/venv-torch/bin/python benches/mlir/depth.py --bin tessera=target/release/tessera
"""

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT_ROOT = REPO / "testdata" / "models" / "large" / "gpt2_depth"


def make(layers, seed=1234):
    folder = OUT_ROOT / f"L{layers}"
    if (folder / "model.onnx").exists():
        return folder
    spec = importlib.util.spec_from_file_location(
        "make_onnx_models", REPO / "testdata" / "models" / "make_onnx_models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    folder.mkdir(parents=True, exist_ok=True)
    mod._gpt2(f"gpt2_depth_L{layers}", folder, seed, {"n_layer": layers}, seq=16,
              external=True, size_threshold=1024)
    return folder


def time_compile(binary, model):
    with tempfile.TemporaryDirectory() as out:
        cmd = [binary, "compile", str(model / "model.onnx"), "--input-shape",
               "input_ids=1x16", "-o", out, "--emit", "object"]
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        dt = time.perf_counter() - t
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
        return dt


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append", required=True, metavar="NAME=PATH")
    ap.add_argument("--layers", default="3,12,48")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    bins = [b.split("=", 1) for b in args.bin]
    layers = [int(x) for x in args.layers.split(",")]
    models = {n: make(n) for n in layers}
    times = {}
    for n in layers:
        for name, path in bins:
            ts = [time_compile(path, models[n]) for _ in range(args.repeat)]
            times[(n, name)] = statistics.median(ts)
            print(f"L{n} {name}: {times[(n, name)]:.2f} s", file=sys.stderr)
    lines = ["| layers | " + " | ".join(f"{name} s | {name} / 12 layers"
                                          for name, _ in bins) + " |",
             "|---|" + "---|---|" * len(bins)]
    for n in layers:
        cells = []
        for name, _ in bins:
            t = times[(n, name)]
            base = times.get((12, name))
            cells.append(f"{t:.2f} | {t / base:.2f}" if base else f"{t:.2f} | n/a")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
