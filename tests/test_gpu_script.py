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


def same_losses(a, b, n):
    return subprocess.run([PY, REF, "same-losses", str(a), str(b), str(n)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_graph_replay_check_on_cpu(tmp_path):
    """run.sh's CUDA-graph check, its CPU-side parts: the same program and
    flags (on the CPU target, where SNRT_CUDA_GRAPH changes nothing), one run
    of --steps k per k, two series compared exactly by torchref.py
    same-losses; a changed loss (last digit) or a missing run fails it."""
    import json
    text = open(RUN).read()
    assert 'SNRT_DETERMINISTIC=1 SNRT_CUDA_GRAPH=$mode run' in text
    assert 'torchref.py same-losses "$G/g0" "$G/g1" 5' in text
    prog = tmp_path / "prog"
    r = subprocess.run([os.path.join(ROOT, "build", "snc"), "compile",
                        os.path.join(ROOT, "examples", "fashion_cnn.onnx"), "-o", str(prog),
                        "--batch", "8", "--optimizer", "adam", "--policy", "superneurons"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    r = subprocess.run(["ninja", "-C", str(prog)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, r.stdout
    n = 3
    for mode in (0, 1):
        d = tmp_path / ("g%d" % mode)
        d.mkdir()
        for k in range(1, n + 1):
            env = dict(os.environ, SNRT_DETERMINISTIC="1", SNRT_CUDA_GRAPH=str(mode))
            subprocess.run([str(prog / "train"), "--data", "synthetic", "--steps", str(k),
                            "--threads", "1", "--metrics", str(d / ("m%d.json" % k))],
                           env=env, stdout=subprocess.DEVNULL, check=True, timeout=120)
    r = same_losses(tmp_path / "g0", tmp_path / "g1", n)
    assert r.returncode == 0, r.stdout
    losses = json.loads(r.stdout)["a"]
    assert len(set(losses)) == n, losses  # training moves the loss at every step
    m = json.load(open(tmp_path / "g1" / "m2.json"))
    m["train_loss"] = float(m["train_loss"]) * (1 + 2 ** -22)  # about one float32 ulp
    json.dump(m, open(tmp_path / "g1" / "m2.json", "w"))
    assert same_losses(tmp_path / "g0", tmp_path / "g1", n).returncode == 1
    os.remove(tmp_path / "g1" / "m2.json")
    assert same_losses(tmp_path / "g0", tmp_path / "g1", n).returncode == 1
    assert same_losses(tmp_path / "g0", tmp_path / "g0", n + 1).returncode == 1


def test_bf16_rows_on_cpu(tmp_path):
    """run.sh's 16-bit rows, their CPU-side parts: the script runs the bf16
    gradient check (norm-relative, bound 2^-5, and over 1e-3 from fp32), the
    fp16 graph check and the bf16/fp16 benchmark rows; torchref.py exports
    smooth_cnn, writes its autocast (bf16) and fp32 reference gradients (here
    on the CPU: torch.autocast('cpu')), and its norm comparison tells them
    apart: the two references differ by more than 1e-3 and less than 2^-5
    (bf16's rounding, as tests/test_precision.py measures it), and each
    passes against itself."""
    pytest.importorskip("torch")
    import json
    text = open(RUN).read()
    assert 'torchref.py grads "$B16" cuda bf16' in text
    assert 'torchref.py compare "$B16/ref" "$B16/got" 0.03125 norm' in text
    assert 'for pr in bf16 fp16; do' in text and "SNRT_LOSS_SCALE=16777216" in text
    d = tmp_path / "s"
    r = subprocess.run([PY, REF, "export", "smooth_cnn", "16", "8", str(d)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    for pr in ("fp32", "bf16"):
        r = subprocess.run([PY, REF, "grads", str(d), "cpu", pr], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        assert r.returncode == 0, r.stdout
        os.rename(d / "ref", d / ("ref_" + pr))

    def cmp(a, b, tol):
        r = subprocess.run([PY, REF, "compare", str(a), str(b), str(tol), "norm"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return r.returncode, json.loads(r.stdout)["worst"]

    assert cmp(d / "ref_bf16", d / "ref_bf16", 1e-12) == (0, 0.0)
    rc, worst = cmp(d / "ref_fp32", d / "ref_bf16", 1e-3)
    assert rc == 1 and 1e-3 < worst, worst
    rc, worst = cmp(d / "ref_fp32", d / "ref_bf16", 2 ** -5)
    assert rc == 0, worst
    # The snc program's gradient files carry these names.
    onnx = pytest.importorskip("onnx")
    inits = {i.name for i in onnx.load(str(d / "model.onnx")).graph.initializer}
    assert {f[:-4] for f in os.listdir(d / "ref_bf16")} - {"loss"} <= inits
    # The whole row on the CPU target: snc's bf16 step against CPU autocast.
    prog = tmp_path / "prog"
    r = subprocess.run([os.path.join(ROOT, "build", "snc"), "compile", str(d / "model.onnx"), "-o",
                        str(prog), "--batch", "8", "--lr", "0", "--precision", "bf16"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    r = subprocess.run(["ninja", "-C", str(prog)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, r.stdout
    subprocess.run([str(prog / "train"), "--data", "npy:%s,%s" % (d / "x.npy", d / "y.npy"),
                    "--steps", "1", "--lr", "0", "--dump-grads", str(d / "got")],
                   stdout=subprocess.DEVNULL, check=True, timeout=300)
    rc, worst = cmp(d / "ref_bf16", d / "got", 2 ** -5)
    print("smooth_cnn bf16 on the CPU target vs CPU autocast: %.3g (bound 2^-5)" % worst)
    assert rc == 0, worst
    rc, worst32 = cmp(d / "ref_fp32", d / "got", 1e-3)
    assert rc == 1, worst32
