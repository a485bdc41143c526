"""Every wait of a schedule is needed, and losing any one of them is caught.

The compiler keeps only necessary waits (compiler/plan/schedule.c): copies run on
two queues, one per direction, each in issue order, so a wait for a copy
covers every earlier copy on its queue. These tests check that from outside:

- the emitted train.c, read as a program (its snrt_offload / snrt_prefetch /
  snrt_wait calls in order), has no wait that an earlier or same-step wait on
  the same queue already implies;
- deleting any single wait is caught. Each wait of an emitted offload,
  superneurons and tightest-budget auto program is skipped in turn
  (SNRT_SKIP_WAIT=E skips the wait for event E, as if its line were deleted;
  one real deletion shows the two are the same) and the program runs 3
  steps with a lazy copy engine (SNRT_COPY_LAZY=1: a copy runs only when
  compute waits for it, the latest moment a correct schedule allows, so the
  outcome does not depend on timing) and --poison. It must
  stop on a poisoned read (exit 4), on a NaN loss (exit 3), or end with
  parameters that differ from the `none` policy's. With every wait in place
  the same run equals `none` bit for bit, lazy and with a slow copy engine
  (SNRT_COPY_DELAY_US).

The CPU copy engine has one queue per direction, like CUDA's two copy
streams, so a prefetch ordered after an offload only by a shared FIFO queue
races here too.
"""
import filecmp
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from snc_harness import ROOT, SNC, compile_model, export, run  # noqa: E402

DELAY_US = "2000"
CALL = re.compile(r"^\s*snrt_(offload|prefetch|wait)\(c, (.*)\);$", re.M)
STEP = re.compile(r"^  /\* +(\d+) ", re.M)


