"""test_program.py — the emitted program's promises (README "The emitted
program") on a compiled model, not the hand-written fake of test_runtime.py.

The model: conv (no bias) + BatchNorm + ReLU + max-pool + Dropout(0.3) +
dense, trained with Adam, compiled with `--policy auto` at the smallest
budget snc accepts (read from its own error for `--budget 1`), so the plan
keeps every parameter and all Adam state in the host arena (checked), BN
running statistics on the device, and offloads activations. 38 training
samples at batch 4: 9 steps per epoch, the last 2 samples dropped.

- --resume mid-epoch, and across an epoch boundary, ends in the same
  checkpoint file, byte for byte, as the run that was never interrupted
  (every parameter, BN statistic, Adam moment, the step, epoch, position and
  seed are in it), and the same --dump-params;
- --epochs counts across resumes; SIGINT and SIGTERM finish the step, save,
  exit 0 and the checkpoint resumes bit-exactly;
- a checkpoint of another optimizer, loss, model or batch is refused (exit 2);
- steps per epoch are floor(N / batch);
- eval with a partial last batch counts every sample: the expected number of
  correct answers comes from the exported ONNX run in PyTorch
  (tests/onnx_torch.py), the labels are chosen so that samples of the
  partial batch are among the correct ones;
- --export-onnx passes onnx.checker and its initializers are --dump-params
  bit for bit;
- images_per_s leaves out exactly the first 3 steps (SNRT_SLOW_STEPS);
- --normalize, both forms, against PyTorch on normalized inputs.
"""
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from snc_harness import SNC, export, grad_err, load_dump, run  # noqa: E402

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
nn = torch.nn
F = torch.nn.functional
import onnx_torch  # noqa: E402

B, N_TRAIN, CLASSES = 4, 38, 5
STEPS_PER_EPOCH = N_TRAIN // B   # 9


class Net(nn.Module):
    def __init__(self, classes=CLASSES):
        super().__init__()
        self.c = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(4 * 4 * 4, classes)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn(self.c(x))), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


def build(onnx_path, out, batch, *flags):
    run([SNC, "compile", onnx_path, "-o", out, "--batch", str(batch)] + list(flags))
    run(["ninja", "-C", out])
    return os.path.join(out, "train")


def smallest_budget(onnx_path, batch, *flags):
    r = run([SNC, "plan", onnx_path, "--batch", str(batch), "--policy", "auto", "--budget", "1"]
            + list(flags), check=False)
    assert r.returncode == 2, r.stderr
    m = re.search(r"smallest budget that fits is .*\((\d+) bytes\)", r.stderr)
    assert m, r.stderr
    return int(m.group(1))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("prog")
    torch.manual_seed(0)
    onnx_path = str(root / "net.onnx")
    export(Net(), torch.randn(B, 2, 8, 8), onnx_path)
    torch.manual_seed(1)
    export(Net(classes=3), torch.randn(B, 2, 8, 8), str(root / "other.onnx"))
    rng = np.random.default_rng(0)
    np.save(root / "x.npy", rng.standard_normal((N_TRAIN, 2, 8, 8)).astype(np.float32))
    np.save(root / "y.npy", rng.integers(0, CLASSES, N_TRAIN))
    np.save(root / "y3.npy", rng.integers(0, 3, N_TRAIN))
    np.save(root / "xe.npy", rng.standard_normal((10, 2, 8, 8)).astype(np.float32))
    budget = smallest_budget(onnx_path, B, "--optimizer", "adam")
    e = {"root": root, "onnx": onnx_path, "budget": budget,
         "data": "npy:%s,%s" % (root / "x.npy", root / "y.npy")}
    e["adam"] = build(onnx_path, str(root / "adam"), B, "--optimizer", "adam", "--policy", "auto",
                      "--budget", str(budget), "--lr", "0.01")
    e["sgd"] = build(onnx_path, str(root / "sgd"), B, "--optimizer", "sgd")
    e["mse"] = build(onnx_path, str(root / "mse"), B, "--optimizer", "adam", "--loss", "mse")
    e["b8"] = build(onnx_path, str(root / "b8"), 8, "--optimizer", "adam")
    e["other"] = build(str(root / "other.onnx"), str(root / "other"), B, "--optimizer", "adam")
    return e


