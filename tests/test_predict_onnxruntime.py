"""onnxruntime as a second reference for the forward pass: the Hugging Face
models of tests/test_hf_models.py, exported as a user would, compiled by snc,
and run with the program's --predict (the eval graph, the ONNX file's own
weights) give the logits onnxruntime computes from the same file and the same
inputs (rtol 1e-4, atol 1e-5). onnxruntime runs in build/venv, which
./configure.py --install-test-deps makes.

mobilenet_v3_small's training-mode export would run BatchNorm on the batch's
statistics in onnxruntime, where --predict uses the running ones: it is
exported in eval mode for this check (torch folds each BatchNorm into its
conv), as a user exports a model for inference.
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


MOBILENET_EXPORT = """
import sys
import numpy as np
import torch
import torchvision
torch.manual_seed(0)
m = torchvision.models.mobilenet_v3_small(num_classes=10).eval()
with torch.no_grad():   # running statistics away from 0 and 1, so that they matter
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
x = np.random.default_rng(1).standard_normal((3, 3, 64, 64)).astype(np.float32)
torch.onnx.export(m, torch.from_numpy(x), sys.argv[1], opset_version=17, input_names=["x"],
                  output_names=["logits"], do_constant_folding=False)
np.save(sys.argv[2], x)
"""


def test_predict_equals_onnxruntime_mobilenet_eval_export(tmp_path):
    assert os.path.exists(VENV_PY), \
        "build/venv is missing: run ./configure.py --install-test-deps"
    onnx_path, x = str(tmp_path / "m.onnx"), str(tmp_path / "x.npy")
    r = subprocess.run([VENV_PY, "-c", MOBILENET_EXPORT, onnx_path, x], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    prog = compile_model(onnx_path, str(tmp_path / "prog"), 3)
    got, ref = str(tmp_path / "snc.npy"), str(tmp_path / "ort.npy")
    r = subprocess.run([prog, "--predict", "npy:" + x, "--out", got], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([VENV_PY, "-c", ORT_RUN, onnx_path, x, ref], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    g, o = np.load(got), np.load(ref)
    assert g.shape == o.shape == (3, 10), (g.shape, o.shape)
    print("mobilenet_v3_small (eval export): --predict vs onnxruntime, max |diff| %.3g (max |logit| "
          "%.3g)" % (float(np.max(np.abs(g - o))), float(np.max(np.abs(o)))))
    # its logits are small (torchvision's classifier starts at N(0, 0.01)):
    # the bound is relative to their scale, not an absolute 1e-5
    assert float(np.max(np.abs(o))) > 1e-3
    assert float(np.max(np.abs(g - o))) <= 1e-4 * float(np.max(np.abs(o)))


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
