"""Elementwise fusion (compiler/front/fuse.c): chains of elementwise ops
become one FUSED step forward and one FUSED_BWD step backward.

- A chain of every fusable op (Add, Sub, Mul, Div with constants on either
  side, Relu, Sigmoid, Tanh, Neg, Reciprocal, Exp, Log, Sqrt, Erf, Pow) with
  two inputs that both need gradients, an input read by several ops and an
  intermediate read by two: one fused step (--dump fuse), and one training
  step's gradients against PyTorch float64 (the tolerance of
  test_op_grads.py: 1e-5 relative).
- Fused against unfused (--no-fuse), same weights and data: the loss is
  bit-identical (the fused forward computes each op as its own kernel does,
  in the same float32 order), the gradients agree within float32 rounding
  (the backward sums a register's contributions in another order than the
  unfused ACCUMULATE steps: not bit-identical, 1e-6 relative).
- The GPT example: its GELU tanh chain is one FUSED step per layer forward
  and one FUSED_BWD step backward in plan.txt, its decomposed LayerNorms
  (opset 13) are LAYERNORM steps, and the liveness arena is smaller than
  --no-fuse's by at least the chain's stored intermediates. (That the
  LayerNorm steps train as PyTorch does: test_gpt.py's opset-13 gradient
  tests, which fuse by default.)
(The policies' bit-identity under --poison on fused programs:
test_gpt.py's test_gpt_policies_bit_identical, whose GPT fuses by default.)
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from onnx_ref import Model, check, head, run_case, torch_head  # noqa: E402
from snc_harness import SNC, grad_err, run  # noqa: E402

SHAPE = (3, 4, 5)
NOPS = 24   # the chain below, op by op: SNRT_FUSED_MAX_OPS, the most one step holds


def chain_model(rng):
    """x -> a = x*s, b = x*u (s, u parameters of one sample's shape: these
    broadcast, so they stay outside the fused group) -> the chain -> head."""
    m = Model(13)
    s = m.param("s", (rng.standard_normal(SHAPE) * 0.5 + 1.0).astype(np.float32))
    u = m.param("u", (rng.standard_normal(SHAPE) * 0.5).astype(np.float32))
    from onnx import numpy_helper

    def c(v):   # a Constant node (a float initializer would be a trainable parameter)
        return m.op("Constant", [], value=numpy_helper.from_array(np.array(v, dtype=np.float32)))

    def build(x):
        a = m.op("Mul", [x, s])
        b = m.op("Mul", [x, u])
        sg = m.op("Sigmoid", [a])
        silu = m.op("Mul", [a, sg])                       # a read twice
        t = m.op("Tanh", [silu])
        e = m.op("Exp", [m.op("Mul", [c(0.3), t])])
        lg = m.op("Log", [m.op("Add", [e, c(1.0)])])
        sq = m.op("Sqrt", [m.op("Add", [m.op("Mul", [lg, lg]), c(0.1)])])
        den = m.op("Add", [m.op("Pow", [b, c(2.0)]), c(1.5)])
        r = m.op("Div", [sq, den])
        rec = m.op("Reciprocal", [m.op("Sub", [c(2.0), m.op("Mul", [m.op("Neg", [r]), c(0.3)])])])
        er = m.op("Erf", [m.op("Div", [b, c(1.7)])])
        re_ = m.op("Relu", [m.op("Sub", [a, c(0.1)])])
        out = m.op("Add", [m.op("Add", [rec, m.op("Mul", [er, t])]), re_])   # t read twice
        return out

    def ref(x, P):
        a, b = x * P[s], x * P[u]
        silu = a * torch.sigmoid(a)
        t = torch.tanh(silu)
        e = torch.exp(0.3 * t)
        lg = torch.log(e + 1.0)
        sq = torch.sqrt(lg * lg + 0.1)
        r = sq / (b ** 2 + 1.5)
        rec = 1.0 / (2.0 - (-r) * 0.3)
        er = torch.erf(b / 1.7)
        return rec + er * t + torch.relu(a - 0.1)

    return m, build, ref


def run_chain(tmp, *flags):
    rng = np.random.default_rng(5)
    m, build, ref = chain_model(rng)
    x_in = "x"
    feat = build(x_in)
    n_in = int(np.prod(SHAPE))
    logits, w, b = head(m, feat, n_in, 4, rng)
    return m, run_case(tmp, m, logits, lambda t, P: torch_head(ref(t, P), P, w, b), SHAPE, 4,
                       batch=3, flags=flags)


def test_chain_is_one_step_with_exact_gradients(tmp_path):
    tmp = str(tmp_path)
    m, res = run_chain(tmp)
    check(res, "fused chain", grad_tol=1e-5, loss_tol=1e-6)
    plan = open(os.path.join(tmp, "prog", "plan.txt")).read()
    fwd = re.findall(r"forward\s+FUSED\s.*fused(\d+)", plan)
    bwd = re.findall(r"backward\s+FUSED_BWD\s", plan)
    assert fwd == [str(NOPS)], fwd
    assert len(bwd) == 1, plan
    dump = run([SNC, "plan", os.path.join(tmp, "model.onnx"), "--batch", "3", "--dump", "fuse"]).stdout
    assert "; 1 group, %d nodes into 1 steps" % NOPS in dump, dump
    assert "%d ops, 2 inputs" % NOPS in dump, dump


def test_fused_loss_bit_identical_gradients_within_rounding(tmp_path):
    fused_dir, plain_dir = tmp_path / "fused", tmp_path / "plain"
    fused_dir.mkdir()
    plain_dir.mkdir()
    _, fused = run_chain(str(fused_dir))
    _, plain = run_chain(str(plain_dir), "--no-fuse")
    plan = open(os.path.join(str(plain_dir), "prog", "plan.txt")).read()
    assert "FUSED" not in plan
    assert fused["ours"] == plain["ours"], (fused["ours"], plain["ours"])
    for k, (g, _, _) in fused["grads"].items():
        gp = plain["grads"][k][0]
        assert grad_err(g, gp) <= 1e-6, (k, grad_err(g, gp))


def gpt_plan(tmp, *flags):
    import make_gpt
    torch.manual_seed(1)
    path = os.path.join(tmp, "gpt.onnx")
    if not os.path.exists(path):
        make_gpt.export(make_gpt.GPT(64, 32, 64, 4, 2, "tanh", True), path, 4, 32, 13)
    js = os.path.join(tmp, "plan%d.json" % len(flags))
    text = run([SNC, "plan", path, "--batch", "4", "--device", "cpu", "--policy", "liveness",
                "--json", js] + list(flags)).stdout
    return text, json.load(open(js))


def test_gpt_gelu_is_one_step_and_the_arena_shrinks(tmp_path):
    tmp = str(tmp_path)
    text, plan = gpt_plan(tmp)
    plain_text, plain = gpt_plan(tmp, "--no-fuse")
    gelu_fwd = re.findall(r"forward\s+FUSED\s+\S+\s+\S+\s+(/blocks\.\d+/Mul_6/fused9)", text)
    gelu_bwd = re.findall(r"backward\s+FUSED_BWD\s+\S+\s+\S+\s+(/blocks\.\d+/Mul_6/fused9/bwd)", text)
    assert len(gelu_fwd) == 2 and len(gelu_bwd) == 2, text
    assert "Tanh" not in text and "Tanh" in plain_text
    # Its LayerNorms, exported at opset 13 as nine nodes each (ReduceMean,
    # Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), are LAYERNORM steps:
    # two blocks of two and the final one.
    assert len(re.findall(r"forward\s+LayerNormalization\s", text)) == 5, text
    assert "ReduceMean" not in text and "ReduceMean" in plain_text
    # The Linear weights' transposes are the MatMuls' trans flags: no
    # Transpose step forward or backward for them (attention's stay).
    for w in ("qkv", "proj", "fc", "fc2"):
        assert "/%s/Transpose" % w in plain_text and "/%s/Transpose" % w not in text, w
        # ... and their bias adds the GEMM's C: one Gemm step, no Add
        assert re.search(r"forward\s+Gemm\s+\S+\s+\S+\s+/blocks\.0/%s/MatMul\+bias" % w, text), w
        add = r"forward\s+Add\s.*/blocks\.0/%s/Add$" % w
        assert re.search(add, plain_text, re.M) and not re.search(add, text, re.M), w
    # Attention's scale (x 1/sqrt(d) after Q K^T) is the product's alpha:
    # one MatMul step named <MatMul>*scale, no Mul step forward.
    for text_, fused_ in ((text, True), (plain_text, False)):
        scaled = re.findall(r"forward\s+MatMul\s+\S+\s+\S+\s+(/blocks\.\d+/MatMul\*scale)$", text_,
                            re.M)
        mul = re.findall(r"forward\s+Mul\s.*(/blocks\.\d+/Mul)$", text_, re.M)
        assert (len(scaled), len(mul)) == ((2, 0) if fused_ else (0, 2)), (scaled, mul)
    # The causal mask (Where(mask, scores, -inf)) is the Softmax's own mask:
    # no Where step forward or backward; the Softmax reads the scores.
    for text_, fused_ in ((text, True), (plain_text, False)):
        where = re.findall(r"(?:forward|backward)\s+Where\s.*(/blocks\.\d+/Where\S*)$", text_, re.M)
        assert len(where) == (0 if fused_ else 4), where
    assert re.search(r"forward\s+Softmax\s+\S+\s+\S+\s+/blocks\.0/Softmax$", text, re.M)
    # The chain's intermediates kept for backward in the unfused plan: at
    # least the Tanh output and the tanh argument, per layer (B x T x 4C floats).
    chain_bytes = 4 * 32 * 4 * 64 * 4
    assert plain["arena_bytes"] - plan["arena_bytes"] >= 2 * chain_bytes, \
        (plain["arena_bytes"], plan["arena_bytes"])
