"""Mixed precision (--precision bf16|fp16) against PyTorch's CPU autocast.

Also here: every policy bit-identical to `none` under bf16 and fp16, every
size of the float32 copies' chunks bit-identical to whole tensors, the fp32
program unchanged, warning-free 16-bit programs (the CUDA ones link:
tests/test_cuda_build.py), resnet50's bf16/fp32 arena ratio, bf16 convergence on Fashion-MNIST, and
fp16: conversions against numpy, a step against a loss-scaled float16
emulation, overflow skipping the updates, --resume continuing the loss
scaling exactly; checkpoints of format 1 still loading.

One training step of the program snc emits with --precision bf16 is compared
with the same step in PyTorch under torch.autocast('cpu', dtype=bfloat16),
on the same ONNX weights, inputs and labels: the loss and every parameter
gradient.

The tolerance, from bf16's precision: bfloat16 keeps 8 significant bits, so
one rounding to nearest moves a value by at most 2^-9 of itself (u = 2^-9,
about 0.2%). The two programs do not round at exactly the same places (snc
keeps parameter gradients in fp32 where autocast rounds a conv's weight
gradient to bf16 before casting it back; torch promotes a bf16 activation
times an fp32 parameter to fp32 where snc stores bf16; their fp32 sums run
in different orders), so their results differ by a sum of independent
roundings of size u along the longest chain from the loss to a gradient:
here under 16 roundings (forward and backward through at most 4 layers with
a few stored tensors each), so ||g - g_ref|| / ||g_ref|| <= 16 u = 2^-5.
The loss is a mean of log-softmaxes of bf16 logits: its error is at most a
few roundings of the logits, <= 4 u relative (2^-7).

Autocast is not itself one rounding per stored tensor: this PyTorch's (1.13)
CPU bf16 convolution is 0.45% (3x3, 1 input channel) to 1% (8 channels) off
the correctly rounded result of the same bf16 operands (measured while
writing this test), which the 16 u budget absorbs on the models compared
(measured: edge_conv 0.0085, smooth_cnn 0.0165).

The bound is checked to mean something: the same gradients are compared with
PyTorch's fp32 step too and must differ from them by over 1e-3 (an fp32
program is ~1e-6 off), and a second test holds the program to 1e-4 of PyTorch
performing snc's bf16 storage roundings exactly (emulated in fp32).
"""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from snc_harness import FASHION, ROOT, SNC, compile_model, grad_err, load_dump, run  # noqa: E402

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from test_reference import CASES, prepare, program_step  # noqa: E402

U = 2.0 ** -9          # bf16 unit roundoff (8 significant bits)
GRAD_TOL = 16 * U      # 2^-5: see the module docstring
LOSS_TOL = 4 * U


class SmallCNN(nn.Module):
    """fashion_cnn's layer kinds: conv, BN, ReLU, max-pool, dense layers."""

    def __init__(self, classes=10):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc1 = nn.Linear(16 * 3 * 3, 32)
        self.fc2 = nn.Linear(32, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.c1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.c2(x))), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class SmoothCNN(nn.Module):
    """Conv, BN, tanh, average pool, dense layers: no decision (ReLU mask,
    max-pool argmax) that a rounding can flip."""

    def __init__(self, classes=10):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc1 = nn.Linear(16 * 3 * 3, 32)
        self.fc2 = nn.Linear(32, classes)

    def forward(self, x):
        x = F.avg_pool2d(torch.tanh(self.bn1(self.c1(x))), 2)
        x = F.avg_pool2d(torch.tanh(self.bn2(self.c2(x))), 2)
        return self.fc2(torch.tanh(self.fc1(torch.flatten(x, 1))))


# BranchNet and FoldNet (test_reference.py) use relu6, whose backward this
# PyTorch (1.13) does not implement in bf16.
AUTOCAST_CASES = {
    "edge_conv": CASES["edge_conv"],
    "smooth_cnn": (lambda: SmoothCNN(), (1, 12, 12), 10, 8),
}


class _Round(torch.autograd.Function):
    """A tensor stored in bf16: rounded in the forward pass and its gradient in the backward."""
    @staticmethod
    def forward(ctx, t):
        return t.bfloat16().float()

    @staticmethod
    def backward(ctx, g):
        return g.bfloat16().float()


class _RoundW(torch.autograd.Function):
    """An fp32 master weight read by a 16-bit op: rounded, its gradient kept fp32."""
    @staticmethod
    def forward(ctx, t):
        return t.bfloat16().float()

    @staticmethod
    def backward(ctx, g):
        return g


