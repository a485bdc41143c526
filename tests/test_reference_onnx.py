"""Op edge cases against PyTorch, with models built by onnx.helper.

Each case is an ONNX graph with numpy initializers and a reference written
by hand with torch.nn.functional from ONNX's definition of the op (not from
snc's code): asymmetric and SAME_* conv padding, LRN windows, Gemm's
transposes/alpha/beta/C broadcasts, batched MatMul, Softmax before and after
opset 13, Pad with a value, ceil-mode pools with asymmetric pads and
dilations, uneven Split, negative-step Slice, a weight used through
Transpose, broadcasting Sub/Div both ways, ReduceMean keepdims, Identity,
Clip with only a min, Dropout. One training step: the loss within 1e-5 and
every parameter gradient within 1e-4 (||g - g_ref|| / ||g_ref||) of PyTorch
float32 and of PyTorch float64 (onnx_ref.check: where PyTorch float32 is
itself off float64, the float64 bound is twice its error). Then MSE with float targets, Dropout's mask
consistency, and random compositions of the same ops (seeds the other tests
never use).
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from onnx_ref import Model, check, head, run_case, torch_head  # noqa: E402
from snc_harness import compile_model, load_dump, run  # noqa: E402

F = torch.nn.functional


def rnd(rng, *shape, scale=1.0):
    return rng.standard_normal(shape).astype(np.float32) * scale


def lrn_onnx(t, size, alpha, beta, bias):
    """ONNX LRN: square sum over channels [c - floor((size-1)/2),
    c + ceil((size-1)/2)], divided by size."""
    c = t.shape[1]
    lo = (size - 1) // 2
    sq = F.pad(t * t, (0, 0, 0, 0, lo, size - 1 - lo))
    s = sum(sq[:, i:i + c] for i in range(size))
    return t / (bias + alpha / size * s) ** beta


# ---- cases: each returns (model, output name, torch ref, x shape, classes)

def conv_pads(rng, mode):
    """Conv with explicit asymmetric pads [t, l, b, r] or auto_pad."""
    m = Model()
    w = m.param("w", rnd(rng, 4, 3, 3, 4, scale=0.3))
    b = m.param("b", rnd(rng, 4, scale=0.1))
    if mode == "asym":
        y = m.op("Conv", ["x", w, b], kernel_shape=[3, 4], pads=[1, 0, 2, 1], strides=[2, 1])
        tpad, stride = (0, 1, 1, 2), (2, 1)           # F.pad: (left, right, top, bottom)
    else:
        y = m.op("Conv", ["x", w, b], kernel_shape=[3, 4], auto_pad=mode, strides=[1, 1])
        # SAME: total pad = kernel - 1 per axis (stride 1): H 2, W 3; the odd
        # extra goes at the end (UPPER) or the beginning (LOWER).
        tpad = (1, 2, 1, 1) if mode == "SAME_UPPER" else (2, 1, 1, 1)
        stride = (1, 1)
    y = m.op("Relu", [y])
    shape = (3, 7, 6)
    with torch.no_grad():
        n = F.conv2d(F.pad(torch.zeros(1, *shape), tpad), torch.zeros(4, 3, 3, 4), stride=stride).numel()
    out, fw, fb = head(m, y, n, 5, rng)

    def ref(x, P):
        h = F.relu(F.conv2d(F.pad(x, tpad), P[w], P[b], stride=stride))
        return torch_head(h, P, fw, fb)
    return m, out, ref, shape, 5


def lrn(rng, size):
    m = Model()
    s = m.param("s", rnd(rng, 1, 6, 1, 1) + 1.5)
    y = m.op("Mul", ["x", s])
    y = m.op("LRN", [y], size=size, alpha=0.3, beta=0.75, bias=1.5)
    out, fw, fb = head(m, y, 6 * 3 * 3, 4, rng)

    def ref(x, P):
        return torch_head(lrn_onnx(x * P[s], size, 0.3, 0.75, 1.5), P, fw, fb)
    return m, out, ref, (6, 3, 3), 4


def gemm(rng, trans_a, trans_b, c_shape):
    m = Model()
    k, n, bsz = 6, 5, 2
    a = m.op("Transpose", ["x"], perm=[1, 0]) if trans_a else "x"
    w = m.param("w", rnd(rng, *((n, k) if trans_b else (k, n)), scale=0.4))
    c = m.param("c", rnd(rng, *c_shape))
    out = m.op("Gemm", [a, w, c], transA=trans_a, transB=trans_b, alpha=0.7, beta=1.3)

    def ref(x, P):
        wt = P[w].T if trans_b else P[w]
        return 0.7 * (x @ wt) + 1.3 * P[c]
    return m, out, ref, (k,), n


def matmul(rng, batched_b):
    m = Model()
    w = m.param("w", rnd(rng, *((2, 4, 3) if batched_b else (4, 3)), scale=0.5))
    a = m.op("Reshape", ["x", m.const([2, 5, 4])])
    y = m.op("MatMul", [a, w])                  # (2, 5, 3)
    out, fw, fb = head(m, y, 15, 4, rng)

    def ref(x, P):
        return torch_head(torch.matmul(x.reshape(2, 5, 4), P[w]), P, fw, fb)
    return m, out, ref, (20,), 4


def matmul_data(rng):
    """(b, M, K) x (b, K, N) with both operands computed from data."""
    m = Model()
    s = m.param("s", rnd(rng, 3, 4) + 1.0)
    a = m.op("Mul", ["x", s])                   # (2, 3, 4)
    bt = m.op("Transpose", ["x"], perm=[0, 2, 1])
    y = m.op("MatMul", [a, bt])                 # (2, 3, 3)
    out, fw, fb = head(m, y, 9, 3, rng)

    def ref(x, P):
        return torch_head(torch.bmm(x * P[s], x.transpose(1, 2)), P, fw, fb)
    return m, out, ref, (3, 4), 3


def softmax(rng, opset):
    m = Model(opset)
    s = m.param("s", rnd(rng, 3, 4) + 1.0)
    y = m.op("Softmax", [m.op("Mul", ["x", s])], axis=1)
    out, fw, fb = head(m, y, 12, 4, rng)

    def ref(x, P):
        h = x * P[s]
        if opset < 13:     # coerced to 2-D at axis 1: normalized over 12 values
            h = F.softmax(h.reshape(h.shape[0], -1), dim=1).reshape(h.shape)
        else:
            h = F.softmax(h, dim=1)
        return torch_head(h, P, fw, fb)
    return m, out, ref, (3, 4), 4


def pad_value(rng):
    m = Model()
    s = m.param("s", rnd(rng, 1, 2, 1, 1) + 1.0)
    y = m.op("Pad", [m.op("Mul", ["x", s]), m.const([0, 0, 1, 0, 0, 0, 0, 2]),
                     m.const(np.float32(0.5), np.float32)], mode="constant")
    w = m.param("w", rnd(rng, 3, 2, 2, 2, scale=0.5))
    y = m.op("Conv", [y, w], kernel_shape=[2, 2])
    out, fw, fb = head(m, y, 3 * 4 * 5, 4, rng)

    def ref(x, P):
        h = F.pad(x * P[s], (0, 2, 1, 0), value=0.5)
        return torch_head(F.conv2d(h, P[w]), P, fw, fb)
    return m, out, ref, (2, 4, 4), 4


def avgpool_ceil(rng):
    """count_include_pad=1, ceil_mode, asymmetric pads [t, l, b, r] =
    [0, 1, 1, 0]. ONNX's divisor counts the pads but not the part of a
    ceil-mode window beyond the padded input: as torch's avg_pool2d on the
    explicitly zero-padded input."""
    m = Model()
    s = m.param("s", rnd(rng, 1, 2, 1, 1) + 1.0)
    y = m.op("AveragePool", [m.op("Mul", ["x", s])], kernel_shape=[3, 3], strides=[2, 2],
             pads=[0, 1, 1, 0], ceil_mode=1, count_include_pad=1)
    with torch.no_grad():
        n = F.avg_pool2d(F.pad(torch.zeros(1, 2, 7, 6), (1, 0, 0, 1)), 3, 2, ceil_mode=True).numel()
    out, fw, fb = head(m, y, n, 4, rng)

    def ref(x, P):
        h = F.avg_pool2d(F.pad(x * P[s], (1, 0, 0, 1)), 3, 2, ceil_mode=True, count_include_pad=True)
        return torch_head(h, P, fw, fb)
    return m, out, ref, (2, 7, 6), 4


def maxpool_dilated(rng):
    m = Model()
    s = m.param("s", rnd(rng, 1, 2, 1, 1) + 1.0)
    y = m.op("MaxPool", [m.op("Mul", ["x", s])], kernel_shape=[2, 3], dilations=[2, 2],
             strides=[1, 2], pads=[1, 1, 1, 1])
    with torch.no_grad():
        n = F.max_pool2d(torch.zeros(1, 2, 7, 8), (2, 3), (1, 2), 1, dilation=2).numel()
    out, fw, fb = head(m, y, n, 4, rng)

    def ref(x, P):
        h = F.max_pool2d(x * P[s], (2, 3), (1, 2), 1, dilation=2)
        return torch_head(h, P, fw, fb)
    return m, out, ref, (2, 7, 8), 4


def split_slice(rng):
    """Uneven Split [1, 3, 2] on channels, a Slice with a negative step, Concat."""
    m = Model()
    s = m.param("s", rnd(rng, 1, 6, 1, 1) + 1.0)
    a, b, c = m.op("Split", [m.op("Mul", ["x", s]), m.const([1, 3, 2])], nout=3, axis=1)
    b = m.op("Sigmoid", [b])
    c = m.op("Slice", [c, m.const([-1]), m.const([-100]), m.const([3]), m.const([-2])])
    c = m.op("Tanh", [c])                      # (n, 2, 4, 3): W 6 -> 5, 3, 1
    y = m.op("Concat", [m.op("Flatten", [b]), m.op("Flatten", [c]), m.op("Flatten", [a])], axis=1)
    out, fw, fb = head(m, y, 3 * 24 + 2 * 12 + 24, 5, rng)

    def ref(x, P):
        h = x * P[s]
        ha, hb, hc = h[:, :1], h[:, 1:4], h[:, 4:]
        hc = torch.tanh(hc[..., [5, 3, 1]])
        z = torch.cat([torch.sigmoid(hb).flatten(1), hc.flatten(1), ha.flatten(1)], 1)
        return torch_head(z, P, fw, fb)
    return m, out, ref, (6, 4, 6), 5


def transposed_weight(rng):
    m = Model()
    w = m.param("w", rnd(rng, 5, 8, scale=0.4))          # used as (8, 5) through Transpose
    out = m.op("MatMul", ["x", m.op("Transpose", [w], perm=[1, 0])])

    def ref(x, P):
        return x @ P[w].T
    return m, out, ref, (8,), 5


def broadcast_arith(rng):
    """Sub/Div with the parameter on either side, one broadcast over the batch."""
    m = Model()
    p1 = m.param("p1", rnd(rng, 3, 1, 1))
    p2 = m.param("p2", rnd(rng, 1, 3, 4, 4))            # broadcast over the batch
    p3 = m.param("p3", rnd(rng, 3, 1, 1) + 3.0)
    p4 = m.param("p4", rnd(rng, 4))
    a = m.op("Sub", ["x", p1])
    a = m.op("Sub", [p2, a])
    a = m.op("Div", [a, p3])
    d = m.op("Add", [m.op("Sigmoid", [a]), m.const(np.float32(1.0), np.float32)])
    a = m.op("Div", [p4, d])
    out, fw, fb = head(m, a, 48, 4, rng)

    def ref(x, P):
        h = (P[p2] - (x - P[p1])) / P[p3]
        return torch_head(P[p4] / (torch.sigmoid(h) + 1.0), P, fw, fb)
    return m, out, ref, (3, 4, 4), 4


def reduce_identity_clip(rng):
    m = Model()
    s = m.param("s", rnd(rng, 3, 4, 5) + 1.0)
    h = m.op("Identity", [m.op("Mul", ["x", s])])
    a = m.op("ReduceMean", [h], axes=[2], keepdims=0)           # (n, 3, 4)
    b = m.op("ReduceMean", [h], axes=[-1, 1], keepdims=1)       # (n, 1, 4, 1)
    b = m.op("Clip", [b, m.const(np.float32(-0.2), np.float32)])
    y = m.op("Concat", [m.op("Flatten", [a]), m.op("Flatten", [b])], axis=1)
    out, fw, fb = head(m, y, 19, 4, rng)

    def ref(x, P):
        h = x * P[s]
        z = torch.cat([h.mean(2).flatten(1), torch.clamp(h.mean((1, 3), keepdim=True), min=-0.2)
                       .flatten(1)], 1)
        return torch_head(z, P, fw, fb)
    return m, out, ref, (3, 4, 5), 4


def dropout_zero(rng):
    m = Model()
    w = m.param("w", rnd(rng, 4, 3, 3, 3, scale=0.3))
    y = m.op("Conv", ["x", w], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = m.op("Dropout", [y, m.const(np.float32(0.0), np.float32), m.const(True, np.bool_)])
    out, fw, fb = head(m, y, 4 * 25, 3, rng)

    def ref(x, P):
        return torch_head(F.conv2d(x, P[w], padding=1), P, fw, fb)
    return m, out, ref, (3, 5, 5), 3


CASES = {
    "conv_asym_pads": lambda r: conv_pads(r, "asym"),
    "conv_same_upper": lambda r: conv_pads(r, "SAME_UPPER"),
    "conv_same_lower": lambda r: conv_pads(r, "SAME_LOWER"),
    "lrn_size5": lambda r: lrn(r, 5),
    "lrn_size4": lambda r: lrn(r, 4),
    "gemm_c_n": lambda r: gemm(r, 0, 1, (5,)),
    "gemm_c_1n_transA": lambda r: gemm(r, 1, 0, (1, 5)),
    "gemm_c_m1": lambda r: gemm(r, 0, 0, (2, 1)),
    "gemm_c_mn_both": lambda r: gemm(r, 1, 1, (2, 5)),
    "gemm_c_scalar": lambda r: gemm(r, 0, 1, ()),
    "matmul_bmk_kn": lambda r: matmul(r, False),
    "matmul_bmk_bkn": lambda r: matmul(r, True),
    "matmul_data_data": matmul_data,
    "softmax_opset11": lambda r: softmax(r, 11),
    "softmax_opset13": lambda r: softmax(r, 13),
    "pad_value": pad_value,
    "avgpool_ceil_asym": avgpool_ceil,
    "maxpool_dilated": maxpool_dilated,
    "split_uneven_slice_negstep": split_slice,
    "transposed_weight": transposed_weight,
    "broadcast_sub_div": broadcast_arith,
    "reduce_identity_clip_min": reduce_identity_clip,
    "dropout_ratio0": dropout_zero,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name, tmp_path):
    rng = np.random.default_rng(sum(map(ord, name)))
    m, out, ref, shape, classes = CASES[name](rng)
    # Gemm's C: with cross-entropy, the gradient of a C broadcast over the
    # classes is the sum of softmax - onehot over a row, exactly 0 (rounding
    # noise to compare); MSE gives it a value.
    loss = "mse" if name.startswith("gemm") else "ce"
    res = run_case(tmp_path, m, out, ref, shape, classes, seed=7, loss=loss)
    check(res, name)


def test_lrn_windows_torch_vs_onnx():
    """Our ONNX LRN reference against torch's own: the same for odd sizes;
    for even sizes torch centres the window one channel lower (it pads
    size//2 channels before and (size-1)//2 after; ONNX floor((size-1)/2)
    before and ceil((size-1)/2) after), so the ONNX model is compared with
    lrn_onnx, never with F.local_response_norm."""
    x = torch.randn(2, 7, 3, 3, dtype=torch.float64)
    for size in (1, 3, 5):
        d = (F.local_response_norm(x, size, 0.3, 0.75, 1.5) - lrn_onnx(x, size, 0.3, 0.75, 1.5)).abs().max()
        assert d < 1e-12, (size, d)
    for size in (2, 4):
        d = (F.local_response_norm(x, size, 0.3, 0.75, 1.5) - lrn_onnx(x, size, 0.3, 0.75, 1.5)).abs().max()
        assert d > 1e-3, size
        # The window sums, recovered from y = x / (k + alpha/size * S)^beta:
        # torch's sum at channel c is ONNX's at c - 1.
        def window_sum(y):
            return ((x / y) ** (1 / 0.75) - 1.5) * size / 0.3
        st = window_sum(F.local_response_norm(x, size, 0.3, 0.75, 1.5))
        so = window_sum(lrn_onnx(x, size, 0.3, 0.75, 1.5))
        assert (st[:, 1:] - so[:, :-1]).abs().max() < 1e-9, size


def test_mse_float_targets(tmp_path):
    """--loss mse with float32 targets (npy Y of the output's shape)."""
    rng = np.random.default_rng(11)
    m, out, ref, shape, classes = conv_pads(rng, "asym")
    res = run_case(tmp_path, m, out, ref, shape, classes, loss="mse", seed=3)
    check(res, "mse_conv_asym_pads")


def test_mse_target_shape_mismatch(tmp_path):
    rng = np.random.default_rng(1)
    m, out, ref, shape, classes = transposed_weight(rng)
    m.save(str(tmp_path / "m.onnx"), (2,) + shape, out)
    prog = compile_model(str(tmp_path / "m.onnx"), str(tmp_path / "p"), 2, "--loss", "mse")
    np.save(tmp_path / "x.npy", rnd(rng, 2, *shape))
    np.save(tmp_path / "y.npy", rnd(rng, 2, classes + 1))
    r = run([prog, "--data", "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy"), "--steps", "1"],
            check=False)
    assert r.returncode == 2 and "targets have 6 values each" in r.stderr, r.stderr


