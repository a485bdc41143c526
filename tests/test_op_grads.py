"""Per-op gradients against an exact reference: PyTorch autograd in float64.

For each differentiable op: a tiny ONNX model x -> Mul(x, s) -> OP ->
Flatten -> Gemm, where s is a parameter of one sample's shape, so the
gradient of s is (x times) the op's input gradient, element by element, and
the op's own parameters (conv weight, BN scale...) get theirs. The program
runs one step with --dump-grads; torch recomputes the same step in float64
from the same float32 inputs and weights (tests/unit/test_kernels.c checks
the kernels against finite differences; this checks the op as compiled:
shape inference, autodiff wiring, emitted parameters, kernels).

Tolerance: every gradient within 1e-5 (||g - g64|| / ||g64||) and the loss
within 1e-6 relative. The program computes in float32 (unit roundoff 6e-8);
in these graphs a gradient element is a sum of at most a few hundred terms,
so its rounding error is at most a few hundred ulps in the worst case and
~sqrt(n) ulps in practice: ~1e-6 relative, which is what we see (the test
prints the worst per op). A wrong window, scale, index or missing term
costs 1e-3 or more, so 1e-5 separates the two with margin on both sides.
Inputs are continuous random values, so no ReLU/Clip/MaxPool input sits on a
kink within rounding.
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from onnx_ref import Model, head, run_case, torch_head  # noqa: E402
from snc_harness import grad_err  # noqa: E402
from test_reference_onnx import lrn_onnx  # noqa: E402

F = torch.nn.functional
GRAD_TOL64 = 1e-5
LOSS_TOL64 = 1e-6
SHAPE = (3, 5, 5)


def rnd(rng, *shape, scale=1.0, shift=0.0):
    return (rng.standard_normal(shape) * scale + shift).astype(np.float32)


def fc(value):
    return np.float32(value)


# Each entry: f(m, rng) -> (build(t) -> output name, ref(t, P) -> tensor).
def op_conv(m, rng):
    w, b = m.param("w", rnd(rng, 4, 3, 3, 3, scale=0.3)), m.param("b", rnd(rng, 4, scale=0.1))
    return (lambda t: m.op("Conv", [t, w, b], kernel_shape=[3, 3], pads=[1, 0, 2, 1], strides=[2, 2]),
            lambda t, P: F.conv2d(F.pad(t, (0, 1, 1, 2)), P[w], P[b], stride=2))


def op_conv_group(m, rng):
    w = m.param("w", rnd(rng, 6, 1, 3, 3, scale=0.3))
    return (lambda t: m.op("Conv", [t, w], kernel_shape=[3, 3], group=3, dilations=[2, 2],
                           pads=[2, 2, 2, 2]),
            lambda t, P: F.conv2d(t, P[w], groups=3, dilation=2, padding=2))


def op_bn(m, rng):
    g, b = m.param("gamma", rnd(rng, 3, scale=0.2, shift=1.0)), m.param("beta", rnd(rng, 3, scale=0.1))
    mean, var = m.const(np.zeros(3), np.float32), m.const(np.ones(3), np.float32)
    return (lambda t: m.op("BatchNormalization", [t, g, b, mean, var], epsilon=1e-5),
            lambda t, P: F.batch_norm(t, None, None, P[g], P[b], training=True, eps=1e-5))


def unary(op_type, fn, **attrs):
    return lambda m, rng: (lambda t: m.op(op_type, [t], **attrs), lambda t, P: fn(t))


def op_clip(m, rng):
    lo, hi = m.const(fc(-0.5), np.float32), m.const(fc(0.7), np.float32)
    return lambda t: m.op("Clip", [t, lo, hi]), lambda t, P: torch.clamp(t, -0.5, 0.7)


def op_lrn(m, rng):
    return (lambda t: m.op("LRN", [t], size=3, alpha=0.4, beta=0.75, bias=1.2),
            lambda t, P: lrn_onnx(t, 3, 0.4, 0.75, 1.2))


def op_reshape(m, rng):
    shape = m.const([0, 15, 5])
    return lambda t: m.op("Reshape", [t, shape]), lambda t, P: t.reshape(t.shape[0], 15, 5)


def op_unsqueeze_squeeze(m, rng):
    a1, a2 = m.const([1]), m.const([1])
    return (lambda t: m.op("Squeeze", [m.op("Sigmoid", [m.op("Unsqueeze", [t, a1])]), a2]),
            lambda t, P: torch.sigmoid(t))


def op_matmul(m, rng):
    w, shape = m.param("w", rnd(rng, 25, 4, scale=0.3)), m.const([0, 3, 25])
    return (lambda t: m.op("MatMul", [m.op("Reshape", [t, shape]), w]),
            lambda t, P: t.reshape(t.shape[0], 3, 25) @ P[w])


def binary(op_type, fn, shape, shift=0.0):
    def make(m, rng):
        p = m.param("p", rnd(rng, *shape, scale=0.5, shift=shift))
        return lambda t: m.op(op_type, [t, p]), lambda t, P: fn(t, P[p])
    return make


def op_div_rev(m, rng):
    p = m.param("p", rnd(rng, 5, scale=0.5))
    one = m.const(fc(2.0), np.float32)
    return (lambda t: m.op("Div", [p, m.op("Add", [m.op("Sigmoid", [t]), one])]),
            lambda t, P: P[p] / (torch.sigmoid(t) + 2.0))


def op_concat(m, rng):
    return (lambda t: m.op("Concat", [t, m.op("Tanh", [t])], axis=1),
            lambda t, P: torch.cat([t, torch.tanh(t)], 1))


def op_split(m, rng):
    sizes = m.const([1, 2])

    def build(t):
        a, b = m.op("Split", [t, sizes], nout=2, axis=1)
        return m.op("Concat", [m.op("Sigmoid", [b]), a], axis=1)
    return build, lambda t, P: torch.cat([torch.sigmoid(t[:, 1:]), t[:, :1]], 1)


def op_slice(m, rng):
    args = [m.const([4]), m.const([-100]), m.const([2]), m.const([-2])]
    return lambda t: m.op("Slice", [t] + args), lambda t, P: t[:, :, [4, 2, 0]]


def op_pad(m, rng):
    pads, v = m.const([0, 0, 1, 0, 0, 0, 0, 2]), m.const(fc(0.3), np.float32)
    return (lambda t: m.op("Sigmoid", [m.op("Pad", [t, pads, v])]),
            lambda t, P: torch.sigmoid(F.pad(t, (0, 2, 1, 0), value=0.3)))


def op_dropout0(m, rng):
    r, tr = m.const(fc(0.0), np.float32), m.const(True, np.bool_)
    return lambda t: m.op("Dropout", [t, r, tr]), lambda t, P: t


def op_softmax(opset):
    def make(m, rng):
        def ref(t, P):
            if opset < 13:   # coerced to (n, 75)
                return F.softmax(t.reshape(t.shape[0], -1), 1).reshape(t.shape)
            return F.softmax(t, 1)
        return lambda t: m.op("Softmax", [t], axis=1), ref
    return make


def positive(m, t):
    """t*t + 0.5: a positive input for Sqrt, Reciprocal and Pow."""
    return m.op("Add", [m.op("Mul", [t, t]), m.const(fc(0.5), np.float32)])


def op_math(op_type, fn, exponent=None):
    def make(m, rng):
        def build(t):
            ins = [positive(m, t)]
            if exponent is not None:
                ins.append(m.const(fc(exponent), np.float32))
            return m.op(op_type, ins)
        return build, lambda t, P: fn(t * t + 0.5)
    return make


def op_layernorm(axis):
    def make(m, rng):
        shp = SHAPE[axis - 1:] if axis > 0 else SHAPE[axis:]   # axis counts the batch
        g, b = m.param("ln_g", rnd(rng, *shp, scale=0.2, shift=1.0)), m.param("ln_b", rnd(rng, *shp, scale=0.1))
        return (lambda t: m.op("LayerNormalization", [t, g, b], axis=axis, epsilon=1e-5),
                lambda t, P: F.layer_norm(t, shp, P[g], P[b], eps=1e-5))
    return make


def op_layernorm_decomposed(m, rng):
    """What torch.onnx.export writes for nn.LayerNorm below opset 17."""
    g, b = m.param("ln_g", rnd(rng, 5, scale=0.2, shift=1.0)), m.param("ln_b", rnd(rng, 5, scale=0.1))

    def build(t):
        mu = m.op("ReduceMean", [t], axes=[-1])
        d = m.op("Sub", [t, mu])
        var = m.op("ReduceMean", [m.op("Pow", [d, m.const(fc(2.0), np.float32)])], axes=[-1])
        sd = m.op("Sqrt", [m.op("Add", [var, m.const(fc(1e-5), np.float32)])])
        return m.op("Add", [m.op("Mul", [m.op("Div", [d, sd]), g]), b])
    return build, lambda t, P: F.layer_norm(t, (5,), P[g], P[b], eps=1e-5)


def op_gelu_erf(m, rng):
    """Exact GELU as torch writes it: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    def build(t):
        e = m.op("Erf", [m.op("Div", [t, m.const(fc(1.4142135381698608), np.float32)])])
        return m.op("Mul", [m.op("Mul", [t, m.op("Add", [e, m.const(fc(1.0), np.float32)])]),
                            m.const(fc(0.5), np.float32)])
    return build, lambda t, P: F.gelu(t)