def emulated_small_cnn(m, x, y):
    q, w = _Round.apply, _RoundW.apply
    h = q(F.conv2d(w(x), w(m.c1.weight), w(m.c1.bias), padding=1))
    h = q(F.max_pool2d(q(F.relu(q(m.bn1(h)))), 2))
    h = q(F.conv2d(h, w(m.c2.weight), w(m.c2.bias), padding=1))
    h = q(F.max_pool2d(q(F.relu(q(m.bn2(h)))), 2))
    h = q(F.relu(q(F.linear(torch.flatten(h, 1), w(m.fc1.weight), w(m.fc1.bias)))))
    return q(F.linear(h, w(m.fc2.weight), w(m.fc2.bias)))


def torch_step(model, x, y, autocast):
    model.train()
    model.zero_grad()
    if autocast == "emulated":
        out = emulated_small_cnn(model, x, y)
    elif autocast:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
    else:
        out = model(x)
    loss = F.cross_entropy(out.float(), y)
    loss.backward()
    return loss.item(), {k: p.grad.detach().clone().numpy() for k, p in model.named_parameters()}


def bf16_step(onnx_path, batch, tmp_path, *flags):
    prog = compile_model(onnx_path, str(tmp_path / "prog"), batch, "--policy", "none",
                         "--precision", "bf16", *flags)
    dump, _ = program_step(prog, tmp_path, 1)
    return float(np.load(dump / "loss.npy").ravel()[0]), dump


@pytest.mark.parametrize("name", sorted(AUTOCAST_CASES))
def test_bf16_gradients_match_autocast(name, tmp_path):
    make, shape, classes, batch = AUTOCAST_CASES[name]
    torch.manual_seed(1)
    model = make()
    x, y, onnx_path = prepare(model, shape, classes, batch, tmp_path)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    loss32, g32 = torch_step(model, x, y, autocast=False)
    model.load_state_dict(state)
    loss16, g16 = torch_step(model, x, y, autocast=True)
    ours, dump = bf16_step(onnx_path, batch, tmp_path)
    assert abs(ours - loss16) <= LOSS_TOL * max(1.0, abs(loss16)), (ours, loss16)
    worst = worst32 = 0.0
    for pname in g16:
        g = load_dump(dump, pname)
        e = grad_err(g, g16[pname])
        worst = max(worst, e)
        worst32 = max(worst32, grad_err(g, g32[pname]))
        assert e <= GRAD_TOL, "%s: gradient of %s off autocast's by %.3g (tolerance %.3g)" % (
            name, pname, e, GRAD_TOL)
    print("%s: loss %.6f vs autocast %.6f (fp32 %.6f); worst gradient error vs autocast %.3g, "
          "vs fp32 %.3g" % (name, ours, loss16, loss32, worst, worst32))
    # An fp32 program is ~1e-6 from torch's fp32 step (test_reference.py).
    assert worst32 > 1e-3, "no bf16 rounding happened"


EMULATION_TOL = 1e-4


def test_bf16_matches_rounding_emulation(tmp_path):
    """ReLU after BN and max-pool make a CNN's gradient discontinuous in its
    activations: a rounding that flips one mask bit or one window's argmax
    moves a whole gradient element, and a few such flips per layer put
    autocast 10-20% away from fp32 on fashion_cnn's layer kinds. There the
    reference is PyTorch doing exactly what snc's bf16 storage does (fp32
    arithmetic, every stored activation and activation gradient rounded to
    bf16, fp32 master weights rounded as 16-bit ops read them, fp32 weight
    gradients), which leaves only the order of fp32 sums: 1e-4, as fp32."""
    torch.manual_seed(1)
    model = SmallCNN()
    x, y, onnx_path = prepare(model, (1, 12, 12), 10, 8, tmp_path)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    loss32, g32 = torch_step(model, x, y, autocast=False)
    model.load_state_dict(state)
    loss_e, g_e = torch_step(model, x, y, autocast="emulated")
    ours, dump = bf16_step(onnx_path, 8, tmp_path)
    assert abs(ours - loss_e) <= 1e-5 * max(1.0, abs(loss_e)), (ours, loss_e)
    worst = worst32 = 0.0
    for pname in g_e:
        g = load_dump(dump, pname)
        e = grad_err(g, g_e[pname])
        worst = max(worst, e)
        worst32 = max(worst32, grad_err(g, g32[pname]))
        assert e <= EMULATION_TOL, "gradient of %s off the emulation by %.3g" % (pname, e)
    print("small_cnn: worst gradient error vs bf16 emulation %.3g, vs fp32 %.3g" % (worst, worst32))
    assert worst32 > 100 * EMULATION_TOL, "no bf16 rounding happened"


# ---- plans under bf16: every policy bit-identical to `none` --------------------

