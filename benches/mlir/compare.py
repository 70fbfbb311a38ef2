#!/usr/bin/env python3
"""Compare compile time and CPU run time of tessera, IREE and onnxruntime.

For every model folder (model.onnx + io.json + sample input / reference
output .npy files) this measures:

  tessera      `tessera compile MODEL --input-shape NAME=DxD.. --target cpu
               -o OUT` (MLIR and the shared library `run` loads) and the
               same with `--emit object` (wall clock), and
               `tessera run OUT --input NAME=FILE.npy .. --repeat N --threads T`
               for T = 1 and 2 (a `run: median <x> ms` line is parsed; the
               process's wall clock is noted).
  IREE         `iree-import-onnx` and `iree-compile` (llvm-cpu, host CPU),
               wall clock, timed separately; run time = `iree-benchmark-module`
               (the runtime's own benchmark tool: the median of N repetitions,
               each as many calls as Google Benchmark needs, inputs uploaded
               once, no Python in the timed region); outputs of one call through
               iree.runtime are checked against the reference .npy files.
  onnxruntime  CPUExecutionProvider, median of N `session.run` calls after
               warmup.

Rounds: with --rounds R each tool's run time is measured R times in a row and the
least of the R medians is kept (the machine is shared and its speed moves).

Threads: onnxruntime runs with intra_op_num_threads=1 (--ort-threads) and
IREE with the single-threaded `local-sync` driver (--iree-driver) by default,
to compare against single-threaded generated code, and tessera's `run ms` is
`--threads 1`; its `2 threads` column is `--threads 2`.  Compilers themselves run
with their own default threading.

Shapes: tessera compiles for fixed input shapes (the sample shapes from
io.json).  By default IREE gets the same: the graph inputs of a copy of the
model are pinned to the sample shapes before import (--iree-shapes static;
`dynamic` imports the model as is).  Models with opset < --iree-min-opset
are upgraded by iree-import-onnx (`--opset-version`), which its ONNX->torch
lowering needs for e.g. BatchNormalization / Slice at old opsets.

Output: a markdown table on stdout and in --out.
"""

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MODEL_ROOT = REPO / "testdata" / "models" / "onnx"
DEFAULT_EXTRA = [REPO / "testdata" / "models" / "large" / "gpt2_small"]

IREE_COMPILE_FLAGS = [
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
]


# ----------------------------------------------------------------- helpers


class StepError(Exception):
    """A step failed; str() is a short reason for the notes column."""


def first_error_line(text, limit=160):
    """The most telling line of a tool's error output, shortened."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    pick = None
    for l in lines:
        if re.search(r"\berror\b|Error|error:", l):
            pick = l
            break
    if pick is None and lines:
        pick = lines[-1]
    if pick is None:
        return "(no output)"
    # Strip long temp paths, keep the message.
    pick = re.sub(r"(?:/[^\s/:]+)+/([^\s/:]+)", r"\1", pick)  # absolute paths -> basename
    pick = pick.replace("|", "\\|")
    if len(pick) > limit:
        pick = pick[: limit - 3] + "..."
    return pick


def run_timed(cmd, timeout, cwd=None):
    """Run cmd, return (seconds, stdout, stderr); raise StepError on failure."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, errors="replace", timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise StepError(f"timeout after {timeout}s: {Path(cmd[0]).name}")
    except OSError as e:
        raise StepError(f"cannot run {cmd[0]}: {e.strerror}")
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise StepError(
            f"{Path(cmd[0]).name} rc={p.returncode}: "
            + first_error_line(p.stderr + "\n" + p.stdout)
        )
    return dt, p.stdout, p.stderr


def median_of(fn, repeats):
    times = []
    out = None
    for _ in range(max(1, repeats)):
        dt, *rest = fn()
        times.append(dt)
        out = rest
    return statistics.median(times), out


def find_tool(name, explicit_dir):
    cands = []
    if explicit_dir:
        cands.append(Path(explicit_dir) / name)
    cands.append(Path(sys.executable).parent / name)
    for c in cands:
        if c.exists():
            return str(c)
    w = shutil.which(name)
    return w or name


def fmt(x, digits=3):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}g}" if x < 1 else f"{x:.2f}"


# ----------------------------------------------------------------- models


