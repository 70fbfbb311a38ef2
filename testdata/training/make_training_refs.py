"""PyTorch references for tessera's training tests (tests/train.rs).

For each model: the ONNX export (model.onnx, logits output), fixed batches (a stack along a
new leading axis: x.npy, labels.npy), and for each optimizer configuration, 10 steps of
PyTorch training on those batches (cycling through the stack): the loss at every step
(<config>/loss.npy) and the final parameters (<config>/<initializer name>.npy).

Needs torch (CPU) in a virtual environment, e.g.:
    python3 -m venv /tmp/torch && /tmp/torch/bin/pip install torch onnx numpy
    /tmp/torch/bin/python testdata/training/make_training_refs.py
"""

import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 10

# The tessera options of each configuration (tests/train.rs passes the same ones).
CONFIGS = {
    "sgd": dict(optimizer="sgd{lr=0.1 momentum=0.9 weight-decay=0.0001}"),
    "adamw": dict(optimizer="adamw{lr=0.01 weight-decay=0.01}"),
    # Adam with L2, global-norm clipping, warmup + cosine, label smoothing, ignored labels.
    "adam-clip-cosine": dict(
        optimizer="adam{lr=0.01 weight-decay=0.001}",
        schedule="warmup-cosine{warmup=3 total=10 min-lr=0.001}",
        clip_norm=0.5,
        label_smoothing=0.1,
    ),
}


def make_optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=0.01, weight_decay=0.01)
    return torch.optim.Adam(params, lr=0.01, weight_decay=0.001)


def warmup_cosine(lr, warmup, total, min_lr):
    """tessera's warmup-cosine as a LambdaLR factor of the 0-based step s."""

    def factor(s):
        t = s + 1
        if t <= warmup:
            return t / warmup
        p = min(max((s - warmup) / (total - warmup), 0.0), 1.0)
        return (min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * p))) / lr

    return factor


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh").tanh() + F.relu(self.fc1(x)))


def train(model, config, xs, ys):
    params = dict(model.named_parameters())
    opt = make_optimizer(config, list(params.values()))
    sched = None
    smoothing = 0.0
    if config == "adam-clip-cosine":
        sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(0.01, 3, 10, 0.001))
        smoothing = 0.1
    losses = []
    for step in range(STEPS):
        x = torch.from_numpy(xs[step % len(xs)])
        y = torch.from_numpy(ys[step % len(ys)])
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y, ignore_index=-100, label_smoothing=smoothing)
        loss.backward()
        if config == "adam-clip-cosine":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    return np.array(losses, dtype=np.float32), {
        k: v.detach().numpy().copy() for k, v in model.named_parameters()
    }


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    name = "mlp"
    out = os.path.join(HERE, name)
    os.makedirs(out, exist_ok=True)
    model = Mlp()
    batches, batch = 4, 8
    xs = np.random.randn(batches, batch, 16).astype(np.float32)
    ys = np.random.randint(0, 10, size=(batches, batch)).astype(np.int64)
    ys[1, 3] = -100  # an ignored label
    np.save(os.path.join(out, "x.npy"), xs)
    np.save(os.path.join(out, "labels.npy"), ys)
    torch.onnx.export(
        model,
        (torch.from_numpy(xs[0]),),
        os.path.join(out, "model.onnx"),
        input_names=["x"],
        output_names=["logits"],
        opset_version=17,
        dynamo=False,
    )
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for config in CONFIGS:
        model.load_state_dict(initial)
        losses, weights = train(model, config, xs, ys)
        d = os.path.join(out, config)
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "loss.npy"), losses)
        for k, v in weights.items():
            np.save(os.path.join(d, k + ".npy"), v)
        print(name, config, losses)


if __name__ == "__main__":
    main()