from test_policies_bitexact import COPY_DELAY_US, model_path, same_files  # noqa: E402
from plan_check import check_plan  # noqa: E402

BF16_POLICIES = ["liveness", "recompute", "offload", "superneurons", "segment"]


def train3_bf16(onnx, batch, policy, out, *flags, precision="bf16"):
    prog = compile_model(onnx, out, batch, "--policy", policy, "--precision", precision, *flags)
    dump = os.path.join(out, "params")
    run([prog, "--data", "synthetic", "--steps", "3", "--poison", "--dump-params", dump,
         "--metrics", os.path.join(out, "metrics.json")],
        env=dict(os.environ, SNRT_COPY_DELAY_US=COPY_DELAY_US))
    return dump


@pytest.mark.parametrize("name,precision", [("fashion_cnn", "bf16"), ("resnet50", "bf16"),
                                            ("gpt_bytes", "bf16"), ("fashion_cnn", "fp16")])
def test_bf16_policies_bit_identical(name, precision, tmp_path):
    """As test_policies_bitexact.py, under --precision bf16: 3 steps with --poison and a
    slow copy engine; each policy's parameters bit-identical to `none`'s, each
    plan through the independent checker, and bf16 arenas smaller than fp32's.
    gpt_bytes brings the transformer ops (embedding, LayerNorm, masked
    softmax, GELU's erf) under bf16; fashion_cnn runs under fp16 too (its
    loss scaling and the updates after the backward pass)."""
    if name == "gpt_bytes":
        onnx, batch = os.path.join(ROOT, "examples", "gpt_bytes.onnx"), 2
    else:
        onnx, batch = model_path(name, str(tmp_path))
    ref = train3_bf16(onnx, batch, "none", str(tmp_path / "none"), precision=precision)
    arenas = {}
    for cfg in BF16_POLICIES:
        out = str(tmp_path / cfg)
        pol, flags = ("recompute", ["--segment", "64KiB"]) if cfg == "segment" else (cfg, [])
        dump = train3_bf16(onnx, batch, pol, out, *flags, precision=precision)
        bad = same_files(ref, dump)
        assert not bad, "%s/%s bf16: parameters differ from policy none: %s" % (name, cfg, bad[:5])
        plan = json.load(open(os.path.join(out, "plan.json")))
        check_plan(plan)
        assert plan["precision"] == precision
        arenas[cfg] = plan["arena_bytes"]
    js = str(tmp_path / "fp32.json")
    run([SNC, "plan", onnx, "--batch", str(batch), "--policy", "liveness", "--device", "cpu",
         "--json", js])
    fp32 = json.load(open(js))["arena_bytes"]
    assert arenas["liveness"] < fp32, (arenas["liveness"], fp32)
    print(name, precision, {k: "%.2f MiB" % (v / 2**20) for k, v in arenas.items()},
          "fp32 liveness %.2f MiB" % (fp32 / 2**20))


# ---- the float32 working copies: planned, chunked, bit-identical ---------------

CHUNKS = ["131072", "1000", "1"]   # the CPU default, a chunk that divides nothing, the smallest


@pytest.mark.parametrize("name,precision", [("fashion_cnn", "bf16"), ("resnet50", "bf16"),
                                            ("gpt_bytes", "bf16"), ("fashion_cnn", "fp16")])
def test_convert_chunks_bit_identical(name, precision, tmp_path):
    """A 16-bit step's float32 working copies live in its planned workspace
    and convert in chunks where its kernel computes the same bits on a part
    (convert.c): elements, whole images (pools, convolutions in their
    kernel's GEMM groups; backward-filter adding to dw), whole channels
    (BatchNorm). Each chunk size (the default 128Ki elements, 1000, 1) gives
    parameters bit-identical to whole tensors
    (--convert-chunk 0) after 3 steps with --poison (a chunk reading a copy
    another chunk did not write shows up as NaN), every plan passes the
    independent checker (copies inside their step's workspace), and smaller
    chunks plan smaller copies."""
    if name == "gpt_bytes":
        onnx, batch = os.path.join(ROOT, "examples", "gpt_bytes.onnx"), 2
    else:
        onnx, batch = model_path(name, str(tmp_path))
    if name == "resnet50":
        batch = 6   # (odd chunks of images: 1000 elements is under one 32x32 image)
    ref = train3_bf16(onnx, batch, "liveness", str(tmp_path / "whole"), "--convert-chunk", "0",
                      precision=precision)
    whole = json.load(open(tmp_path / "whole" / "plan.json"))
    check_plan(whole)
    assert "for (int64_t u" not in open(tmp_path / "whole" / "train.c").read()
    def all_copies(plan):   # every step's copies, summed
        return sum(i.get("convert_bytes", 0) for i in plan["instances"] if i["kind"] == "workspace")
    sizes = {"0": whole["convert_bytes"]}
    total = {"0": all_copies(whole)}
    for ch in CHUNKS:
        out = str(tmp_path / ("c" + ch))
        dump = train3_bf16(onnx, batch, "liveness", out, "--convert-chunk", ch, precision=precision)
        bad = same_files(ref, dump)
        assert not bad, "%s %s chunks of %s: parameters differ from whole tensors: %s" % (
            name, precision, ch, bad[:5])
        plan = json.load(open(os.path.join(out, "plan.json")))
        check_plan(plan)
        assert plan["convert_chunk"] == int(ch)
        sizes[ch] = plan["convert_bytes"]
        total[ch] = all_copies(plan)
        if ch == "1":
            assert "for (int64_t u" in open(os.path.join(out, "train.c")).read()
    print(name, precision, "largest step's float32 copies by chunk:",
          {k: "%.1f KiB" % (v / 1024) for k, v in sizes.items()}, "all steps':",
          {k: "%.1f KiB" % (v / 1024) for k, v in total.items()})
    assert sizes["1"] <= sizes["1000"] <= sizes["131072"] <= sizes["0"], sizes
    # The largest step may be one that converts whole tensors (a MatMul of
    # the GPT, once fusion made its GELU one step); the copies of all steps
    # together shrink.
    assert total["1"] < total["0"], total


