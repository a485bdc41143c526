"""The CPU-side parts of tests/gpu/run.sh (which needs a GPU to run):

- the script parses (bash -n; shellcheck where installed) and, without a GPU,
  stops at once with a clear message and exit code 2;
- torchref.py's comparison passes equal gradients and fails a perturbed one,
  a missing one, a NaN;
- torchref.py's export and reference gradients work (on the CPU), and the
  ONNX initializers carry the parameter names the gradient files use.
"""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "tests", "gpu", "run.sh")
REF = os.path.join(ROOT, "tests", "gpu", "torchref.py")
PY = "/usr/bin/python3"


def test_script_parses():
    r = subprocess.run(["bash", "-n", RUN], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, r.stdout
    if shutil.which("shellcheck"):
        r = subprocess.run(["shellcheck", "-S", "warning", RUN], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU is here: run.sh would run")
def test_script_without_gpu(tmp_path):
    r = subprocess.run(["bash", RUN], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, OUT=str(tmp_path)), timeout=60)
    assert r.returncode == 2, r.stdout
    assert "no GPU found" in r.stdout


def compare(ref, got):
    return subprocess.run([PY, REF, "compare", str(ref), str(got), "1e-3"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_compare(tmp_path):
    np = pytest.importorskip("numpy")
    ref, got = tmp_path / "ref", tmp_path / "got"
    ref.mkdir()
    got.mkdir()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    np.save(ref / "w.npy", a)
    np.save(ref / "loss.npy", np.array([2.5], dtype=np.float32))
    np.save(got / "w.npy", a * (1 + 1e-5))
    np.save(got / "loss.npy", np.array([2.5], dtype=np.float32))
    r = compare(ref, got)
    assert r.returncode == 0, r.stdout
    assert '"tensors": 2' in r.stdout
    b = a.copy()
    b[0, 0] += 0.01 * np.abs(a).max()  # 1e-2 relative: over the bound
    np.save(got / "w.npy", b)
    r = compare(ref, got)
    assert r.returncode == 1 and '"worst_tensor": "w"' in r.stdout, r.stdout
    b[0, 0] = np.nan
    np.save(got / "w.npy", b)
    assert compare(ref, got).returncode == 1
    os.remove(got / "w.npy")
    r = compare(ref, got)
    assert r.returncode == 1 and "w.npy" in r.stdout, r.stdout


def test_export_and_reference_on_cpu(tmp_path):
    pytest.importorskip("torchvision")
    onnx = pytest.importorskip("onnx")
    d = tmp_path / "m"
    r = subprocess.run([PY, REF, "export", "resnet18", "32", "2", str(d)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    r = subprocess.run([PY, REF, "grads", str(d), "cpu"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    grads = {f[:-4] for f in os.listdir(d / "ref")}
    inits = {i.name for i in onnx.load(str(d / "model.onnx")).graph.initializer}
    params = grads - {"loss"}
    assert "conv1.weight" in params and "fc.bias" in params
    # Every gradient file names an ONNX initializer: the program's
    # --dump-grads files will have the same names.
    assert params <= inits, sorted(params - inits)
    # A reference compared with itself passes.
    assert compare(d / "ref", d / "ref").returncode == 0