def prog(exe, *args, env_extra=None, **kw):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([exe, "--threads", "1"] + [str(a) for a in args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120, env=env, **kw)


def ok(exe, *args, **kw):
    r = prog(exe, *args, **kw)
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    return r


def dumps(d):
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def metrics(path):
    with open(path) as f:
        return json.load(f)


def read_checkpoint(path):
    """The checkpoint's header fields and tensors, from the layout documented
    in runtime/common/checkpoint.c (little-endian, header of 104 bytes in
    version 2, 80 in version 1)."""
    import struct
    raw = open(path, "rb").read()
    assert raw[:8] == b"SNRTCKPT"
    (version,) = struct.unpack_from("<I", raw, 8)
    batch, count = struct.unpack_from("<ii", raw, 40)
    step, epoch, pos, seed = struct.unpack_from("<qqqQ", raw, 48)
    off, tensors = (104 if version >= 2 else 80), {}
    for _ in range(count):
        (nl,) = struct.unpack_from("<I", raw, off)
        name = raw[off + 4:off + 4 + nl].decode()
        (nb,) = struct.unpack_from("<q", raw, off + 4 + nl)
        off += 4 + nl + 8
        tensors[name] = np.frombuffer(raw, np.float32, nb // 4, off)
        off += nb
    assert off == len(raw)
    return {"batch": batch, "step": step, "epoch": epoch, "pos": pos, "seed": seed, "tensors": tensors}


def test_plan_keeps_parameters_and_adam_state_on_the_host(env):
    """The premise of the resume tests: at the smallest budget every
    parameter and every Adam moment lives in the host arena."""
    plan = json.load(open(os.path.join(os.path.dirname(env["adam"]), "plan.json")))
    assert plan["arena_bytes"] <= env["budget"]
    pers = [i for i in plan["instances"] if i["persistent"]]
    params = [i for i in pers if i["kind"] == "param"]
    opt = [i for i in pers if i["kind"] == "optimizer"]
    assert len(params) == 5 and len(opt) == 10, pers
    for i in params + opt:
        assert i["offset"] == -1 and i["host_offset"] >= 0, i
    assert plan["host_bytes"] > 0


def test_resume_mid_epoch_is_bit_identical(env, tmp_path):
    exe, data = env["adam"], env["data"]
    common = ["--data", data, "--seed", 3]
    ok(exe, *common, "--epochs", 2, "--save", tmp_path / "full", "--dump-params", tmp_path / "dfull")
    ok(exe, *common, "--steps", 5, "--save", tmp_path / "ck5")
    # The checkpoint's seed wins: the resumed runs pass none.
    r = ok(exe, "--data", data, "--epochs", 2, "--resume", tmp_path / "ck5", "--save", tmp_path / "res",
           "--dump-params", tmp_path / "dres")
    assert "at step 5 (epoch 1, batch 5)" in r.stdout
    full = open(tmp_path / "full", "rb").read()
    assert open(tmp_path / "ck5", "rb").read() != full
    assert dumps(tmp_path / "dres") == dumps(tmp_path / "dfull")
    # Adam's moments and step (not in --dump-params) as the checkpoint holds them.
    a, b = read_checkpoint(tmp_path / "full"), read_checkpoint(tmp_path / "res")
    assert (a["step"], a["epoch"], a["pos"], a["seed"]) == (2 * STEPS_PER_EPOCH, 2, 0, 3)
    moments = [k for k in a["tensors"] if ".adam_" in k]
    assert len(moments) == 10 and all(np.abs(a["tensors"][k]).max() > 0 for k in moments)
    for k in a["tensors"]:
        assert a["tensors"][k].tobytes() == b["tensors"][k].tobytes(), k
    assert open(tmp_path / "res", "rb").read() == full
    # Two hops, the second starting in the next epoch (5 + 7 = 12 = epoch 2, batch 3).
    ok(exe, "--data", data, "--steps", 7, "--resume", tmp_path / "ck5", "--save", tmp_path / "ck12")
    r = ok(exe, "--data", data, "--epochs", 2, "--resume", tmp_path / "ck12", "--save", tmp_path / "res2")
    assert "at step 12 (epoch 2, batch 3)" in r.stdout
    assert open(tmp_path / "res2", "rb").read() == full
    # Training did move every parameter and BN statistic.
    ok(exe, *common, "--steps", 0, "--dump-params", tmp_path / "d0")
    d0, df = dumps(tmp_path / "d0"), dumps(tmp_path / "dfull")
    assert set(d0) == set(df) and len(d0) == 7
    assert all(d0[k] != df[k] for k in d0), [k for k in d0 if d0[k] == df[k]]


def test_epochs_count_across_resumes(env, tmp_path):
    exe, data = env["adam"], env["data"]
    ok(exe, "--data", data, "--epochs", 2, "--save", tmp_path / "full")
    ok(exe, "--data", data, "--epochs", 1, "--save", tmp_path / "ck", "--metrics", tmp_path / "m1")
    m = metrics(tmp_path / "m1")
    assert m["steps"] == STEPS_PER_EPOCH and m["global_step"] == STEPS_PER_EPOCH and m["epochs"] == 1
    ok(exe, "--data", data, "--epochs", 2, "--resume", tmp_path / "ck", "--save", tmp_path / "ck2",
       "--metrics", tmp_path / "m2")
    m = metrics(tmp_path / "m2")
    assert m["steps"] == STEPS_PER_EPOCH and m["global_step"] == 2 * STEPS_PER_EPOCH and m["epochs"] == 2
    assert open(tmp_path / "ck2", "rb").read() == open(tmp_path / "full", "rb").read()
    # Already at the end of epoch 2: nothing more to do.
    ok(exe, "--data", data, "--epochs", 2, "--resume", tmp_path / "ck2", "--metrics", tmp_path / "m3")
    assert metrics(tmp_path / "m3")["steps"] == 0


def test_steps_per_epoch_drop_the_last_partial_batch(env, tmp_path):
    exe, data = env["adam"], env["data"]
    r = ok(exe, "--data", data, "--epochs", 3, "--log-every", 1, "--metrics", tmp_path / "m")
    m = metrics(tmp_path / "m")
    assert m["steps"] == 3 * STEPS_PER_EPOCH and m["epochs"] == 3, m
    assert "epoch 3 step %d/%d " % (STEPS_PER_EPOCH, STEPS_PER_EPOCH) in r.stdout
    assert "step %d/" % (STEPS_PER_EPOCH + 1) not in r.stdout


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_finishes_the_step_saves_and_resumes(env, tmp_path, sig):
    exe, data = env["adam"], env["data"]
    ck = tmp_path / "ck"
    # 30 ms per step, so the signal lands mid-run, not after it.
    slow = dict(os.environ, SNRT_SLOW_STEPS="1000:30000")
    p = subprocess.Popen([exe, "--threads", "1", "--data", data, "--epochs", "1000", "--log-every", "1",
                          "--save", str(ck)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=slow)
    n = 0
    for line in p.stdout:
        if " step " in line:
            n += 1
            if n == 3:
                p.send_signal(getattr(signal, sig))
                break
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, (p.returncode, err)
    m = re.search(r"stopped by %s after step (\d+); saving" % sig, out)
    assert m, out
    k = int(m.group(1))
    assert 3 <= k < 1000
    r = ok(exe, "--data", data, "--steps", 4, "--resume", ck, "--save", tmp_path / "res")
    assert "at step %d " % k in r.stdout
    ok(exe, "--data", data, "--steps", k + 4, "--save", tmp_path / "full")
    assert open(tmp_path / "res", "rb").read() == open(tmp_path / "full", "rb").read()


def one_error(r):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train: error: checkpoint "), r.stderr
    return lines[0]


def test_refuses_a_checkpoint_of_another_optimizer_model_or_batch(env, tmp_path):
    data = env["data"]
    ok(env["adam"], "--data", data, "--steps", 2, "--save", tmp_path / "adam")
    ok(env["sgd"], "--data", data, "--steps", 2, "--save", tmp_path / "sgd")
    line = one_error(prog(env["adam"], "--data", data, "--resume", tmp_path / "sgd"))
    assert "training with sgd" in line and "trains with adam" in line, line
    line = one_error(prog(env["sgd"], "--data", data, "--resume", tmp_path / "adam"))
    assert "training with adam" in line and "trains with sgd" in line, line
    line = one_error(prog(env["mse"], "--data", data, "--resume", tmp_path / "adam"))
    assert "loss softmax-ce" in line and "loss is mse" in line, line
    d3 = "npy:%s,%s" % (env["root"] / "x.npy", env["root"] / "y3.npy")
    line = one_error(prog(env["other"], "--data", d3, "--resume", tmp_path / "adam"))
    assert "another model" in line, line
    line = one_error(prog(env["b8"], "--data", data, "--resume", tmp_path / "adam"))
    assert "batch 4" in line and "batch 8" in line, line
    # And the right checkpoint is accepted.
    ok(env["adam"], "--data", data, "--steps", 1, "--resume", tmp_path / "adam")


def test_export_and_eval_with_a_partial_last_batch(env, tmp_path):
    """Train one epoch, export; the exported model must pass onnx.checker and
    hold --dump-params bit for bit. Run in PyTorch (onnx_torch, inference
    semantics) it predicts classes for 10 eval samples (batches of 4, 4, 2);
    labels are then chosen so that exactly the samples in CORRECT are right,
    two of them in the partial batch, and the program's test accuracy must be
    len(CORRECT) / 10 exactly, its test loss PyTorch's cross-entropy."""
    from onnx import numpy_helper
    exe, data, root = env["adam"], env["data"], env["root"]
    ok(exe, "--data", data, "--epochs", 1, "--save", tmp_path / "ck", "--export-onnx", tmp_path / "e.onnx",
       "--dump-params", tmp_path / "p")
    model = onnx.load(str(tmp_path / "e.onnx"))
    onnx.checker.check_model(model)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    names = ["c.weight", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "fc.weight", "fc.bias"]
    assert set(inits) == set(names)
    for name in names:
        dumped = load_dump(tmp_path / "p", name)
        assert inits[name].dtype == np.float32 and inits[name].shape == dumped.shape
        assert inits[name].tobytes() == dumped.tobytes(), name
    # The trained values, not the initial ones, were exported.
    init0 = {t.name: numpy_helper.to_array(t) for t in onnx.load(env["onnx"]).graph.initializer}
    assert all(init0[k].tobytes() != inits[k].tobytes() for k in names)

    xe = np.load(root / "xe.npy")
    logits = onnx_torch.run(model, xe)
    # The evaluator against the torch module holding the exported values.
    net = Net()
    with torch.no_grad():
        for k, v in net.state_dict().items():
            if k in inits:
                v.copy_(torch.from_numpy(np.array(inits[k])))
    net.eval()
    with torch.no_grad():
        np.testing.assert_allclose(net(torch.from_numpy(xe)).numpy(), logits, rtol=1e-5, atol=1e-6)
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert np.all(top2[:, 1] - top2[:, 0] > 1e-4), "a near tie: pick another seed"
    pred = logits.argmax(1)
    for n, correct in [(10, {0, 3, 4, 8, 9}), (10, {9}), (3, {1, 2})]:
        y = np.array([pred[i] if i in correct else (pred[i] + 1) % CLASSES for i in range(n)], np.int64)
        np.save(tmp_path / "xe.npy", xe[:n])
        np.save(tmp_path / "ye.npy", y)
        ev = "npy:%s,%s" % (tmp_path / "xe.npy", tmp_path / "ye.npy")
        ref_loss = F.cross_entropy(torch.from_numpy(logits[:n]).double(), torch.from_numpy(y)).item()
        # After the last step (resumed, 0 steps) and at the end of an epoch.
        for run_args in (["--resume", tmp_path / "ck", "--steps", 0], ["--epochs", 1]):
            ok(exe, "--data", data, "--eval", ev, "--metrics", tmp_path / "m", *run_args)
            m = metrics(tmp_path / "m")
            assert round(m["test_accuracy"] * n, 6) == len(correct), (n, correct, m)
            assert abs(m["test_loss"] - ref_loss) <= 1e-5 * ref_loss, (m["test_loss"], ref_loss)


def test_images_per_s_leaves_out_the_first_three_steps(env, tmp_path):
    """SNRT_SLOW_STEPS=K:US makes each of the first K steps US us slower.
    8 steps of 4 images: with the first 3 slow (0.3 s each) and left out the
    rate is that of 5 fast steps; with 4 slow, the 4th counts and the rate is
    at most 5 * 4 / 0.3 = 66.7 images/s."""
    exe, data = env["sgd"], env["data"]      # no copies: steps take microseconds
    rates = {}
    for k in (3, 4):
        ok(exe, "--data", data, "--steps", 8, "--metrics", tmp_path / "m",
           env_extra={"SNRT_SLOW_STEPS": "%d:300000" % k})
        m = metrics(tmp_path / "m")
        assert m["steps"] == 8
        rates[k] = m["images_per_s"]
    assert rates[4] <= 5 * B / 0.3, rates
    # Fast steps of this model take well under a millisecond; 5 of them in
    # 130 ms would still pass. Counting the slow steps gives at most
    # 8 * 4 / 0.9 = 36, counting one of them 6 * 4 / 0.3 = 80.
    assert rates[3] > 150, rates


# ---- --normalize -------------------------------------------------------------

def linear_model(path, batch, c=3, h=2, w=2, classes=4):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)
    W = (rng.standard_normal((classes, c * h * w)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(classes) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=1, name="flat"),
             helper.make_node("Gemm", ["f", "W", "b"], ["logits"], transB=1, name="fc")]
    g = helper.make_graph(nodes, "lin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, h, w])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
                          [numpy_helper.from_array(W, "W"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return W, b


@pytest.mark.parametrize("form", ["all", "per_channel"])
def test_normalize(tmp_path, form):
    """One step's gradients with --normalize against PyTorch given the
    normalized inputs: (x - M) / S on every channel, or per channel. uint8
    images (scaled by 1/255 first) for the per-channel form."""
    batch = 6
    W, b = linear_model(str(tmp_path / "m.onnx"), batch)
    exe = build(str(tmp_path / "m.onnx"), str(tmp_path / "p"), batch, "--policy", "none")
    rng = np.random.default_rng(4)
    if form == "all":
        x = rng.standard_normal((batch, 3, 2, 2)).astype(np.float32)
        flag, mean, std = "0.5,2", np.full(3, 0.5), np.full(3, 2.0)
        xf = x
    else:
        x = rng.integers(0, 256, (batch, 3, 2, 2)).astype(np.uint8)
        flag, mean, std = "0.1,0.5,0.9,0.25,2,4", np.array([0.1, 0.5, 0.9]), np.array([0.25, 2.0, 4.0])
        xf = x.astype(np.float64) / 255
    y = rng.integers(0, 4, batch)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    data = "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy")
    ok(exe, "--data", data, "--steps", 1, "--normalize", flag, "--dump-grads", tmp_path / "g")
    xn = (xf - mean[None, :, None, None]) / std[None, :, None, None]
    Wt = torch.tensor(W, dtype=torch.float64, requires_grad=True)
    bt = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    loss = F.cross_entropy(torch.from_numpy(xn.reshape(batch, -1)) @ Wt.T + bt, torch.from_numpy(y))
    loss.backward()
    ours = float(np.load(tmp_path / "g" / "loss.npy"))
    assert abs(ours - loss.item()) <= 1e-5 * loss.item(), (ours, loss.item())
    assert grad_err(load_dump(tmp_path / "g", "W"), Wt.grad.numpy()) <= 1e-5
    assert grad_err(load_dump(tmp_path / "g", "b"), bt.grad.numpy()) <= 1e-5
    # Without --normalize the gradient differs (the check above can fail).
    ok(exe, "--data", data, "--steps", 1, "--dump-grads", tmp_path / "g0")
    assert grad_err(load_dump(tmp_path / "g0", "W"), Wt.grad.numpy()) > 1e-2
    # A count that is neither 2 nor 2 x channels is a usage error.
    r = prog(exe, "--data", data, "--steps", 1, "--normalize", "0.1,0.2,1,2")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--normalize takes MEAN,STD or 3 means then 3 deviations" in r.stderr, r.stderr
