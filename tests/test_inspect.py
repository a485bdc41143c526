"""End-to-end tests of `snc inspect --json` against independent references:
ONNX's own shape inference (onnx.shape_inference.infer_shapes), PyTorch's
output shapes and parameter counts, on the eight torchvision exports at small
sizes, deep ResNets from examples/make_resnet.py, the shipped fashion CNN, and
small models built here from the same op set that no other test uses.

Exports are made once per session into a temporary folder (small sizes keep
the run short)."""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNC = os.path.join(ROOT, "build", "snc")
sys.path.insert(0, os.path.join(ROOT, "examples"))
import export_torchvision  # noqa: E402
import make_resnet  # noqa: E402

SIZES = {"alexnet": 64, "vgg16": 32, "resnet18": 32, "resnet50": 32, "googlenet": 32,
         "inception_v3": 75, "densenet121": 32, "mobilenet_v2": 32}


def inspect(path, *args):
    r = subprocess.run([SNC, "inspect", path, "--json"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def onnx_shapes(path, batch=None):
    """name -> static shape, from ONNX shape inference (no weights needed)."""
    m = onnx.load(path, load_external_data=False)
    if batch is not None:
        d = m.graph.input[0].type.tensor_type.shape.dim[0]
        d.ClearField("dim_param")
        d.dim_value = batch
        for o in m.graph.output:
            o.type.tensor_type.shape.dim[0].ClearField("dim_param")
            o.type.tensor_type.shape.dim[0].dim_value = batch
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    shapes = {}
    for vi in list(m.graph.value_info) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = [d.dim_value for d in dims]
    return shapes


def compare_shapes(js, ref, min_fraction=0.95):
    outs = [o for n in js["nodes"] for o in n["outputs"]]
    assert outs, "no node outputs"
    compared = 0
    # ONNX leaves BatchNormalization's training outputs (running and saved
    # statistics) without shapes: they are per channel of output 0.
    for n in js["nodes"]:
        if n["op"] == "BatchNormalization" and n["outputs"][0]["name"] in ref:
            c = ref[n["outputs"][0]["name"]][1]
            for o in n["outputs"][1:]:
                if o["name"] not in ref:
                    assert o["shape"] == [c], o["name"]
                    compared += 1
    for o in outs:
        if o["name"] in ref:
            assert o["shape"] == ref[o["name"]], o["name"]
            compared += 1
    assert compared >= min_fraction * len(outs), "%d of %d compared" % (compared, len(outs))
    return compared


@pytest.mark.parametrize("name", list(SIZES))
def test_torchvision(torchvision_onnx, name):
    # The file examples/export_torchvision.py writes (tests/conftest.py: once
    # per run, shared with the other tests of these models), and the same
    # seeded model it exported.
    path = torchvision_onnx(name, SIZES[name])
    model, _ = export_torchvision.build(name, SIZES[name])
    js = inspect(path)
    compare_shapes(js, onnx_shapes(path))
    assert js["params"] == sum(p.numel() for p in model.parameters())
    assert js["param_bytes"] == 4 * js["params"]
    # the logits shape PyTorch gives at another batch, with --batch
    with torch.no_grad():
        model.eval()
        y = model(torch.zeros(3, 3, SIZES[name], SIZES[name]))
        model.train()
    js3 = inspect(path, "--batch", "3")
    last = [o for n in js3["nodes"] for o in n["outputs"] if o["name"] == "logits"]
    assert last and last[0]["shape"] == list(y.shape)
    assert js3["flops"] > js["flops"] > 0


def test_resnet50_generator(tmp_path):
    model, depth = make_resnet.make([3, 4, 6, 3], 64, 1000)
    path = str(tmp_path / "r50.onnx")
    onnx.save(model, path)
    js = inspect(path, "--batch", "2")
    compare_shapes(js, onnx_shapes(path, batch=2))
    import torchvision
    assert js["params"] == sum(p.numel() for p in torchvision.models.resnet50().parameters())
    # conv FLOPs by hand for the stem: 2 * N * K * OH * OW * C * KH * KW
    assert js["flops"] > 2 * 2 * 64 * 32 * 32 * 3 * 7 * 7


def test_fashion_cnn():
    path = os.path.join(ROOT, "examples", "fashion_cnn.onnx")
    assert os.path.getsize(path) < 1 << 20
    js = inspect(path, "--batch", "64")
    compare_shapes(js, onnx_shapes(path, batch=64))
    init = onnx.load(path).graph.initializer
    assert js["params"] == sum(int(np.prod(t.dims)) for t in init
                               if "running" not in t.name)
    # forward FLOPs by hand: two convs, two gemms (2 per MAC) + elementwise/pool terms
    macs = 64 * (32 * 28 * 28 * 9 + 64 * 14 * 14 * 32 * 9 + 3136 * 64 + 64 * 10)
    assert 2 * macs < js["flops"] < 2 * macs * 1.1


class Mixed(nn.Module):
    """Ops the torchvision models do not use: flips (negative-step
    Slice), Transpose, Split, Concat, Softmax, ReduceMean, MatMul, Sub/Mul/Div
    with broadcasting, LeakyRelu, Sigmoid, Tanh, AveragePool with ceil_mode."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=(0, 1), dilation=(2, 1))
        self.bn = nn.BatchNorm2d(8)
        self.lin = nn.Linear(5, 6)
        self.w = nn.Parameter(torch.randn(6, 7))

    def forward(self, x):
        x = F.leaky_relu(self.bn(self.conv(x)), 0.1)
        x = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
        a, b = torch.split(x, [3, 5], dim=1)
        x = torch.cat([torch.sigmoid(b), torch.tanh(a), a.flip(-1)], dim=1)
        x = x - x.mean(dim=(2, 3), keepdim=True)
        x = x.permute(0, 2, 3, 1) * 0.5 / 3.0
        x = x.flip(2)[:, 1:, ::2, :5]
        x = torch.softmax(self.lin(x), dim=-1)
        return torch.matmul(x, self.w)


def test_mixed_ops_torch(tmp_path):
    torch.manual_seed(0)
    m = Mixed().train()
    x = torch.randn(2, 4, 19, 23)
    path = str(tmp_path / "mixed.onnx")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, x, path, opset_version=13, input_names=["x"], output_names=["y"],
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    js = inspect(path)
    ops = {n["op"] for n in js["nodes"]}
    assert {"Slice", "Transpose", "Split", "Concat", "Softmax", "ReduceMean",
            "MatMul", "Sub", "Mul", "Div", "LeakyRelu", "AveragePool"} <= ops, ops
    compare_shapes(js, onnx_shapes(path))
    y = [o for n in js["nodes"] for o in n["outputs"] if o["name"] == "y"][0]
    assert y["shape"] == list(m(x).shape)
    assert js["params"] == sum(p.numel() for p in m.parameters())


def test_helper_model(tmp_path):
    """Opset-11 forms written with onnx.helper: Pad with pads as an input, Clip bounds as inputs,
    Softmax's 2-D coercion, Split attribute, LRN, MaxPool ceil_mode with
    asymmetric pads and dilations, auto_pad SAME_LOWER, depthwise Conv,
    Reshape with 0 and -1, Gemm with transA and a (M,1) C, Dropout."""
    f = TensorProto.FLOAT

    def init(name, arr):
        return numpy_helper.from_array(np.asarray(arr), name)

    nodes = [
        helper.make_node("Pad", ["x0", "pads", "pval"], ["x"]),
        helper.make_node("Conv", ["x", "w1"], ["c1"], auto_pad="SAME_LOWER", strides=[2, 2]),
        helper.make_node("Conv", ["c1", "w2", "b2"], ["c2"], group=6, pads=[1, 0, 2, 1]),
        helper.make_node("LRN", ["c2"], ["l"], size=3),
        helper.make_node("Clip", ["l", "lo", "hi"], ["cl"]),
        helper.make_node("MaxPool", ["cl"], ["mp"], kernel_shape=[3, 2], strides=[2, 2],
                         pads=[1, 0, 1, 1], dilations=[1, 2], ceil_mode=1),
        helper.make_node("Split", ["mp"], ["s0", "s1"], axis=1, split=[4, 8]),
        helper.make_node("Reshape", ["s1", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
        helper.make_node("Gemm", ["t", "gw", "gc"], ["g"], transA=1, alpha=0.5),
        helper.make_node("Dropout", ["g"], ["d"], ratio=0.2),
        helper.make_node("Softmax", ["d"], ["y"], axis=1),
    ]
    rng = np.random.default_rng(0)
    inits = [init("w1", rng.standard_normal((6, 3, 4, 4)).astype(np.float32)),
             init("w2", rng.standard_normal((12, 1, 3, 3)).astype(np.float32)),
             init("b2", np.zeros(12, np.float32)),
             init("lo", np.array(-1.0, np.float32)), init("hi", np.array(1.0, np.float32)),
             init("shape", np.array([0, -1], np.int64)),
             init("pads", np.array([0, 0, 1, 2, 0, 0, 0, 1], np.int64)),
             init("pval", np.array(0.5, np.float32))]
    g = helper.make_graph(nodes, "h", [helper.make_tensor_value_info("x0", f, [2, 3, 16, 12])],
                          [helper.make_tensor_value_info("y", f, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    path = str(tmp_path / "h.onnx")
    onnx.save(m, path)
    ref = onnx_shapes(path)
    r_shape = ref["r"]
    # Gemm: t is (K, M) with transA: A^T = (M=2, K); B (K, 5); C (M, 1)
    k = r_shape[1]
    inits += [init("gw", rng.standard_normal((k, 5)).astype(np.float32)),
              init("gc", np.zeros((2, 1), np.float32))]
    g = helper.make_graph(nodes, "h", [helper.make_tensor_value_info("x0", f, [2, 3, 16, 12])],
                          [helper.make_tensor_value_info("y", f, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), path)
    js = inspect(path)
    compare_shapes(js, onnx_shapes(path), min_fraction=1.0)
    # the pool by PyTorch (same padding, ceil_mode, dilation): pad explicitly for asymmetry
    c2 = torch.zeros(ref["cl"])
    mp = F.max_pool2d(F.pad(c2, (0, 1, 1, 1), value=-1e9), (3, 2), 2, 0, (1, 2), ceil_mode=True)
    got = [o for n in js["nodes"] for o in n["outputs"] if o["name"] == "mp"][0]["shape"]
    assert got == list(mp.shape)


def test_deep_resnet_fast(tmp_path):
    """The 2,498-layer ResNet: 8,335 nodes, inspected in well under a second."""
    import time
    model, depth = make_resnet.make([6, 32, 788, 6], 32, 10)
    path = str(tmp_path / "r2498.onnx")
    onnx.save(model, path)
    t = time.time()
    js = inspect(path, "--batch", "1")
    assert time.time() - t < 5
    # stem 4, 10 per block (3 conv, 3 BN, 3 Relu, Add), 2 per projection, head 3
    assert len(js["nodes"]) == 4 + 10 * (6 + 32 + 788 + 6) + 2 * 4 + 3
    assert js["nodes"][-1]["outputs"][0]["shape"] == [1, 10]
