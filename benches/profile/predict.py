#!/usr/bin/env python3
"""Predicted against measured model time on this CPU: the roofline, calibrated, and
calibrated on other models.

For every model folder (model.onnx + io.json + sample inputs) under the model roots this
runs, with `--threads 1`:

  roofline     `tessera compile MODEL --target cpu -o DIR` and `tessera run DIR --profile`:
               the error of the simulated latency against the steps' measured time
               ((predicted - measured) / measured, report.json's measured.error; the
               median run's wall time, with the runner's copies of inputs and outputs,
               is the `run` column);
  calibrated   `tessera calibrate --target cpu --device cpu0 MODEL --input ...` (the
               sample inputs; --runs times, merged: each op's median) first, then the same
               with `--calibration`: the model's own shapes measured;
  others       the calibration of every OTHER model and of the standard set (`tessera
               calibrate` without a model), merged (`tessera calibrate --merge`: a
               measurement met in several files takes the median of its seconds, and the
               scales are fitted again to them all): the model's shapes mostly not
               measured, so its time comes from the scales (per op kind, its FLOPs and
               bytes) and the shapes other models share with it.

  other shape  the model's own calibration (its sample shapes measured) for the model at
               another shape: its first symbolic dimension (a batch, GPT-2's positions)
               times --scale, the sample inputs tiled along it; none for a model of
               static shapes. The shapes are not measured (`calibrate` measures the model
               at its sample shapes and with every symbolic dimension doubled, x2, not
               x4), so the time comes from the scales, as for a model compiled at a new
               batch size.

Each compiled model is profiled --runs times, each in a process of its own, and the
median steps' time counts: this machine's speed moves between processes.

Output: a markdown table on stdout and in --out. Needs only Python 3 and a
release build of tessera.
"""

import argparse
import ast
import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ROOT = REPO / "testdata" / "models" / "onnx"


def model_dirs(roots):
    for root in roots:
        root = Path(root)
        if (root / "io.json").is_file():
            yield root
            continue
        for d in sorted(root.iterdir()):
            if (d / "io.json").is_file() and (d / "model.onnx").is_file():
                yield d


def io_args(d):
    io = json.loads((d / "io.json").read_text())
    shapes, inputs = [], []
    for i in io["inputs"]:
        shape = i.get("sample_shape") or i["shape"]
        shapes += ["--input-shape", f"{i['name']}=" + "x".join(str(x) for x in shape)]
        inputs += ["--input", f"{i['name']}={d / i['file']}"]
    return shapes, inputs


def read_npy(path):
    """(header dict, raw little-endian data) of a version 1 .npy file."""
    b = Path(path).read_bytes()
    n = struct.unpack("<H", b[8:10])[0]
    return ast.literal_eval(b[10:10 + n].decode("latin1")), b[10 + n:]


def write_npy(path, header, data):
    h = repr(header).encode("latin1")
    pad = 64 - (10 + len(h) + 1) % 64
    h += b" " * (pad % 64) + b"\n"
    Path(path).write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data)


def scaled_io(d, tmp, factor):
    """The model's --input-shape and --input arguments with its first symbolic dimension
    times `factor` (every input dimension of that name), the sample inputs tiled along
    it; None for a model without one."""
    io = json.loads((d / "io.json").read_text())
    names = [s for i in io["inputs"] for s in i["shape"] if isinstance(s, str)]
    if not names:
        return None
    name = names[0]
    shapes, inputs = [], []
    for i in io["inputs"]:
        shape = list(i.get("sample_shape") or i["shape"])
        header, data = read_npy(d / i["file"])
        assert list(header["shape"]) == shape, (d, i["name"])
        for ax in [k for k, s in enumerate(i["shape"]) if s == name]:
            outer = 1
            for e in shape[:ax]:
                outer *= e
            block = len(data) // max(outer, 1)
            data = b"".join(data[k * block:(k + 1) * block] * factor for k in range(outer))
            shape[ax] *= factor
        header = dict(header, shape=tuple(shape))
        f = tmp / f"{d.name}-{i['name']}-x{factor}.npy"
        write_npy(f, header, data)
        shapes += ["--input-shape", f"{i['name']}=" + "x".join(str(x) for x in shape)]
        inputs += ["--input", f"{i['name']}={f}"]
    return shapes, inputs


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}\n{p.stderr[-2000:]}")
    return p


