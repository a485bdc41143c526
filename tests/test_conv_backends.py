"""test_conv_backends.py — the CPU runtime's two convolution paths
(runtime/cpu/k_conv_dnnl.c: oneDNN, loaded at run time; k_conv.c: im2col +
OpenBLAS), chosen by SNRT_CONV, on the geometries where they differ most:
first layers on 3 channels with asymmetric implied padding, depthwise and
grouped convs, strided 1x1 downsamples, dilation, and the deep small-plane
backward-filter that k_conv_dnnl.c hands back to OpenBLAS.

One conv (then a global average pool and a Linear layer into the softmax
cross-entropy: no ReLU, so no kink makes the gradients ill-conditioned) per
case, one training step: the loss and every gradient within 1e-5 / 1e-4 of
PyTorch in float64 on the same weights and batch, under each path; the
banner names the path; a bad SNRT_CONV is refused."""
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from snc_harness import compile_model, export, grad_err, load_dump, run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#        name               c  size k  kernel stride pad dil groups
CASES = [("7x7_s2_p3_c3", 3, 64, 16, 7, 2, 3, 1, 1),      # resnet/densenet conv0: pads 3, implied 2
         ("3x3_s2_p1_c3", 3, 96, 8, 3, 2, 1, 1, 1),       # mobilenet_v2's first layer
         ("depthwise_s2", 16, 15, 16, 3, 2, 1, 1, 16),
         ("grouped_dilated", 8, 12, 12, 3, 1, 2, 2, 4),
         ("1x1_s2", 32, 8, 48, 1, 2, 0, 1, 1),
         ("3x3_deep_2x2", 128, 2, 64, 3, 1, 1, 1, 1)]     # backward-filter back on OpenBLAS


class OneConv(nn.Module):
    def __init__(self, c, k, kernel, stride, pad, dil, groups):
        super().__init__()
        self.conv = nn.Conv2d(c, k, kernel, stride, pad, dil, groups, bias=True)
        self.fc = nn.Linear(k, 5)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.conv(x), 1).flatten(1))


@pytest.fixture(scope="module")
def have_dnnl():
    r = subprocess.run(["/usr/bin/python3", "-c", "import ctypes; ctypes.CDLL('libdnnl.so.2')"])
    if r.returncode != 0:
        pytest.skip("libdnnl.so.2 is not installed (configure.py --install-deps installs it)")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_both_paths_match_float64(case, tmp_path, have_dnnl):
    name, c, size, k, kernel, stride, pad, dil, groups = case
    torch.manual_seed(3)
    model = OneConv(c, k, kernel, stride, pad, dil, groups)
    batch = 4
    x = torch.randn(batch, c, size, size)
    y = torch.randint(0, 5, (batch,))
    onnx = str(tmp_path / "m.onnx")
    export(model, x, onnx)
    prog = compile_model(onnx, str(tmp_path / "prog"), batch, "--policy", "none")
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "y.npy", y.numpy().astype(np.int64))
    exact = model.double()
    loss64 = F.cross_entropy(exact(x.double()), y)
    loss64.backward()
    for path, banner in (("dnnl", "oneDNN convs"), ("im2col", "im2col convs")):
        dump = tmp_path / ("grads_" + path)
        r = run([prog, "--data", "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy"),
                 "--steps", "1", "--dump-grads", str(dump)],
                env=dict(os.environ, SNRT_CONV=path))
        assert banner in r.stdout, r.stdout
        ours = float(np.load(dump / "loss.npy").ravel()[0])
        assert abs(ours - loss64.item()) <= 1e-5 * max(1.0, abs(loss64.item())), (path, ours, loss64.item())
        for pname, p in exact.named_parameters():
            e = grad_err(load_dump(dump, pname), p.grad.numpy())
            assert e <= 1e-4, "%s, SNRT_CONV=%s: gradient of %s off float64 by %.3g" % (name, path, pname, e)


def test_bad_choice_is_refused(tmp_path):
    torch.manual_seed(0)
    model = OneConv(3, 4, 3, 1, 1, 1, 1)
    x = torch.randn(2, 3, 8, 8)
    onnx = str(tmp_path / "m.onnx")
    export(model, x, onnx)
    prog = compile_model(onnx, str(tmp_path / "prog"), 2, "--policy", "none")
    r = subprocess.run([prog, "--data", "synthetic", "--steps", "1"], capture_output=True, text=True,
                       env=dict(os.environ, SNRT_CONV="winograd"), timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "SNRT_CONV=winograd: want auto, dnnl or im2col" in r.stderr, r.stderr