def test_convert_chunks_weight_first_dim_equals_batch(tmp_path):
    """A chunk of images splits only a step's (batch, ...) operands: at batch
    64 fashion_cnn's second conv has 64 output channels, so its weight
    gradient (64, 32, 3, 3) starts with the batch size too, and must still be
    written whole (a chunked one crashed or trained on a fraction of its
    gradient). Chunks against whole tensors, bit for bit, 2 steps with
    --poison."""
    onnx = os.path.join(ROOT, "examples", "fashion_cnn.onnx")
    dumps = []
    for ch in ("131072", "0"):
        out = str(tmp_path / ("c" + ch))
        prog = compile_model(onnx, out, 64, "--policy", "liveness", "--precision", "bf16",
                             "--convert-chunk", ch)
        dump = os.path.join(out, "params")
        run([prog, "--data", "synthetic", "--steps", "2", "--poison", "--dump-params", dump])
        dumps.append(dump)
    assert "for (int64_t u" in open(tmp_path / "c131072" / "train.c").read()
    bad = same_files(dumps[0], dumps[1])
    assert not bad, "chunks differ from whole tensors at batch 64: %s" % bad[:5]


# ---- the command line and the emitted program ---------------------------------

def test_fp32_program_unchanged(tmp_path):
    """--precision fp32 (the default) emits the very program snc emitted before
    the flag existed (generated/ holds those: test_generated.py)."""
    onnx = os.path.join(ROOT, "examples", "fashion_cnn.onnx")
    for d, extra in (("a", []), ("b", ["--precision", "fp32"])):
        run([SNC, "compile", onnx, "-o", str(tmp_path / d), "--batch", "8"] + extra)
    for f in ("train.c", "plan.json"):
        a, b = open(tmp_path / "a" / f).read(), open(tmp_path / "b" / f).read()
        assert a == b, f
    assert "bf16" not in open(tmp_path / "a" / "train.c").read()
    assert "precision" not in json.load(open(tmp_path / "a" / "plan.json"))


