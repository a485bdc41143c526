"""The compiled program against PyTorch: one step's loss and gradients, and 3 steps' parameters.

For each model: export it with its weights, load the exported initializers
back into the torch model (so both sides start from the same bytes, BN
statistics included), run one training step in torch and in the program snc
emits on the same batch and labels, and compare the loss (1e-5 relative) and
every parameter gradient (||g - g_ref|| / ||g_ref|| <= 1e-4). Then parameters
(and BN running statistics) after 3 SGD-momentum steps and after 3 Adam steps.
The torchvision models are also run in float64 PyTorch, the exact reference
for gradients that no float32 program can give to 1e-4 (see the comment above
TORCHVISION). Run with -s to see the worst error per model.
"""
import copy
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from snc_harness import compile_model, export, grad_err, load_dump, rel_err, run  # noqa: E402

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

GRAD_TOL = 1e-4
LOSS_TOL = 1e-5


class EdgeConvNet(nn.Module):
    """Conv edge cases: groups, dilation, stride, uneven padding, depthwise,
    ceil-mode pools (windows starting in padding), count_include_pad.
    (Asymmetric pads are in FoldNet and test_reference_onnx.py; LRN only in
    the latter: torch exports LocalResponseNorm with an If node.)"""

    def __init__(self, classes=7):
        super().__init__()
        self.c1 = nn.Conv2d(4, 8, 3, stride=2, dilation=2, groups=2, padding=(0, 1), bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.mp = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
        self.c2 = nn.Conv2d(8, 6, 1)
        self.ap = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        self.ap2 = nn.AvgPool2d(2, stride=1, padding=1, count_include_pad=True)
        self.fc = nn.Linear(6 * 4 * 4, classes)

    def forward(self, x):
        x = F.leaky_relu(self.bn1(self.c1(x)), 0.1)
        x = torch.sigmoid(self.dw(x)) * 2.0
        x = self.mp(x)
        x = torch.tanh(self.c2(x))
        x = self.ap2(self.ap(x))
        return self.fc(torch.flatten(x, 1))


class BranchNet(nn.Module):
    """Fan-out, residual add, concat, split, slice, transpose, broadcasting
    arithmetic with parameters, softmax, reduce-mean, clip, matmul, dropout."""

    def __init__(self, classes=5):
        super().__init__()
        # No bias before BatchNorm: its exact gradient is 0 and the computed one
        # rounding noise (~1e-8), which Adam would scale up to full-size steps.
        self.c0 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.ca = nn.Conv2d(4, 4, 3, padding=1)
        self.cb = nn.Conv2d(4, 4, 1)
        self.scale = nn.Parameter(torch.rand(1, 8, 1, 1) + 0.5)
        self.shift = nn.Parameter(torch.randn(8, 1, 1) * 0.1)
        self.w = nn.Parameter(torch.randn(8, 6) * 0.3)
        self.drop = nn.Dropout(0.0)
        self.fc = nn.Linear(6 * 4, classes)

    def forward(self, x):
        x = F.relu6(self.bn(self.c0(x)))
        a, b = torch.split(x, 4, dim=1)
        y = torch.cat([self.ca(a) + a, self.cb(b) * b], dim=1)
        y = y * self.scale - self.shift
        y = y / (1.5 + torch.sigmoid(y))
        y = y[:, :, 1:5, 0:8:2]                        # Slice, with a step
        m = y.mean(dim=(2,), keepdim=False)             # ReduceMean -> (n, 8, 4)
        m = m.transpose(1, 2)                           # (n, 4, 8)
        m = torch.clamp(m, -2.0, 3.0)
        s = torch.softmax(m, dim=-1) + m                # fan-out of m
        z = s @ self.w                                  # MatMul with a parameter, (n, 4, 6)
        z = self.drop(z)
        return self.fc(torch.flatten(z, 1))


class FoldNet(nn.Module):
    """What torch exports as shape-computing subgraphs, folded by snc at
    compile time: nn.ZeroPad2d and F.pad (Shape, Gather, ConstantOfShape,
    Concat, Reshape, Slice, Transpose, Cast -> Pad's pads), F.relu6 and
    clamp with only a min (Cast(Constant) -> Clip's bounds), x.view(n, -1)
    (Shape, Gather, Unsqueeze, Concat -> Reshape's shape), and Unsqueeze/
    Squeeze of data (copies)."""

    def __init__(self, classes=4):
        super().__init__()
        self.c1 = nn.Conv2d(3, 6, 3)
        self.pad = nn.ZeroPad2d((1, 2, 0, 1))
        self.c2 = nn.Conv2d(6, 5, 2, stride=2)
        self.fc = nn.Linear(5 * 4 * 5, classes)

    def forward(self, x):
        x = F.relu6(self.pad(self.c1(x)) * 3.0)
        x = F.pad(x, (0, 1, 2, 0), value=0.5)
        x = torch.clamp(self.c2(x), min=-0.3)
        x = torch.tanh(x.unsqueeze(2)).squeeze(2)
        return self.fc(x.view(x.size(0), -1))


def onnx_state(path):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


def load_exported(model, path):
    """Copies the exported initializers into the torch model; every parameter
    and buffer the graph uses must be found (or the comparison is meaningless)."""
    init = onnx_state(path)
    sd = model.state_dict()
    missing = [k for k, v in model.named_parameters() if k not in init]
    assert not missing, "parameters not exported under their names: %s" % missing
    with torch.no_grad():
        for k, v in sd.items():
            if k in init:
                v.copy_(torch.from_numpy(np.array(init[k])).to(v.dtype))
    return set(init)


def prepare(model, shape, classes, batch, tmp, opset=13, seed=0):
    torch.manual_seed(seed)
    x = torch.randn(batch, *shape)
    y = torch.randint(0, classes, (batch,))
    onnx_path = str(tmp / "model.onnx")
    export(copy.deepcopy(model), x, onnx_path, opset=opset)
    load_exported(model, onnx_path)
    np.save(tmp / "x.npy", x.numpy())
    np.save(tmp / "y.npy", y.numpy().astype(np.int64))
    return x, y, onnx_path


def program_step(prog, tmp, steps, *extra, env=None):
    """Runs the program; returns (gradient dump dir, parameter dump dir)."""
    grads, params = tmp / ("grads%d" % steps), tmp / ("params%d" % steps)
    run([prog, "--data", "npy:%s,%s" % (tmp / "x.npy", tmp / "y.npy"), "--steps", str(steps),
         "--dump-grads", str(grads), "--dump-params", str(params)] + list(extra), env=env)
    return grads, params


def banner_of(prog, tmp):
    """What the program prints (its banner's device names the convolution path)."""
    return run([prog, "--data", "npy:%s,%s" % (tmp / "x.npy", tmp / "y.npy"), "--steps", "1"]).stdout


CASES = {
    "edge_conv": (lambda: EdgeConvNet(), (4, 15, 14), 7, 3),
    "branches": (lambda: BranchNet(), (3, 8, 8), 5, 4),
    "folded": (lambda: FoldNet(), (3, 7, 8), 4, 3),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_step_gradients(name, tmp_path):
    make, shape, classes, batch = CASES[name]
    torch.manual_seed(1)
    model = make()
    x, y, onnx_path = prepare(model, shape, classes, batch, tmp_path)
    prog = compile_model(onnx_path, str(tmp_path / "prog"), batch, "--policy", "none")

    model.train()
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()

    dump, _ = program_step(prog, tmp_path, 1)
    ours = float(np.load(dump / "loss.npy").ravel()[0])
    assert abs(ours - loss.item()) <= LOSS_TOL * max(1.0, abs(loss.item())), (ours, loss.item())
    worst = 0.0
    for pname, p in model.named_parameters():
        e = grad_err(load_dump(dump, pname), p.grad.numpy())
        worst = max(worst, e)
        assert e <= GRAD_TOL, "%s: gradient of %s off by %.3g" % (name, pname, e)
    print("%s: loss %.6f vs %.6f, worst gradient error %.3g" % (name, ours, loss.item(), worst))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("optim", ["sgd", "adam", "adamw"])
def test_three_steps_parameters(name, optim, tmp_path):
    make, shape, classes, batch = CASES[name]
    torch.manual_seed(1)
    model = make()
    x, y, onnx_path = prepare(model, shape, classes, batch, tmp_path)
    lr = 0.05 if optim == "sgd" else 1e-3
    prog = compile_model(onnx_path, str(tmp_path / "prog"), batch, "--policy", "none",
                         "--optimizer", optim, "--lr", str(lr))
    model.train()
    if optim == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    if optim == "adamw":   # snc's default decay for adamw is torch's, 0.01
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    _, dump = program_step(prog, tmp_path, 3)
    for pname, v in model.state_dict().items():
        if pname.endswith("num_batches_tracked"):
            continue
        e = rel_err(load_dump(dump, pname), v.numpy())
        assert e <= GRAD_TOL, "%s/%s: %s after 3 steps off by %.3g" % (name, optim, pname, e)


# ---- the eight torchvision models (examples/export_torchvision.py builds them)
#
# Sizes: at 32 px ResNet/DenseNet/MobileNet/GoogLeNet end on 1x1 feature
# maps, so with batch 2 their last BatchNorms normalize over 2 values per
# channel, and inception_v3 at 75 px does the same in Mixed_7: there the
# float32 forward itself is ill-conditioned (PyTorch's own float32 loss is
# 7% off its float64 loss for inception_v3 at 75 px, resnet18's gradients
# 6% at 32 px). 64 px (mobilenet_v2 96, inception_v3 107) ends on 2x2 or 3x3.
#
# Two things still make some gradients incomparable at 1e-4 between two
# float32 programs, and the test tells them apart with PyTorch in float64
# (the exact reference, same weights and batch):
#  - cancellation: the bias of a BatchNorm whose output reaches the next
#    BatchNorm through a 1x1 conv (ResNet-50's bottleneck, MobileNetV2's
#    projection, DenseNet) is a sum of terms that nearly cancel (the next
#    BN's backward removes the per-channel mean), so its float32 value
#    carries relative errors up to ~1e-2: PyTorch's own float32 gradient is
#    that far from float64. Such a gradient must be within max(1e-4, 3 x
#    PyTorch float32's error) of float64: snc about as accurate as PyTorch
#    (which of two float32 summations cancels more luckily varies with the
#    host's BLAS kernels: on one host snc was within 2x everywhere, on an
#    AMD EPYC host resnet50's layer3.5.bn2.bias is 2.2x, 2.77% against
#    PyTorch's 1.24%, and densenet121's worst 2.02x; a wrong backward is
#    off by far more).
#  - kinks: a ReLU input within float32 rounding of 0 (a conv output that is
#    a sum of hundreds of nearly cancelling products) falls on either side
#    depending on summation order, and then a whole element's gradient flows
#    or not. We saw it in mobilenet_v2 at 64 px (one of 10,240 ReLU6 inputs
#    of features.18 at -3.1e-5 rounds above 0 in snc's GEMM: recomputing the
#    tail in float64 with that one mask bit flipped reproduces snc's
#    gradients to 6e-5) and throughout inception_v3, where even PyTorch's
#    float32 gradients are 0.35% (107 px) to 0.5% (139 px) off float64 and
#    snc's, with different crossings, up to ~4%. For inception_v3 only
#    (CHAOTIC), gradients beyond both bounds above must still be within 10%
#    of float64, and the loss within 1e-4 of float64; the test prints how
#    many there were. Every other model must meet the first two bounds,
#    or a third where the gradient is that ill-conditioned in snc's own
#    float32 program: on some hosts (seen on an AMD EPYC, OpenBLAS's Zen
#    kernels) a different summation order alone, the same program with
#    --threads 1 instead of 2, moves googlenet's conv1 weight gradient by
#    0.45%; a gradient is then accepted within twice that spread of float64
#    (the spread is measured, per gradient, only where the first two bounds
#    fail; a race would show as a spread between runs at one thread count,
#    which the test also rules out). The other summation order measured is
#    the other convolution path (SNRT_CONV: oneDNN or im2col + OpenBLAS):
#    with oneDNN, whose results do not move with the thread count, the
#    first-layer weight gradients of mobilenet_v2 (1.7% from float64) and
#    densenet121 (0.18%) and resnet50's layer3.5.bn2.weight (1.6%) fail the
#    first two bounds, and the im2col path moves them as far. mobilenet_v2's
#    is one kink: a ReLU6 input of features.18 at 2.4e-5 from 0 in float64
#    that oneDNN's summation puts on the other side; flipping that one mask
#    bit in the float64 model reproduces snc's shifted gradients (its
#    features.0.0.weight within 2.2e-5 of snc's instead of 1.74%; checked
#    by hand once, flipping in turn the 3 inputs nearest 0 and 6 of each
#    ReLU6). The densenet121 and resnet50 ones were not traced. A wrong convolution kernel is not hidden by this:
#    test_conv_backends.py holds each path to float64 on single convs of
#    these geometries, where nothing is kinked.

TORCHVISION = {"alexnet": 64, "vgg16": 32, "resnet18": 64, "resnet50": 64, "googlenet": 64,
               "inception_v3": 107, "densenet121": 64, "mobilenet_v2": 96}
CHAOTIC = {"inception_v3"}


def torchvision_model(name, size):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "examples"))
    from export_torchvision import build
    model, _ = build(name, size)
    for m in model.modules():          # the reference runs with dropout off
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return model


