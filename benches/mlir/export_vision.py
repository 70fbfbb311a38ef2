#!/usr/bin/env python3
"""Export the vision models of issue 20's measurement list as compare.py model folders.

Each folder (default under testdata/models/large/, which git ignores) holds model.onnx,
io.json, a sample input and onnxruntime's output for it (one intra-op thread), the
format `compare.py` reads:

  resnet18       torchvision ResNet-18, 1x3x224x224 (11.7M parameters)
  mobilenet_v2   torchvision MobileNetV2, 1x3x224x224 (light ImageNet; depthwise convolutions)
  squeezenet1_1  torchvision SqueezeNet 1.1, 1x3x224x224 (light ImageNet)
  yolo_tiny      a YOLOv8n-shaped detector defined here: Conv-BN-SiLU stem and stages with
                 C2f blocks, SPPF, an upsampling neck with concatenations and three 1x1
                 heads; 1x3x320x320 (no torchvision model of that class exists)

Weights are random (seeded): run time does not depend on them. Needs torch, torchvision,
onnx and onnxruntime:

    /path/to/venv/bin/python benches/mlir/export_vision.py [--out DIR] [NAME ...]
    /path/to/venv/bin/python benches/mlir/compare.py testdata/models/large/resnet18 ...
"""

import argparse
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn

REPO = Path(__file__).resolve().parents[2]
SEED = 20261206


class ConvBnSilu(nn.Sequential):
    def __init__(self, cin, cout, k=3, s=1):
        super().__init__(
            nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU()
        )


class C2f(nn.Module):
    """Split, a chain of bottlenecks, concatenate everything, 1x1 (YOLOv8's block)."""

    def __init__(self, cin, cout, n=1):
        super().__init__()
        self.c = cout // 2
        self.cv1 = ConvBnSilu(cin, 2 * self.c, 1)
        self.m = nn.ModuleList(
            nn.Sequential(ConvBnSilu(self.c, self.c), ConvBnSilu(self.c, self.c)) for _ in range(n)
        )
        self.cv2 = ConvBnSilu((2 + n) * self.c, cout, 1)

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class Sppf(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.cv1 = ConvBnSilu(cin, cin // 2, 1)
        self.cv2 = ConvBnSilu(cin * 2, cout, 1)
        self.m = nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat([x, y1, y2, self.m(y2)], 1))


class YoloTiny(nn.Module):
    """YOLOv8n's layout (widths 16-256), heads of 64 + 80 channels per scale."""

    def __init__(self, classes=80):
        super().__init__()
        self.b1 = nn.Sequential(ConvBnSilu(3, 16, 3, 2), ConvBnSilu(16, 32, 3, 2), C2f(32, 32))
        self.b2 = nn.Sequential(ConvBnSilu(32, 64, 3, 2), C2f(64, 64, 2))
        self.b3 = nn.Sequential(ConvBnSilu(64, 128, 3, 2), C2f(128, 128, 2))
        self.b4 = nn.Sequential(ConvBnSilu(128, 256, 3, 2), C2f(256, 256), Sppf(256, 256))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.n1 = C2f(256 + 128, 128)
        self.n2 = C2f(128 + 64, 64)
        self.heads = nn.ModuleList(nn.Conv2d(c, 64 + classes, 1) for c in (64, 128, 256))

    def forward(self, x):
        p3 = self.b2(self.b1(x))
        p4 = self.b3(p3)
        p5 = self.b4(p4)
        n4 = self.n1(torch.cat([self.up(p5), p4], 1))
        n3 = self.n2(torch.cat([self.up(n4), p3], 1))
        return tuple(h(f) for h, f in zip(self.heads, (n3, n4, p5)))


def models():
    import torchvision.models as tv

    return {
        "resnet18": (lambda: tv.resnet18(), [1, 3, 224, 224], ["logits"]),
        "mobilenet_v2": (lambda: tv.mobilenet_v2(), [1, 3, 224, 224], ["logits"]),
        "squeezenet1_1": (lambda: tv.squeezenet1_1(), [1, 3, 224, 224], ["logits"]),
        "yolo_tiny": (lambda: YoloTiny(), [1, 3, 320, 320], ["p3", "p4", "p5"]),
    }


def export(name, make, shape, outputs, out_root):
    torch.manual_seed(SEED)
    model = make().eval()
    folder = out_root / name
    folder.mkdir(parents=True, exist_ok=True)
    x = torch.randn(*shape)
    path = folder / "model.onnx"
    torch.onnx.export(
        model, (x,), str(path), input_names=["image"], output_names=outputs,
        opset_version=18, dynamo=False,
    )
    onnx.checker.check_model(str(path))
    np.save(folder / "input_0_image.npy", x.numpy())
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    got = sess.run(None, {"image": x.numpy()})
    io = {
        "name": name,
        "description": f"{name}, random weights (seed {SEED}), exported for issue 20's measurements",
        "generator": "benches/mlir/export_vision.py",
        "opset": 18,
        "inputs": [{"name": "image", "file": "input_0_image.npy", "dtype": "float32",
                    "shape": shape, "sample_shape": shape}],
        "outputs": [],
        "reference": "onnxruntime CPUExecutionProvider, intra_op_num_threads=1",
    }
    for i, (o, y) in enumerate(zip(outputs, got)):
        f = f"output_{i}_{o}.npy"
        np.save(folder / f, y)
        io["outputs"].append({"name": o, "file": f, "dtype": "float32", "shape": list(y.shape),
                              "sample_shape": list(y.shape), "rtol": 1e-3, "atol": 1e-4})
    (folder / "io.json").write_text(json.dumps(io, indent=1) + "\n")
    params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {params / 1e6:.1f}M parameters -> {folder}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "testdata/models/large")
    ap.add_argument("names", nargs="*", help="which models (default: all)")
    args = ap.parse_args()
    table = models()
    for name in args.names or table:
        make, shape, outputs = table[name]
        export(name, make, shape, outputs, args.out)


if __name__ == "__main__":
    main()
