"""--predict: the emitted program's forward-only mode (runtime/common/predict.c).

The shipped Fashion-MNIST CNN is trained for a few steps (BatchNorm's
running statistics move, the weights change), saved and exported; then
`--predict npy:X.npy --resume CKPT --out Y.npy` over 19 samples (batches of
8, 8 and a padded 3) must equal the exported model run by a second
evaluator on the same file, element by element (rtol 1e-4, atol 1e-5):
onnxruntime when it is installed, else tests/onnx_torch.py (PyTorch, with
inference semantics). Also: --out as a directory (OUTPUT_NAME.npy), inputs
of the wrong shape, a missing file and --out without --predict each end with
one line and their exit code.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
onnx = pytest.importorskip("onnx")
from snc_harness import ROOT, compile_model  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


def reference(model_path, x):
    try:
        import onnxruntime as ort
    except ImportError:
        pytest.importorskip("torch")
        import onnx_torch
        return onnx_torch.run(onnx.load(str(model_path)), x), "onnx_torch (PyTorch)"
    s = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0], "onnxruntime"


def prog_run(exe, *args):
    return subprocess.run([str(exe)] + [str(a) for a in args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=300)


@pytest.fixture(scope="module")
def fc(tmp_path_factory):
    d = tmp_path_factory.mktemp("predict")
    exe = compile_model(os.path.join(ROOT, "examples", "fashion_cnn.onnx"), str(d / "fc"), 8)
    r = prog_run(exe, "--steps", 5, "--lr", 0.01, "--save", d / "ck", "--export-onnx", d / "e.onnx")
    assert r.returncode == 0, r.stderr
    x = np.random.default_rng(3).random((19, 1, 28, 28)).astype(np.float32)
    np.save(d / "x.npy", x)
    return {"dir": d, "exe": exe, "x": x}


def test_predict_equals_a_second_evaluator(fc):
    d, exe, x = fc["dir"], fc["exe"], fc["x"]
    r = prog_run(exe, "--predict", "npy:%s" % (d / "x.npy"), "--resume", d / "ck", "--out", d / "y.npy")
    assert r.returncode == 0, r.stderr
    y = np.load(d / "y.npy")
    ref, who = reference(d / "e.onnx", x)
    assert y.shape == ref.shape == (19, 10)
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
    # The trained weights were used: the initial ones give other outputs.
    r = prog_run(exe, "--predict", "npy:%s" % (d / "x.npy"), "--out", d / "y0.npy")
    assert r.returncode == 0, r.stderr
    assert np.abs(np.load(d / "y0.npy") - y).max() > 1e-3
    print("predict vs %s: max abs diff %.3g" % (who, np.abs(y - ref).max()))


def test_predict_out_directory_and_errors(fc):
    d, exe = fc["dir"], fc["exe"]
    r = prog_run(exe, "--predict", "npy:%s" % (d / "x.npy"), "--resume", d / "ck", "--out", d / "outs")
    assert r.returncode == 0, r.stderr
    assert os.listdir(d / "outs") == ["logits.npy"]
    np.testing.assert_array_equal(np.load(d / "outs" / "logits.npy"), np.load(d / "y.npy"))

    def one_error(r, code):
        lines = r.stderr.strip().splitlines()
        assert r.returncode == code and len(lines) == 1 and "error" in lines[0], (r.returncode, r.stderr)
        return lines[0]

    np.save(d / "bad.npy", np.zeros((3, 1, 27, 28), np.float32))
    line = one_error(prog_run(exe, "--predict", "npy:%s" % (d / "bad.npy"), "--out", d / "b.npy"), 2)
    assert "27x28" in line and "28x28" in line, line
    line = one_error(prog_run(exe, "--predict", "npy:%s" % (d / "none.npy"), "--out", d / "b.npy"), 2)
    assert "none.npy" in line
    one_error(prog_run(exe, "--out", d / "b.npy"), 1)
    one_error(prog_run(exe, "--predict", "npy:%s" % (d / "x.npy")), 1)
    assert not os.path.exists(d / "b.npy")


def test_predict_writes_every_graph_output(tmp_path):
    """A model with three graph outputs (the logits first, which training
    uses; a hidden activation; a Sigmoid head off it), compiled with
    --all-outputs: --predict writes each as DIR/NAME.npy, equal to numpy's
    forward on the program's weights (--dump-params after a step of
    training). Without the flag the head that training does not need is
    dropped at import, as before, and --predict writes the outputs kept."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)
    w1 = rng.standard_normal((6, 5)).astype(np.float32)
    w2 = rng.standard_normal((5, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["hidden/relu"]),
             helper.make_node("MatMul", ["hidden/relu", "w2"], ["logits"]),
             helper.make_node("Sigmoid", ["hidden/relu"], ["gate"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                           for n in ("logits", "hidden/relu", "gate")],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    exe = compile_model(str(path), str(tmp_path / "p"), 4, "--all-outputs")
    r = prog_run(exe, "--steps", 1, "--lr", 0.1, "--save", tmp_path / "ck", "--dump-params", tmp_path / "pp")
    assert r.returncode == 0, r.stderr
    x = rng.standard_normal((7, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = prog_run(exe, "--predict", "npy:%s" % (tmp_path / "x.npy"), "--resume", tmp_path / "ck",
                 "--out", tmp_path / "o")
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "o")) == ["gate.npy", "hidden_relu.npy", "logits.npy"]
    W1, W2 = np.load(tmp_path / "pp" / "w1.npy"), np.load(tmp_path / "pp" / "w2.npy")
    assert np.abs(W2 - w2).max() > 1e-4   # trained
    h = np.maximum(x.astype(np.float64) @ W1, 0)
    ref = {"hidden_relu": h, "logits": h @ W2, "gate": 1 / (1 + np.exp(-h))}
    for k, v in ref.items():
        np.testing.assert_allclose(np.load(tmp_path / "o" / (k + ".npy")), v, rtol=RTOL, atol=ATOL)
    exe = compile_model(str(path), str(tmp_path / "p1"), 4)
    r = prog_run(exe, "--predict", "npy:%s" % (tmp_path / "x.npy"), "--out", tmp_path / "o1")
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "o1")) == ["hidden_relu.npy", "logits.npy"]   # no gate


