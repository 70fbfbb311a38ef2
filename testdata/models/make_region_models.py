#!/usr/bin/env python3
"""Generates testdata/models/regions/: small ONNX models with data-dependent control flow,
with inputs and onnxruntime reference outputs (.npy), for tessera's region ops.

    python3 testdata/models/make_region_models.py

if_rank5: an If on ReduceSum(x) > 0. The then branch reshapes x [5, 2, 3] to a rank-5
tensor [5, 2, 3, 1, 1], reduces it back and feeds an LSTM (hidden size 4), returning its
last hidden state [2, 4]; the else branch never makes a rank-5 tensor (mean over time,
matmul). Two input sets: x_pos takes the then branch, x_neg the else branch.

Deterministic: fixed seed, no metadata that changes between runs.
"""

import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regions")


def make_if_rank5():
    rng = np.random.default_rng(1616)
    seq, batch, inp, hid = 5, 2, 3, 4
    w = rng.standard_normal((1, 4 * hid, inp)).astype(np.float32) * 0.5
    r = rng.standard_normal((1, 4 * hid, hid)).astype(np.float32) * 0.5
    b = rng.standard_normal((1, 8 * hid)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((inp, hid)).astype(np.float32)
    i64 = lambda v: np.array(v, dtype=np.int64)  # noqa: E731

    then_g = h.make_graph(
        [
            h.make_node("Reshape", ["x", "shape5"], ["x5"]),
            h.make_node("ReduceSum", ["x5", "axes34"], ["x3"], keepdims=0),
            h.make_node("LSTM", ["x3", "W", "R", "B"], ["", "y_h"], hidden_size=hid),
            h.make_node("Squeeze", ["y_h", "axes0"], ["then_out"]),
        ],
        "then_branch", [],
        [h.make_tensor_value_info("then_out", T.FLOAT, [batch, hid])],
        initializer=[nh.from_array(i64([seq, batch, inp, 1, 1]), "shape5"),
                     nh.from_array(i64([3, 4]), "axes34")])
    else_g = h.make_graph(
        [
            h.make_node("ReduceMean", ["x", "axes0"], ["m"], keepdims=0),
            h.make_node("MatMul", ["m", "W2"], ["else_out"]),
        ],
        "else_branch", [],
        [h.make_tensor_value_info("else_out", T.FLOAT, [batch, hid])])
    nodes = [
        h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        h.make_node("Greater", ["s", "zero"], ["c"]),
        h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    graph = h.make_graph(
        nodes, "if_rank5",
        [h.make_tensor_value_info("x", T.FLOAT, [seq, batch, inp])],
        [h.make_tensor_value_info("y", T.FLOAT, [batch, hid])],
        initializer=[nh.from_array(w, "W"), nh.from_array(r, "R"), nh.from_array(b, "B"),
                     nh.from_array(w2, "W2"), nh.from_array(np.float32(0.0), "zero"),
                     nh.from_array(i64([0]), "axes0")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)],
                         producer_name="tessera make_region_models.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    folder = os.path.join(OUT, "if_rank5")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    onnx.save(model, path)

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    x_pos = np.abs(x)
    x_neg = -np.abs(x)
    for name, data in (("pos", x_pos), ("neg", x_neg)):
        (y,) = sess.run(None, {"x": data})
        np.save(os.path.join(folder, f"input_x_{name}.npy"), data)
        np.save(os.path.join(folder, f"output_y_{name}.npy"), y)


if __name__ == "__main__":
    make_if_rank5()