def op_gelu_tanh(m, rng):
    """tanh GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with Pow."""
    def build(t):
        x3 = m.op("Pow", [t, m.const(fc(3.0), np.float32)])
        inner = m.op("Add", [t, m.op("Mul", [m.const(fc(0.044715), np.float32), x3])])
        th = m.op("Tanh", [m.op("Mul", [m.const(fc(0.7978845834732056), np.float32), inner])])
        return m.op("Mul", [m.op("Mul", [m.const(fc(0.5), np.float32), t]),
                            m.op("Add", [m.const(fc(1.0), np.float32), th])])
    return build, lambda t, P: F.gelu(t, approximate="tanh")


def op_softmax4d_masked(m, rng):
    """Causal attention probabilities: scores (B, 3, 5, 5), the upper triangle
    filled with -inf by Where (constant mask), softmax over the last axis."""
    mask = m.const(np.triu(np.ones((1, 1, 5, 5), dtype=bool), 1), np.bool_)
    ninf = m.const(fc(-np.inf), np.float32)
    tri = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    return (lambda t: m.op("Softmax", [m.op("Where", [mask, ninf, t])], axis=-1),
            lambda t, P: F.softmax(t.masked_fill(tri, float("-inf")), -1))


def op_where_keep(m, rng):
    """The same with the mask as 'keep' and the fill in the false branch:
    Where(tril, x, -1e4), over a (5, 1) condition that broadcasts."""
    keep = m.const(np.array([[True], [False], [True], [True], [False]]), np.bool_)
    fill = m.const(fc(-1e4), np.float32)
    kt = torch.tensor([[True], [False], [True], [True], [False]])
    return (lambda t: m.op("Softmax", [m.op("Where", [keep, t, fill])], axis=-1),
            lambda t, P: F.softmax(torch.where(kt, t, torch.tensor(-1e4, dtype=t.dtype)), -1))