class Model:
    def __init__(self, folder):
        self.dir = Path(folder).resolve()
        self.name = self.dir.name
        self.onnx = self.dir / "model.onnx"
        with open(self.dir / "io.json") as f:
            self.io = json.load(f)
        self.inputs = [
            (i["name"], self.dir / i["file"], list(i["sample_shape"]))
            for i in self.io["inputs"]
        ]
        self.outputs = [
            (o["name"], self.dir / o["file"], o.get("rtol", 1e-3), o.get("atol", 1e-4))
            for o in self.io["outputs"]
        ]
        self.opset = self.io.get("opset") or self.io.get("opset_import", {}).get("ai.onnx")

    def feeds(self):
        return {name: np.load(path) for name, path, _ in self.inputs}

    def references(self):
        return [(name, np.load(path), rtol, atol) for name, path, rtol, atol in self.outputs]


def discover(args):
    folders = []
    if args.models:
        folders = [Path(m) for m in args.models]
    else:
        folders = sorted(p for p in DEFAULT_MODEL_ROOT.iterdir() if (p / "io.json").exists())
        if not args.no_large:
            folders += [p for p in DEFAULT_EXTRA if (p / "io.json").exists()]
    return [Model(f) for f in folders]


def compare_outputs(model, outs):
    """Return (max abs error over all outputs, all within io.json tolerance)."""
    refs = model.references()
    if len(outs) != len(refs):
        return None, f"{len(outs)} outputs, expected {len(refs)}"
    worst = 0.0
    ok = True
    for (name, ref, rtol, atol), got in zip(refs, outs):
        got = np.asarray(got)
        if got.shape != ref.shape:
            return None, f"output {name}: shape {list(got.shape)} != {list(ref.shape)}"
        if ref.dtype.kind in "iub":
            err = float(np.max(np.abs(got.astype(np.int64) - ref.astype(np.int64)))) if ref.size else 0.0
            ok = ok and err == 0
        else:
            err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
            ok = ok and bool(np.allclose(got, ref, rtol=rtol, atol=atol))
        worst = max(worst, err)
    return worst, None if ok else "outside io.json tolerance"


# ----------------------------------------------------------------- IREE


def pin_input_shapes(model, dst):
    """Copy of model.onnx with graph inputs fixed to the sample shapes.

    External data is not loaded or copied: the importer gets --data-dir
    pointing at the original folder.
    """
    import onnx

    m = onnx.load(str(model.onnx), load_external_data=False)
    shapes = {name: shape for name, _, shape in model.inputs}
    for gi in m.graph.input:
        if gi.name not in shapes:
            continue
        dims = gi.type.tensor_type.shape.dim
        want = shapes[gi.name]
        if len(dims) != len(want):
            raise StepError(f"input {gi.name}: rank {len(dims)} != sample rank {len(want)}")
        for d, v in zip(dims, want):
            d.Clear()
            d.dim_value = int(v)
    onnx.save(m, str(dst))


def bench_iree(model, args, work):
    res = {"compile": None, "import_s": None, "compile_s": None, "run_ms": None,
           "err": None, "notes": []}
    imp = find_tool("iree-import-onnx", args.iree_bin)
    comp = find_tool("iree-compile", args.iree_bin)
    src = model.onnx
    import_flags = []
    if args.iree_shapes == "static":
        src = work / "model.static.onnx"
        pin_input_shapes(model, src)
        import_flags += ["--data-dir", str(model.dir)]
    if model.opset is not None and model.opset < args.iree_min_opset:
        import_flags += ["--opset-version", str(args.iree_min_opset)]
        res["notes"].append(f"IREE: opset {model.opset}->{args.iree_min_opset}")
    mlir = work / "model.mlir"
    vmfb = work / "model.vmfb"

    try:
        res["import_s"], _ = median_of(
            lambda: run_timed([imp, str(src), "-o", str(mlir)] + import_flags, args.timeout),
            args.compile_repeats)
    except StepError as e:
        res["notes"].append(f"IREE import failed: {e}")
        return res
    try:
        res["compile_s"], _ = median_of(
            lambda: run_timed([comp] + IREE_COMPILE_FLAGS + args.iree_extra_flag
                              + [str(mlir), "-o", str(vmfb)], args.timeout),
            args.compile_repeats)
    except StepError as e:
        res["notes"].append(f"IREE compile failed: {e}")
        return res
    res["compile"] = res["import_s"] + res["compile_s"]
    if args.keep_tmp:
        res["notes"].append(f"IREE mlir {mlir.stat().st_size/1e6:.1f} MB, vmfb {vmfb.stat().st_size/1e6:.1f} MB")

    try:
        import iree.runtime as rt
    except ImportError as e:
        res["notes"].append(f"IREE run: no iree.runtime ({e})")
        return res
    try:
        mod = rt.load_vm_flatbuffer_file(str(vmfb), driver=args.iree_driver)
        names = [n for n in mod.vm_module.function_names
                 if not n.startswith("__") and not n.endswith("$async")]
        if len(names) != 1:
            raise StepError(f"expected one exported function, got {names}")
        fn = mod[names[0]]
        feeds = model.feeds()
        order = onnx_input_order(model)
        argv = [feeds[n] for n in order]
        # The outputs, checked once through the Python API; the time is the runtime's own
        # benchmark tool's, which keeps Python, argument wrapping and output copies out of it.
        r = fn(*argv)
        if not isinstance(r, (tuple, list)):
            r = (r,)
        outs = [x.to_host() if hasattr(x, "to_host") else np.asarray(x) for x in r]
        err, problem = compare_outputs(model, outs)
        res["err"] = err
        if err is not None:
            res["notes"].append(f"IREE max abs err {err:.2g}")
        if problem:
            res["notes"].append(f"IREE: {problem}")
        del fn, mod
        inputs = []
        for k, a in enumerate(argv):
            f = work / f"iree_input_{k}.npy"
            np.save(f, np.ascontiguousarray(a))
            inputs.append(f"--input=@{f}")
        res["run_ms"] = min(iree_benchmark(vmfb, names[0], inputs, args)
                            for _ in range(args.rounds))
    except StepError as e:
        res["notes"].append(f"IREE run failed: {e}")
    except Exception as e:  # runtime errors from iree.runtime
        res["notes"].append(f"IREE run failed: {first_error_line(str(e)) or type(e).__name__}")
    return res


