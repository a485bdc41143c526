"""onnxruntime as a second reference for the forward pass: the Hugging Face
models of tests/test_hf_models.py, exported as a user would, compiled by snc,
and run with the program's --predict (the eval graph, the ONNX file's own
weights) give the logits onnxruntime computes from the same file and the same
inputs (rtol 1e-4, atol 1e-5). onnxruntime runs in build/venv, which
./configure.py --install-test-deps makes.

mobilenet_v3_small is not here: its training-mode export runs BatchNorm on
the batch's statistics in onnxruntime, where --predict uses the running ones.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from snc_harness import compile_model  # noqa: E402

VENV_PY = os.path.join(ROOT, "build", "venv", "bin", "python")

ORT_RUN = """
import sys
import numpy as np
import onnxruntime as ort
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
x = np.load(sys.argv[2])
name = s.get_inputs()[0].name
np.save(sys.argv[3], s.run(None, {name: x})[0].astype(np.float32))
"""


@pytest.mark.parametrize("model", ["gpt2", "bert", "llama", "vit"])
def test_predict_equals_onnxruntime(tmp_path, model):
    assert os.path.exists(VENV_PY), \
        "build/venv is missing: run ./configure.py --install-test-deps"
    d = str(tmp_path / "m")
    r = subprocess.run([VENV_PY, os.path.join(HERE, "hf_export.py"), model, "17", "2", "2", d],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    onnx_path, x = os.path.join(d, "model.onnx"), os.path.join(d, "x.npy")
    prog = compile_model(onnx_path, os.path.join(d, "prog"), 2)
    got = str(tmp_path / "snc.npy")
    r = subprocess.run([prog, "--predict", "npy:" + x, "--out", got], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    ref = str(tmp_path / "ort.npy")
    r = subprocess.run([VENV_PY, "-c", ORT_RUN, onnx_path, x, ref], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    g, o = np.load(got), np.load(ref)
    assert g.shape == o.shape, (g.shape, o.shape)
    err = float(np.max(np.abs(g - o)))
    print("%s: --predict vs onnxruntime, logits %s, max |diff| %.3g (max |logit| %.3g)"
          % (model, g.shape, err, float(np.max(np.abs(o)))))
    np.testing.assert_allclose(g, o, rtol=1e-4, atol=1e-5)
