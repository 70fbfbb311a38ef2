#!/usr/bin/env python3
"""Generates tessera's ONNX test-model corpus: small models with random (seeded) weights, a
sample input for each, and onnxruntime's outputs for it as the reference.

Layout, next to this script:
  onnx/<name>/model.onnx        the model (plus model.onnx.data for `external_data`)
  onnx/<name>/input_<i>_<inputname>.npy, output_<i>_<outputname>.npy
  onnx/<name>/io.json           manifest: input/output names -> .npy files, dtypes, declared
                                shapes (symbolic dims as strings), tolerances, opset,
                                ir_version, node count, op types with counts, versions, and
                                the max abs difference between torch and onnxruntime
  large/<name>/...              `--large` / `--eqsat-bench` only: benchmark models
                                (git-ignored)

Usage (from anywhere):
  python3 testdata/models/make_onnx_models.py             # all small models
  python3 testdata/models/make_onnx_models.py --only cnn  # one (repeatable, or comma list)
  python3 testdata/models/make_onnx_models.py --large     # also the large models into large/
  python3 testdata/models/make_onnx_models.py --eqsat-bench  # only the eqsat benchmark models
  python3 testdata/models/make_onnx_models.py --list
  python3 testdata/models/make_onnx_models.py --verify    # re-check files vs io.json

Needs the packages in requirements.txt (torch, torchvision, transformers, onnx,
onnxruntime, onnxscript, numpy). No network access: every model is built from a config with
random weights. Reference outputs come from onnxruntime's CPU execution provider with one
intra-op thread.

Determinism: weights come from torch.manual_seed(seed), inputs from
numpy.random.default_rng(seed), with a fixed seed per model. Node metadata the torch
exporters attach (stack traces with absolute file paths, FX node names) and doc strings are
stripped, so rerunning the script with the same package versions rewrites the same bytes.
"""

import argparse
import json
import os
import re
import shutil
import sys
import time
import zlib
from collections import Counter

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL_DIR = os.path.join(HERE, "onnx")
LARGE_DIR = os.path.join(HERE, "large")

# Default comparison tolerances written into io.json (per output).
FLOAT_TOL = {"rtol": 1e-3, "atol": 1e-4}
INT_TOL = {"rtol": 0.0, "atol": 0.0}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def seed_of(name):
    return zlib.crc32(name.encode()) % (2**31)


# ----------------------------------------------------------------------------- onnx helpers


def strip_metadata(model):
    """Drops exporter metadata (stack traces with absolute paths, FX node names) and doc
    strings, recursively through subgraphs, so files do not depend on where the script ran."""
    import onnx

    def graph(g):
        g.doc_string = ""
        del g.metadata_props[:]
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            vi.doc_string = ""
            del vi.metadata_props[:]
        for t in g.initializer:
            t.doc_string = ""
            del t.metadata_props[:]
        for n in g.node:
            n.doc_string = ""
            del n.metadata_props[:]
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sg in a.graphs:
                        graph(sg)

    model.doc_string = ""
    del model.metadata_props[:]
    graph(model.graph)
    for f in model.functions:
        f.doc_string = ""
        del f.metadata_props[:]
        for n in f.node:
            n.doc_string = ""
            del n.metadata_props[:]
    return model


def count_ops(g, counter):
    """Counts op types in g and its subgraphs; returns the number of nodes visited."""
    import onnx

    total = 0
    for n in g.node:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        counter[key] += 1
        total += 1
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                total += count_ops(a.g, counter)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sg in a.graphs:
                    total += count_ops(sg, counter)
    return total


def declared(vi):
    import onnx

    tt = vi.type.tensor_type
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name
    return dtype, (dims if tt.HasField("shape") else None)


def safe(name):
    return re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "x"


def save_model(model, out_dir, external_data=False, size_threshold=0):
    import onnx

    path = os.path.join(out_dir, "model.onnx")
    if external_data:
        onnx.save_model(
            model,
            path,
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="model.onnx.data",
            size_threshold=size_threshold,
            convert_attribute=True,
        )
    else:
        onnx.save_model(model, path)
    return path


def torch_export(module, args, *, dynamo, opset, input_names, output_names,
                 dynamic_shapes=None, dynamic_axes=None, keep_batchnorm=False, **kw):
    """Exports with torch.onnx and returns an onnx.ModelProto (metadata stripped).

    keep_batchnorm (dynamo only): run the exporter's usual optimizer (onnxscript's
    constant folding, default rewrite rules, onnx fusions) minus its rule that folds a
    BatchNormalization into the preceding Conv, so eval-mode BatchNorm stays a
    BatchNormalization node."""
    import io as _io

    import onnx
    import torch

    if dynamo:
        prog = torch.onnx.export(
            module, args, dynamo=True, opset_version=opset, input_names=input_names,
            output_names=output_names, dynamic_shapes=dynamic_shapes, verbose=False,
            **({"optimize": False} if keep_batchnorm else {}), **kw)
        if keep_batchnorm:
            optimize_keeping_batchnorm(prog)
        model = prog.model_proto
    else:
        buf = _io.BytesIO()
        torch.onnx.export(
            module, args, buf, dynamo=False, opset_version=opset, input_names=input_names,
            output_names=output_names, dynamic_axes=dynamic_axes, **kw)
        model = onnx.load_from_string(buf.getvalue())
    return strip_metadata(model)


def optimize_keeping_batchnorm(prog):
    """prog.optimize() (what torch.onnx.export(dynamo=True) does by default) with
    onnxscript's fuse-BatchNorm-into-Conv/ConvTranspose/Gemm rules taken out of the default
    rewrite rules for the duration of the call."""
    import onnxscript.rewriter as rewriter
    from onnxscript.rewriter.rules.common import _fuse_batchnorm

    saved = rewriter._DEFAULT_REWRITE_RULES
    bn_rules = set(_fuse_batchnorm.rules)
    assert bn_rules and all(r in saved for r in bn_rules)
    rewriter._DEFAULT_REWRITE_RULES = tuple(r for r in saved if r not in bn_rules)
    try:
        prog.optimize()
    finally:
        rewriter._DEFAULT_REWRITE_RULES = saved