def iree_benchmark(vmfb, function, inputs, args):
    """Milliseconds per call of `function`: the median of --repeat repetitions of
    `iree-benchmark-module` (Google Benchmark: each repetition times as many calls as it
    needs for a stable figure, after its own warm-up), inputs uploaded once, outputs left
    on the device as a deployed program leaves them."""
    tool = find_tool("iree-benchmark-module", args.iree_bin)
    cmd = [tool, f"--module={vmfb}", f"--device={args.iree_driver}", f"--function={function}",
           f"--benchmark_repetitions={max(1, args.repeat)}", "--benchmark_format=json",
           "--benchmark_report_aggregates_only=true"] + inputs
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise StepError(f"iree-benchmark-module: {e}")
    if p.returncode != 0:
        raise StepError(first_error_line(p.stderr + p.stdout))
    start = p.stdout.find("{")
    if start < 0:
        raise StepError("iree-benchmark-module printed no JSON")
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    for b in json.loads(p.stdout[start:])["benchmarks"]:
        if b.get("aggregate_name") == "median" and b["name"].endswith("/real_time_median"):
            return b["real_time"] * scale[b["time_unit"]]
    raise StepError("iree-benchmark-module reported no median")


def onnx_input_order(model):
    import onnx

    m = onnx.load(str(model.onnx), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits]


# ----------------------------------------------------------------- onnxruntime


def bench_ort(model, args):
    res = {"run_ms": None, "notes": []}
    try:
        import onnxruntime as ort
    except ImportError as e:
        res["notes"].append(f"onnxruntime missing ({e})")
        return res
    try:
        so = ort.SessionOptions()
        if args.ort_threads > 0:
            so.intra_op_num_threads = args.ort_threads
            so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        t0 = time.perf_counter()
        sess = ort.InferenceSession(str(model.onnx), so, providers=["CPUExecutionProvider"])
        res["session_s"] = time.perf_counter() - t0
        feeds = model.feeds()
        for _ in range(1 + args.warmup):
            sess.run(None, feeds)
        medians = []
        for _ in range(args.rounds):
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                times.append(time.perf_counter() - t0)
            medians.append(statistics.median(times) * 1e3)
        res["run_ms"] = min(medians)
    except Exception as e:
        res["notes"].append(f"onnxruntime failed: {first_error_line(str(e))}")
    return res


# ----------------------------------------------------------------- tessera


RUN_MEDIAN_RE = re.compile(r"run:\s*median\s+([0-9.eE+-]+)\s*ms")
# How `tessera run DIR` got its code: `loaded 1 library in 2.0 ms` or `JIT compile 391.1 ms`.
START_RE = re.compile(r"(loaded [^)]*? in|JIT compile) [0-9.]+ ms")