def op_additive_mask(m, rng):
    """An additive causal mask held in a float initializer with -inf (a buffer)."""
    buf = np.triu(np.full((5, 5), -np.inf, dtype=np.float32), 1)
    name = m.fresh("mask")
    from onnx import numpy_helper
    m.inits.append(numpy_helper.from_array(buf, name))
    tb = torch.tensor(buf, dtype=torch.float64)
    return (lambda t: m.op("Softmax", [m.op("Add", [t, name])], axis=-1),
            lambda t, P: F.softmax(t + tb.to(t.dtype), -1))


def op_matmul4d(m, rng):
    """Batched 4-D products: (B, 3, 5, 5) @ (B, 3, 5, 5)^T, then @ a (5, 4) weight."""
    w = m.param("w", rnd(rng, 5, 4, scale=0.3))

    def build(t):
        s = m.op("MatMul", [t, m.op("Transpose", [m.op("Tanh", [t])], perm=[0, 1, 3, 2])])
        return m.op("MatMul", [s, w])
    return build, lambda t, P: (t @ torch.tanh(t).transpose(-1, -2)) @ P[w]


def op_expand(m, rng):
    p = m.param("p", rnd(rng, 1, 5, 1, scale=0.5))
    shape = m.const([3, 5, 5])
    return (lambda t: m.op("Mul", [t, m.op("Expand", [p, shape])]),
            lambda t, P: t * P[p].expand(3, 5, 5))


