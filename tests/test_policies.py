"""Memory plans are checked, not trusted: every policy must give parameters
bit-identical to the `none` policy (every tensor its own region) after 3
training steps with --poison on (a read of a dead region shows up as NaN),
on every example model: a CNN with dropout and BN, a bottleneck ResNet
(residual adds), GoogLeNet (concats), DenseNet (dense concats), MobileNetV2
(depthwise convs, clip). The compiler itself runs its overlap checker on
every plan it makes (an overlap is an internal error, exit 3).
"""
import filecmp
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from snc_harness import ROOT, SNC, compile_model, run  # noqa: E402

def model_path(name, tmp_dir):
    """The ONNX file of an example model (built on first use)."""
    if name == "fashion_cnn":
        return os.path.join(ROOT, "examples", "fashion_cnn.onnx"), 8
    out = os.path.join(tmp_dir, name + ".onnx")
    if name == "resnet50":
        run(["/usr/bin/python3", os.path.join(ROOT, "examples", "make_resnet.py"),
             "--depth", "50", "--size", "32", "--classes", "10", "-o", out])
        return out, 2
    run(["/usr/bin/python3", os.path.join(ROOT, "examples", "export_torchvision.py"), name,
         "--size", "32", "--out", tmp_dir])
    return out, 2


MODELS = ["fashion_cnn", "resnet50", "googlenet", "densenet121", "mobilenet_v2"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("models"))
    return lambda name: model_path(name, d)


def train3(onnx, batch, policy, out, *flags):
    prog = compile_model(onnx, out, batch, "--policy", policy, *flags)
    dump = os.path.join(out, "params")
    run([prog, "--data", "synthetic", "--steps", "3", "--poison", "--dump-params", dump,
         "--metrics", os.path.join(out, "metrics.json")])
    return dump


def same_files(a, b):
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b)), "different parameter sets"
    assert names, "no parameters dumped"
    match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return mismatch + errors


def smallest_budget(onnx, batch):
    """The smallest feasible budget, as snc's error for an impossible one names it."""
    r = run([SNC, "plan", onnx, "--batch", str(batch), "--policy", "auto", "--budget", "1"],
            check=False)
    assert r.returncode == 2, r.stderr
    m = re.search(r"smallest budget that fits is .*\((\d+) bytes\)", r.stderr)
    assert m, r.stderr
    return int(m.group(1))


FULL = ["liveness", "recompute", "offload", "superneurons", "auto:1.0", "auto:0.5", "auto:0.25",
        "auto:min"]
SHORT = ["liveness", "recompute", "superneurons", "auto:min"]
CONFIGS = {"fashion_cnn": FULL, "resnet50": FULL, "googlenet": FULL, "densenet121": SHORT,
           "mobilenet_v2": SHORT}


@pytest.mark.parametrize("name", MODELS)
def test_policies_bit_identical(name, models, tmp_path):
    onnx, batch = models(name)
    ref = train3(onnx, batch, "none", str(tmp_path / "none"))
    arenas = {"none": json.load(open(tmp_path / "none" / "plan.json"))["arena_bytes"]}
    live = None
    for cfg in CONFIGS[name]:
        pol, _, frac = cfg.partition(":")
        flags = []
        if frac:
            if frac == "min":
                budget = smallest_budget(onnx, batch)
            else:
                budget = max(int(float(frac) * live), smallest_budget(onnx, batch))
            flags = ["--budget", str(budget)]
        out = str(tmp_path / cfg.replace(":", "_"))
        dump = train3(onnx, batch, pol, out, *flags)
        bad = same_files(ref, dump)
        assert not bad, "%s/%s: parameters differ from policy none: %s" % (name, cfg, bad[:5])
        plan = json.load(open(os.path.join(out, "plan.json")))
        metrics = json.load(open(os.path.join(out, "metrics.json")))
        assert metrics["arena_bytes"] == plan["arena_bytes"]
        assert metrics["host_bytes"] == plan["host_bytes"]
        if flags:
            assert plan["arena_bytes"] <= budget, (cfg, plan["arena_bytes"], budget)
        arenas[cfg] = plan["arena_bytes"]
        if pol == "liveness":
            live = plan["arena_bytes"]
    assert arenas["liveness"] < arenas["none"]
    assert arenas["recompute"] <= arenas["liveness"]
    assert arenas["superneurons"] <= arenas["recompute"]
    print(name, {k: "%.1f MiB" % (v / 2**20) for k, v in arenas.items()})


def test_recompute_resnet50_224(tmp_path):
    """Issue 6: on resnet50 at batch 32, 224x224, recomputation brings the arena
    well under the liveness arena at under 15% extra FLOPs (cheap layers only)."""
    onnx = str(tmp_path / "r50.onnx")
    run(["/usr/bin/python3", os.path.join(ROOT, "examples", "make_resnet.py"), "--depth", "50",
         "--size", "224", "-o", onnx])
    plans = {}
    for pol in ["liveness", "recompute"]:
        js = str(tmp_path / (pol + ".json"))
        run([SNC, "plan", onnx, "--batch", "32", "--policy", pol, "--json", js])
        plans[pol] = json.load(open(js))
    live, rec = plans["liveness"], plans["recompute"]
    assert rec["arena_bytes"] < 0.7 * live["arena_bytes"], (rec["arena_bytes"], live["arena_bytes"])
    kinds = {s["kind"] for s in rec["steps"]}
    assert "recompute" in kinds
    recomputed_ops = {s["op"] for s in rec["steps"] if s["kind"] == "recompute"}
    assert not recomputed_ops & {"Conv", "Gemm", "MatMul"}, recomputed_ops
    share = rec["recompute_flops"] / rec["step_flops"]
    assert 0 < share < 0.15, share
    print("resnet50 b32: liveness %.2f GiB, recompute %.2f GiB, extra %.1f%% FLOPs"
          % (live["arena_bytes"] / 2**30, rec["arena_bytes"] / 2**30, 100 * share))