def bench_tessera(model, args, work):
    res = {"compile_s": None, "mlir_s": None, "run_ms": None, "run2_ms": None, "notes": []}
    exe = Path(args.tessera)
    if not exe.is_absolute():
        exe = (REPO / exe) if (REPO / exe).exists() else Path.cwd() / exe
    if not exe.exists():
        res["compile_s"] = res["run_ms"] = f"n/a (no binary at {args.tessera})"
        return res
    out = work / "tessera_out"
    base = [str(exe), "compile", str(model.onnx)]
    for name, _, shape in model.inputs:
        base += ["--input-shape", f"{name}=" + "x".join(str(d) for d in shape)]
    base += ["--target", "cpu", "-o", str(out)]

    def once(cmd):
        def f():
            if out.exists():
                shutil.rmtree(out)
            return run_timed(cmd, args.timeout)
        return f

    try:
        # What `-o` always writes (verified per-device MLIR, each CPU device's shared
        # library), then also an object file.
        res["mlir_s"], _ = median_of(once(base), args.compile_repeats)
        res["compile_s"], _ = median_of(once(base + ["--emit", "object"]), args.compile_repeats)
    except StepError as e:
        res["compile_s"] = res["mlir_s"] = res["run_ms"] = res["run2_ms"] = "n/a (compile failed)"
        res["notes"].append(f"tessera compile failed: {e}")
        return res

    # One thread (the comparison with IREE local-sync and onnxruntime's one thread), then
    # two: the schedule's large contractions share their tiles across OpenMP's threads.
    for threads, key in [(1, "run_ms"), (2, "run2_ms")]:
        cmd = [str(exe), "run", str(out)]
        for name, path, _ in model.inputs:
            cmd += ["--input", f"{name}={path}"]
        cmd += ["--repeat", str(args.repeat), "--threads", str(threads)]
        try:
            # The least median of --rounds runs.
            runs = [run_timed(cmd, args.timeout) for _ in range(args.rounds)]
        except StepError as e:
            res[key] = "n/a (run failed)"
            res["notes"].append(f"tessera run --threads {threads} failed: {e}")
            continue

        def median(run):
            m = RUN_MEDIAN_RE.search(run[1] + "\n" + run[2])
            return float(m.group(1)) if m else float("inf")

        wall, stdout, stderr = min(runs, key=median)
        m = RUN_MEDIAN_RE.search(stdout + "\n" + stderr)
        start = START_RE.search(stdout + "\n" + stderr)
        if start and threads == 1:
            res["notes"].append(f"tessera start {start.group(0)}")
        if m:
            res[key] = float(m.group(1))
            if threads == 1:
                res["notes"].append(f"tessera run process wall {wall*1e3:.0f} ms for --repeat {args.repeat}")
        else:
            res[key] = f"n/a (no 'run: median' line; process wall {wall*1e3:.0f} ms, --repeat {args.repeat})"
    return res


# ----------------------------------------------------------------- main