def profile_error(tessera, d, out, calibration, repeat, runs, io=None):
    """(predicted, measured, error, run) seconds of the compiled model: the median of
    `runs` profiles' steps (each a process of its own), the run time of that profile."""
    shapes, inputs = io or io_args(d)
    cmd = [tessera, "compile", d / "model.onnx", "--target", "cpu", *shapes, "-o", out]
    if calibration:
        cmd += ["--calibration", calibration]
    run(cmd)
    each = []
    for _ in range(runs):
        run([tessera, "run", out, *inputs, "--profile", "--repeat", str(repeat), "--threads",
             "1"])
        each.append(json.loads((Path(out) / "report.json").read_text())["measured"])
    each.sort(key=lambda m: m["measured"])
    m = each[len(each) // 2]
    return m["predicted"], m["measured"], m["error"], m["run"]


def merge(tessera, files, out):
    args = [x for f in files for x in ("--merge", f)]
    run([tessera, "calibrate", "--target", "cpu", "--device", "cpu0", *args, "-o", out])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="*", default=[DEFAULT_ROOT])
    ap.add_argument("--tessera", default=str(REPO / "target" / "release" / "tessera"))
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--scale", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3,
                    help="profiles of each compiled model (processes of their own; the "
                         "median steps' time counts): this machine's speed moves between "
                         "processes")
    ap.add_argument("--out")
    a = ap.parse_args()
    dirs = list(model_dirs(a.roots))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        calib = {}
        std = tmp / "standard.toml"
        run([a.tessera, "calibrate", "--target", "cpu", "--device", "cpu0", "--threads", "1",
             "--repeat", str(a.repeat), "-o", std])
        for d in dirs:
            shapes, inputs = io_args(d)
            f = tmp / f"{d.name}.toml"
            print(f"[{d.name}] calibrating", file=sys.stderr)
            each = []
            for k in range(a.runs):
                each.append(tmp / f"{d.name}-{k}.toml")
                run([a.tessera, "calibrate", "--target", "cpu", "--device", "cpu0",
                     "--threads", "1", "--repeat", str(a.repeat), d / "model.onnx", *shapes,
                     *inputs, "-o", each[-1]])
            merge(a.tessera, each, f)
            calib[d.name] = f
        for d in dirs:
            print(f"[{d.name}] profiling", file=sys.stderr)
            others = tmp / f"others-{d.name}.toml"
            merge(a.tessera, [std] + [f for n, f in calib.items() if n != d.name], others)
            row = [d.name]
            for c in (None, calib[d.name], others):
                row.append(profile_error(a.tessera, d, tmp / f"out-{d.name}", c, a.repeat,
                                         a.runs))
            io = scaled_io(d, tmp, a.scale)
            if io is None:
                row.append(None)
            else:
                print(f"[{d.name}] profiling at another shape", file=sys.stderr)
                row.append((io[0][1::2], profile_error(
                    a.tessera, d, tmp / f"out-{d.name}-x", calib[d.name], a.repeat, a.runs,
                    io)))
            rows.append(row)
    head = ("| model | run ms | steps ms | roofline ms | error | calibrated ms | error "
            "| calibrated on the others ms | error | other shape | steps ms "
            "| calibrated ms | error |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for name, r, c, o, x in rows:
        other = "| static shapes | | | "
        if x is not None:
            shapes, m = x
            other = (f"| {', '.join(shapes)} | {m[1] * 1e3:.4g} | {m[0] * 1e3:.4g} "
                     f"| {100 * m[2]:+.1f}% ")
        lines.append(
            f"| {name} | {c[3] * 1e3:.4g} | {c[1] * 1e3:.4g} | {r[0] * 1e3:.4g} | {100 * r[2]:+.1f}% "
            f"| {c[0] * 1e3:.4g} | {100 * c[2]:+.1f}% | {o[0] * 1e3:.4g} | {100 * o[2]:+.1f}% "
            f"{other}|"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