def op_gather_const(m, rng):
    """An embedding table read at constant positions (torch's wpe(arange(T)))."""
    table = m.param("table", rnd(rng, 7, 5, scale=0.5))
    pos = m.const([[6, 0, 2, 2, 5]] * 3)
    ix = torch.tensor([[6, 0, 2, 2, 5]] * 3)
    return (lambda t: m.op("Add", [t, m.op("Gather", [table, pos], axis=0)]),
            lambda t, P: t + P[table][ix])


def op_gather_axis(axis, idx):
    """Gather on another axis of data: a select (scalar index, ViT's x[:, 0])
    or a list of indices with repeats (their gradients add)."""
    def make(m, rng):
        ix = m.const(idx)
        ti = torch.tensor(idx)
        sl = (slice(None),) * axis
        return (lambda t: m.op("Sigmoid", [m.op("Gather", [t, ix], axis=axis)]),
                lambda t, P: torch.sigmoid(t[sl + (ti,)]))
    return make


def op_reduce(op_type, fn, axes, keepdims, opset, pre=None):
    """A reduction over `axes` (an attribute below opset 18, input 1 from 18
    for Max/L2, from 13 for Sum)."""
    def make(m, rng):
        as_input = opset >= (13 if op_type == "ReduceSum" else 18)

        def build(t):
            if as_input:
                return m.op(op_type, [t, m.const(axes)], keepdims=keepdims)
            return m.op(op_type, [t], axes=axes, keepdims=keepdims)
        return build, lambda t, P: fn(t)
    return make


def op_tile(m, rng):
    reps = m.const([1, 2, 1, 3])
    return lambda t: m.op("Tile", [t, reps]), lambda t, P: t.repeat(1, 2, 1, 3)


def op_tile_param(m, rng):
    """Tile of a parameter: its gradient sums over the copies."""
    p = m.param("p", rnd(rng, 1, 5, 1, scale=0.5))
    reps = m.const([3, 1, 5])
    return (lambda t: m.op("Mul", [t, m.op("Tile", [p, reps])]),
            lambda t, P: t * P[p].repeat(3, 1, 5))


def op_trilu(upper, k):
    def make(m, rng):
        fn = torch.triu if upper else torch.tril

        def build(t):
            ins = [t] if k is None else [t, m.const(k)]
            return m.op("Trilu", ins, upper=upper)
        return build, lambda t, P: fn(t, 0 if k is None else k)
    return make


def op_einsum_attention(m, rng):
    """Attention as transformers write it with einsum: scores
    'bhqd,bhkd->bhqk', softmax, then 'bhqk,bhkd->bhqd' (both operands data)."""
    def build(t):
        k = m.op("Tanh", [t])
        s = m.op("Softmax", [m.op("Einsum", [t, k], equation="bhqd,bhkd->bhqk")], axis=-1)
        return m.op("Einsum", [s, k], equation="bhqk, bhkd -> bhqd")

    def ref(t, P):
        k = torch.tanh(t)
        s = F.softmax(torch.einsum("bhqd,bhkd->bhqk", t, k), -1)
        return torch.einsum("bhqk,bhkd->bhqd", s, k)
    return build, ref