def machine_notes(args):
    lines = []
    try:
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                    if l.startswith("model name")), platform.processor())
    except OSError:
        cpu = platform.processor()
    lines.append(f"- machine: {cpu}, {os.cpu_count()} logical cores, "
                 f"{platform.system()} {platform.release()}, Python {platform.python_version()}")
    vers = []
    for mod, label in [("onnxruntime", "onnxruntime"), ("onnx", "onnx"), ("numpy", "numpy")]:
        try:
            vers.append(f"{label} {__import__(mod).__version__}")
        except Exception:
            pass
    try:
        from importlib.metadata import version
        vers.append(f"iree-base-compiler {version('iree-base-compiler')}")
        vers.append(f"iree-base-runtime {version('iree-base-runtime')}")
    except Exception:
        pass
    lines.append("- versions: " + ", ".join(vers))
    lines.append(
        f"- run times: tessera (--threads 1, and --threads 2 in its own column) and onnxruntime median of {args.repeat} calls after {args.warmup} warmup call(s), the least of {args.rounds} such median(s); "
        f"onnxruntime CPU EP intra_op_num_threads={args.ort_threads or 'default'}, ORT_SEQUENTIAL; "
        f"IREE iree-benchmark-module --device={args.iree_driver}, median of {args.repeat} repetitions (least of {args.rounds}); "
        f"compile times: median of {args.compile_repeats} run(s), wall clock")
    lines.append(
        f"- IREE: iree-import-onnx (input shapes {args.iree_shapes}"
        f"{' = io.json sample shapes' if args.iree_shapes == 'static' else ''}, opset raised to "
        f"{args.iree_min_opset} when lower) then iree-compile "
        + " ".join(IREE_COMPILE_FLAGS + args.iree_extra_flag)
        + "; 'IREE import+compile s' is the sum of the two")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="model folders (default: testdata/models/onnx/* with io.json, plus large/gpt2_small)")
    ap.add_argument("--no-large", action="store_true", help="skip gpt2_small in the default model list")
    ap.add_argument("--tessera", default="target/release/tessera", help="tessera binary (relative to the repo root or cwd)")
    ap.add_argument("--out", help="also write the markdown table to this file")
    ap.add_argument("--repeat", type=int, default=20, help="timed run calls per model (median)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed run calls before timing")
    ap.add_argument("--rounds", type=int, default=1,
                    help="timing rounds per tool and model; each run time is the least of their medians")
    ap.add_argument("--compile-repeats", type=int, default=1, help="compile runs per model (median)")
    ap.add_argument("--ort-threads", type=int, default=1, help="onnxruntime intra-op threads (0 = ORT default)")
    ap.add_argument("--iree-driver", default="local-sync", help="IREE runtime driver: local-sync (1 thread) or local-task")
    ap.add_argument("--iree-shapes", choices=["static", "dynamic"], default="static")
    ap.add_argument("--iree-min-opset", type=int, default=18, help="upgrade models below this opset on import")
    ap.add_argument("--iree-extra-flag", action="append", default=[], help="extra iree-compile flag (repeatable)")
    ap.add_argument("--iree-bin", help="folder with iree-import-onnx / iree-compile (default: next to this python, then PATH)")
    ap.add_argument("--skip", action="append", default=[], choices=["tessera", "iree", "ort"], help="skip a column (repeatable)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per external command")
    ap.add_argument("--tmpdir", help="parent folder for temporary files")
    ap.add_argument("--keep-tmp", action="store_true", help="keep temporary files (path printed)")
    args = ap.parse_args()
    args.rounds = max(1, args.rounds)

    models = discover(args)
    tmp_root = Path(tempfile.mkdtemp(prefix="tessera-bench-", dir=args.tmpdir))
    rows = []
    load_before = os.getloadavg()
    t_start = time.time()
    try:
        for model in models:
            print(f"[{model.name}] ...", file=sys.stderr, flush=True)
            work = tmp_root / model.name
            work.mkdir(parents=True, exist_ok=True)
            notes = []
            t = {"compile_s": "n/a (skipped)", "mlir_s": "n/a (skipped)", "run_ms": "n/a (skipped)",
                 "run2_ms": "n/a (skipped)", "notes": []}
            i = {"compile": "n/a (skipped)", "run_ms": "n/a (skipped)", "notes": []}
            o = {"run_ms": "n/a (skipped)", "notes": []}
            if "tessera" not in args.skip:
                t = bench_tessera(model, args, work)
            if "iree" not in args.skip:
                i = bench_iree(model, args, work)
                if i["compile"] is not None and not isinstance(i["compile"], str):
                    notes.append(f"IREE import {i['import_s']:.2f} s + compile {i['compile_s']:.2f} s")
            if "ort" not in args.skip:
                o = bench_ort(model, args)
                if o.get("session_s") is not None:
                    notes.append(f"ORT session init {o['session_s']:.2f} s")
            notes = t["notes"] + i["notes"] + notes + o["notes"]
            row = [model.name, fmt(t["mlir_s"]), fmt(t["compile_s"]), fmt(i["compile"]), fmt(t["run_ms"]),
                   fmt(t.get("run2_ms", "n/a")), fmt(i["run_ms"]), fmt(o["run_ms"]), "; ".join(notes)]
            rows.append(row)
            print("  " + " | ".join(row), file=sys.stderr, flush=True)
            if not args.keep_tmp:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        if args.keep_tmp:
            print(f"temporary files kept in {tmp_root}", file=sys.stderr)
        else:
            shutil.rmtree(tmp_root, ignore_errors=True)

    header = ["model", "tessera compile -o s", "tessera to object s", "IREE import+compile s", "tessera run ms",
              "tessera 2 threads ms", "IREE run ms", "onnxruntime run ms", "notes"]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    out.append("")
    out += machine_notes(args)
    out.append(f"- load average before/after: {load_before[0]:.2f} / {os.getloadavg()[0]:.2f}; "
               f"total wall {time.time() - t_start:.0f} s")
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