@pytest.mark.parametrize("policy", ["none", "superneurons"])
def test_dropout_mask_consistent(tmp_path, policy):
    """Dropout with ratio 0.5 cannot be compared with torch's RNG, so the
    masks are read back from the gradients. logits = W dropout(x * s) + b,
    MSE, batch 2; sample A is nonzero on features [0, 2K/3), sample B on
    [K/3, K), zero elsewhere. Then column k of dW is sum_i dl_i y_ik with
    y = mask * x * s / 0.5: on A's own third it is dl_A or 0 (times a known
    scale), which gives dl_A and A's mask there; likewise B; on the shared
    third a 2-unknown fit gives both masks. Checked: every mask value is 0
    or 1, about half are 1, the two samples' masks differ (a mask that
    ignored the sample would not); the loss and db recomputed from the
    recovered forward masks are the program's (the forward used them); ds,
    which flows through the backward's mask, is what those same masks give
    (forward, recomputation and backward agree). Under superneurons the
    dropout output is recomputed for backward."""
    rng = np.random.default_rng(5)
    k, n, bsz = 300, 3, 2
    m = Model()
    s = m.param("s", rng.uniform(0.5, 1.5, k))
    w = m.param("w", rnd(rng, n, k, scale=0.1))
    b = m.param("b", rnd(rng, n))
    h = m.op("Mul", ["x", s])
    y = m.op("Dropout", [h, m.const(np.float32(0.5), np.float32), m.const(True, np.bool_)])
    out = m.op("Gemm", [y, w, b], transB=1)
    m.save(str(tmp_path / "m.onnx"), (bsz, k), out)
    x = (rng.uniform(0.5, 1.5, (bsz, k)) * rng.choice([-1, 1], (bsz, k))).astype(np.float32)
    third = k // 3
    x[0, 2 * third:] = 0
    x[1, :third] = 0
    t = rnd(rng, bsz, n)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", t)
    prog = compile_model(str(tmp_path / "m.onnx"), str(tmp_path / "p"), bsz, "--loss", "mse",
                         "--policy", policy)
    run([prog, "--data", "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy"), "--steps", "1",
         "--dump-grads", str(tmp_path / "g")])
    G = {p_: load_dump(tmp_path / "g", p_).astype(np.float64) for p_ in (s, w, b)}
    S, W = m.params[s].astype(np.float64), m.params[w].astype(np.float64)
    a = 2.0 * x.astype(np.float64) * S[None, :]          # y = mask * a
    dW = G[w]
    own = [np.arange(0, third), np.arange(2 * third, k)]
    shared = np.arange(third, 2 * third)
    masks = np.full((bsz, k), np.nan)
    dl = np.zeros((bsz, n))
    for i in range(bsz):
        cols = dW[:, own[i]] / a[i, own[i]][None, :]       # dl_i or 0 per column
        norms = np.linalg.norm(cols, axis=0)
        dl[i] = cols[:, norms.argmax()]
        ratio = cols.T @ dl[i] / (dl[i] @ dl[i])
        assert np.allclose(cols, np.outer(dl[i], ratio), rtol=0, atol=1e-5 * np.abs(dl[i]).max()), \
            "a dW column is not a multiple of the sample's dlogits"
        masks[i, own[i]] = ratio
    for c in shared:
        A = np.stack([dl[0] * a[0, c], dl[1] * a[1, c]], axis=1)
        sol, *_ = np.linalg.lstsq(A, dW[:, c], rcond=None)
        assert np.allclose(A @ sol, dW[:, c], rtol=1e-4, atol=1e-7), c
        masks[:, c] = sol
    live = x != 0                                       # where a mask matters
    assert not np.any(np.isnan(masks[live]))
    masks[~live] = 0
    assert np.all(np.abs(masks - np.round(masks)) < 1e-3), "gradient is not a masked, scaled x"
    mask = np.round(masks)
    assert np.all((mask == 0) | (mask == 1))
    for i in range(bsz):
        kept = mask[i, x[i] != 0].mean()
        assert 0.35 < kept < 0.65, kept
    differ = (mask[0, shared] != mask[1, shared]).mean()
    assert 0.25 < differ < 0.75, "the two samples' masks differ at %.0f%% of shared features" % (100 * differ)
    # The forward used these masks: loss, dlogits and db follow from them.
    logits = (mask * a) @ W.T + m.params[b]
    ref_dl = 2.0 * (logits - t) / (bsz * n)
    loss = float(np.load(tmp_path / "g" / "loss.npy").ravel()[0])
    assert abs(loss - float(np.mean((logits - t) ** 2))) <= 1e-5 * loss, loss
    assert np.allclose(dl, ref_dl, rtol=1e-4, atol=1e-7)
    assert np.allclose(G[b], ref_dl.sum(0), rtol=1e-5, atol=1e-7)
    # The backward's mask is the same: ds = sum_i (W^T dl_i) * mask_i * 2 x_i.
    ds = ((ref_dl @ W) * mask * 2.0 * x).sum(0)
    assert np.allclose(G[s], ds, rtol=1e-4, atol=1e-6 * np.abs(ds).max()), \
        "the backward's dropout mask is not the forward's"


