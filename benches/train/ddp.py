"""Data-parallel training, really run on this machine: tessera's MPI program against PyTorch
DDP (gloo), on the same model, batches and number of replicas. The table goes into the
README's Benchmarks section.

    python3 -m venv /tmp/torch && /tmp/torch/bin/pip install torch onnx numpy
    cargo build --release
    /tmp/torch/bin/python benches/train/ddp.py [--steps 20 420] [--repeats 5]

tessera: `tessera compile MODEL --train ... --target testdata/targets/cpu-pair.toml --split
force --split-axes batch --emit mpi`, on a target of two CPUs, the host one of them (the
planner splits every op it can along the batch over the pair: each CPU
runs its rows of the forward and backward, the gradients are all-reduced in DDP's buckets),
then `mpirun -np 2 DIR/program --steps S`: one rank per CPU core of this machine. PyTorch:
two processes, each a `DistributedDataParallel` replica on its rows of every batch (one
thread each, gloo over loopback). Both train with AdamW. The step time of each is the
difference of two whole runs' wall times, S2 and S1 steps, over S2 - S1: start-up (MPI and
gloo initialization, reading the files, JIT or native code loading) cancels out. Medians of
--repeats.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "testdata", "training"))
TESSERA = os.path.join(ROOT, "target", "release", "tessera")
OPT = "adamw{lr=0.001 weight-decay=0.01}"
# Data-parallel replicas (tessera's CPUs, PyTorch's processes).
REPLICAS = 2
# name, model class in make_training_refs, input name, input shape
MODELS = [
    ("mlp", "Mlp", "x", "x=8x16"),
    ("gpt2_tiny", "Gpt2Tiny", "input_ids", "input_ids=2x16"),
]


def worker(args):
    """One PyTorch DDP replica: trains `steps` steps on its rows of each batch."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import make_training_refs as refs

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(getattr(refs, args.cls)())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    d = os.path.join(ROOT, "testdata", "training", args.model)
    xs = np.load(os.path.join(d, args.input + ".npy"))
    ys = np.load(os.path.join(d, "labels.npy"))
    # Each replica's rows of every batch (GPT-2's labels are [batch * seq]: its rows' tokens).
    for s in range(args.steps):
        x = torch.from_numpy(np.array_split(xs[s % len(xs)], world)[rank])
        y = torch.from_numpy(np.array_split(ys[s % len(ys)], world)[rank])
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y, ignore_index=-100)
        loss.backward()
        opt.step()
    # Every replica done before any leaves (gloo's teardown aborted a replica that left
    # while the other was still in its last all-reduce).
    dist.barrier()
    dist.destroy_process_group()


def torch_run(model, cls, inp, steps, replicas, port):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE=str(replicas), OMP_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", model, "--cls",
           cls, "--input", inp, "--steps", str(steps)]
    t = time.perf_counter()
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r))) for r in range(replicas)]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t
    if any(codes):
        raise SystemExit(f"torch DDP failed: {codes}")
    return wall


# Two CPUs on one link, the host one of them: a rank per core of a 2-core machine (a third
# rank, a host of its own, made every blocking receive wait for the scheduler: 0.5 s steps).
CPU_PAIR = os.path.join(ROOT, "testdata", "targets", "cpu-pair.toml")


def tessera_build(model, inp, shape, out):
    d = os.path.join(ROOT, "testdata", "training", model)
    cmd = [TESSERA, "compile", os.path.join(d, "model.onnx"), "--train", "--labels", "labels",
           "--optimizer", OPT, "--input-shape", shape, "--target", CPU_PAIR, "--split",
           "force", "--split-axes", "batch", "--emit", "mpi", "-o", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    mesh = next((l for l in r.stdout.splitlines() if l.startswith("mesh")), "mesh ?")
    with open(os.path.join(out, "program.mlir")) as f:
        ranks = f.read().count("func.func @rank")
    inputs = ["--input", f"{inp}={os.path.join(d, inp + '.npy')}",
              "--input", f"labels={os.path.join(d, 'labels.npy')}"]
    return ranks, inputs, mesh.split(None, 1)[1].split(":")[0]


def tessera_run(out, ranks, inputs, steps):
    with tempfile.TemporaryDirectory() as res:
        cmd = ["mpirun", "-np", str(ranks), os.path.join(out, "program")] + inputs + \
            ["--steps", str(steps), "--output-dir", res]
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if r.returncode != 0:
            raise SystemExit(r.stderr)
    return wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--model")
    ap.add_argument("--cls")
    ap.add_argument("--input")
    ap.add_argument("--steps", type=int, nargs="+", default=[20, 420])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if args.worker:
        args.steps = args.steps[0]
        worker(args)
        return
    s1, s2 = args.steps
    print(f"steps {s1} and {s2}, {args.repeats} repeats, {os.cpu_count()} CPUs")
    print("| model | tessera mesh | tessera ranks | tessera step ms | PyTorch DDP replicas "
          "| PyTorch DDP step ms | tessera / PyTorch |")
    print("|---|---|---:|---:|---:|---:|---:|")
    port = 29500
    for model, cls, inp, shape in MODELS:
        with tempfile.TemporaryDirectory() as out:
            ranks, inputs, mesh = tessera_build(model, inp, shape, out)
            ts, ps = [], []
            for _ in range(args.repeats):
                ts.append((tessera_run(out, ranks, inputs, s2)
                           - tessera_run(out, ranks, inputs, s1)) / (s2 - s1) * 1e3)
                port += 2
                ps.append((torch_run(model, cls, inp, s2, REPLICAS, port)
                           - torch_run(model, cls, inp, s1, REPLICAS, port + 1))
                          / (s2 - s1) * 1e3)
            t, p = statistics.median(ts), statistics.median(ps)
            print(f"| {model} | {mesh} | {ranks} | {t:.3f} | {REPLICAS} | {p:.3f} | "
                  f"{t / p:.2f} |", flush=True)


if __name__ == "__main__":
    main()
