"""test_limits.py — the compiler's limits: absurd dimensions, sizes that
overflow once the batch multiplies them, deep and wide graphs, cycles and huge
attribute lists give one clear error line (exit 2) or finish in bounded time
and memory (each run here is capped at 2 GiB of address space).

Import-level limits (absurd initializer dims, rank, a cycle through several
nodes, a 50,000-node import) are in test_import.py; this file covers what
only shows up in shape inference, autodiff and planning (`snc plan`).
"""
import resource
import subprocess
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from import_util import SNC

F = TensorProto.FLOAT


def vi(name, shape):
    return helper.make_tensor_value_info(name, F, shape)


def save(path, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def fc(src, dst, k=4, n=4, name="fc"):
    w = numpy_helper.from_array(np.ones((n, k), np.float32), "W" + name)
    return helper.make_node("Gemm", [src, "W" + name], [dst], transB=1, name=name), w


def cap():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def plan(path, batch, timeout=60):
    t0 = time.time()
    r = subprocess.run([str(SNC), "plan", str(path), "--batch", str(batch), "--policy", "liveness"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, preexec_fn=cap)
    return r, time.time() - t0


def error(path, batch=8):
    r, _ = plan(path, batch)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("snc: error: "), \
        (r.returncode, r.stderr[-2000:])
    return lines[0]


def test_batch_times_dims_over_2_48(tmp_path):
    # 2^32 elements per sample are fine alone; a batch of 2^17 makes it 2^49.
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="fl"),
             helper.make_node("Gemm", ["f", "W"], ["y"], transB=1, name="fc")]
    p = save(tmp_path / "m.onnx", nodes, [vi("x", ["N", 1 << 16, 1 << 16]), vi("W", [4, 1 << 32])],
             [vi("y", ["N", 4])])
    assert "absurd size" in error(p, 1 << 17) and "2^48" in error(p, 1 << 17)


def test_absurd_parameter_and_output(tmp_path):
    p = save(tmp_path / "m.onnx", [helper.make_node("Gemm", ["x", "W"], ["y"], transB=1, name="fc")],
             [vi("x", ["N", 4]), vi("W", [1 << 30, 4])], [vi("y", ["N", 1 << 30])])
    assert "absurd size" in error(p, 1 << 19)


def test_reshape_to_absurd_size(tmp_path):
    n, w = fc("x", "t")
    shape = numpy_helper.from_array(np.array([-1, 1 << 30, 1 << 30], np.int64), "shape")
    p = save(tmp_path / "m.onnx", [n, helper.make_node("Reshape", ["t", "shape"], ["y"], name="rs")],
             [vi("x", ["N", 4])], [vi("y", ["N", 4])], [w, shape])
    e = error(p)
    assert "rs" in e


def test_pads_out_of_range(tmp_path):
    pads = numpy_helper.from_array(np.array([0, 0, 1 << 45, 0, 0, 0, 1 << 45, 0], np.int64), "pads")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="c", kernel_shape=[1, 1]),
             helper.make_node("Pad", ["c", "pads"], ["y"], name="p")]
    p = save(tmp_path / "m.onnx", nodes, [vi("x", ["N", 1, 8, 8]), vi("W", [4, 1, 1, 1])],
             [vi("y", ["N", 4, 8, 8])], [pads])
    e = error(p)
    assert "out of range" in e and "node 'p'" in e
    conv = [helper.make_node("Conv", ["x", "W"], ["y"], name="c", kernel_shape=[3, 3],
                             pads=[1 << 40] * 4)]
    p = save(tmp_path / "c.onnx", conv, [vi("x", ["N", 1, 8, 8]), vi("W", [4, 1, 3, 3])],
             [vi("y", ["N", 4, 8, 8])])
    e = error(p)
    assert "pads" in e and "node 'c'" in e


def test_self_loop_is_a_cycle(tmp_path):
    n, w = fc("x", "t")
    nodes = [n, helper.make_node("Add", ["t", "z"], ["z"], name="self"),
             helper.make_node("Relu", ["z"], ["y"], name="r")]
    p = save(tmp_path / "m.onnx", nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])], [w])
    e = error(p)
    assert "cycle" in e and "node 'self'" in e


def test_huge_attribute_lists(tmp_path):
    n, w = fc("t", "y")
    tr = helper.make_node("Transpose", ["x"], ["t"], name="tr", perm=list(range(1000000)))
    p = save(tmp_path / "perm.onnx", [tr, n], [vi("x", ["N", 4])], [vi("y", ["N", 4])], [w])
    assert "1000000 values" in error(p)
    relu = helper.make_node("Relu", ["t"], ["y"], name="r")
    for i in range(5000):
        relu.attribute.append(helper.make_attribute("a%d" % i, i))
    n, w = fc("x", "t")
    p = save(tmp_path / "many.onnx", [n, relu], [vi("x", ["N", 4])], [vi("y", ["N", 4])], [w])
    assert "5000 attributes" in error(p)


def test_deep_chain_plans_in_seconds(tmp_path):
    n = 100000
    head, w = fc("x", "t0")
    nodes = [head] + [helper.make_node("Relu", ["t%d" % i], ["t%d" % (i + 1) if i < n - 1 else "y"],
                                       name="r%d" % i) for i in range(n)]
    p = save(tmp_path / "deep.onnx", nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])], [w])
    r, secs = plan(p, 8, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert secs < 30, secs


@pytest.mark.parametrize("shared", [True, False], ids=["one-input", "fan-out"])
def test_wide_concat_plans_in_seconds(tmp_path, shared):
    # 20,000 inputs to one Concat (the same tensor, or 20,000 readers of one
    # tensor): each adds a gradient piece for the same tensor; naming them
    # once took time quadratic in their number (minutes).
    k = 20000
    head, w = fc("x", "t")
    nodes, ins = [head], []
    for i in range(k):
        if shared:
            ins.append("t")
        else:
            nodes.append(helper.make_node("Relu", ["t"], ["r%d" % i], name="r%d" % i))
            ins.append("r%d" % i)
    nodes.append(helper.make_node("Concat", ins, ["y"], name="cat", axis=1))
    p = save(tmp_path / "wide.onnx", nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4 * k])], [w])
    r, secs = plan(p, 2, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert secs < 20, secs


def test_names_must_be_utf8(tmp_path):
    # Names reach plan.json: a byte that is not UTF-8 would make it invalid
    # JSON. Protobuf's Python API refuses such names, so patch the bytes.
    n, w = fc("x", "t")
    p = save(tmp_path / "m.onnx", [n, helper.make_node("Relu", ["t"], ["y"], name="QQQQ")],
             [vi("x", ["N", 4])], [vi("y", ["N", 4])], [w])
    raw = p.read_bytes()
    assert raw.count(b"QQQQ") == 1
    p.write_bytes(raw.replace(b"QQQQ", b"Q\xfeQQ"))
    e = error(p)
    assert "not valid UTF-8" in e and "Q\\xfeQQ" in e
    e.encode("utf-8")
