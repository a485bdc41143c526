#!/usr/bin/python3
"""make_seeds.py — writes the fuzzer's seed models into a folder (argv[1]).

Seeds: the shipped Fashion-MNIST CNN, a small ResNet from make_resnet.py, and
a few torch exports (an MLP; a conv net with BatchNorm, pooling, residual add,
concat). Every initializer becomes a graph input with a
declared shape (snc initializes those), so that each seed is a few KB and the
fuzzer's mutations land in the graph rather than in weight bytes.
"""
import io
import os
import subprocess
import sys

import onnx
import torch
from onnx import helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def strip(model):
    """Initializers -> declared inputs (keeps small int64 constants: shapes)."""
    g = model.graph
    keep = []
    for init in g.initializer:
        if init.data_type == onnx.TensorProto.INT64 and len(init.dims) <= 1:
            keep.append(init)
            continue
        g.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    del g.initializer[:]
    g.initializer.extend(keep)
    return model


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(12, 16), torch.nn.Linear(16, 5)
        self.drop = torch.nn.Dropout(0.25)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.c2 = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.fc = torch.nn.Linear(8 * 4 * 4, 3)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        y = torch.nn.functional.max_pool2d(y + self.c2(y), 2)
        z = torch.nn.functional.avg_pool2d(torch.sigmoid(y), 1)
        y = torch.cat([y, z[:, :, :, :]], 1)
        return self.fc(torch.flatten(y, 1))


def export(model, shape, path):
    f = io.BytesIO()
    torch.onnx.export(model.eval(), torch.zeros(*shape), f, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}}, opset_version=13)
    m = onnx.load_from_string(f.getvalue())
    onnx.save(strip(m), path)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    onnx.save(strip(onnx.load(os.path.join(ROOT, "examples", "fashion_cnn.onnx"))),
              os.path.join(out, "fashion_cnn.onnx"))
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "examples", "make_resnet.py"),
                    "--blocks", "1,1,1,1", "--size", "32", "--classes", "10",
                    "-o", os.path.join(out, "resnet_small.onnx")], check=True,
                   stdout=subprocess.DEVNULL)
    torch.manual_seed(0)
    export(Mlp(), (2, 12), os.path.join(out, "mlp.onnx"))
    export(ConvNet(), (2, 3, 8, 8), os.path.join(out, "convnet.onnx"))


if __name__ == "__main__":
    main()