def op_einsum_weight(m, rng):
    """'bij,jk->bik' against a weight, in the implicit form 'bij,jk'."""
    w, shape = m.param("w", rnd(rng, 5, 4, scale=0.3)), m.const([0, 15, 5])
    return (lambda t: m.op("Einsum", [m.op("Reshape", [t, shape]), w], equation="bij,jk"),
            lambda t, P: torch.einsum("bij,jk->bik", t.reshape(t.shape[0], 15, 5), P[w]))


def op_einsum_outer(m, rng):
    """The outer product 'i,j->ij' of two parameters, added to the data."""
    u, v = m.param("u", rnd(rng, 5, scale=0.5)), m.param("v", rnd(rng, 5, scale=0.5))
    return (lambda t: m.op("Add", [t, m.op("Einsum", [u, v], equation="i,j->ij")]),
            lambda t, P: t + torch.einsum("i,j->ij", P[u], P[v]))


def op_einsum_batched(m, rng):
    """'bij,bjk->bik' with a transposed operand ('bkj' read as 'bjk')."""
    shape = m.const([0, 15, 5])

    def build(t):
        a = m.op("Reshape", [t, shape])
        return m.op("Einsum", [a, m.op("Sigmoid", [a])], equation="bij,bkj->bik")
    return build, lambda t, P: torch.einsum("bij,bkj->bik", t.reshape(t.shape[0], 15, 5),
                                            torch.sigmoid(t.reshape(t.shape[0], 15, 5)))


def op_matmul_vec_right(m, rng):
    """(B, 3, 5, 5) @ (5,): a 1-D second operand drops the last dim."""
    v = m.param("v", rnd(rng, 5, scale=0.5))
    return lambda t: m.op("MatMul", [t, v]), lambda t, P: t @ P[v]


def op_matmul_vec_left(m, rng):
    """(5,) @ (B, 3, 5, 5): a 1-D first operand drops the second-to-last."""
    u = m.param("u", rnd(rng, 5, scale=0.5))
    return lambda t: m.op("MatMul", [u, t]), lambda t, P: P[u] @ t


def op_matmul_bcast_both(m, rng):
    """(B, 3, 1, 5, 5) @ (4, 5, 2): batch dims broadcast on both sides."""
    w, ax = m.param("w", rnd(rng, 4, 5, 2, scale=0.5)), m.const([2])
    return (lambda t: m.op("MatMul", [m.op("Unsqueeze", [t, ax]), w]),
            lambda t, P: t.unsqueeze(2) @ P[w])


def op_matmul_param_left(m, rng):
    """(5, 5) weight @ (B, 3, 5, 5): the first operand broadcast over the batch."""
    w = m.param("w", rnd(rng, 5, 5, scale=0.5))
    return lambda t: m.op("MatMul", [w, t]), lambda t, P: P[w] @ t


def op_matmul_const_left(m, rng):
    """(5, 5) constant @ (B, 3, 5, 5): a constant first operand shared by the
    batch (batch stride 0), as a registered buffer (nanoGPT's `wei @ x`); the
    gradient of the second operand reads it at every batch item."""
    from onnx import numpy_helper
    c = m.op("Constant", [], value=numpy_helper.from_array(rnd(rng, 5, 5, scale=0.5)))
    cval = numpy_helper.to_array(m.nodes[-1].attribute[0].t)
    return lambda t: m.op("MatMul", [c, t]), lambda t, P: torch.tensor(cval, dtype=t.dtype) @ t


def as_ncl(m, t):
    """(B, 3, 5, 5) -> (B, 3, 25): a 1-D signal per channel."""
    return m.op("Reshape", [t, m.const([0, 3, 25])])


def op_conv1d(m, rng):
    w, b = m.param("w", rnd(rng, 4, 3, 3, scale=0.3)), m.param("b", rnd(rng, 4, scale=0.1))
    return (lambda t: m.op("Conv", [as_ncl(m, t), w, b], kernel_shape=[3], pads=[1, 2], strides=[2],
                           dilations=[2]),
            lambda t, P: F.conv1d(F.pad(t.reshape(t.shape[0], 3, 25), (1, 2)), P[w], P[b], stride=2,
                                  dilation=2))