def finalize(name, out_dir, model_path, inputs, *, torch_outputs=None, description="",
             exporter="", seed=None, notes=None, tolerances=None, timing=None):
    """Checks the saved model, runs onnxruntime on `inputs` (name -> ndarray), saves the
    .npy files and io.json. `torch_outputs`: list of ndarrays in graph-output order."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(model_path, load_external_data=False)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        # Given a path, full_check's shape inference cannot read shape constants (e.g. a
        # Reshape's shape) that live in external data; check the loaded model instead.
        onnx.checker.check_model(onnx.load(model_path), full_check=True)
    else:
        onnx.checker.check_model(model_path, full_check=True)
    g = model.graph

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    results = sess.run(out_names, inputs)

    init_names = {t.name for t in g.initializer}
    graph_inputs = [vi for vi in g.input if vi.name not in init_names]
    assert [vi.name for vi in graph_inputs] == list(inputs), (
        [vi.name for vi in graph_inputs], list(inputs))
    assert [o.name for o in g.output] == out_names

    manifest_inputs = []
    for i, vi in enumerate(graph_inputs):
        arr = inputs[vi.name]
        fname = f"input_{i}_{safe(vi.name)}.npy"
        np.save(os.path.join(out_dir, fname), arr)
        dtype, shape = declared(vi)
        assert dtype == arr.dtype.name, (vi.name, dtype, arr.dtype)
        manifest_inputs.append({"name": vi.name, "file": fname, "dtype": dtype,
                                "shape": shape, "sample_shape": list(arr.shape)})

    manifest_outputs = []
    for i, (vi, arr) in enumerate(zip(g.output, results)):
        fname = f"output_{i}_{safe(vi.name)}.npy"
        arr = np.asarray(arr)  # (np.ascontiguousarray would turn rank 0 into [1])
        np.save(os.path.join(out_dir, fname), arr)
        dtype, shape = declared(vi)
        assert shape is None or len(shape) == arr.ndim, (vi.name, shape, arr.shape)
        is_float = np.issubdtype(arr.dtype, np.floating)
        tol = dict(FLOAT_TOL if is_float else INT_TOL)
        if tolerances and vi.name in tolerances:
            tol.update(tolerances[vi.name])
        entry = {"name": vi.name, "file": fname, "dtype": arr.dtype.name, "shape": shape,
                 "sample_shape": list(arr.shape), **tol}
        if torch_outputs is not None:
            ref = np.asarray(torch_outputs[i])
            assert ref.shape == arr.shape, (vi.name, ref.shape, arr.shape)
            diff = np.abs(ref.astype(np.float64) - arr.astype(np.float64))
            entry["torch_max_abs_diff"] = float(diff.max()) if diff.size else 0.0
        manifest_outputs.append(entry)

    dyn_check = check_dynamic_dims(sess, graph_inputs, g.output, inputs)

    ops = Counter()
    total_nodes = count_ops(g, ops)
    files = {}
    for f in sorted(os.listdir(out_dir)):
        if f.startswith("model.onnx"):
            files[f] = os.path.getsize(os.path.join(out_dir, f))
    n_params = 0
    for t in g.initializer:
        n = 1
        for d in t.dims:
            n *= d
        n_params += n

    import torch  # noqa: F401  (versions only)

    manifest = {
        "name": name,
        "description": description,
        "generator": "testdata/models/make_onnx_models.py",
        "exporter": exporter,
        "seed": seed,
        "opset_import": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "node_count": len(g.node),
        "node_count_with_subgraphs": total_nodes,
        "op_types": dict(sorted(ops.items())),
        "initializer_count": len(g.initializer),
        "initializer_elements": n_params,
        "external_data": any(t.data_location == onnx.TensorProto.EXTERNAL
                             for t in g.initializer),
        "files": files,
        "inputs": manifest_inputs,
        "outputs": manifest_outputs,
        "reference": "onnxruntime CPUExecutionProvider, intra_op_num_threads=1",
        "symbolic_dims_checked": dyn_check,
        "versions": versions(),
        "notes": notes or [],
    }
    with open(os.path.join(out_dir, "io.json"), "w") as f:
        f.write(dump_json(manifest))
    diffs = [o.get("torch_max_abs_diff") for o in manifest_outputs]
    log(f"  {name}: opset {manifest['opset']}, {len(g.node)} nodes, "
        f"{sum(files.values())} bytes, torch-vs-ort {diffs}"
        + (f", {timing:.1f}s" if timing else ""))
    return manifest


def check_dynamic_dims(sess, graph_inputs, graph_outputs, inputs):
    """If inputs have symbolic dims, runs onnxruntime once more with every symbolic dim one
    larger than in the sample (inputs resized with np.resize, which repeats values, so token
    ids and masks stay valid) and checks that output dims with the same symbol follow.
    Returns {symbol: size tried}, or {} when all inputs are static."""
    sizes = {}
    for vi in graph_inputs:
        _, shape = declared(vi)
        for d, n in zip(shape or [], inputs[vi.name].shape):
            if isinstance(d, str):
                sizes[d] = n + 1
    if not sizes:
        return {}
    feeds = {}
    for vi in graph_inputs:
        _, shape = declared(vi)
        arr = inputs[vi.name]
        new = [sizes[d] if isinstance(d, str) else n for d, n in zip(shape, arr.shape)]
        feeds[vi.name] = np.resize(arr, new).astype(arr.dtype)
    outs = sess.run(None, feeds)
    for vi, arr in zip(graph_outputs, outs):
        _, shape = declared(vi)
        for d, n in zip(shape or [], arr.shape):
            if isinstance(d, str) and d in sizes:
                assert n == sizes[d], (vi.name, d, n, sizes[d])
    return dict(sorted(sizes.items()))


def dump_json(obj):
    """json.dumps(indent=1) with lists of scalars kept on one line."""
    text = json.dumps(obj, indent=1)
    return re.sub(r"\[\s*([^\[\]{}]*?)\s*\]",
                  lambda m: "[" + re.sub(r"\s*\n\s*", " ", m.group(1)) + "]", text) + "\n"


_VERSIONS = None


def versions():
    global _VERSIONS
    if _VERSIONS is None:
        import onnx
        import onnxruntime
        import torch

        v = {"python": sys.version.split()[0], "numpy": np.__version__,
             "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
             "torch": torch.__version__}
        for mod in ("torchvision", "transformers", "onnxscript"):
            try:
                v[mod] = __import__(mod).__version__
            except ImportError:
                pass
        _VERSIONS = dict(sorted(v.items()))
    return _VERSIONS


def fresh_dir(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    return path


def to_np(t):
    return t.detach().cpu().numpy()


def calibrate_bn(module, x):
    """Sets every BatchNorm's running statistics to the batch statistics of one train-mode
    forward pass on x (momentum 1), then puts the module in eval mode. With random weights
    this keeps activations of order one through deep networks, as trained statistics
    would."""
    import torch

    bns = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    saved = [m.momentum for m in bns]
    for m in bns:
        m.momentum = 1.0
    module.train()
    with torch.no_grad():
        module(x)
    for m, mom in zip(bns, saved):
        m.momentum = mom
    module.eval()


def perturb_constant_params(module, gen, std=0.02):
    """Adds seeded noise (normal, `std`) to every parameter its initializer left constant
    (zero biases, LayerNorm's ones and zeros), as training would. Otherwise the exporter's
    optimizer merges equal initializers into one tensor (all zero biases of one shape become
    a single initializer) and every bias add is an add of zeros that a pass could drop,
    neither of which a trained model has. Returns the number of parameters changed."""
    import torch

    n = 0
    with torch.no_grad():
        for p in module.parameters():
            if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn(p.shape, generator=gen) * std)
                n += 1
    return n


def randomize_bn(module, gen):
    """Gives BatchNorm layers non-trivial running statistics and affine parameters."""
    import torch

    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            c = m.num_features
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.2)
                m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(c, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.1)


# ----------------------------------------------------------------------------- models
# Each builder takes (name, out_dir, seed) and returns the io.json manifest.

MODELS = {}
# The eqsat pass's benchmark set (the TENSAT paper's model families), built by --eqsat-bench.
EQSAT_BENCH = []


def model(name, large=False, eqsat_bench=False):
    def deco(fn):
        MODELS[name] = (fn, large)
        if eqsat_bench:
            assert large, name
            EQSAT_BENCH.append(name)
        return fn
    return deco


@model("mlp")
def make_mlp(name, out_dir, seed):
    import torch

    torch.manual_seed(seed)

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(32, 64)
            self.fc2 = torch.nn.Linear(64, 48)
            self.fc3 = torch.nn.Linear(48, 10)

        def forward(self, x):
            h = torch.nn.functional.gelu(self.fc1(x))
            h = torch.relu(self.fc2(h))
            return torch.softmax(self.fc3(h), dim=-1)

    m = MLP().eval()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 32), dtype=np.float32)
    batch = torch.export.Dim("batch", min=1, max=1024)
    model_proto = torch_export(m, (torch.from_numpy(x),), dynamo=True, opset=18,
                               input_names=["x"], output_names=["probs"],
                               dynamic_shapes=({0: batch},))
    path = save_model(model_proto, out_dir)
    with torch.no_grad():
        ref = [to_np(m(torch.from_numpy(x)))]
    return finalize(name, out_dir, path, {"x": x}, torch_outputs=ref, seed=seed,
                    exporter="torch.onnx.export(dynamo=True), opset 18",
                    description="x[batch,32] -> Linear 64 -> GELU(erf) -> Linear 48 -> ReLU "
                                "-> Linear 10 -> softmax; batch is a symbolic dim")


@model("cnn")
def make_cnn(name, out_dir, seed):
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(8)
            self.pool1 = nn.MaxPool2d(2)
            self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(16)
            self.pool2 = nn.AvgPool2d(2)
            self.conv3 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
            self.gap = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = self.pool1(torch.relu(self.bn1(self.conv1(x))))
            x = self.pool2(torch.relu(self.bn2(self.conv2(x))))
            x = torch.relu(self.conv3(x))
            x = torch.flatten(self.gap(x), 1)
            return self.fc(x)

    m = CNN()
    randomize_bn(m, torch.Generator().manual_seed(seed + 1))
    m.eval()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, 32, 32), dtype=np.float32)
    # Legacy TorchScript exporter at opset 13. TrainingMode.PRESERVE (with the module in
    # eval mode) keeps BatchNormalization nodes instead of folding them into the Conv.
    model_proto = torch_export(m, (torch.from_numpy(x),), dynamo=False, opset=13,
                               input_names=["image"], output_names=["logits"],
                               dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                               training=torch.onnx.TrainingMode.PRESERVE)
    path = save_model(model_proto, out_dir)
    with torch.no_grad():
        ref = [to_np(m(torch.from_numpy(x)))]
    return finalize(name, out_dir, path, {"image": x}, torch_outputs=ref, seed=seed,
                    exporter="torch.onnx.export(dynamo=False) legacy TorchScript exporter, "
                             "opset 13, training=PRESERVE (BatchNormalization kept)",
                    description="image[batch,3,32,32] -> Conv-BN-ReLU-MaxPool -> "
                                "Conv(no bias)-BN-ReLU-AvgPool -> Conv(stride 2)-ReLU -> "
                                "GlobalAveragePool -> Flatten -> Linear 10")


@model("resnet_small")
def make_resnet_small(name, out_dir, seed):
    import torch
    import torch.nn as nn
    from torchvision.models.resnet import BasicBlock

    torch.manual_seed(seed)

    class ResNetSmall(nn.Module):
        """torchvision's ResNet-18 layout ([2, 2, 2, 2] BasicBlocks, 7x7 stem, max pool,
        global average pool, fc) with widths 16/32/64/128 instead of 64/128/256/512."""

        def __init__(self, widths=(16, 32, 64, 128), num_classes=10):
            super().__init__()
            self.inplanes = widths[0]
            self.conv1 = nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            self.layer1 = self._make_layer(widths[0], 2, 1)
            self.layer2 = self._make_layer(widths[1], 2, 2)
            self.layer3 = self._make_layer(widths[2], 2, 2)
            self.layer4 = self._make_layer(widths[3], 2, 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(widths[3], num_classes)

        def _make_layer(self, planes, blocks, stride):
            downsample = None
            if stride != 1 or self.inplanes != planes:
                downsample = nn.Sequential(
                    nn.Conv2d(self.inplanes, planes, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(planes))
            layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes
            layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    m = ResNetSmall()
    randomize_bn(m, torch.Generator().manual_seed(seed + 1))
    m.eval()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 3, 64, 64), dtype=np.float32)
    model_proto = torch_export(m, (torch.from_numpy(x),), dynamo=True, opset=18,
                               input_names=["image"], output_names=["logits"])
    path = save_model(model_proto, out_dir)
    with torch.no_grad():
        ref = [to_np(m(torch.from_numpy(x)))]
    return finalize(name, out_dir, path, {"image": x}, torch_outputs=ref, seed=seed,
                    exporter="torch.onnx.export(dynamo=True), opset 18",
                    description="ResNet-18 structure (torchvision BasicBlock, [2,2,2,2]) at "
                                "widths 16/32/64/128, image[1,3,64,64] -> logits[1,10]; "
                                "BatchNorm with random running statistics")


def _gpt2(name, out_dir, seed, config_kwargs, seq, external, notes_extra=(),
          size_threshold=0):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    vocab = config_kwargs.get("vocab_size", 50257)
    cfg = GPT2Config(**config_kwargs, use_cache=False, bos_token_id=vocab - 1,
                     eos_token_id=vocab - 1)
    cfg._attn_implementation = "eager"
    m = GPT2LMHeadModel(cfg).eval()

    class Wrap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            return self.inner(input_ids=input_ids, use_cache=False).logits

    w = Wrap(m).eval()
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, cfg.vocab_size, size=(1, seq), dtype=np.int64)
    notes = list(notes_extra)
    kw = dict(dynamo=True, opset=18, input_names=["input_ids"], output_names=["logits"])
    try:
        sdim = torch.export.Dim("seq", min=2, max=cfg.n_positions)
        model_proto = torch_export(w, (torch.from_numpy(ids),),
                                   dynamic_shapes=({1: sdim},), **kw)
        notes.append("sequence dim exported as symbolic 'seq' (2..n_positions)")
    except Exception as e:  # fall back to a static sequence length
        notes.append(f"dynamic seq export failed ({type(e).__name__}); static shapes")
        model_proto = torch_export(w, (torch.from_numpy(ids),), **kw)
    path = save_model(model_proto, out_dir, external_data=external,
                      size_threshold=size_threshold)
    with torch.no_grad():
        ref = [to_np(w(torch.from_numpy(ids)))]
    return finalize(name, out_dir, path, {"input_ids": ids}, torch_outputs=ref, seed=seed,
                    exporter="torch.onnx.export(dynamo=True), opset 18; transformers "
                             "GPT2LMHeadModel, eager attention, use_cache=False",
                    description=f"GPT-2 LM head from GPT2Config({config_kwargs}), random "
                                f"weights; input_ids int64[1,{seq}] -> logits",
                    notes=notes)


@model("gpt2_tiny")
def make_gpt2_tiny(name, out_dir, seed):
    return _gpt2(name, out_dir, seed,
                 dict(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128),
                 seq=16, external=False)


@model("gpt2_small", large=True)
def make_gpt2_small(name, out_dir, seed):
    return _gpt2(name, out_dir, seed, {}, seq=16, external=True, size_threshold=1024,
                 notes_extra=["GPT2Config() defaults: 12 layers, 768 hidden, 12 heads, "
                              "vocab 50257, 124M parameters; tensors of 1 KiB or more in "
                              "model.onnx.data, smaller ones inline"])


@model("bert_tiny")
def make_bert_tiny(name, out_dir, seed):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=128, max_position_embeddings=128)
    cfg._attn_implementation = "eager"
    m = BertModel(cfg).eval()

    class Wrap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            o = self.inner(input_ids=input_ids, attention_mask=attention_mask)
            return o.last_hidden_state, o.pooler_output

    w = Wrap(m).eval()
    rng = np.random.default_rng(seed)
    batch, seq = 2, 16
    ids = rng.integers(0, cfg.vocab_size, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    mask[1, 11:] = 0  # second sequence padded after 11 tokens
    ids[1, 11:] = 0
    kw = dict(dynamo=True, opset=18, input_names=["input_ids", "attention_mask"],
              output_names=["last_hidden_state", "pooler_output"])
    args = (torch.from_numpy(ids), torch.from_numpy(mask))
    notes = []
    try:
        bdim = torch.export.Dim("batch", min=1, max=64)
        sdim = torch.export.Dim("seq", min=2, max=cfg.max_position_embeddings)
        model_proto = torch_export(w, args, dynamic_shapes=({0: bdim, 1: sdim},
                                                            {0: bdim, 1: sdim}), **kw)
        notes.append("batch and seq exported as symbolic dims")
    except Exception as e:  # fall back to static shapes
        notes.append(f"dynamic batch/seq export failed ({type(e).__name__}); static shapes")
        model_proto = torch_export(w, args, **kw)
    path = save_model(model_proto, out_dir)
    with torch.no_grad():
        ref = [to_np(t) for t in w(torch.from_numpy(ids), torch.from_numpy(mask))]
    return finalize(name, out_dir, path, {"input_ids": ids, "attention_mask": mask},
                    torch_outputs=ref, seed=seed,
                    exporter="torch.onnx.export(dynamo=True), opset 18; transformers "
                             "BertModel, eager attention",
                    description="BertModel from BertConfig(vocab 1000, hidden 64, 2 layers, "
                                "4 heads, intermediate 128), random weights; input_ids and "
                                "attention_mask int64[2,16] (second row padded) -> "
                                "last_hidden_state[2,16,64], pooler_output[2,64]",
                    notes=notes)


# --- eqsat benchmark models (--eqsat-bench, or --large): the TENSAT paper's model families


@model("bert_base", large=True, eqsat_bench=True)
def make_bert_base(name, out_dir, seed):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    layers, seq = 8, 64
    # BERT-base widths (hidden 768, 12 heads, intermediate 3072, vocab 30522), 8 of its 12
    # layers (the depth of the TASO/TENSAT BERT benchmark).
    cfg = BertConfig(hidden_size=768, num_hidden_layers=layers, num_attention_heads=12,
                     intermediate_size=3072)
    cfg._attn_implementation = "eager"  # separate Q, K, V projections of the same input
    m = BertModel(cfg).eval()
    n_perturbed = perturb_constant_params(m, torch.Generator().manual_seed(seed + 1))

    class Wrap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            o = self.inner(input_ids=input_ids, attention_mask=attention_mask)
            return o.last_hidden_state, o.pooler_output

    w = Wrap(m).eval()
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, cfg.vocab_size, size=(1, seq), dtype=np.int64)
    mask = np.ones((1, seq), dtype=np.int64)
    mask[0, 56:] = 0  # padded after 56 tokens
    ids[0, 56:] = 0
    args = (torch.from_numpy(ids), torch.from_numpy(mask))
    model_proto = torch_export(w, args, dynamo=True, opset=18,
                               input_names=["input_ids", "attention_mask"],
                               output_names=["last_hidden_state", "pooler_output"])
    path = save_model(model_proto, out_dir, external_data=True, size_threshold=1024)
    with torch.no_grad():
        ref = [to_np(t) for t in w(*args)]
    matmuls = sum(n.op_type == "MatMul" for n in model_proto.graph.node)
    return finalize(name, out_dir, path, {"input_ids": ids, "attention_mask": mask},
                    torch_outputs=ref, seed=seed,
                    exporter="torch.onnx.export(dynamo=True), opset 18, static shapes; "
                             "transformers BertModel, eager attention",
                    description=f"BertModel from BertConfig(hidden 768, {layers} layers, 12 "
                                "heads, intermediate 3072, vocab 30522), random weights; "
                                f"input_ids and attention_mask int64[1,{seq}] (padded after "
                                f"56 tokens) -> last_hidden_state[1,{seq},768], "
                                "pooler_output[1,768]",
                    notes=[f"BERT-base widths with {layers} of its 12 layers (the TASO/TENSAT "
                           "BERT benchmark has 8)",
                           f"{n_perturbed} parameters that BERT's init leaves constant (zero "
                           "biases, LayerNorm ones and zeros) got N(0, 0.02) noise added, so "
                           "every initializer is distinct",
                           f"{matmuls} MatMul nodes: per layer separate Q, K and V "
                           "projections of the same input, Q.K^T, attention.V, the output "
                           "projection and the two feed-forward matmuls (the pooler's "
                           "Linear is a Gemm)",
                           "tensors of 1 KiB or more in model.onnx.data, smaller ones "
                           "inline"])


def _vision(name, out_dir, seed, ctor, size, description, atol=None):
    """A torchvision classifier with random weights at batch 1 and static shapes; BatchNorm
    (if any) gets random affine parameters and running statistics calibrated on a random
    batch, and is kept as BatchNormalization nodes in the export. The notes record how far
    torch and onnxruntime (float32) are from torch in float64, the model's own float32
    noise, which `atol` (if given) must cover."""
    import torch

    torch.manual_seed(seed)
    m = ctor()
    n_bn = sum(isinstance(x, torch.nn.BatchNorm2d) for x in m.modules())
    notes = []
    gen = torch.Generator().manual_seed(seed + 1)
    if n_bn:
        randomize_bn(m, gen)
    n_perturbed = perturb_constant_params(m, gen)
    if n_perturbed:
        notes.append(f"{n_perturbed} parameters that the init leaves constant (zero biases) "
                     "got N(0, 0.02) noise added, so every initializer is distinct")
    if n_bn:
        calibrate_bn(m, torch.randn((2, 3, size, size), generator=gen))
        notes.append(f"{n_bn} BatchNorm2d layers: random affine parameters, running "
                     "statistics from one train-mode pass (momentum 1) over a random batch "
                     "of 2 images")
    m.eval()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 3, size, size), dtype=np.float32)
    model_proto = torch_export(m, (torch.from_numpy(x),), dynamo=True, opset=18,
                               input_names=["image"], output_names=["logits"],
                               keep_batchnorm=True)
    n_bn_nodes = sum(n.op_type == "BatchNormalization" for n in model_proto.graph.node)
    assert n_bn_nodes == n_bn, (n_bn_nodes, n_bn)
    if n_bn:
        notes.append(f"exported with the BatchNorm-into-Conv fusion of the exporter's "
                     f"optimizer turned off: {n_bn_nodes} BatchNormalization nodes (inference "
                     "form) follow their Convs")
    notes.append("tensors of 1 KiB or more in model.onnx.data, smaller ones inline")
    path = save_model(model_proto, out_dir, external_data=True, size_threshold=1024)
    with torch.no_grad():
        ref = [to_np(m(torch.from_numpy(x)))]
        ref64 = to_np(m.double()(torch.from_numpy(x).double()))
    ort_out = _run_ort(path, {"image": x})[0]
    notes.append("float32 noise, max abs diff to torch in float64: torch float32 "
                 f"{np.abs(ref[0] - ref64).max():.2g}, onnxruntime "
                 f"{np.abs(ort_out - ref64).max():.2g}")
    tolerances = None
    if atol is not None:
        tolerances = {"logits": {"atol": atol}}
        notes.append(f"logits atol {atol:g} (not {FLOAT_TOL['atol']:g}): float32 "
                     "implementations differ by more than that here (see the line above)")
    return finalize(name, out_dir, path, {"image": x}, torch_outputs=ref, seed=seed,
                    exporter="torch.onnx.export(dynamo=True, optimize=False), opset 18, "
                             "static shapes, then the exporter's optimizer without its "
                             "BatchNorm fusion rules",
                    description=description, notes=notes, tolerances=tolerances)


@model("resnext50", large=True, eqsat_bench=True)
def make_resnext50(name, out_dir, seed):
    from torchvision.models import resnext50_32x4d

    return _vision(name, out_dir, seed, lambda: resnext50_32x4d(weights=None), 224,
                   "torchvision resnext50_32x4d (ResNeXt-50, 32 groups x 4 channels), "
                   "random weights, eval mode; image[1,3,224,224] -> logits[1,1000]")


@model("inception_v3", large=True, eqsat_bench=True)
def make_inception_v3(name, out_dir, seed):
    from torchvision.models import inception_v3

    return _vision(name, out_dir, seed,
                   lambda: inception_v3(weights=None, aux_logits=False, init_weights=True),
                   299,
                   "torchvision inception_v3 (aux_logits=False, transform_input=False), "
                   "random weights, eval mode; image[1,3,299,299] -> logits[1,1000]",
                   atol=1e-3)


@model("vgg19", large=True, eqsat_bench=True)
def make_vgg19(name, out_dir, seed):
    from torchvision.models import vgg19

    return _vision(name, out_dir, seed, lambda: vgg19(weights=None), 224,
                   "torchvision vgg19 (no BatchNorm), random weights, eval mode (Dropout "
                   "off); image[1,3,224,224] -> logits[1,1000]")


@model("external_data")
def make_external_data(name, out_dir, seed):
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.Tanh(),
                      nn.Linear(256, 10)).eval()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 256), dtype=np.float32)
    batch = torch.export.Dim("batch", min=1, max=1024)
    model_proto = torch_export(m, (torch.from_numpy(x),), dynamo=True, opset=18,
                               input_names=["x"], output_names=["y"],
                               dynamic_shapes=({0: batch},))
    path = save_model(model_proto, out_dir, external_data=True)
    with torch.no_grad():
        ref = [to_np(m(torch.from_numpy(x)))]
    return finalize(name, out_dir, path, {"x": x}, torch_outputs=ref, seed=seed,
                    exporter="torch.onnx.export(dynamo=True), opset 18; saved with "
                             "onnx.save_model(save_as_external_data=True, "
                             "all_tensors_to_one_file=True, size_threshold=0)",
                    description="x[batch,256] -> Linear 512 -> ReLU -> Linear 256 -> Tanh -> "
                                "Linear 10; every initializer (and tensor attribute) lives "
                                "in model.onnx.data")


@model("rnn")
def make_rnn(name, out_dir, seed):
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)

    class RNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(8, 16, batch_first=True, bidirectional=True)
            self.gru = nn.GRU(32, 16, batch_first=True)
            self.fc = nn.Linear(16, 4)

        def forward(self, x):
            h, _ = self.lstm(x)
            h, hn = self.gru(h)
            return self.fc(h), hn

    m = RNN().eval()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 5, 8), dtype=np.float32)
    model_proto = torch_export(m, (torch.from_numpy(x),), dynamo=False, opset=14,
                               input_names=["x"], output_names=["y", "h_n"],
                               dynamic_axes={"x": {0: "batch", 1: "seq"},
                                             "y": {0: "batch", 1: "seq"},
                                             "h_n": {1: "batch"}})
    path = save_model(model_proto, out_dir)
    with torch.no_grad():
        ref = [to_np(t) for t in m(torch.from_numpy(x))]
    return finalize(name, out_dir, path, {"x": x}, torch_outputs=ref, seed=seed,
                    exporter="torch.onnx.export(dynamo=False) legacy TorchScript exporter, "
                             "opset 14",
                    description="x[batch,seq,8] -> bidirectional LSTM(hidden 16) -> "
                                "GRU(hidden 16) -> Linear 4; outputs y[batch,seq,4] and the "
                                "GRU's final hidden state h_n[1,batch,16]")


# --- hand-built with onnx.helper: ops and structures torch rarely emits


def _helper_model(graph, opset, ir_version):
    import onnx
    from onnx import helper

    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="tessera make_onnx_models.py")
    m.ir_version = ir_version
    return m


@model("if_const")
def make_if_const(name, out_dir, seed):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((3, 3), dtype=np.float32)

    # Branches read `x` and `w` from the enclosing scope (no subgraph inputs).
    then_g = h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["t0"]),
         h.make_node("Add", ["t0", "one"], ["then_out"])],
        "then_branch", [], [h.make_tensor_value_info("then_out", T.FLOAT, ["batch", 3])])
    else_g = h.make_graph(
        [h.make_node("Mul", ["x", "two"], ["else_out"])],
        "else_branch", [], [h.make_tensor_value_info("else_out", T.FLOAT, ["batch", 3])])
    # Second If: the condition depends on the data, so it cannot be folded.
    pos_g = h.make_graph(
        [h.make_node("Relu", ["a"], ["pos_out"])],
        "pos_branch", [], [h.make_tensor_value_info("pos_out", T.FLOAT, ["batch", 3])])
    neg_g = h.make_graph(
        [h.make_node("Neg", ["a"], ["neg_out"])],
        "neg_branch", [], [h.make_tensor_value_info("neg_out", T.FLOAT, ["batch", 3])])
    nodes = [
        h.make_node("Constant", [], ["cond"], value=nh.from_array(np.array(True), "cond_v")),
        h.make_node("If", ["cond"], ["a"], then_branch=then_g, else_branch=else_g),
        h.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
        h.make_node("Greater", ["s", "zero"], ["c2"]),
        h.make_node("If", ["c2"], ["y"], then_branch=pos_g, else_branch=neg_g),
    ]
    graph = h.make_graph(
        nodes, "if_const",
        [h.make_tensor_value_info("x", T.FLOAT, ["batch", 3])],
        [h.make_tensor_value_info("y", T.FLOAT, ["batch", 3]),
         h.make_tensor_value_info("c2", T.BOOL, [])],
        initializer=[nh.from_array(w, "w"), nh.from_array(np.float32(1.0), "one"),
                     nh.from_array(np.float32(2.0), "two"),
                     nh.from_array(np.float32(0.0), "zero")])
    m = _helper_model(graph, 13, 7)
    path = save_model(m, out_dir)
    x = rng.standard_normal((4, 3), dtype=np.float32)
    y_ref = x @ w + 1.0
    y_ref = np.maximum(y_ref, 0) if y_ref.sum() > 0 else -y_ref
    man = finalize(name, out_dir, path, {"x": x}, seed=seed,
                   exporter="onnx.helper, opset 13, ir_version 7",
                   description="If with a Constant true condition (then: x @ w + 1, else: "
                               "x * 2; branches capture outer-scope values), then a second "
                               "If on the data-dependent condition ReduceSum(a) > 0 (Relu "
                               "vs Neg); outputs y and the rank-0 bool condition c2",
                   notes=["numpy reference for y agrees with onnxruntime to "
                          f"{float(np.abs(y_ref - _run_ort(path, {'x': x})[0]).max()):.3g}"])
    return man


def _run_ort(path, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


@model("shape_range_reshape")
def make_shape_range_reshape(name, out_dir, seed):
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    i64 = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    nodes = [
        # Reshape x[batch,4,6] to [batch, -1] with a shape computed at run time.
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Slice", ["s", "zero1", "one1"], ["b"]),
        h.make_node("Concat", ["b", "minus1"], ["new_shape"], axis=0),
        h.make_node("Reshape", ["x", "new_shape"], ["flat"]),
        # Range(0, flat.shape[1]) as float, scaled, broadcast-added to each row.
        h.make_node("Shape", ["flat"], ["fs"]),
        h.make_node("Gather", ["fs", "one0"], ["n"], axis=0),
        h.make_node("Range", ["zero0", "n", "one0"], ["r"]),
        h.make_node("Cast", ["r"], ["rf"], to=T.FLOAT),
        h.make_node("Mul", ["rf", "scale"], ["rs"]),
        h.make_node("Add", ["flat", "rs"], ["y"]),
        # The same shape arithmetic feeding ConstantOfShape / Expand: ones[batch, n].
        h.make_node("Concat", ["b", "n1"], ["ones_shape"], axis=0),
        h.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]),
        h.make_node("ConstantOfShape", ["ones_shape"], ["ones"],
                    value=nh.from_array(np.array([1.0], dtype=np.float32), "v")),
        h.make_node("Expand", ["rs", "ones_shape"], ["re"]),
        h.make_node("Mul", ["ones", "re"], ["z"]),
    ]
    # Topological order: Unsqueeze must come before its consumer.
    nodes[10], nodes[11] = nodes[11], nodes[10]
    graph = h.make_graph(
        nodes, "shape_range_reshape",
        [h.make_tensor_value_info("x", T.FLOAT, ["batch", 4, 6])],
        [h.make_tensor_value_info("y", T.FLOAT, ["batch", 24]),
         h.make_tensor_value_info("z", T.FLOAT, ["batch", 24])],
        initializer=[nh.from_array(i64([0]), "zero1"), nh.from_array(i64([1]), "one1"),
                     nh.from_array(i64([-1]), "minus1"), nh.from_array(i64(0), "zero0"),
                     nh.from_array(i64(1), "one0"),
                     nh.from_array(np.float32(0.01), "scale")])
    m = _helper_model(graph, 11, 6)
    path = save_model(m, out_dir)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 4, 6), dtype=np.float32)
    return finalize(name, out_dir, path, {"x": x}, seed=seed,
                    exporter="onnx.helper, opset 11, ir_version 6",
                    description="shape-computation subgraph: Shape -> Slice -> Concat -> "
                                "Reshape(x[batch,4,6] -> [batch,24]); Shape -> Gather -> "
                                "Range -> Cast -> Mul -> Add; ConstantOfShape and Expand "
                                "on a computed shape")


@model("resize_topk_einsum")
def make_resize_topk_einsum(name, out_dir, seed):
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    nodes = [
        h.make_node("Resize", ["img", "", "scales"], ["up_linear"], mode="linear",
                    coordinate_transformation_mode="half_pixel"),
        h.make_node("Resize", ["img", "", "", "sizes"], ["up_nearest"], mode="nearest",
                    coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        h.make_node("Einsum", ["a", "b"], ["prod"], equation="bij,bjk->bik"),
        h.make_node("TopK", ["prod", "k"], ["top_values", "top_indices"], axis=-1,
                    largest=1, sorted=1),
    ]
    graph = h.make_graph(
        nodes, "resize_topk_einsum",
        [h.make_tensor_value_info("img", T.FLOAT, [1, 2, 4, 4]),
         h.make_tensor_value_info("a", T.FLOAT, [2, 3, 4]),
         h.make_tensor_value_info("b", T.FLOAT, [2, 4, 5])],
        [h.make_tensor_value_info("up_linear", T.FLOAT, [1, 2, 8, 8]),
         h.make_tensor_value_info("up_nearest", T.FLOAT, [1, 2, 6, 10]),
         h.make_tensor_value_info("prod", T.FLOAT, [2, 3, 5]),
         h.make_tensor_value_info("top_values", T.FLOAT, [2, 3, 2]),
         h.make_tensor_value_info("top_indices", T.INT64, [2, 3, 2])],
        initializer=[nh.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales"),
                     nh.from_array(np.array([1, 2, 6, 10], dtype=np.int64), "sizes"),
                     nh.from_array(np.array([2], dtype=np.int64), "k")])
    m = _helper_model(graph, 18, 8)
    path = save_model(m, out_dir)
    rng = np.random.default_rng(seed)
    feeds = {"img": rng.standard_normal((1, 2, 4, 4), dtype=np.float32),
             "a": rng.standard_normal((2, 3, 4), dtype=np.float32),
             "b": rng.standard_normal((2, 4, 5), dtype=np.float32)}
    prod = np.einsum("bij,bjk->bik", feeds["a"], feeds["b"])
    diff = float(np.abs(prod - _run_ort(path, feeds)[2]).max())
    return finalize(name, out_dir, path, feeds, seed=seed,
                    exporter="onnx.helper, opset 18, ir_version 8",
                    description="Resize (linear/half_pixel by scales 2x; nearest/asymmetric/"
                                "floor to sizes 6x10), Einsum bij,bjk->bik, TopK k=2 on the "
                                "Einsum result (values and int64 indices)",
                    notes=[f"numpy einsum agrees with onnxruntime to {diff:.3g}"])


# ----------------------------------------------------------------------------- main


def verify(dirs):
    """Re-checks committed models against their io.json without torch: onnx.checker, then
    onnxruntime on the saved inputs, compared with the saved outputs at the recorded
    tolerances. Returns the number of failures."""
    import onnx

    bad = 0
    for d in dirs:
        with open(os.path.join(d, "io.json")) as f:
            man = json.load(f)
        path = os.path.join(d, "model.onnx")
        try:
            onnx.checker.check_model(onnx.load(path), full_check=True)
            feeds = {i["name"]: np.load(os.path.join(d, i["file"])) for i in man["inputs"]}
            outs = _run_ort(path, feeds)
            worst = []
            for o, got in zip(man["outputs"], outs):
                want = np.load(os.path.join(d, o["file"]))
                assert got.shape == want.shape and got.dtype == want.dtype, o["name"]
                if not np.allclose(got, want, rtol=o["rtol"], atol=o["atol"]):
                    raise AssertionError(f"{o['name']} differs beyond tolerance")
                worst.append(float(np.abs(got.astype(np.float64) - want).max())
                             if got.size else 0.0)
            log(f"ok   {man['name']}: max abs diff vs saved outputs {max(worst):.3g}")
        except Exception as e:
            bad += 1
            log(f"FAIL {man['name']}: {type(e).__name__}: {e}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[],
                    help="model name(s) to build (repeatable or comma-separated)")
    ap.add_argument("--large", action="store_true",
                    help="also build the large benchmark models into large/ (git-ignored)")
    ap.add_argument("--eqsat-bench", action="store_true",
                    help="build only the eqsat benchmark models (the TENSAT families: "
                         + ", ".join(EQSAT_BENCH) + ") into large/; with --verify, check "
                         "only those")
    ap.add_argument("--list", action="store_true", help="list model names and exit")
    ap.add_argument("--verify", action="store_true",
                    help="only re-check the existing models against their io.json (needs "
                         "onnx, onnxruntime, numpy; not torch)")
    args = ap.parse_args()

    if args.verify:
        roots = [SMALL_DIR] + ([LARGE_DIR] if args.large or args.eqsat_bench else [])
        dirs = sorted(os.path.join(r, n) for r in roots if os.path.isdir(r)
                      for n in os.listdir(r)
                      if os.path.exists(os.path.join(r, n, "io.json")))
        only = [s for o in args.only for s in o.split(",") if s]
        if args.eqsat_bench:
            only = only or EQSAT_BENCH
        if only:
            dirs = [d for d in dirs if os.path.basename(d) in only]
        return 1 if verify(dirs) else 0

    if args.list:
        for n, (_, large) in MODELS.items():
            print(n + ("  (large)" if large else "")
                  + ("  (eqsat-bench)" if n in EQSAT_BENCH else ""))
        return 0

    only = [s for o in args.only for s in o.split(",") if s]
    unknown = [n for n in only if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(MODELS)}")
    if only:
        names = only
    elif args.eqsat_bench:
        names = list(EQSAT_BENCH)
    else:
        names = [n for n, (_, large) in MODELS.items() if args.large or not large]

    import torch

    torch.set_num_threads(1)
    failed = []
    t_all = time.time()
    for n in names:
        fn, large = MODELS[n]
        out_dir = fresh_dir(os.path.join(LARGE_DIR if large else SMALL_DIR, n))
        log(f"building {n} -> {os.path.relpath(out_dir, HERE)}")
        t0 = time.time()
        try:
            fn(n, out_dir, seed_of(n))
        except Exception as e:  # keep going; report at the end
            import traceback

            traceback.print_exc()
            failed.append((n, f"{type(e).__name__}: {e}"))
            continue
        log(f"  done in {time.time() - t0:.1f}s")
    log(f"total {time.time() - t_all:.1f}s")
    for n, why in failed:
        log(f"FAILED {n}: {why}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