@pytest.mark.parametrize("name", sorted(TORCHVISION))
def test_torchvision_gradients(name, tmp_path):
    size = TORCHVISION[name]
    model = torchvision_model(name, size)
    batch = 2
    x, y, onnx_path = prepare(model, (3, size, size), 1000, batch, tmp_path)
    prog = compile_model(onnx_path, str(tmp_path / "prog"), batch, "--policy", "none")
    exact = copy.deepcopy(model).double()
    model.train()
    exact.train()
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    loss64 = F.cross_entropy(exact(x.double()), y)
    loss64.backward()
    dump, _ = program_step(prog, tmp_path, 1)
    ours = float(np.load(dump / "loss.npy").ravel()[0])
    ref, exact_loss = loss.item(), loss64.item()
    # The loss too: within 1e-5 of PyTorch float32, or no farther from the
    # float64 loss than twice PyTorch float32 is (inception_v3: 2.6e-5).
    tol = LOSS_TOL * max(1.0, abs(ref))
    if name in CHAOTIC:
        tol = max(tol, 10 * LOSS_TOL * abs(exact_loss))
    assert (abs(ours - ref) <= tol or
            abs(ours - exact_loss) <= max(tol, 2 * abs(ref - exact_loss))), (ours, ref, exact_loss)
    worst, where, ill, worst_ill, kinks, worst_kink = 0.0, "", [], (0.0, 0.0, ""), [], (0.0, "")
    spread_dirs, spread_used = [], []

    def spread(pname):
        """How far snc's own float32 gradient moves with the summation order:
        one thread instead of two, and the other convolution path."""
        if not spread_dirs:
            for d in ("again", "one", "conv"):
                (tmp_path / d).mkdir()
                for f in ("x.npy", "y.npy"):
                    os.symlink(tmp_path / f, tmp_path / d / f)
            again, _ = program_step(prog, tmp_path / "again", 1)
            one, _ = program_step(prog, tmp_path / "one", 1, "--threads", "1")
            other = "im2col" if "oneDNN convs" in banner_of(prog, tmp_path) else "dnnl"
            conv, _ = program_step(prog, tmp_path / "conv", 1, env=dict(os.environ, SNRT_CONV=other))
            spread_dirs.extend([again, one, conv])
        assert grad_err(load_dump(spread_dirs[0], pname), g) == 0.0, (
            "%s: two runs of one program differ in %s" % (name, pname))
        return max(grad_err(load_dump(d, pname), g) for d in spread_dirs[1:])
    for (pname, p), (_, q) in zip(model.named_parameters(), exact.named_parameters()):
        g = load_dump(dump, pname)
        e = grad_err(g, p.grad.numpy())
        if e > worst:
            worst, where = e, pname
        if e <= GRAD_TOL:
            continue
        e64, torch64 = grad_err(g, q.grad.numpy()), grad_err(p.grad.numpy(), q.grad.numpy())
        if e64 > max(GRAD_TOL, 3 * torch64) and name in CHAOTIC and e64 <= 0.1:
            kinks.append(pname)
            if e64 > worst_kink[0]:
                worst_kink = (e64, pname)
            continue
        ill.append(pname)
        if e64 / max(torch64, 1e-30) > worst_ill[0] / max(worst_ill[1], 1e-30):
            worst_ill = (e64, torch64, pname)
        if e64 > max(GRAD_TOL, 3 * torch64):
            sp = spread(pname)
            spread_used.append((pname, e64, sp))
            assert e64 <= 2 * sp, (
                "%s: gradient of %s off by %.3g from PyTorch float32 and %.3g from float64 "
                "(where PyTorch float32 is off by %.3g, and snc with --threads 1 moves it by "
                "%.3g)" % (name, pname, e, e64, torch64, sp))
    print("%s at %d px: loss %.7f vs %.7f (float64 %.7f); worst gradient error vs PyTorch float32 %.3g (%s)"
          % (name, size, ours, ref, exact_loss, worst, where))
    if ill:
        print("  %d ill-conditioned gradients above %.0e; worst vs float64: snc %.3g, PyTorch "
              "float32 %.3g (%s)" % (len(ill), GRAD_TOL, worst_ill[0], worst_ill[1], worst_ill[2]))
    if spread_used:
        print("  %d gradients within twice snc's own summation-order spread of float64: %s"
              % (len(spread_used), ", ".join("%s %.3g (spread %.3g)" % u for u in spread_used)))
    if kinks:
        print("  %d kink-affected gradients (beyond both bounds); worst vs float64 %.3g (%s)"
              % (len(kinks), worst_kink[0], worst_kink[1]))