def branch_net(path):
    """A small network with fan-out, a concat, a residual add, BN, max-pool
    and dropout: the branching shapes a schedule must get right."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c0 = nn.Conv2d(1, 8, 3, padding=1, bias=False)
            self.bn0 = nn.BatchNorm2d(8)
            self.ca = nn.Conv2d(8, 4, 3, padding=1)
            self.cb = nn.Conv2d(8, 4, 1)
            self.bn1 = nn.BatchNorm2d(8)
            self.c2 = nn.Conv2d(8, 8, 3, padding=1)
            self.drop = nn.Dropout(0.25)
            self.fc = nn.Linear(8 * 7 * 7, 10)

        def forward(self, x):
            x = F.relu(self.bn0(self.c0(x)))
            y = torch.cat([self.ca(x), self.cb(x)], dim=1)
            y = F.relu(self.bn1(y) + x)
            y = F.max_pool2d(F.relu(self.c2(y)), 2)
            y = F.max_pool2d(y, 2)
            return self.fc(self.drop(torch.flatten(y, 1)))

    torch.manual_seed(0)
    export(Net(), torch.randn(2, 1, 28, 28), path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("wait_models")
    branch = str(d / "branch.onnx")
    branch_net(branch)
    resnet = str(d / "resnet50.onnx")
    run(["/usr/bin/python3", os.path.join(ROOT, "examples", "make_resnet.py"), "--depth", "50",
         "--size", "32", "--classes", "10", "-o", resnet])
    return {"fashion_cnn": os.path.join(ROOT, "examples", "fashion_cnn.onnx"), "branch": branch,
            "resnet": resnet}


def smallest_budget(onnx, batch):
    r = run([SNC, "plan", onnx, "--batch", str(batch), "--policy", "auto", "--budget", "1"],
            check=False)
    assert r.returncode == 2, r.stderr
    m = re.search(r"smallest budget that fits is .*\((\d+) bytes\)", r.stderr)
    assert m, r.stderr
    return int(m.group(1))


def calls(src, steps=False):
    """The copy and wait calls of train.c in program order (with steps: a
    ("step", index, at) entry where each step's code begins)."""
    out = []
    for m in CALL.finditer(src):
        args = [int(a, 0) for a in m.group(2).split(",")]
        out.append((m.group(1), args[-1], m.start()))
    if steps:
        out += [("step", int(m.group(1)), m.start()) for m in STEP.finditer(src)]
        out.sort(key=lambda c: c[2])
    return out


def implied_waits(src):
    """Waits that another wait implies: an independent reading of the
    emitted program. Returns a list of (event, why)."""
    # The step functions are written as parts train_step_0.. then called in
    # order by train_step; parts appear in the file in that order, so file
    # order is program order within the train part and within the eval part.
    eval_at = src.find("static void eval_step_0(")
    queue_of, pos_of = {}, {}
    done = {"offload": -1, "prefetch": -1}
    n = {"offload": 0, "prefetch": 0}
    bad = []
    pending = []          # waits of the current step (consecutive wait lines)
    in_eval = False

    def flush():
        best = {}
        for e in pending:
            q = queue_of.get(e)
            if q is None:
                continue
            if pos_of[e] <= done[q]:
                bad.append((e, "an earlier wait covers it"))
            if q in best and best[q] != e:
                lo = min(best[q], e, key=lambda x: pos_of[x])
                bad.append((lo, "a wait at the same step for a later copy covers it"))
            if q not in best or pos_of[e] > pos_of[best[q]]:
                best[q] = e
        for q, e in best.items():
            done[q] = max(done[q], pos_of[e])
        pending.clear()

    for kind, ev, at in calls(src, steps=True):
        if eval_at >= 0 and at > eval_at and not in_eval:
            flush()
            in_eval = True
            done = {"offload": -1, "prefetch": -1}
        if kind == "wait":
            pending.append(ev)
            continue
        flush()
        if kind == "step":
            continue
        queue_of[ev] = kind
        pos_of[ev] = n[kind]
        n[kind] += 1
    flush()
    return bad


def eval_set(folder, n):
    """n random Fashion-MNIST-shaped test images and labels, as .npy: the
    eval steps (and their copies) run too, and their result is compared."""
    import numpy as np
    rng = np.random.default_rng(1)
    x, y = os.path.join(folder, "x.npy"), os.path.join(folder, "y.npy")
    np.save(x, rng.standard_normal((n, 1, 28, 28)).astype(np.float32))
    np.save(y, rng.integers(0, 10, n).astype(np.int64))
    return "npy:%s,%s" % (x, y)


def dump_params(prog, out, env=None, tag="p"):
    """3 poisoned training steps and an eval pass; the parameters (and the
    eval metrics, in the same folder) for comparison."""
    dump = os.path.join(out, tag)
    r = run([prog, "--data", "synthetic", "--steps", "3", "--poison", "--dump-params", dump,
             "--eval", eval_set(out, 12), "--metrics", os.path.join(out, tag + ".json")],
            check=False, env=env)
    if r.returncode == 0:
        m = json.load(open(os.path.join(out, tag + ".json")))
        with open(os.path.join(dump, "eval.txt"), "w") as f:
            f.write("%r %r\n" % (m["test_loss"], m["test_accuracy"]))
    return r, dump


def same(a, b):
    names = sorted(os.listdir(a))
    assert "eval.txt" in names and len(names) > 1 and names == sorted(os.listdir(b))
    _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return not mismatch and not errors


def caught(r, ref, dump):
    """How a run without one wait was caught ('' if it was not)."""
    if r.returncode == 4 and "--poison" in r.stderr and "reads a dead region" in r.stderr:
        return "poisoned read"
    if r.returncode == 3 and "NaN" in r.stderr:
        return "NaN loss"
    assert r.returncode == 0, r.stderr
    return "" if same(ref, dump) else "different parameters"


CASES = [("fashion_cnn", 8, "superneurons"), ("fashion_cnn", 8, "auto:min"),
         ("branch", 4, "superneurons"), ("branch", 4, "offload"), ("branch", 4, "auto:min")]


@pytest.mark.parametrize("name,batch,policy", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_every_wait_is_needed(models, tmp_path, name, batch, policy):
    onnx = models[name]
    flags = ["--policy", policy]
    if policy == "auto:min":
        flags = ["--policy", "auto", "--budget", str(smallest_budget(onnx, batch))]
    ref_prog = compile_model(onnx, str(tmp_path / "none"), batch, "--policy", "none")
    r, ref = dump_params(ref_prog, str(tmp_path / "none"))
    assert r.returncode == 0, r.stderr
    out = str(tmp_path / "prog")
    prog = compile_model(onnx, out, batch, *flags)
    src = open(os.path.join(out, "train.c")).read()

    assert implied_waits(src) == [], "train.c keeps waits that others imply"
    waits = [ev for kind, ev, _ in calls(src) if kind == "wait"]
    assert waits, "no waits: this case checks nothing"
    assert len(set(waits)) == len(waits), "an event is waited for twice"

    slow = dict(os.environ, SNRT_COPY_DELAY_US=DELAY_US)
    r, dump = dump_params(prog, out, env=slow, tag="all")
    assert r.returncode == 0, r.stderr
    assert same(ref, dump), "with every wait the plan differs from none"
    lazy = dict(os.environ, SNRT_COPY_LAZY="1")
    r, dump = dump_params(prog, out, env=lazy, tag="all_lazy")
    assert r.returncode == 0, r.stderr
    assert same(ref, dump), "with every wait the plan differs from none (lazy copies)"

    missed = []
    how = {}
    for ev in waits:
        env = dict(lazy, SNRT_SKIP_WAIT=str(ev))
        r, dump = dump_params(prog, out, env=env, tag="skip%d" % ev)
        how[ev] = caught(r, ref, dump)
        if not how[ev]:
            missed.append(ev)
    assert not missed, "deleting the wait for events %s went unnoticed" % missed

    # The knob is a deletion: delete one wait line for real, rebuild, and see
    # the same outcome.
    ev = waits[len(waits) // 2]
    line = re.compile(r"^  snrt_wait\(c, %d\);\n" % ev, re.M)
    stripped, n = line.subn("", src)
    assert n == 1
    open(os.path.join(out, "train.c"), "w").write(stripped)
    run(["ninja", "-C", out])
    r, dump = dump_params(prog, out, env=lazy, tag="deleted")
    assert caught(r, ref, dump) == how[ev]


def test_pruning_removes_implied_waits(models):
    """--dump schedule shows the pass at work: on a superneurons plan (several
    copies waited for at one step) it removes waits, and what it keeps is
    exactly the waits of train.c."""
    r = run([SNC, "plan", models["resnet"], "--batch", "2", "--policy", "superneurons",
             "--dump", "schedule"])
    removed = re.findall(r"^  step +\d+ waits for event +(\d+) .*: removed", r.stdout, re.M)
    kept = re.findall(r"^  step +\d+ waits for event +(\d+) .*: kept", r.stdout, re.M)
    assert removed and kept
    m = re.search(r"schedule: (\d+) waits kept, (\d+) implied ones removed", r.stdout)
    assert m and int(m.group(1)) == len(kept) and int(m.group(2)) == len(removed)


def test_poison_survives_relu(tmp_path):
    """A read of a dead region is caught even where a kernel would launder
    the NaN (ReLU, max-pool, Clip turn it into a number): poison mode checks
    what each step reads. Here a prefetch's wait is skipped in a plan whose
    prefetched tensors feed ReLU/max-pool backward steps only through masks:
    without the read check the run would end with finite parameters."""
    onnx = os.path.join(ROOT, "examples", "fashion_cnn.onnx")
    out = str(tmp_path / "sn")
    prog = compile_model(onnx, out, 8, "--policy", "superneurons")
    src = open(os.path.join(out, "train.c")).read()
    seq = calls(src)
    prefetch_events = [ev for kind, ev, _ in seq if kind == "prefetch"]
    waited = [ev for kind, ev, _ in seq if kind == "wait"]
    ev = [e for e in prefetch_events if e in waited][0]
    env = dict(os.environ, SNRT_COPY_LAZY="1", SNRT_SKIP_WAIT=str(ev))
    r = run([prog, "--data", "synthetic", "--steps", "2", "--poison"], check=False, env=env)
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert re.search(r"plan step \d+ \(training step 0\) reads a dead region", r.stderr), r.stderr


def test_copy_engine_unit():
    """tests/unit/test_copy_engine.c: the CPU copy engine orders copies as
    CUDA's two copy streams do, and no more (a prefetch does not wait for an
    earlier offload); lazy mode, SNRT_SKIP_WAIT and the poison read check."""
    exe = os.path.join(ROOT, "build", "tests", "test_copy_engine")
    assert os.path.exists(exe), "build it first: ninja tests"
    r = run([exe], check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"copy engine: \d+ checks, 0 failures", r.stdout), r.stdout