# ---- compositions the tests have never seen: random stacks of the op set

def random_model(seed):
    """A random stack over (n, C, H, W): conv (random kernel/stride/dilation/
    groups/asymmetric pads), BN, activations, pools, residual Add/Mul with a
    parameter, two-branch Concat, Pad, Slice; then the Gemm head. Returns the
    case tuple with the torch reference built alongside."""
    rng = np.random.default_rng(seed)
    m = Model()
    steps = []                  # torch closures, in order
    c, h, w = 3, 12, 11
    cur = "x"

    def add(fn):
        steps.append(fn)

    kinds = [str(rng.choice(["conv", "bn", "act", "pool", "residual", "concat", "pad", "slice"]))
             for _ in range(int(rng.integers(5, 8)))]
    kinds[0] = "conv"
    for i, kind in enumerate(kinds):
        if kind == "conv":
            co = int(rng.choice([4, 6, 8]))
            g = int(rng.choice([gg for gg in (1, 2) if c % gg == 0 and co % gg == 0]))
            kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            st, dil = int(rng.integers(1, 3)), int(rng.integers(1, 3))
            pads = [int(v) for v in rng.integers(0, 2, 4)]
            if h + pads[0] + pads[2] < dil * (kh - 1) + 1 or w + pads[1] + pads[3] < dil * (kw - 1) + 1:
                pads = [kh, kw, kh, kw]
            wn = m.param(m.fresh("w"), rnd(rng, co, c // g, kh, kw, scale=1.0 / np.sqrt(c // g * kh * kw)))
            # No bias right before BN: its exact gradient is 0 (noise to compare).
            bn_ = None if i + 1 < len(kinds) and kinds[i + 1] == "bn" else \
                m.param(m.fresh("b"), rnd(rng, co, scale=0.1))
            cur = m.op("Conv", [cur, wn] + ([bn_] if bn_ else []), kernel_shape=[kh, kw],
                       strides=[st, st], dilations=[dil, dil], group=g, pads=pads)
            tp, sd = (pads[1], pads[3], pads[0], pads[2]), (st, dil, g)
            add(lambda t, P, wn=wn, bn_=bn_, tp=tp, sd=sd:
                F.conv2d(F.pad(t, tp), P[wn], P[bn_] if bn_ else None, stride=sd[0], dilation=sd[1],
                         groups=sd[2]))
            h = (h + pads[0] + pads[2] - dil * (kh - 1) - 1) // st + 1
            w = (w + pads[1] + pads[3] - dil * (kw - 1) - 1) // st + 1
            c = co
        elif kind == "bn":
            sc = m.param(m.fresh("gamma"), rnd(rng, c, scale=0.2) + 1.0)
            be = m.param(m.fresh("beta"), rnd(rng, c, scale=0.1))
            mean = m.const(np.zeros(c, np.float32), np.float32)
            var = m.const(np.ones(c, np.float32), np.float32)
            cur = m.op("BatchNormalization", [cur, sc, be, mean, var], epsilon=1e-5, momentum=0.9)
            add(lambda t, P, sc=sc, be=be: F.batch_norm(t, None, None, P[sc], P[be], training=True,
                                                       eps=1e-5))
        elif kind == "act":
            a = str(rng.choice(["Relu", "LeakyRelu", "Sigmoid", "Tanh"]))
            cur = m.op(a, [cur], **({"alpha": 0.2} if a == "LeakyRelu" else {}))
            fn = {"Relu": F.relu, "LeakyRelu": lambda t: F.leaky_relu(t, 0.2),
                  "Sigmoid": torch.sigmoid, "Tanh": torch.tanh}[a]
            add(lambda t, P, fn=fn: fn(t))
        elif kind == "pool" and h >= 3 and w >= 3:
            if rng.random() < 0.5:
                cur = m.op("MaxPool", [cur], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
                add(lambda t, P: F.max_pool2d(t, 2, 2, ceil_mode=True))
                h, w = -(-(h - 2) // 2) + 1, -(-(w - 2) // 2) + 1
            else:
                cip = bool(rng.integers(0, 2))
                cur = m.op("AveragePool", [cur], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                           count_include_pad=int(cip))
                add(lambda t, P, cip=cip: F.avg_pool2d(t, 3, 1, 1, count_include_pad=cip))
        elif kind == "residual":
            p = m.param(m.fresh("scale"), rnd(rng, c, 1, 1, scale=0.3) + 1.0)
            cur = m.op("Add", [cur, m.op("Mul", [m.op("Tanh", [cur]), p])])
            add(lambda t, P, p=p: t + torch.tanh(t) * P[p])
        elif kind == "concat":
            wn = m.param(m.fresh("w1x1"), rnd(rng, 2, c, 1, 1, scale=0.5))
            br = m.op("Conv", [cur, wn], kernel_shape=[1, 1])
            cur = m.op("Concat", [m.op("Sigmoid", [br]), cur], axis=1)
            add(lambda t, P, wn=wn: torch.cat([torch.sigmoid(F.conv2d(t, P[wn])), t], 1))
            c += 2
        elif kind == "pad":
            pr = [int(v) for v in rng.integers(0, 2, 4)]
            cur = m.op("Pad", [cur, m.const([0, 0, pr[0], pr[1], 0, 0, pr[2], pr[3]]),
                               m.const(np.float32(0.25), np.float32)])
            add(lambda t, P, pr=pr: F.pad(t, (pr[1], pr[3], pr[0], pr[2]), value=0.25))
            h, w = h + pr[0] + pr[2], w + pr[1] + pr[3]
        elif kind == "slice" and w >= 3:
            cur = m.op("Slice", [cur, m.const([-1]), m.const([-1000]), m.const([3]), m.const([-2])])
            idx = list(range(w - 1, -1, -2))
            add(lambda t, P, idx=idx: t[..., idx])
            w = len(idx)
    out, fw, fb = head(m, cur, c * h * w, 5, rng)

    def ref(x, P):
        t = x
        for s in steps:
            t = s(t, P)
        return torch_head(t, P, fw, fb)
    return m, out, ref, (3, 12, 11), 5


@pytest.mark.parametrize("seed", [101, 202, 303])
def test_random_composition(seed, tmp_path):
    m, out, ref, shape, classes = random_model(seed)
    res = run_case(tmp_path, m, out, ref, shape, classes, batch=3, seed=seed)
    ops = sorted({n.op_type for n in m.nodes})
    check(res, "random %d (%s)" % (seed, ", ".join(ops)))
