"""The GPU bundle (tests/gpu/bundle.sh builds it here; its run-gpu.sh runs
on a machine with a GPU), rehearsed on the CPU:

- the rehearsal: the bundle built at a small size from this checkout; packed
  (what travels) it stays under 56 MiB and holds every file, every binary's libraries resolve with LD_LIBRARY_PATH
  set to the bundle's lib/ and the CUDA library folder only (what the bundle
  must carry, it carries), every CUDA plan in it passes tests/plan_check.py,
  run-gpu.sh parses, walks every step with DRY=1, and without a GPU stops at
  once with exit code 2;
- the gradient check's logic end to end on the CPU target: a stripped export,
  the program's own initial values handed to PyTorch by --dump-params, the
  same gradients;
- torchref.py's comparison passes equal gradients and fails a perturbed one,
  a missing one, a NaN;
- the CUDA-graph and 16-bit checks' CPU-side parts.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "tests", "gpu", "run-gpu.sh")
BUNDLE_SH = os.path.join(ROOT, "tests", "gpu", "bundle.sh")
REF = os.path.join(ROOT, "tests", "gpu", "torchref.py")
PY = "/usr/bin/python3"


@pytest.mark.parametrize("script", ["run-gpu.sh", "bundle.sh", "run.sh"])
def test_scripts_parse(script):
    path = os.path.join(ROOT, "tests", "gpu", script)
    r = subprocess.run(["bash", "-n", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, r.stdout
    if shutil.which("shellcheck"):
        r = subprocess.run(["shellcheck", "-S", "warning", path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout


# Every step of run-gpu.sh, as its dry run names them: [NAME, TIMEOUTs] CMD.
STEPS = ["grad-resnet18-run", "grad-resnet18-torch", "graph-g0-s1", "graph-g1-s5", "bf16-run",
         "bf16-torch32", "bf16-torch", "fp16-g0-s1", "fp16-g1-s5", "bench-torch", "bench-fp32",
         "bench-bf16", "bench-fp16", "sweep-100", "sweep-50", "calibrate", "bench-torch-bf16",
         "safe-none", "poison-safe-superneurons", "poison-safe-auto", "san-memcheck-safe-offload",
         "san-racecheck-safe-superneurons", "san-initcheck-safe-superneurons", "bench-torch-compile",
         "prof-fp32", "prof-bf16", "gpt-bf16", "gpt-live", "gpt-torch-autocast", "maxb-auto",
         "maxb-superneurons", "grad-resnet18-torch32", "mut-all"]
MIB = 1 << 20


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    if not os.path.exists("/usr/local/cuda/bin/nvcc") and not shutil.which("nvcc"):
        pytest.skip("no CUDA toolkit here: the bundle's programs cannot be built")
    pytest.importorskip("torchvision")
    out = tmp_path_factory.mktemp("bundle") / "b"
    r = subprocess.run(["bash", BUNDLE_SH, str(out)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=900,
                       env=dict(os.environ, SMALL="1"))
    assert r.returncode == 0, r.stdout
    return out


def test_bundle_is_small_and_listed(bundle):
    files = [os.path.join(d, f) for d, _, fs in os.walk(bundle) for f in fs]
    packed = str(bundle) + ".tar.xz"   # what travels: the folder, packed
    assert os.path.getsize(packed) < 56 * MIB, os.path.getsize(packed)
    import tarfile
    with tarfile.open(packed) as t:
        inside = {m.name for m in t.getmembers() if m.isfile()}
    assert inside == {os.path.join("b", os.path.relpath(f, bundle)) for f in files}
    manifest = open(bundle / "MANIFEST.txt").read().split("\n")
    listed = {line.split()[2] for line in manifest if line.strip()}
    on_disk = {"./" + os.path.relpath(f, bundle) for f in files} - {"./MANIFEST.txt"}
    assert listed == on_disk
    kinds = {line.split()[0] for line in manifest if line.strip()}
    assert kinds == {"program", "library", "input", "plan", "script"}, kinds
    # No sources, objects or build files travel: the device builds nothing.
    assert not [f for f in files if f.endswith((".c", ".o", ".ninja"))]


def test_bundle_libraries_resolve(bundle):
    """With LD_LIBRARY_PATH = the bundle's lib/ and the CUDA folder only,
    every library a binary needs is found, and the ones no GPU image has
    (libprotobuf-c) come from the bundle."""
    lib = str(bundle / "lib")
    env = dict(os.environ, LD_LIBRARY_PATH=lib + ":/usr/local/cuda/lib64")
    bins = [bundle / "bin" / "snc", bundle / "bin" / "snc-calibrate-cuda"]
    bins += sorted((bundle / "progs").glob("*/train"))
    assert len(bins) >= 9
    for b in bins:
        r = subprocess.run(["ldd", str(b)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=env)
        assert r.returncode == 0 and "not found" not in r.stdout, (b, r.stdout)
        for line in r.stdout.splitlines():
            if "libprotobuf-c" in line:
                assert lib in line, (b, line)
        if b.name == "train":
            assert "libcudnn.so" in r.stdout and "libcublas.so" in r.stdout, r.stdout
    # Nothing CUDA travels: the device's driver and pip packages bring it.
    assert not [f for f in os.listdir(lib) if f.startswith(("libcud", "libcublas", "libnccl"))]


def test_bundle_plans_pass_the_checker(bundle):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import plan_check
    plans = sorted((bundle / "progs").glob("*/plan.json"))
    assert len(plans) >= 9
    lent = 0
    for p in plans:
        doc = json.load(open(p))
        assert doc["workspace_cap_bytes"] > 0, p     # a cuda plan
        plan_check.check_plan(doc)
        lent += sum(1 for i in doc["instances"] if i.get("lent_bytes"))
    assert lent > 0     # conv workspaces were lent holes, and the checker saw them


def test_run_gpu_dry_run_walks_every_step(bundle, tmp_path):
    r = subprocess.run(["bash", str(bundle / "run-gpu.sh")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120,
                       env=dict(os.environ, DRY="1", OUT=str(tmp_path), PYTHON=PY))
    assert r.returncode == 0, r.stdout
    names = [line[1:].split(",")[0] for line in r.stdout.splitlines() if line.startswith("[")]
    assert [s for s in STEPS if s not in names] == [], r.stdout
    # Each program command names a program of the bundle, with its libraries.
    for line in r.stdout.splitlines():
        if "/progs/" in line:
            prog = line.split("/progs/")[1].split()[0]
            assert (bundle / "progs" / prog).exists(), line
            assert "LD_LIBRARY_PATH=%s/lib" % bundle in line, line


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU is here: it would run")
def test_run_gpu_without_gpu(bundle, tmp_path):
    r = subprocess.run(["bash", str(bundle / "run-gpu.sh")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=dict(os.environ, OUT=str(tmp_path)),
                       timeout=60)
    assert r.returncode == 2, r.stdout
    assert "no GPU found" in r.stdout


def stripped_step(tmp_path, model, res, batch):
    """run-gpu.sh's gradient flow on the CPU target: a stripped export to
    tmp_path/m, compiled and built, one step at lr 0 with the gradients in
    tmp_path/got and the program's own initial values in tmp_path/p0."""
    d = tmp_path / "m"
    r = subprocess.run([PY, REF, "export", model, str(res), str(batch), str(d), "--strip"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    prog = tmp_path / "prog"
    subprocess.run([os.path.join(ROOT, "build", "snc"), "compile", str(d / "model.onnx"), "-o",
                    str(prog), "--batch", str(batch), "--lr", "0"], stdout=subprocess.DEVNULL,
                   check=True)
    subprocess.run(["ninja", "-C", str(prog)], stdout=subprocess.DEVNULL, check=True)
    subprocess.run([str(prog / "train"), "--data", "npy:%s,%s" % (d / "x.npy", d / "y.npy"),
                    "--steps", "1", "--lr", "0", "--dump-grads", str(tmp_path / "got"),
                    "--dump-params", str(tmp_path / "p0")],
                   stdout=subprocess.DEVNULL, check=True, timeout=300)
    return d


def test_stripped_gradient_check_on_cpu(tmp_path):
    """run-gpu.sh's gradient check on the CPU target: a stripped export (no
    weights in the file), the program's own initial values read back by
    PyTorch from --dump-params, one step each: the same gradients (1e-3);
    and a reference from other weights does not pass."""
    pytest.importorskip("torchvision")
    d = stripped_step(tmp_path, "resnet18", 64, 4)
    assert os.path.getsize(d / "model.onnx") < 100000   # the weights are not in it
    assert not (d / "state.pt").exists()
    r = subprocess.run([PY, REF, "grads", str(d), "cpu", "fp32", str(tmp_path / "p0")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    r = compare(d / "ref", tmp_path / "got")
    assert r.returncode == 0, r.stdout
    print("resnet18 64px b4, stripped export, CPU target vs PyTorch:", r.stdout.strip())
    # Another seed's weights: the comparison fails.
    np = pytest.importorskip("numpy")
    w = tmp_path / "p0" / "conv1.weight.npy"
    np.save(w, np.load(w)[::-1].copy())
    subprocess.run([PY, REF, "grads", str(d), "cpu", "fp32", str(tmp_path / "p0")],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=300)
    assert compare(d / "ref", tmp_path / "got").returncode == 1


@pytest.mark.parametrize("model,res,batch", [("fashion_cnn", 28, 16), ("gpt", 32, 4)])
def test_stripped_gradient_check_examples_on_cpu(tmp_path, model, res, batch):
    """The same for the README's fashion_cnn and the GPT example (token ids
    in, next tokens as labels; its causal masks stay in the stripped file):
    the program's gradients against PyTorch float64 from the same weights,
    within 1e-3, as run-gpu.sh checks them on the GPU."""
    d = stripped_step(tmp_path, model, res, batch)
    r = subprocess.run([PY, REF, "grads", str(d), "cpu", "fp64", str(tmp_path / "p0")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    r = compare(d / "ref", tmp_path / "got")
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["tensors"] > 10
    print("%s, stripped export, CPU target vs PyTorch float64: %s" % (model, r.stdout.strip()))


def test_gpt_loss_tracking_on_cpu(tmp_path):
    """run-gpu.sh's "track" check on the CPU target: make_gpt.py's model
    (GELU tanh, tied head; small) exported with its weights, the program's
    initial values (--dump-params after 0 steps) loaded by torchref.py
    gpt-track, 20 AdamW steps on one batch in both: the losses as printed
    (4 decimals) equal PyTorch float32's within 2e-4; and from other initial
    values they do not."""
    np = pytest.importorskip("numpy")
    onnx = tmp_path / "m.onnx"
    subprocess.run([PY, os.path.join(ROOT, "examples", "make_gpt.py"), "-o", str(onnx), "--vocab",
                    "512", "--block", "32", "--embd", "32", "--heads", "4", "--layers", "2",
                    "--gelu", "tanh", "--batch", "4"], stdout=subprocess.DEVNULL, check=True,
                   timeout=300)
    w = np.random.default_rng(0).integers(0, 512, size=(4, 33))
    np.save(tmp_path / "x.npy", w[:, :-1])
    np.save(tmp_path / "y.npy", w[:, 1:])
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"vocab": 512, "T": 32, "embd": 32, "heads": 4, "layers": 2,
                                "gelu": "tanh"}))
    prog = tmp_path / "prog"
    subprocess.run([os.path.join(ROOT, "build", "snc"), "compile", str(onnx), "-o", str(prog),
                    "--batch", "4", "--optimizer", "adamw"], stdout=subprocess.DEVNULL, check=True)
    subprocess.run(["ninja", "-C", str(prog)], stdout=subprocess.DEVNULL, check=True)
    data = "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy")
    subprocess.run([str(prog / "train"), "--data", data, "--steps", "0", "--dump-params",
                    str(tmp_path / "p0")], stdout=subprocess.DEVNULL, check=True, timeout=300)
    r = subprocess.run([str(prog / "train"), "--data", data, "--steps", "20", "--lr", "1e-3",
                        "--log-every", "1"], stdout=subprocess.PIPE, text=True, check=True,
                       timeout=300)
    import re
    snc = [float(v) for v in re.findall(r"step \d+/\d+ loss ([-0-9.eE+naif]+)", r.stdout)]
    assert len(snc) == 20, r.stdout

    def torch_losses():
        out = subprocess.run([PY, REF, "gpt-track", str(meta), str(tmp_path / "p0"),
                              str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "20", "1e-3",
                              "fp32", "cpu"], stdout=subprocess.PIPE, text=True, check=True,
                             timeout=300).stdout
        return json.loads(out.strip().splitlines()[-1])["losses"]
    ref = torch_losses()
    d = max(abs(a - b) for a, b in zip(snc, ref))
    assert len(ref) == 20 and d <= 2e-4, (d, snc, ref)
    assert snc[-1] < snc[0] - 0.5, snc   # it trained
    print("GPT loss over 20 AdamW steps, CPU target vs PyTorch: max |diff| %.2e" % d)
    # Other initial values: PyTorch's losses move away.
    f = tmp_path / "p0" / "wte.weight.npy"
    np.save(f, np.load(f)[::-1].copy())
    ref2 = torch_losses()
    assert max(abs(a - b) for a, b in zip(snc, ref2)) > 1e-2


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
    """run-gpu.sh's CUDA-graph check, its CPU-side parts: the same program and
    flags (on the CPU target, where SNRT_CUDA_GRAPH changes nothing), one run
    of --steps k per k, two series compared exactly by torchref.py
    same-losses; a changed loss (last digit) or a missing run fails it."""
    import json
    text = open(RUN).read()
    assert 'SNRT_DETERMINISTIC=1 SNRT_CUDA_GRAPH=$mode' in text
    assert '"$REF" same-losses "$WORK/$name/g0" "$WORK/$name/g1" 5' in text
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
    """run-gpu.sh's 16-bit rows, their CPU-side parts: the script runs the bf16
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
    assert '"$REF" grads "$w/m" cuda bf16 "$w/p0"' in text
    assert '"$REF" compare "$w/m/ref" "$w/got" 0.03125 norm' in text
    assert 'for pr in fp32 bf16 fp16; do' in text and "SNRT_LOSS_SCALE=16777216" in text
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
