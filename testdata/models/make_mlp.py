#!/usr/bin/env python3
"""Writes the bundled sample model of tessera's demo and CLI tests.

Outputs, next to this script:
  mlp.tir           the model in tessera's text format: x[N, 16] -> dense 32 -> relu ->
                    dense 10 -> softmax
  mlp.safetensors   the constants with more than 16 elements (tensor name = constant name)
  mlp.input.npy     a sample input, f32[4, 16]
  mlp.expected.npy  the output numpy computes for it, f32[4, 10]

Needs numpy and safetensors (`make deps` installs them). Deterministic: running it again
rewrites the same bytes. Run it from anywhere: python3 testdata/models/make_mlp.py
"""

import os

import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
INLINE_LIMIT = 16  # constants with more elements live in the sidecar


def dyadic(a, bits=6):
    """Rounds to multiples of 2**-bits so inline values print exactly and briefly."""
    # `+ 0.0` turns -0.0 into 0.0.
    return (np.round(a * (1 << bits)) / (1 << bits) + 0.0).astype(np.float32)


def fmt_float(v):
    # Python's repr is the shortest text that reads back to the same double; for the dyadic
    # values used inline it is also the shortest for f32, like tessera's printer.
    r = repr(float(v))
    assert float(np.float32(r)) == float(v), r
    return r


def ty(shape):
    return "f32[" + ", ".join(str(d) for d in shape) + "]"


def const_decl(name, a):
    if a.size > INLINE_LIMIT:
        return f"const @{name} : {ty(a.shape)} = external"
    values = ", ".join(fmt_float(v) for v in a.reshape(-1))
    return f"const @{name} : {ty(a.shape)} = [{values}]"


def main():
    rng = np.random.default_rng(20241130)
    consts = {
        "fc1.weight": (rng.standard_normal((16, 32)) / 4.0).astype(np.float32),
        "fc1.bias": dyadic(rng.standard_normal(32) * 0.3),
        "fc2.weight": (rng.standard_normal((32, 10)) / np.sqrt(32.0)).astype(np.float32),
        "fc2.bias": dyadic(rng.standard_normal(10) * 0.3),
    }
    x = rng.standard_normal((4, 16)).astype(np.float32)

    # Reference output, in f32 like the interpreter.
    h = np.maximum(x @ consts["fc1.weight"] + consts["fc1.bias"], np.float32(0))
    logits = h @ consts["fc2.weight"] + consts["fc2.bias"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    y = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

    # Canonical layout: the constants, a blank line, the graph.
    lines = [const_decl(name, a) for name, a in consts.items()]
    lines += [
        "",
        "graph @mlp(%x: f32[N, 16]) {",
        "  %w1 = const @fc1.weight : f32[16, 32]",
        "  %b1 = const @fc1.bias : f32[32]",
        "  %0 = matmul %x, %w1 : f32[N, 32]",
        "  %1 = add %0, %b1 : f32[N, 32]",
        "  %2 = relu %1 : f32[N, 32]",
        "  %w2 = const @fc2.weight : f32[32, 10]",
        "  %b2 = const @fc2.bias : f32[10]",
        "  %3 = matmul %2, %w2 : f32[N, 10]",
        "  %4 = add %3, %b2 : f32[N, 10]",
        "  %y = softmax %4 {axis = 1} : f32[N, 10]",
        "  return %y",
        "}",
    ]
    with open(os.path.join(HERE, "mlp.tir"), "w") as f:
        f.write("\n".join(lines) + "\n")

    sidecar = {k: v for k, v in consts.items() if v.size > INLINE_LIMIT}
    save_file(sidecar, os.path.join(HERE, "mlp.safetensors"))
    os.chmod(os.path.join(HERE, "mlp.safetensors"), 0o644)
    np.save(os.path.join(HERE, "mlp.input.npy"), x)
    np.save(os.path.join(HERE, "mlp.expected.npy"), y)
    print(f"wrote mlp.tir, mlp.safetensors ({', '.join(sidecar)}), mlp.input.npy {x.shape}, "
          f"mlp.expected.npy {y.shape} in {HERE}")


if __name__ == "__main__":
    main()
