"""onnx_ref.py — models built with onnx.helper, checked against a PyTorch
reference written by hand with torch.nn.functional (shared by
test_reference_onnx.py and test_op_grads.py).

A case is an ONNX graph (Model: numpy initializers; float ones are the
trainable parameters) plus a torch function ref(x, P) -> logits written
independently from the ONNX semantics, where P maps each parameter name to a
torch tensor with requires_grad. run_case() compiles the graph with snc, runs
one training step with --dump-grads, runs the same step in torch (float32
and float64) and returns both sides.
"""
import os

import numpy as np

from snc_harness import grad_err, load_dump, one_step_grads

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


class Model:
    """An ONNX graph under construction: x is the data input."""

    def __init__(self, opset=13):
        self.opset = opset
        self.nodes, self.inits, self.params = [], [], {}
        self.k = 0

    def fresh(self, base):
        self.k += 1
        return "%s_%d" % (base, self.k)

    def param(self, name, arr):
        arr = np.asarray(arr, dtype=np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        self.params[name] = arr
        return name

    def const(self, arr, dtype=np.int64):
        name = self.fresh("const")
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=dtype), name))
        return name

    def op(self, op_type, inputs, nout=1, **attrs):
        outs = [self.fresh(op_type.lower()) for _ in range(nout)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.fresh(op_type), **attrs))
        return outs[0] if nout == 1 else outs

    def save(self, path, x_shape, out):
        # The output is renamed "output" through a final Identity-free rename.
        for n in self.nodes:
            n.output[:] = ["output" if o == out else o for o in n.output]
            n.input[:] = ["output" if i == out else i for i in n.input]
        g = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              list(x_shape))],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
                              self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        onnx.save(m, path)


def head(m, feat, n_in, classes, rng):
    """Flatten -> Gemm(transB) to `classes` logits: every case ends so."""
    f = m.op("Flatten", [feat], axis=1)
    w = m.param(m.fresh("fc_w"), rng.standard_normal((classes, n_in)) / np.sqrt(n_in))
    b = m.param(m.fresh("fc_b"), rng.standard_normal(classes) * 0.1)
    return m.op("Gemm", [f, w, b], transB=1), w, b


def torch_head(t, P, w, b):
    import torch
    return torch.flatten(t, 1) @ P[w].T + P[b]


def run_case(tmp, m, out, ref, x_shape, classes, batch=2, loss="ce", seed=0, flags=(),
             x=None):
    """Compiles and runs one step; returns dict with ours/ref32/ref64 losses
    and per-parameter (ours, ref32, ref64) gradients."""
    import torch
    F = torch.nn.functional
    tmp = str(tmp)
    rng = np.random.default_rng(seed)
    if x is None:
        x = rng.standard_normal((batch,) + tuple(x_shape)).astype(np.float32)
    if loss == "ce":
        y = rng.integers(0, classes, batch).astype(np.int64)
    else:
        y = rng.standard_normal((batch, classes)).astype(np.float32)
    path = os.path.join(tmp, "model.onnx")
    m.save(path, (batch,) + tuple(x_shape), out)
    extra = ["--loss", "mse"] if loss == "mse" else []
    ours, dump = one_step_grads(path, tmp, x, y, batch, *(extra + list(flags)))
    res = {"ours": ours, "grads": {}}
    refs = {}
    for dt in (torch.float32, torch.float64):
        P = {k: torch.tensor(v, dtype=dt, requires_grad=True) for k, v in m.params.items()}
        logits = ref(torch.tensor(x, dtype=dt), P)
        if loss == "ce":
            lv = F.cross_entropy(logits, torch.tensor(y))
        else:
            lv = F.mse_loss(logits, torch.tensor(y, dtype=dt))
        lv.backward()
        refs[dt] = (lv.item(), {k: (p.grad.numpy() if p.grad is not None else np.zeros(p.shape))
                                for k, p in P.items()})
    res["ref32"], res["ref64"] = refs[torch.float32][0], refs[torch.float64][0]
    for k in m.params:
        res["grads"][k] = (load_dump(dump, k), refs[torch.float32][1][k], refs[torch.float64][1][k])
    return res


def check(res, tag, grad_tol=1e-4, loss_tol=1e-5):
    """The loss within loss_tol (relative) of PyTorch float32; every gradient
    within grad_tol of PyTorch float32, or, where PyTorch float32 is itself
    that far from float64 (an ill-conditioned gradient: a BatchNorm gamma
    whose output feeds another BatchNorm is a nearly cancelling sum), no
    farther from float64 than max(grad_tol, 2 x PyTorch float32's error).
    Every gradient must meet the float64 bound. Returns (worst error vs
    float32, worst vs float64) for the report."""
    ref = res["ref32"]
    assert abs(res["ours"] - ref) <= loss_tol * max(1.0, abs(ref)), (tag, res["ours"], ref)
    w32 = w64 = 0.0
    ill = []
    for k, (g, r32, r64) in res["grads"].items():
        assert g.shape == r32.shape, (tag, k, g.shape, r32.shape)
        e32, e64, t = grad_err(g, r32), grad_err(g, r64), grad_err(r32, r64)
        w32, w64 = max(w32, e32), max(w64, e64)
        msg = ("%s: gradient of %s off by %.3g from PyTorch float32 and %.3g from float64 "
               "(PyTorch float32: %.3g)" % (tag, k, e32, e64, t))
        assert e64 <= max(grad_tol, 2 * t), msg
        if e32 > grad_tol:
            ill.append("%s (%.3g vs float64; PyTorch float32 %.3g)" % (k, e64, t))
    print("%s: loss %.7f vs %.7f; worst gradient error %.3g (float32 ref), %.3g (float64 ref)%s"
          % (tag, res["ours"], ref, w32, w64,
             "; ill-conditioned: " + ", ".join(ill) if ill else ""))
    return w32, w64