def test_precision_errors(tmp_path):
    onnx = os.path.join(ROOT, "examples", "fashion_cnn.onnx")
    r = run([SNC, "plan", onnx, "--batch", "8", "--precision", "fp8"], check=False)
    assert r.returncode == 1 and "--precision must be fp32, bf16 or fp16" in r.stderr, r.stderr
    r = run([SNC, "compile", onnx, "-o", str(tmp_path / "p"), "--batch", "8", "--precision",
             "fp16", "--dist", "mpi"], check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("snc: error: --precision fp16 does not run with --dist"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    for bad in ("-1", "x", "1.5"):
        r = run([SNC, "plan", onnx, "--batch", "8", "--precision", "bf16", "--convert-chunk", bad],
                check=False)
        assert r.returncode == 1 and "--convert-chunk" in r.stderr, r.stderr


@pytest.mark.parametrize("model", ["fashion_cnn", "gpt_bytes"])
def test_bf16_program_compiles_clean(model, tmp_path):
    """Every bf16 operand reaches a kernel through a float32 scratch copy: the
    emitted train.c compiles with -Wall -Wextra -Werror (a bf16 pointer passed
    where a kernel takes float * is an incompatible-pointer warning), and the
    plan's bf16 tensors take 2 bytes an element."""
    onnx = os.path.join(ROOT, "examples", model + ".onnx")
    out = tmp_path / "p"
    run([SNC, "compile", onnx, "-o", str(out), "--batch", "2", "--precision", "bf16"])
    run(["gcc", "-std=c11", "-O0", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
         "-I" + os.path.join(ROOT, "runtime"), "-c", str(out / "train.c"), "-o",
         str(out / "train.o")])
    plan = json.load(open(out / "plan.json"))
    kinds = {}
    for inst in plan["instances"]:
        kinds.setdefault(inst["kind"], set()).add(inst["dtype"])
        if inst["kind"] == "activation" and inst["dtype"] != "bfloat16":
            # the runtime reads the eval logits (accuracy): float32
            assert inst["tensor"].endswith("@eval"), inst
        if inst["dtype"] == "bfloat16":
            assert inst["kind"] in ("activation", "grad"), inst
    assert kinds["grad"] == {"bfloat16"}, kinds
    for k in ("param", "param-grad", "optimizer", "loss", "input"):
        assert kinds.get(k, {"float32"}) <= {"float32", "int32"}, (k, kinds)
    text = open(out / "plan.txt").read()
    assert "precision" in text and "bfloat16" in text


def test_resnet50_bf16_arena_ratio(tmp_path):
    """The issue's figure: resnet50 224x224 batch 32, liveness arena in bf16 at
    most 0.55x the fp32 one (activations halve; parameters, gradients and
    momentum, 3 x 98 MiB, do not), the float32 working copies of every 16-bit
    step counted in it (planned in the steps' workspaces, in chunks)."""
    onnx = str(tmp_path / "r50.onnx")
    run(["/usr/bin/python3", os.path.join(ROOT, "examples", "make_resnet.py"), "--depth", "50",
         "--size", "224", "-o", onnx])
    arena, plans = {}, {}
    for pr in ("fp32", "bf16"):
        js = str(tmp_path / (pr + ".json"))
        run([SNC, "plan", onnx, "--batch", "32", "--policy", "liveness", "--precision", pr,
             "--json", js])
        plans[pr] = json.load(open(js))
        arena[pr] = plans[pr]["arena_bytes"]
    bf = plans["bf16"]
    copies = [i for i in bf["instances"] if i.get("convert_bytes")]
    assert copies and all(i["kind"] == "workspace" for i in copies)
    assert not any("convert_bytes" in i for i in plans["fp32"]["instances"])
    ratio = arena["bf16"] / arena["fp32"]
    print("resnet50 b32 liveness: fp32 %.2f GiB, bf16 %.2f GiB, ratio %.4f; largest step's "
          "float32 copies %.1f MiB" % (arena["fp32"] / 2**30, arena["bf16"] / 2**30, ratio,
                                       bf["convert_bytes"] / 2**20))
    assert ratio <= 0.55, arena


# ---- convergence: the main job's model trained in bf16 -------------------------

@pytest.mark.skipif(not os.path.isdir(FASHION), reason="needs Debian's dataset-fashion-mnist")
def test_bf16_fashion_converges(tmp_path):
    """test_train_fashion.py's CI-sized run (300 steps, the main job's optimizer
    and learning rate) compiled with --precision bf16: the accuracy clears the
    same threshold, and --export-onnx writes fp32 master weights whose numpy
    (fp32) accuracy on the test set is the program's (bf16 eval) within 0.5
    points. The full 3-epoch main job in bf16 (`PRECISION=bf16
    examples/demo.sh`) is in the README."""
    from test_train_fashion import STEPS, THRESHOLD, demo_flags, numpy_accuracy, read_idx
    import onnx
    exe = compile_model(os.path.join(ROOT, "examples", "fashion_cnn.onnx"), str(tmp_path / "p"),
                        64, "--precision", "bf16", *demo_flags())
    train = "idx:%s/train-images-idx3-ubyte.gz,%s/train-labels-idx1-ubyte.gz" % (FASHION, FASHION)
    test = "idx:%s/t10k-images-idx3-ubyte.gz,%s/t10k-labels-idx1-ubyte.gz" % (FASHION, FASHION)
    metrics, onnx_out = str(tmp_path / "m.json"), str(tmp_path / "trained.onnx")
    run([exe, "--data", train, "--eval", test, "--steps", str(STEPS), "--threads", "2",
         "--log-every", "100", "--metrics", metrics, "--export-onnx", onnx_out], timeout=300)
    m = json.load(open(metrics))
    assert m["steps"] == STEPS and m["test_accuracy"] >= THRESHOLD, m
    inits = onnx.load(onnx_out).graph.initializer
    assert inits and all(t.data_type == onnx.TensorProto.FLOAT for t in inits)
    acc = numpy_accuracy(onnx_out, read_idx(FASHION + "/t10k-images-idx3-ubyte.gz"),
                         read_idx(FASHION + "/t10k-labels-idx1-ubyte.gz"))
    print("bf16 fashion_cnn %d steps: program %.4f, numpy fp32 of the export %.4f" % (
        STEPS, m["test_accuracy"], acc))
    assert abs(acc - m["test_accuracy"]) <= 0.005, (acc, m["test_accuracy"])


# ---- fp16: conversions, loss scaling --------------------------------------------

CONVERT_C = r"""
#include <stdio.h>
#include <string.h>
#include "snrt.h"
int main(void) {
  unsigned u;
  while (scanf("%x", &u) == 1) {
    float f;
    memcpy(&f, &u, 4);
    float back = snrt_f16_to_f32(snrt_f32_to_f16(f));
    unsigned b;
    memcpy(&b, &back, 4);
    printf("%04x %04x %08x\n", snrt_f32_to_f16(f), snrt_f32_to_bf16(f), b);
  }
  return 0;
}
"""


def test_half_conversions_match_numpy_and_torch(tmp_path):
    """snrt.h's float16 and bfloat16 rounding against numpy's float16 and
    torch's bfloat16 (both round to nearest even) on edge cases (ties,
    subnormals, 65504/65520, Inf, NaN) and 20,000 random bit patterns."""
    src, exe = tmp_path / "conv.c", tmp_path / "conv"
    src.write_text(CONVERT_C)
    run(["gcc", "-std=c11", "-O1", "-I" + os.path.join(ROOT, "runtime"), str(src), "-o", str(exe)])
    rng = np.random.default_rng(0)
    edge = np.array([0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e5, 2.0**-14, 2.0**-24,
                     2.0**-25, 2.0**-25 * 1.0001, 3 * 2.0**-26, 1 + 2.0**-11, 1 + 3 * 2.0**-11,
                     1 + 2.0**-8, 1 + 3 * 2.0**-8, np.inf, -np.inf, 6e-8, 1e-10],
                    np.float32)
    rand = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    mags = (rng.standard_normal(20000) * 10.0 ** rng.uniform(-9, 6, 20000)).astype(np.float32)
    x = np.concatenate([edge, -edge, rand, mags])
    x = x[~np.isnan(x)]
    r = run([str(exe)], input="\n".join("%08x" % v for v in x.view(np.uint32)) + "\n")
    got = np.array([[int(w, 16) for w in line.split()] for line in r.stdout.split("\n") if line])
    with np.errstate(over="ignore"):
        want16 = x.astype(np.float16).view(np.uint16)
    bad = np.nonzero(got[:, 0] != want16)[0]
    assert not len(bad), [("%08x" % x.view(np.uint32)[i], "%04x" % got[i, 0], "%04x" % want16[i])
                          for i in bad[:5]]
    want_bf = torch.from_numpy(x).bfloat16().view(torch.int16).numpy().view(np.uint16)
    bad = np.nonzero(got[:, 1] != want_bf)[0]
    assert not len(bad), [("%08x" % x.view(np.uint32)[i], "%04x" % got[i, 1], "%04x" % want_bf[i])
                          for i in bad[:5]]
    back = want16.view(np.float16).astype(np.float32).view(np.uint32)
    assert (got[:, 2].astype(np.uint32) == back).all()


class _Round16(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.half().float()

    @staticmethod
    def backward(ctx, g):
        return g.half().float()


class _RoundW16(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.half().float()

    @staticmethod
    def backward(ctx, g):
        return g


def test_fp16_matches_loss_scaled_emulation(tmp_path):
    """fp16 (11 significant bits, u = 2^-12) with dynamic loss scaling: one
    step against PyTorch performing the same float16 storage roundings
    (fp32 arithmetic) on a loss multiplied by 65536, the parameter gradients
    divided by it afterwards, as GradScaler does: 1e-4 (only the order of
    fp32 sums differs). And against PyTorch's fp32 step: a few u per rounding
    along the chain, as for bf16 but with a 16x smaller u (2^-5 / 16)."""
    torch.manual_seed(1)
    model = SmallCNN()
    x, y, onnx_path = prepare(model, (1, 12, 12), 10, 8, tmp_path)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    model.zero_grad()
    q, w = _Round16.apply, _RoundW16.apply
    m = model
    h = q(F.conv2d(w(x), w(m.c1.weight), w(m.c1.bias), padding=1))
    h = q(F.max_pool2d(q(F.relu(q(m.bn1(h)))), 2))
    h = q(F.conv2d(h, w(m.c2.weight), w(m.c2.bias), padding=1))
    h = q(F.max_pool2d(q(F.relu(q(m.bn2(h)))), 2))
    h = q(F.relu(q(F.linear(torch.flatten(h, 1), w(m.fc1.weight), w(m.fc1.bias)))))
    loss = F.cross_entropy(q(F.linear(h, w(m.fc2.weight), w(m.fc2.bias))), y)
    (loss * 65536.0).backward()
    g_e = {k: p.grad.numpy() / 65536.0 for k, p in model.named_parameters()}
    model.load_state_dict(state)
    _, g32 = torch_step(model, x, y, autocast=False)
    prog = compile_model(onnx_path, str(tmp_path / "prog"), 8, "--policy", "none",
                         "--precision", "fp16")
    dump, _ = program_step(prog, tmp_path, 1, "--metrics", str(tmp_path / "m.json"))
    ours = float(np.load(dump / "loss.npy").ravel()[0])
    assert abs(ours - loss.item()) <= 1e-5 * max(1.0, abs(loss.item())), (ours, loss.item())
    worst = worst32 = 0.0
    for pname in g_e:
        g = load_dump(dump, pname)
        if pname in ("c1.bias", "c2.bias"):
            # A conv bias before BN: its exact gradient is 0, both sides' are
            # rounding noise of sums taken in different orders.
            assert np.linalg.norm(g) <= 1e-3 * np.linalg.norm(load_dump(dump, pname[:2] + ".weight"))
            continue
        e = grad_err(g, g_e[pname])
        worst = max(worst, e)
        worst32 = max(worst32, grad_err(g, g32[pname]))
        assert e <= EMULATION_TOL, "gradient of %s off the fp16 emulation by %.3g" % (pname, e)
    print("small_cnn fp16: worst gradient error vs emulation %.3g, vs fp32 %.3g" % (worst, worst32))
    assert 1e-5 < worst32 <= GRAD_TOL / 16 * 4, worst32
    m = json.load(open(tmp_path / "m.json"))
    assert m["precision"] == "fp16" and m["skipped_steps"] == 0 and m["loss_scale"] == 65536, m


def test_fp16_overflow_skips_steps(tmp_path):
    """A loss scale that overflows float16 (SNRT_LOSS_SCALE=2^60, a testing
    aid) skips every update and halves the scale each step: after 3 steps
    the weights are their initial values, the metrics count 3 skipped steps
    and the scale is 2^57."""
    torch.manual_seed(1)
    model = SmallCNN()
    x, y, onnx_path = prepare(model, (1, 12, 12), 10, 8, tmp_path)
    prog = compile_model(onnx_path, str(tmp_path / "prog"), 8, "--precision", "fp16")
    params = tmp_path / "params"
    run([prog, "--data", "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy"), "--steps", "3",
         "--dump-params", str(params), "--metrics", str(tmp_path / "m.json")],
        env=dict(os.environ, SNRT_LOSS_SCALE=str(2.0 ** 60)))
    m = json.load(open(tmp_path / "m.json"))
    assert m["skipped_steps"] == 3 and m["loss_scale"] == 2.0 ** 57, m
    for pname, p in model.named_parameters():
        assert np.array_equal(load_dump(params, pname), p.detach().numpy()), pname
    # An ordinary scale trains: the weights move.
    run([prog, "--data", "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy"), "--steps", "1",
         "--dump-params", str(params), "--metrics", str(tmp_path / "m.json")])
    assert json.load(open(tmp_path / "m.json"))["skipped_steps"] == 0
    assert not np.array_equal(load_dump(params, "fc2.weight"), model.fc2.weight.detach().numpy())


# ---- checkpoints: fp16's loss scaling resumes exactly; version 1 still loads ----

def fnv1a(b):
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def ckpt_scaling(raw):
    """Version, loss scale, good steps and skipped steps of a checkpoint (the
    layout documented in runtime/common/checkpoint.c)."""
    import struct
    (version,) = struct.unpack_from("<I", raw, 8)
    if version < 2:
        return version, None, None, None
    return (version,) + struct.unpack_from("<dqq", raw, 80)


def ckpt_rewrite(raw, version=None, good=None):
    """The same checkpoint as version 1 (bytes 80..103 dropped), or with
    another count of good steps; length and checksum fixed."""
    import struct
    b = bytearray(raw)
    if good is not None:
        struct.pack_into("<q", b, 88, good)
    if version == 1:
        del b[80:104]
        struct.pack_into("<I", b, 8, 1)
    struct.pack_into("<Q", b, 24, len(b) - 24)
    struct.pack_into("<Q", b, 16, fnv1a(bytes(b[24:])))
    return bytes(b)


def test_fp16_resume_continues_loss_scaling(tmp_path):
    """An fp16 checkpoint holds the loss scale, the clean steps since it last
    changed and the steps skipped so far, so a run stopped at step 8 and
    resumed to step 14 ends bit for bit where an uninterrupted 14-step run
    ends (parameters, checkpoint, metrics). SNRT_LOSS_SCALE=2^26 makes the
    first steps overflow (the scale halves on each) and
    SNRT_LOSS_SCALE_INTERVAL=3 doubles it after 3 clean steps, so at step 8
    the scale is neither the initial one nor GradScaler's, and a clean step
    is counted towards the next doubling: resuming with that count lost
    ends elsewhere (the test can fail)."""
    exe = compile_model(os.path.join(ROOT, "examples", "fashion_cnn.onnx"), str(tmp_path / "p"), 8,
                        "--precision", "fp16")
    env = dict(os.environ, SNRT_LOSS_SCALE=str(2 ** 26), SNRT_LOSS_SCALE_INTERVAL="3")
    common = ["--data", "synthetic", "--seed", "5"]

    def go(name, *flags):
        run([exe] + common + ["--save", str(tmp_path / name), "--dump-params", str(tmp_path / ("d" + name)),
                              "--metrics", str(tmp_path / (name + ".json"))] + list(flags), env=env)
        return (open(tmp_path / name, "rb").read(), json.load(open(tmp_path / (name + ".json"))),
                tmp_path / ("d" + name))

    full, mfull, dfull = go("full", "--steps", "14")
    ck8, m8, _ = go("ck8", "--steps", "8")
    version, scale, good, skipped = ckpt_scaling(ck8)
    assert version == 2 and scale == m8["loss_scale"] and skipped == m8["skipped_steps"], (
        ckpt_scaling(ck8), m8)
    assert scale not in (2.0 ** 26, 65536.0) and 0 < good < 3 and skipped > 0, ckpt_scaling(ck8)
    res, mres, dres = go("res", "--steps", "6", "--resume", str(tmp_path / "ck8"))
    assert not same_files(str(dfull), str(dres)), "parameters differ from the uninterrupted run"
    assert res == full
    assert (mres["loss_scale"], mres["skipped_steps"]) == (mfull["loss_scale"], mfull["skipped_steps"])
    # The count of clean steps matters: lost, the run ends elsewhere.
    (tmp_path / "ck8g").write_bytes(ckpt_rewrite(ck8, good=0))
    lost, _, _ = go("lost", "--steps", "6", "--resume", str(tmp_path / "ck8g"))
    assert lost != full
    print("fp16 resume at step 8: scale %g, %d clean steps, %d skipped; final scale %g, %d skipped"
          % (scale, good, skipped, mfull["loss_scale"], mfull["skipped_steps"]))


def test_checkpoint_version1_still_loads(tmp_path):
    """A version 1 checkpoint (no loss-scaling bytes, written before they
    existed) resumes: an fp32 run from it ends bit for bit where the run from
    the version 2 file ends; an fp16 program resumes it too (from the
    initial scale)."""
    onnx = os.path.join(ROOT, "examples", "fashion_cnn.onnx")
    exe = compile_model(onnx, str(tmp_path / "p"), 8)
    common = ["--data", "synthetic", "--seed", "2"]
    run([exe] + common + ["--steps", "3", "--save", str(tmp_path / "ck3")])
    raw = open(tmp_path / "ck3", "rb").read()
    assert ckpt_scaling(raw)[0] == 2
    (tmp_path / "ck3v1").write_bytes(ckpt_rewrite(raw, version=1))
    for name in ("ck3", "ck3v1"):
        run([exe, "--data", "synthetic", "--steps", "2", "--resume", str(tmp_path / name), "--save",
             str(tmp_path / (name + "_end"))])
    assert open(tmp_path / "ck3_end", "rb").read() == open(tmp_path / "ck3v1_end", "rb").read()
    exe16 = compile_model(onnx, str(tmp_path / "p16"), 8, "--precision", "fp16")
    r = run([exe16, "--data", "synthetic", "--steps", "1", "--resume", str(tmp_path / "ck3v1"),
             "--metrics", str(tmp_path / "m.json")])
    assert "resumed from" in r.stdout
    assert json.load(open(tmp_path / "m.json"))["loss_scale"] == 65536
    # A version this program does not know is refused in one line.
    import struct
    b = bytearray(raw)
    struct.pack_into("<I", b, 8, 3)
    (tmp_path / "ck3v3").write_bytes(bytes(b))
    r = run([exe, "--data", "synthetic", "--steps", "1", "--resume", str(tmp_path / "ck3v3")], check=False)
    assert r.returncode == 2 and "format version 3" in r.stderr, r.stderr