def op_conv1d_group_bn(m, rng):
    w = m.param("w", rnd(rng, 6, 1, 5, scale=0.3))
    g, b = m.param("gamma", rnd(rng, 6, scale=0.2, shift=1.0)), m.param("beta", rnd(rng, 6, scale=0.1))
    mean, var = m.const(np.zeros(6), np.float32), m.const(np.ones(6), np.float32)
    return (lambda t: m.op("BatchNormalization", [m.op("Conv", [as_ncl(m, t), w], group=3,
                                                        auto_pad="SAME_UPPER"), g, b, mean, var]),
            lambda t, P: F.batch_norm(F.conv1d(F.pad(t.reshape(t.shape[0], 3, 25), (2, 2)), P[w],
                                               groups=3), None, None, P[g], P[b], training=True))


def op_pool1d(op_type, fn, **attrs):
    def make(m, rng):
        return (lambda t: m.op(op_type, [as_ncl(m, t)], **attrs),
                lambda t, P: fn(t.reshape(t.shape[0], 3, 25)))
    return make


def op_pad_mode(mode, pads, torch_pad):
    """Reflect/edge padding of H and W (torch's 'reflect' / 'replicate'),
    with a crop (negative pad) on one side in the edge case."""
    def make(m, rng):
        tm = {"reflect": "reflect", "edge": "replicate"}[mode]

        def ref(t, P):
            y = F.pad(t, tuple(max(v, 0) for v in torch_pad), mode=tm)
            crop = [(-v if v < 0 else 0) for v in torch_pad]   # (w0, w1, h0, h1)
            return y[:, :, crop[2]:y.shape[2] - crop[3], crop[0]:y.shape[3] - crop[1]]
        return lambda t: m.op("Pad", [t, m.const(pads)], mode=mode), ref
    return make


def op_gather_elements(axis, shape):
    """GatherElements at constant indices (repeats and negative ones: their
    gradients add); the indices' batch is the test's batch, 3, with the same
    indices for every sample (the loader shuffles the samples of a batch)."""
    def make(m, rng):
        dim = (3,) + SHAPE
        idx = np.repeat(rng.integers(-dim[axis], dim[axis], size=(1,) + shape[1:]), 3, axis=0)
        ix = m.const(idx)
        ti = torch.tensor(idx % dim[axis])
        return (lambda t: m.op("GatherElements", [t, ix], axis=axis),
                lambda t, P: torch.gather(t, axis, ti[:t.shape[0]]))
    return make


def op_hard(build, fn):
    """HardSigmoid/HardSwish over 3x the input: every piece of the function
    (below -3, the middle, above 3) is reached."""
    def make(m, rng):
        three = m.const(fc(3.0), np.float32)
        return lambda t: build(m, m.op("Mul", [t, three])), lambda t, P: fn(t * 3.0)
    return make


