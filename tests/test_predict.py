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
