"""Real models as a user exports them: Hugging Face GPT2LMHeadModel,
BertForMaskedLM, LlamaForCausalLM (grouped-query attention: 4 heads over 2
key/value heads) and ViTForImageClassification, built from their config
classes with small random weights (nothing is downloaded), and torchvision's
mobilenet_v3_small; each exported by torch.onnx.export(...,
training=TrainingMode.TRAINING, do_constant_folding=False) at opsets 14 and
17 (torch 1.13's newest).

For each: snc compiles the file as it is, the program runs one training step,
and the loss and every parameter's gradient are compared with PyTorch's
(tests/hf_export.py computes them in float32 and float64): the loss within
1e-5 of PyTorch float32, every gradient no farther from float64 than
max(1e-4, 3 x PyTorch float32's own error), none missing. Then the same
models exported at batch 2 and compiled at batch 4 (the export batch baked
into shape literals follows --batch), and exported with dynamic_axes. And
20 training steps (SGD, lr 0.05, momentum 0.9, the same batch each step):
every step's loss, as the program prints it (4 decimals), no farther from
PyTorch float64's curve than max(1e-3, 3 x PyTorch float32's own distance
from it): a curve that oscillates (BERT's does, from step 16) amplifies
rounding, PyTorch's own included.

The models run in build/venv, which ./configure.py --install-test-deps makes
(Debian's torch with transformers, onnx and onnxruntime from PyPI, pinned
there); without it these tests fail, naming the command.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from snc_harness import SNC, compile_model, grad_err, load_dump, run  # noqa: E402

VENV_PY = os.path.join(ROOT, "build", "venv", "bin", "python")

# Models snc cannot take yet: while snc refuses one with exactly this
# message the test is an expected failure; any other refusal fails, and once
# it compiles the whole check runs (then the entry goes). Empty: all five in.
PENDING = {}
MODELS = ["gpt2", "bert", "llama", "vit", "mobilenet_v3_small"]


def param(model, *rest):
    return pytest.param(model, *rest, id="-".join([model] + [str(r) for r in rest]))


def export(tmp, model, opset, export_batch, run_batch, dynamic=False):
    assert os.path.exists(VENV_PY), \
        "build/venv is missing: run ./configure.py --install-test-deps (makes it, pip-installs " \
        "transformers, onnx and onnxruntime into it)"
    out = os.path.join(tmp, "m")
    cmd = [VENV_PY, os.path.join(HERE, "hf_export.py"), model, str(opset), str(export_batch),
           str(run_batch), out] + (["--dynamic"] if dynamic else [])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def step_and_check(tmp, model, opset, export_batch, run_batch, dynamic=False):
    d = export(tmp, model, opset, export_batch, run_batch, dynamic)
    if model in PENDING:
        r = subprocess.run([SNC, "inspect", os.path.join(d, "model.onnx"), "--batch",
                            str(run_batch)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=300)
        if r.returncode != 0:
            assert r.returncode == 2 and PENDING[model][1] in r.stderr, r.stderr
            pytest.xfail(PENDING[model][0])
    prog = compile_model(os.path.join(d, "model.onnx"), os.path.join(d, "prog"), run_batch,
                         "--policy", "none")
    dump = os.path.join(d, "grads")
    run([prog, "--data", "npy:%s,%s" % (os.path.join(d, "x.npy"), os.path.join(d, "y.npy")),
         "--steps", "1", "--dump-grads", dump, "--threads", "2"])
    ref = np.load(os.path.join(d, "ref.npz"))
    ours = float(np.load(os.path.join(dump, "loss.npy")).ravel()[0])
    r32 = float(ref["loss32"])
    assert abs(ours - r32) <= 1e-5 * max(1.0, abs(r32)), (ours, r32)
    names = [k[4:] for k in ref.files if k.startswith("g32/")]
    assert names, "no parameter gradients in the reference"
    worst = 0.0
    for name in names:
        g = load_dump(dump, name)
        g32, g64 = ref["g32/" + name], ref["g64/" + name]
        assert g.shape == g32.shape, (name, g.shape, g32.shape)
        e64, t = grad_err(g, g64), grad_err(g32, g64)
        assert e64 <= max(1e-4, 3 * t), \
            "%s: gradient of %s off by %.3g from PyTorch float64 (PyTorch float32: %.3g)" % (
                model, name, e64, t)
        worst = max(worst, e64)
    print("%s opset %d, exported at %d, run at %d%s: loss %.7f vs %.7f; %d gradients, worst "
          "error vs float64 %.3g" % (model, opset, export_batch, run_batch,
                                     " (dynamic_axes)" if dynamic else "", ours, r32, len(names),
                                     worst))


@pytest.mark.parametrize("model", MODELS)
def test_twenty_steps_track_torch(tmp_path, model):
    d = export(str(tmp_path), model, 17, 4, 4)
    prog = compile_model(os.path.join(d, "model.onnx"), os.path.join(d, "prog"), 4,
                         "--policy", "none", "--optimizer", "sgd", "--momentum", "0.9")
    r = subprocess.run([prog, "--data", "npy:%s,%s" % (os.path.join(d, "x.npy"),
                                                      os.path.join(d, "y.npy")),
                        "--steps", "20", "--lr", "0.05", "--log-every", "1", "--threads", "2"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    ours = [float(line.split(" loss ")[1].split()[0]) for line in r.stdout.splitlines()
            if " loss " in line and " step " in line]
    npz = np.load(os.path.join(d, "ref.npz"))
    ref, r64 = npz["curve32"], npz["curve64"]
    assert len(ours) == len(ref) == 20, (len(ours), r.stdout[-500:])
    diff = np.abs(np.array(ours) - r64)
    bound = np.maximum(1e-3, 3 * np.abs(ref - r64))
    print("%s: 20 steps, loss %.4f -> %.4f (PyTorch float32 %.4f -> %.4f); largest distance "
          "from float64 %.1e (PyTorch float32's %.1e)" % (
              model, ours[0], ours[-1], ref[0], ref[-1], diff.max(), np.abs(ref - r64).max()))
    assert r64[-1] < r64[0] - 0.05, "the reference did not train: %s" % r64
    assert (diff <= bound).all(), list(zip(ours, ref.tolist(), r64.tolist()))


@pytest.mark.parametrize("model,opset", [param(m, o) for m in MODELS for o in (14, 17)])
def test_one_step_matches_torch(tmp_path, model, opset):
    step_and_check(str(tmp_path), model, opset, 2, 2)


@pytest.mark.parametrize("model", [param(m) for m in MODELS])
def test_exported_at_2_compiled_at_4(tmp_path, model):
    step_and_check(str(tmp_path), model, 17, 2, 4)


@pytest.mark.parametrize("model", [param(m) for m in ["gpt2", "llama"]])
def test_dynamic_axes(tmp_path, model):
    step_and_check(str(tmp_path), model, 17, 2, 3, dynamic=True)


def test_inspect_says_the_batch_follows(tmp_path):
    """snc inspect tells which shape literals held the export batch."""
    d = export(str(tmp_path), "gpt2", 17, 2, 4)
    r = run([SNC, "inspect", os.path.join(d, "model.onnx"), "--batch", "4"])
    assert "held the export batch 2; they follow --batch 4" in r.stdout, r.stdout