OPS = {
    "Conv": (op_conv, 13),
    "Conv_group_dilated": (op_conv_group, 13),
    "BatchNormalization": (op_bn, 13),
    "Relu": (unary("Relu", F.relu), 13),
    "LeakyRelu": (unary("LeakyRelu", lambda t: F.leaky_relu(t, 0.2), alpha=0.2), 13),
    "Sigmoid": (unary("Sigmoid", torch.sigmoid), 13),
    "Tanh": (unary("Tanh", torch.tanh), 13),
    "Clip": (op_clip, 13),
    "MaxPool": (unary("MaxPool", lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True),
                      kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), 13),
    "AveragePool": (unary("AveragePool", lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True,
                                                               count_include_pad=False),
                          kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), 13),
    "GlobalAveragePool": (unary("GlobalAveragePool", lambda t: t.mean((2, 3), keepdim=True)), 13),
    "LRN": (op_lrn, 13),
    "Flatten": (unary("Flatten", lambda t: t.flatten(1), axis=1), 13),
    "Reshape": (op_reshape, 13),
    "Identity": (unary("Identity", lambda t: t), 13),
    "Cast": (unary("Cast", lambda t: t, to=1), 13),
    "Unsqueeze_Squeeze": (op_unsqueeze_squeeze, 13),
    "MatMul": (op_matmul, 13),
    "Add": (binary("Add", lambda t, p: t + p, (3, 1, 5)), 13),
    "Sub": (binary("Sub", lambda t, p: t - p, (5,)), 13),
    "Mul": (binary("Mul", lambda t, p: t * p, (1, 5, 1)), 13),
    "Div": (binary("Div", lambda t, p: t / p, (3, 1, 1), shift=2.0), 13),
    "Div_param_numerator": (op_div_rev, 13),
    "Concat": (op_concat, 13),
    "Split": (op_split, 13),
    "Slice": (op_slice, 13),
    "Transpose": (unary("Transpose", lambda t: t.permute(0, 2, 3, 1), perm=[0, 2, 3, 1]), 13),
    "Pad": (op_pad, 13),
    "Dropout": (op_dropout0, 13),
    "Softmax_13": (op_softmax(13), 13),
    "Softmax_11": (op_softmax(11), 11),
    "ReduceMean": (unary("ReduceMean", lambda t: t.mean((2, 3)), axes=[2, 3], keepdims=0), 13),
    "Sqrt": (op_math("Sqrt", torch.sqrt), 13),
    "Reciprocal": (op_math("Reciprocal", torch.reciprocal), 13),
    "Pow2": (op_math("Pow", lambda t: t ** 2, 2.0), 13),
    "Pow3_5": (op_math("Pow", lambda t: t ** 3.5, 3.5), 13),
    "Erf": (unary("Erf", torch.erf), 13),
    "Neg": (unary("Neg", torch.neg), 13),
    "LayerNormalization_17": (op_layernorm(-1), 17),
    "LayerNormalization_axis1": (op_layernorm(1), 17),
    "LayerNorm_decomposed_13": (op_layernorm_decomposed, 13),
    "GELU_erf": (op_gelu_erf, 13),
    "GELU_tanh": (op_gelu_tanh, 13),
    "Softmax4d_where_mask": (op_softmax4d_masked, 13),
    "Softmax4d_additive_mask": (op_additive_mask, 13),
    "Where_keep_broadcast": (op_where_keep, 13),
    "MatMul4d": (op_matmul4d, 13),
    "Expand": (op_expand, 13),
    "Gather_const": (op_gather_const, 13),
    "Sin": (unary("Sin", torch.sin), 13),
    "Cos": (unary("Cos", torch.cos), 13),
    "Exp": (unary("Exp", torch.exp), 13),
    "Log": (op_math("Log", torch.log), 13),
    "Abs": (unary("Abs", torch.abs), 13),
    "HardSigmoid_default": (unary("HardSigmoid", lambda t: torch.clamp(0.2 * t + 0.5, 0, 1)), 13),
    "HardSigmoid_torch": (op_hard(lambda m, t: m.op("HardSigmoid", [t], alpha=1.0 / 6),
                                  F.hardsigmoid), 13),
    "Gather_axis1_select": (op_gather_axis(1, 0), 13),
    "Gather_axis2_repeats": (op_gather_axis(2, [[4, 0], [4, -1]]), 13),
    "Gather_axis3_last": (op_gather_axis(3, -2), 13),
    "Min": (binary("Min", torch.minimum, (3, 1, 5)), 13),
    "Max": (binary("Max", torch.maximum, (5, 1)), 13),
    "Max_tie": (lambda m, rng: (lambda t: m.op("Max", [t, t]), lambda t, P: torch.maximum(t, t)), 13),
    "ReduceSum_axes_input": (op_reduce("ReduceSum", lambda t: t.sum((1, 3)), [1, 3], 0, 13), 13),
    "ReduceSum_keep": (op_reduce("ReduceSum", lambda t: t.sum(-1, keepdim=True), [-1], 1, 13), 13),
    "ReduceMax": (op_reduce("ReduceMax", lambda t: t.amax((2,)), [2], 0, 13), 13),
    "ReduceMax_18": (op_reduce("ReduceMax", lambda t: t.amax((1, 3), keepdim=True), [1, 3], 1, 18), 18),
    "ReduceL2": (op_reduce("ReduceL2", lambda t: t.norm(dim=(2, 3)), [2, 3], 0, 13), 13),
    "Tile": (op_tile, 13),
    "Tile_param": (op_tile_param, 13),
    "Trilu_upper": (op_trilu(1, None), 14),
    "Trilu_lower_k": (op_trilu(0, -1), 14),
    "Trilu_upper_k2": (op_trilu(1, 2), 14),
    "Einsum_attention": (op_einsum_attention, 13),
    "Einsum_weight_implicit": (op_einsum_weight, 13),
    "Einsum_outer": (op_einsum_outer, 13),
    "Einsum_batched": (op_einsum_batched, 13),
    "MatMul_1d_right": (op_matmul_vec_right, 13),
    "MatMul_1d_left": (op_matmul_vec_left, 13),
    "MatMul_broadcast_both": (op_matmul_bcast_both, 13),
    "MatMul_param_left": (op_matmul_param_left, 13),
    "MatMul_const_left": (op_matmul_const_left, 13),
    "Conv1d": (op_conv1d, 13),
    "Conv1d_group_same_bn": (op_conv1d_group_bn, 13),
    "MaxPool1d": (op_pool1d("MaxPool", lambda t: F.max_pool1d(t, 3, 2, 1, ceil_mode=True),
                            kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1), 13),
    "AveragePool1d": (op_pool1d("AveragePool", lambda t: F.avg_pool1d(t, 4, 3, 2, count_include_pad=True),
                                kernel_shape=[4], strides=[3], pads=[2, 2], count_include_pad=1), 13),
    "GlobalAveragePool1d": (op_pool1d("GlobalAveragePool", lambda t: t.mean(2, keepdim=True)), 13),
    "Pad_reflect": (op_pad_mode("reflect", [0, 0, 2, 4, 0, 0, 3, 1], (4, 1, 2, 3)), 13),
    "Pad_edge": (op_pad_mode("edge", [0, 0, 3, -1, 0, 0, 1, 2], (-1, 2, 3, 1)), 13),
    "GatherElements_axis2": (op_gather_elements(2, (3, 3, 7, 5)), 13),
    "GatherElements_axis_last": (op_gather_elements(-1, (3, 2, 5, 4)), 13),
    "HardSwish": (op_hard(lambda m, t: m.op("HardSwish", [t]), F.hardswish), 14),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_gradient_float64(name, tmp_path):
    make, opset = OPS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    m = Model(opset)
    s = m.param("s", rnd(rng, *SHAPE, scale=0.3, shift=1.0))
    build, fn = make(m, rng)
    y = build(m.op("Mul", ["x", s]))
    with torch.no_grad():
        P0 = {k: torch.tensor(v, dtype=torch.float64) for k, v in m.params.items()}
        n = fn(torch.ones(1, *SHAPE, dtype=torch.float64), P0).numel()
    out, fw, fb = head(m, y, n, 4, rng)

    def ref(x, P):
        return torch_head(fn(x * P[s], P), P, fw, fb)
    res = run_case(tmp_path, m, out, ref, SHAPE, 4, batch=3, seed=5)
    exact = res["ref64"]
    assert abs(res["ours"] - exact) <= LOSS_TOL64 * abs(exact), (res["ours"], exact)
    worst, where = 0.0, ""
    for k, (g, _, g64) in res["grads"].items():
        e = grad_err(g, g64)
        if e > worst:
            worst, where = e, k
        assert e <= GRAD_TOL64, "%s: gradient of %s off by %.3g from float64" % (name, k, e)
    print("%s: loss %.8f vs float64 %.8f; worst gradient error %.3g (%s)"
          % (name, res["ours"], exact, worst, where))
