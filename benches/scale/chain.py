#!/usr/bin/env python3
"""Writes an N-op chain of elementwise ops as tessera text IR (README: "A million-op compile").

    python3 benches/scale/chain.py 1000000 chain.tir
    /usr/bin/time -v target/release/tessera compile chain.tir -o chain-out

Each op feeds the next (relu, neg, tanh, abs, repeating) on a 4x8 f32 tensor, so every pass,
placement, the simulator, the lowering and the report see a graph as deep as it is long.
"""
import sys

OPS = ["relu", "neg", "tanh", "abs"]


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: chain.py N OUT.tir")
    n, out = int(sys.argv[1]), sys.argv[2]
    with open(out, "w") as f:
        f.write("graph @chain(%x: f32[4, 8]) {\n")
        prev = "%x"
        for i in range(n):
            f.write(f"  %v{i} = {OPS[i % len(OPS)]} {prev} : f32[4, 8]\n")
            prev = f"%v{i}"
        f.write(f"  return {prev}\n}}\n")


if __name__ == "__main__":
    main()
