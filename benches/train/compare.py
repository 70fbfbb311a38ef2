"""Training step time and peak memory: tessera (JIT-compiled step, `tessera train`) against
PyTorch eager on the same CPU threads, and the placed step's simulated time on the
built-in targets. The table goes into the README's Benchmarks section.

    python3 -m venv /tmp/torch && /tmp/torch/bin/pip install torch onnx numpy
    cargo build --release
    /tmp/torch/bin/python benches/train/compare.py [--threads 1] [--steps 12] [--skip-small]

Models: the MLP, CNN and GPT-2 tiny of testdata/training (their model classes and batches),
and GPT-2 small (124M parameters, the same class at GPT-2 small's sizes) at batch 1x64,
exported here, trained for --small-steps steps with LLVM at --small-opt-level (default 0:
-O2 on its one-function step did not finish in 13 minutes). Every model trains with AdamW; step times are medians over the steps after
the first two (tessera's from `tessera train`'s own report, which excludes the JIT's code
generation; PyTorch's around zero_grad, forward, backward and the optimizer step). Peak
memory is each process's maximum resident set (ru_maxrss of a child process), so tessera's
includes MLIR's compiler and PyTorch's its runtime.
"""

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "testdata", "training"))
import make_training_refs as refs  # noqa: E402

TESSERA = os.path.join(ROOT, "target", "release", "tessera")
OPT = "adamw{lr=0.001 weight-decay=0.01}"
TARGETS = ["cpu", "mcm-2x2", "hetero-cpu-gpu", "gpu-8"]


def torch_step_time(model_fn, xs, ys, steps, threads, q):
    """Runs in a child process: median step time (ms) and peak RSS (MiB)."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = model_fn()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    times = []
    for s in range(steps):
        x = torch.from_numpy(xs[s % len(xs)])
        y = torch.from_numpy(ys[s % len(ys)])
        t = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t) * 1e3)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    q.put((float(np.median(times[2:])), rss))


def run_torch(model_fn, xs, ys, steps, threads):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=torch_step_time, args=(model_fn, xs, ys, steps, threads, q))
    p.start()
    out = q.get()
    p.join()
    return out


def run_tessera(model, shape, inputs, steps, threads, opt_level):
    with tempfile.TemporaryDirectory() as out:
        cmd = [TESSERA, "train", model, "--train", "--labels", "labels", "--optimizer", OPT,
               "--input-shape", shape, "--steps", str(steps), "--output-dir", out,
               "--opt-level", str(opt_level)]
        for k, v in inputs.items():
            cmd += ["--input", f"{k}={v}"]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        # A fresh Python parent per run, so that its children's ru_maxrss is this run's.
        wrapper = ("import resource, subprocess, sys\n"
                   "r = subprocess.run(sys.argv[1:])\n"
                   "print('maxrss', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
                   " file=sys.stderr)\n"
                   "sys.exit(r.returncode)\n")
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", wrapper] + cmd, capture_output=True,
                           text=True, env=env)
        wall = time.perf_counter() - t
        if r.returncode != 0:
            return None, None, r.stderr.strip().splitlines()[-2]
        rss = int(re.search(r"maxrss (\d+)", r.stderr).group(1))
        m = re.search(r"median step ([0-9.]+) ms .*JIT compile ([0-9.]+) ms", r.stderr)
        note = (f"LLVM -O{opt_level}, JIT compile {float(m.group(2)) / 1e3:.1f} s, "
                f"whole run {wall:.1f} s")
        return float(m.group(1)), rss / 1024, note


def simulated(model, shape, target):
    r = subprocess.run([TESSERA, "compile", model, "--train", "--labels", "labels",
                        "--optimizer", OPT, "--input-shape", shape, "--target", target],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "error: " + r.stderr.strip().splitlines()[-1]
    m = re.search(r"^latency\s+(.+)$", r.stdout, re.M)
    return m.group(1) if m else "?"


def gpt2_small(tmp):
    import torch

    model = refs.Gpt2Tiny(vocab=50257, ctx=64, d=768, heads=12, layers=12)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50257, size=(3, 1, 65)).astype(np.int64)
    xs, ys = ids[:, :, :64].copy(), ids[:, :, 1:].reshape(3, 64).copy()
    path = os.path.join(tmp, "gpt2_small.onnx")
    torch.onnx.export(model, (torch.from_numpy(xs[0]),), path, input_names=["input_ids"],
                      output_names=["logits"], opset_version=17, dynamo=False,
                      do_constant_folding=False)
    np.save(os.path.join(tmp, "input_ids.npy"), xs)
    np.save(os.path.join(tmp, "labels.npy"), ys)
    return (lambda: refs.Gpt2Tiny(vocab=50257, ctx=64, d=768, heads=12, layers=12)), path, \
        "input_ids=1x64", {"input_ids": os.path.join(tmp, "input_ids.npy"),
                           "labels": os.path.join(tmp, "labels.npy")}, xs, ys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--skip-small", action="store_true")
    ap.add_argument("--only-small", action="store_true")
    # LLVM -O2 on GPT-2 small's step (one function of the whole step) did not finish in
    # 13 minutes; -O0 compiles it in minutes.
    ap.add_argument("--small-opt-level", type=int, default=0)
    ap.add_argument("--small-steps", type=int, default=4)
    args = ap.parse_args()
    d = os.path.join(ROOT, "testdata", "training")
    rows = []
    cases = [] if args.only_small else [
        ("mlp", refs.Mlp, "x=8x16", "x"),
        ("cnn", refs.Cnn, "x=8x1x8x8", "x"),
        ("gpt2_tiny", refs.Gpt2Tiny, "input_ids=2x16", "input_ids"),
    ]
    tmp = tempfile.mkdtemp()
    for name, cls, shape, inp in cases:
        xs = np.load(os.path.join(d, name, inp + ".npy"))
        ys = np.load(os.path.join(d, name, "labels.npy"))
        inputs = {inp: os.path.join(d, name, inp + ".npy"),
                  "labels": os.path.join(d, name, "labels.npy")}
        rows.append((name, os.path.join(d, name, "model.onnx"), shape, inputs, cls, xs, ys))
    if not args.skip_small:
        fn, path, shape, inputs, xs, ys = gpt2_small(tmp)
        rows.append(("GPT-2 small 1x64", path, shape, inputs, fn, xs, ys))
    print(f"threads: {args.threads}, steps: {args.steps} (median of the steps after the 2nd)")
    print("| model | tessera step ms | PyTorch step ms | ratio | tessera peak MiB | PyTorch peak MiB | "
          + " | ".join(f"simulated {t}" for t in TARGETS) + " | notes |")
    print("|---|---|---|---|---|---|" + "---|" * len(TARGETS) + "---|")
    for name, model, shape, inputs, fn, xs, ys in rows:
        small = name.startswith("GPT-2 small")
        steps = args.small_steps if small else args.steps
        level = args.small_opt_level if small else 2
        t_ms, t_rss, note = run_tessera(model, shape, inputs, steps, args.threads, level)
        p_ms, p_rss = run_torch(fn, xs, ys, args.steps, args.threads)
        sims = [simulated(model, shape, t) for t in TARGETS]
        ratio = f"{t_ms / p_ms:.2f}" if t_ms else "-"
        t_txt = f"{t_ms:.3f}" if t_ms else "failed"
        r_txt = f"{t_rss:.0f}" if t_rss else "-"
        print(f"| {name} | {t_txt} | {p_ms:.3f} | {ratio} | {r_txt} | {p_rss:.0f} | "
              + " | ".join(sims) + f" | {note} |", flush=True)


if __name__ == "__main__":
    main()
