"""PyTorch references for tessera's training tests (tests/train.rs).

For each model: the ONNX export (model.onnx, logits output), fixed batches (a stack along a
new leading axis: x.npy, labels.npy), and for each optimizer configuration, 10 steps of
PyTorch training on those batches (cycling through the stack): the loss at every step
(<config>/loss.npy) and the final parameters (<config>/<initializer name>.npy).

Needs torch (CPU) in a virtual environment, e.g.:
    python3 -m venv /tmp/torch && /tmp/torch/bin/pip install torch onnx numpy
    /tmp/torch/bin/python testdata/training/make_training_refs.py [MODEL...]
(no MODEL: all of them).
"""

import copy
import math
import os
import shutil
import sys

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


# Configurations that run each batch as microbatches (tessera's --microbatches): each
# microbatch's forward and backward in turn, gradients accumulated (each microbatch's mean
# loss over the number of microbatches, the whole batch's mean when they are equal-sized
# with no ignored labels), batch norm with each microbatch's statistics, then one step.
MICROBATCHES = {"sgd-mb2": 2}


def make_optimizer(name, params):
    if name in ("sgd", "sgd-mb2"):
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


class Block(nn.Module):
    def __init__(self, d, heads, ctx):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        # No key bias: it shifts every score of a query's row equally, so its gradient is
        # exactly zero and Adam would turn rounding noise into full-size steps, differently
        # in every implementation.
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx)).bool(), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        n = self.ln_1(x)
        q, k, v = self.q(n), self.k(n), self.v(n)
        q = q.reshape(b, t, h, d // h).transpose(1, 2)
        k = k.reshape(b, t, h, d // h).transpose(1, 2)
        v = v.reshape(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2Tiny(nn.Module):
    """GPT-2's structure, tiny: token and position embeddings, pre-norm blocks with causal
    attention and a GELU MLP, a final layer norm, the output head tied to the token
    embedding. Logits come out as [batch * seq, vocab]."""

    def __init__(self, vocab=64, ctx=16, d=32, heads=2, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList([Block(d, heads, ctx) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.register_buffer("pos", torch.arange(ctx), persistent=False)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)
        # Distinct layer-norm parameters: the ONNX exporter merges initializers with equal
        # contents (all-ones scales), which would tie what torch trains separately.
        for m in self.modules():
            if isinstance(m, nn.LayerNorm):
                nn.init.normal_(m.weight, 1.0, 0.1)
                nn.init.normal_(m.bias, 0.0, 0.1)

    def forward(self, ids):
        b, t = ids.shape
        x = self.wte(ids) + self.wpe(self.pos[:t])
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return logits.reshape(b * t, -1)


class Lstm(nn.Module):
    """A one-layer LSTM over a sequence, classified from its last hidden state."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, batch_first=False)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.head(h[0])


class Cnn(nn.Module):
    """Two convolutions with batch normalization (trained in training mode: batch
    statistics, running statistics updated), ReLU, max and average pooling, a linear head."""

    def __init__(self):
        super().__init__()
        # No convolution bias before batch norm (it subtracts the batch mean, so such a
        # bias has a gradient of exactly zero, which Adam turns into noise-driven steps).
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1, stride=2, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)
        # Distinct initial values: the ONNX exporter merges initializers with equal
        # contents (the ones and zeros batch norm starts from).
        for bn in (self.bn1, self.bn2):
            nn.init.normal_(bn.weight, 1.0, 0.1)
            nn.init.normal_(bn.bias, 0.0, 0.1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


# tessera's dropout generator (passes/src/train/dropout.rs, Op::RandomUniform in
# ir/src/op.rs), reimplemented here so that torch trains with the masks tessera draws: the
# losses and weights can then match. SplitMix64's mix; all arithmetic wraps in u64.
GAMMA = np.uint64(0x9E3779B97F4A7C15)
SEED = 0  # `tessera train --seed` (default 0)
CURRENT_STEP = [0]  # the step count tessera feeds as the generator's counter


def mix(z):
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def tessera_uniform(seed, counter, salt, shape):
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):
        one = lambda v: np.array([v % 2**64], dtype=np.uint64)  # i64 bits as u64
        key = mix(one(seed) ^ mix(one(counter) ^ mix(one(salt) + GAMMA)))
        i = np.arange(1, n + 1, dtype=np.uint64)
        bits = mix(key + i * GAMMA) >> np.uint64(40)
    return (bits.astype(np.float32) * np.float32(2.0**-24)).reshape(shape)


class SeededDropout(nn.Module):
    """Dropout that exports as ONNX Dropout (training mode) and trains, in torch, with the
    mask tessera's generator draws for the `salt`-th dropout at the current step."""

    def __init__(self, p, salt):
        super().__init__()
        self.p, self.salt = p, salt

    def forward(self, x):
        if torch.onnx.is_in_onnx_export():
            return F.dropout(x, self.p, training=True)
        u = torch.from_numpy(tessera_uniform(SEED, CURRENT_STEP[0], self.salt, tuple(x.shape)))
        return torch.where(u >= self.p, x * (1.0 / (1.0 - self.p)), torch.zeros_like(x))


class MlpDropout(nn.Module):
    """An MLP with two dropouts (exported in training mode)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.drop1 = SeededDropout(0.25, 0)
        self.fc2 = nn.Linear(32, 32)
        self.drop2 = SeededDropout(0.5, 1)
        self.fc3 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.drop1(F.relu(self.fc1(x)))
        x = self.drop2(torch.tanh(self.fc2(x)))
        return self.fc3(x)


def mlp_dropout_data(rng):
    xs = rng.standard_normal((4, 8, 16)).astype(np.float32)
    ys = rng.integers(0, 10, size=(4, 8)).astype(np.int64)
    return MlpDropout(), "x", xs, ys


def mlp_data(rng):
    xs = rng.standard_normal((4, 8, 16)).astype(np.float32)
    ys = rng.integers(0, 10, size=(4, 8)).astype(np.int64)
    ys[1, 3] = -100  # an ignored label
    return Mlp(), "x", xs, ys


def gpt2_data(rng):
    ids = rng.integers(0, 64, size=(4, 2, 17)).astype(np.int64)
    xs = ids[:, :, :16].copy()
    ys = ids[:, :, 1:].reshape(4, 32).copy()
    return Gpt2Tiny(), "input_ids", xs, ys


def lstm_data(rng):
    xs = rng.standard_normal((4, 5, 4, 8)).astype(np.float32)
    ys = rng.integers(0, 3, size=(4, 4)).astype(np.int64)
    return Lstm(), "x", xs, ys


def cnn_data(rng):
    xs = rng.standard_normal((4, 8, 1, 8, 8)).astype(np.float32)
    ys = rng.integers(0, 10, size=(4, 8)).astype(np.int64)
    return Cnn(), "x", xs, ys


# Each model: how to build it and its data, and the optimizer configurations trained.
MODELS = {
    "cnn": (cnn_data, ["sgd", "adamw", "sgd-mb2"]),
    "mlp": (mlp_data, ["sgd", "adamw", "adam-clip-cosine"]),
    "gpt2_tiny": (gpt2_data, ["sgd", "adamw"]),
    "lstm": (lstm_data, ["sgd", "adamw"]),
    "mlp_dropout": (mlp_dropout_data, ["sgd", "adamw"]),
}

# Models exported in training mode (their Dropout nodes stay in the ONNX graph).
TRAINING_EXPORT = {"mlp_dropout"}
# Models also exported in training mode as model_training.onnx (batch norm with
# training_mode = 1 and its running-statistics outputs), which trains to the same numbers.
ALSO_TRAINING_EXPORT = {"cnn"}


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
        CURRENT_STEP[0] = step
        x = torch.from_numpy(xs[step % len(xs)])
        y = torch.from_numpy(ys[step % len(ys)])
        opt.zero_grad()
        m = MICROBATCHES.get(config, 1)
        if m == 1:
            loss = F.cross_entropy(model(x), y, ignore_index=-100, label_smoothing=smoothing)
            loss.backward()
        else:
            loss = torch.zeros(())
            for xi, yi in zip(torch.chunk(x, m), torch.chunk(y, m)):
                li = F.cross_entropy(model(xi), yi, ignore_index=-100, label_smoothing=smoothing)
                (li / m).backward()
                loss = loss + li.detach() / m
        if config == "adam-clip-cosine":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    state = {k: v.detach().numpy().copy() for k, v in model.named_parameters()}
    # Float buffers (batch norm's running statistics) are trained state too.
    for k, v in model.named_buffers():
        if v.dtype == torch.float32 and k in model.state_dict():
            state[k] = v.detach().numpy().copy()
    return np.array(losses, dtype=np.float32), state


def main():
    only = set(sys.argv[1:])
    for name, (data, configs) in MODELS.items():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        out = os.path.join(HERE, name)
        os.makedirs(out, exist_ok=True)
        model, input_name, xs, ys = data(rng)
        np.save(os.path.join(out, input_name + ".npy"), xs)
        np.save(os.path.join(out, "labels.npy"), ys)
        def export(m, file, training):
            torch.onnx.export(
                m,
                (torch.from_numpy(xs[0]),),
                os.path.join(out, file),
                input_names=[input_name],
                output_names=["logits"],
                opset_version=17,
                dynamo=False,
                do_constant_folding=False,
                training=training,
            )

        modes = torch.onnx.TrainingMode
        export(model, "model.onnx", modes.TRAINING if name in TRAINING_EXPORT else modes.EVAL)
        if name in ALSO_TRAINING_EXPORT:
            # The export runs the model once in training mode, which would update the
            # running statistics it then writes: export a copy whose batch norms keep them
            # (momentum 0; tessera takes the momentum from --bn-momentum, not the node).
            exported = copy.deepcopy(model)
            for m in exported.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.momentum = 0.0
            export(exported, "model_training.onnx", modes.TRAINING)
        initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
        for config in configs:
            model.load_state_dict(initial)
            losses, weights = train(model, config, xs, ys)
            d = os.path.join(out, config)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            np.save(os.path.join(d, "loss.npy"), losses)
            for k, v in weights.items():
                np.save(os.path.join(d, k + ".npy"), v)
            print(name, config, losses)


if __name__ == "__main__":
    main()
