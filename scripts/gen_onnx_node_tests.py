#!/usr/bin/env python3
"""Generates the ONNX backend node test cases into a cache folder.

The onnx wheel ships the case generators, not the data: this writes them in the usual
layout (`node/<case>/model.onnx`, `node/<case>/test_data_set_0/{input,output}_<i>.pb`).
Usage: gen_onnx_node_tests.py OUT_DIR   (OUT_DIR/node/... is created; a stamp file records
the onnx version so the cache is rebuilt when it changes).
"""
import argparse
import os
import sys

import onnx
from onnx.backend.test.case import node as node_cases
from onnx.backend.test.cmd_tools import generate_data
from onnx.backend.test.case import model as model_cases


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    args = ap.parse_args()
    stamp = os.path.join(args.out, "STAMP")
    want = f"onnx {onnx.__version__}\n"
    if os.path.exists(stamp) and open(stamp).read() == want:
        return 0
    # generate_data writes whatever model_test.collect_testcases returns: point it at the
    # node cases.
    from onnx.backend.test.cmd_tools import model_test  # noqa: F401 (patched below)
    import onnx.backend.test.cmd_tools as tools

    tools.model_test.collect_testcases = lambda *a, **k: node_cases.collect_testcases()
    generate_data(argparse.Namespace(output=args.out, clean=False, diff=False, op_type=None))
    with open(stamp, "w") as f:
        f.write(want)
    n = len(os.listdir(os.path.join(args.out, "node")))
    print(f"generated {n} ONNX node test cases (onnx {onnx.__version__}) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
