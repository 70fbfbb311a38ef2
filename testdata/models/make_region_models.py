#!/usr/bin/env python3
"""Generates testdata/models/regions/: small ONNX models with data-dependent control flow,
with inputs and onnxruntime reference outputs (.npy), for tessera's region ops.

    python3 testdata/models/make_region_models.py

if_rank5: an If on ReduceSum(x) > 0. The then branch reshapes x [5, 2, 3] to a rank-5
tensor [5, 2, 3, 1, 1], reduces it back and feeds an LSTM (hidden size 4), returning its
last hidden state [2, 4]; the else branch never makes a rank-5 tensor (mean over time,
matmul). Two input sets: x_pos takes the then branch, x_neg the else branch.

loop_window: a Loop of 4 iterations whose body slices rows [i + 1, i + 3) of the graph input x
[6, 3] (starts and ends computed from the iteration number: a run-time Slice of static
extent 2), adds them into a carried [2, 3] sum and scans out each running sum.

scan8_batched: an opset-8 Scan (batch axis first, per-entry sequences) over batch 2, with two
state values and two scan inputs, the second read in reverse (directions = [0, 1]), two
scan outputs, and a body that reads the outer initializer `bias` (a captured value).

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
    folder, sess = save_model("if_rank5", model)
    x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    x_pos = np.abs(x)
    x_neg = -np.abs(x)
    for name, data in (("pos", x_pos), ("neg", x_neg)):
        (y,) = sess.run(None, {"x": data})
        np.save(os.path.join(folder, f"input_x_{name}.npy"), data)
        np.save(os.path.join(folder, f"output_y_{name}.npy"), y)

def save_model(name, model):
    """Checks and saves `model` as regions/NAME/model.onnx; returns the folder and an
    onnxruntime session of it (one thread)."""
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    onnx.save(model, path)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return folder, ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def save_with_outputs(name, model, inputs):
    """Saves `model` into regions/NAME with its inputs and onnxruntime outputs."""
    folder, sess = save_model(name, model)
    outs = sess.run(None, inputs)
    for k, v in inputs.items():
        np.save(os.path.join(folder, f"input_{k}.npy"), v)
    for o, v in zip(sess.get_outputs(), outs):
        np.save(os.path.join(folder, f"output_{o.name}.npy"), v)


def make_loop_window():
    rng = np.random.default_rng(1617)
    i64 = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    body = h.make_graph(
        [
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
            h.make_node("Add", ["i", "one"], ["s"]),
            h.make_node("Add", ["i", "three"], ["e"]),
            h.make_node("Unsqueeze", ["s", "axes0"], ["starts"]),
            h.make_node("Unsqueeze", ["e", "axes0"], ["ends"]),
            h.make_node("Slice", ["x", "starts", "ends", "axes0"], ["rows"]),
            h.make_node("Add", ["acc_in", "rows"], ["acc_out"]),
            h.make_node("Identity", ["acc_out"], ["scan_out"]),
        ],
        "loop_body",
        [h.make_tensor_value_info("i", T.INT64, []),
         h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("acc_in", T.FLOAT, [2, 3])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         h.make_tensor_value_info("acc_out", T.FLOAT, [2, 3]),
         h.make_tensor_value_info("scan_out", T.FLOAT, [2, 3])],
        initializer=[nh.from_array(i64(1), "one"), nh.from_array(i64(3), "three"),
                     nh.from_array(i64([0]), "axes0")])
    graph = h.make_graph(
        [h.make_node("Loop", ["M", "cond", "acc0"], ["acc", "sums"], body=body)],
        "loop_window",
        [h.make_tensor_value_info("x", T.FLOAT, [6, 3])],
        [h.make_tensor_value_info("acc", T.FLOAT, [2, 3]),
         h.make_tensor_value_info("sums", T.FLOAT, [4, 2, 3])],
        initializer=[nh.from_array(i64(4), "M"), nh.from_array(np.array(True), "cond"),
                     nh.from_array(np.zeros((2, 3), np.float32), "acc0")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)],
                         producer_name="tessera make_region_models.py")
    x = rng.standard_normal((6, 3)).astype(np.float32)
    save_with_outputs("loop_window", model, {"x": x})


def make_scan8_batched():
    rng = np.random.default_rng(1618)
    body = h.make_graph(
        [
            h.make_node("Add", ["sum_in", "a"], ["sum_a"]),
            h.make_node("Add", ["sum_a", "bias"], ["sum_out"]),
            h.make_node("Mul", ["prod_in", "b"], ["prod_out"]),
            h.make_node("Sub", ["sum_out", "b"], ["diff"]),
            h.make_node("Identity", ["prod_out"], ["prods"]),
        ],
        "scan_body",
        [h.make_tensor_value_info("sum_in", T.FLOAT, [3]),
         h.make_tensor_value_info("prod_in", T.FLOAT, [3]),
         h.make_tensor_value_info("a", T.FLOAT, [3]),
         h.make_tensor_value_info("b", T.FLOAT, [3])],
        [h.make_tensor_value_info("sum_out", T.FLOAT, [3]),
         h.make_tensor_value_info("prod_out", T.FLOAT, [3]),
         h.make_tensor_value_info("diff", T.FLOAT, [3]),
         h.make_tensor_value_info("prods", T.FLOAT, [3])])
    batch, seq = 2, 4
    graph = h.make_graph(
        [h.make_node("Scan", ["", "s0", "p0", "a", "b"], ["s", "p", "diffs", "prods"],
                     num_scan_inputs=2, directions=[0, 1], body=body)],
        "scan8_batched",
        [h.make_tensor_value_info("s0", T.FLOAT, [batch, 3]),
         h.make_tensor_value_info("p0", T.FLOAT, [batch, 3]),
         h.make_tensor_value_info("a", T.FLOAT, [batch, seq, 3]),
         h.make_tensor_value_info("b", T.FLOAT, [batch, seq, 3])],
        [h.make_tensor_value_info("s", T.FLOAT, [batch, 3]),
         h.make_tensor_value_info("p", T.FLOAT, [batch, 3]),
         h.make_tensor_value_info("diffs", T.FLOAT, [batch, seq, 3]),
         h.make_tensor_value_info("prods", T.FLOAT, [batch, seq, 3])],
        initializer=[nh.from_array(np.array([0.5, -1.0, 2.0], np.float32), "bias")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 8)],
                         producer_name="tessera make_region_models.py")
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    save_with_outputs("scan8_batched", model,
                      {"s0": f(batch, 3), "p0": f(batch, 3), "a": f(batch, seq, 3),
                       "b": f(batch, seq, 3)})


if __name__ == "__main__":
    make_if_rank5()
    make_loop_window()
    make_scan8_batched()