def test_predict_without_parameters_and_whole_outputs(tmp_path):
    """A model with nothing to train (MaxPool, then a Transpose that puts the
    channels first: no batch rows) compiles with a note; the program refuses
    to train (exit 1, one line) and --predict writes the output whole, with
    its own shape, when the input is exactly one batch, equal to numpy's
    forward; with any other sample count it refuses (exit 2, one line)."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Transpose", ["p"], ["y"], perm=[1, 0, 2, 3])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                    [3, 2, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "pool.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    r = subprocess.run([os.path.join(ROOT, "build", "snc"), "compile", str(path), "-o",
                        str(tmp_path / "p"), "--batch", "3", "--loss", "mse"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    assert "depends on no trainable parameter" in r.stderr
    exe = compile_model(str(path), str(tmp_path / "p"), 3, "--loss", "mse")
    r = prog_run(exe, "--steps", 1)
    assert r.returncode == 1 and "no trainable parameter" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    x = np.random.default_rng(5).standard_normal((3, 2, 4, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = prog_run(exe, "--predict", "npy:%s" % (tmp_path / "x.npy"), "--out", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    ref = x.reshape(3, 2, 2, 2, 2, 2).max(axis=(3, 5)).transpose(1, 0, 2, 3)
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (2, 3, 2, 2)
    np.testing.assert_array_equal(y, ref)
    np.save(tmp_path / "x4.npy", np.concatenate([x, x[:1]]))
    r = prog_run(exe, "--predict", "npy:%s" % (tmp_path / "x4.npy"), "--out", tmp_path / "y4.npy")
    assert r.returncode == 2 and "exactly one batch" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "y4.npy")
