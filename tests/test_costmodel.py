"""test_costmodel.py — the cost model's inputs and outputs (issue 17):
build/snc-calibrate writes a profile the planner accepts; a wrong or partial
profile file is one clear error; a profile without per-class rates is the
simple model; the emitted program's --profile reports every training step
with the plan's estimate beside it. Correctness only: no test here depends
on how fast the machine is."""
import json
import os
import subprocess

import pytest

from snc_harness import ROOT, SNC, compile_model, run

CAL = os.path.join(ROOT, "build", "snc-calibrate")
FASHION = os.path.join(ROOT, "examples", "fashion_cnn.onnx")
CLASSES = ["conv", "conv_small", "conv_1x1", "conv_bwd", "conv_bwd_small", "conv_bwd_1x1",
           "gemm", "pool", "norm", "elementwise", "update", "adam"]


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cal") / "cpu.json")
    r = run([CAL, "--target", "cpu", "--quick", "--threads", "2", "-o", path], timeout=120)
    assert "wrote" in r.stderr
    return path


def plan(device, *flags, check=True):
    return run([SNC, "plan", FASHION, "--batch", "8", "--policy", "liveness", "--device", device]
               + list(flags), check=check)


def plan_json(tmp_path, device, *flags):
    js = str(tmp_path / "plan.json")
    plan(device, "--json", js, *flags)
    return json.load(open(js))


def test_calibrate_writes_a_valid_profile(profile, tmp_path):
    p = json.load(open(profile))
    assert set(p["classes"]) == set(CLASSES)
    for c in CLASSES:
        rate = p["classes"][c].get("flops", 0) or p["classes"][c].get("bw", 0)
        assert rate > 0, c
    assert p["copy"]["d2h"] > 0 and p["copy"]["h2d"] > 0
    assert p["step_overhead_s"] >= 0
    assert p["measured"]["target"] == "cpu" and p["measured"]["threads"] == 2
    assert p["measured"]["date"] and p["measured"]["machine"]
    pl = plan_json(tmp_path, profile)
    assert pl["device"] == profile
    assert pl["est_step_seconds"] > 0
    # the planner's other commands take the file too
    r = run([SNC, "max-batch", FASHION, "--budget", "64MiB", "--policy", "liveness", "--device", profile])
    assert int(r.stdout.strip()) > 0


def test_calibrate_usage():
    r = run([CAL], check=False)
    assert r.returncode == 1 and "--target" in r.stderr
    r = run([CAL, "--target", "tpu"], check=False)
    assert r.returncode == 1 and "unknown target" in r.stderr
    r = run([CAL, "--help"])
    assert "--quick" in r.stdout


def test_calibrate_cuda_links():
    """The cuda calibration is built and linked where the CUDA runtime is
    (it is never run here: no GPU)."""
    if not os.path.exists(os.path.join(ROOT, "build", "libsnrt_cuda.a")):
        pytest.skip("no CUDA runtime built")
    exe = os.path.join(ROOT, "build", "snc-calibrate-cuda")
    assert os.access(exe, os.X_OK)
    r = run(["nm", "-u", exe], check=False)
    assert r.returncode == 0


def test_simple_profile_file_equals_builtin(tmp_path):
    """A profile file without "classes" is the simple model: the built-in cpu
    profile's numbers in a file give the same plan and estimate."""
    dev = {d["name"]: d for d in json.load(open(os.path.join(ROOT, "schemas", "devices.json")))["devices"]}
    f = tmp_path / "simple.json"
    f.write_text(json.dumps({k: v for k, v in dev["cpu"].items() if k not in ("name", "source")}))
    a = plan_json(tmp_path, "cpu")
    b = plan_json(tmp_path, str(f))
    assert a["est_step_seconds"] == b["est_step_seconds"]
    assert a["arena_bytes"] == b["arena_bytes"]


def test_calibrated_profile_changes_the_estimate(profile, tmp_path):
    """Per-class rates are used: doubling every rate halves the compute part."""
    p = json.load(open(profile))
    p.pop("conv_shapes", None)   # measured shapes' rates would take precedence
    for c in p["classes"].values():
        for k in ("flops", "bw"):
            if k in c:
                c[k] *= 2
        c["overhead_s"] = 0
        c["per_image_s"] = 0
    p["step_overhead_s"] = 0
    fast = tmp_path / "fast.json"
    fast.write_text(json.dumps(p))
    for c in p["classes"].values():
        for k in ("flops", "bw"):
            if k in c:
                c[k] /= 2
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(p))
    a = plan_json(tmp_path, str(fast))["est_step_seconds"]
    b = plan_json(tmp_path, str(slow))["est_step_seconds"]
    assert b == pytest.approx(2 * a, rel=1e-6)


BAD = [
    ("not json", "{", "line"),
    ("array", "[1]", "not a device profile"),
    ("missing flops", {"mem_bw": 1e9, "link_bw": 1e9, "mem_bytes": 1 << 30}, 'missing "flops"'),
    ("string", {"flops": "fast", "mem_bw": 1e9, "link_bw": 1e9, "mem_bytes": 1 << 30},
     '"flops" is not a number'),
    ("negative", {"flops": 1e9, "mem_bw": -1, "link_bw": 1e9, "mem_bytes": 1 << 30},
     '"mem_bw" must be a positive number'),
    ("partial classes", "PARTIAL", 'has no "gemm"'),
    ("no copy", "NOCOPY", '"classes" without "copy"'),
    ("class without rate", "NORATE", 'neither a positive "flops" nor a positive "bw"'),
]


@pytest.mark.parametrize("name,content,words", BAD, ids=[b[0] for b in BAD])
def test_bad_profile_is_one_clear_error(profile, tmp_path, name, content, words):
    if content in ("PARTIAL", "NOCOPY", "NORATE"):
        p = json.load(open(profile))
        if content == "PARTIAL":
            del p["classes"]["gemm"]
        elif content == "NOCOPY":
            del p["copy"]
        else:
            p["classes"]["norm"] = {"bw": 0}
        content = p
    f = tmp_path / "bad.json"
    f.write_text(content if isinstance(content, str) else json.dumps(content))
    for cmd in (["plan", FASHION, "--batch", "8"], ["compile", FASHION, "-o", str(tmp_path / "o"), "--batch", "8"],
                ["max-batch", FASHION, "--budget", "1GiB"]):
        r = run([SNC] + cmd + ["--device", str(f)], check=False)
        assert r.returncode == 2, (cmd, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith("snc: error: %s" % f), lines[0]
        assert words in lines[0], lines[0]
        if name not in ("not json", "array"):
            assert "snc-calibrate" in lines[0]


def test_missing_profile_file(tmp_path):
    f = str(tmp_path / "nope.json")
    r = plan(f, check=False)
    assert r.returncode == 2
    assert r.stderr.startswith("snc: error: ") and f in r.stderr and len(r.stderr.splitlines()) == 1


def test_program_profile(profile, tmp_path):
    """--profile: every training step of the plan, its kind and class, the
    measured time beside the estimate; the sums per kind and class add up."""
    out = str(tmp_path / "prog")
    train = compile_model(FASHION, out, 8, "--policy", "superneurons", "--device", profile)
    pl = json.load(open(os.path.join(out, "plan.json")))
    prof = str(tmp_path / "prof.json")
    run([train, "--data", "synthetic", "--steps", "5", "--threads", "2", "--profile", prof])
    p = json.load(open(prof))
    assert p["steps_measured"] == 2 and p["per_step_timing"] is True
    assert p["device"] == profile and p["policy"] == "superneurons"
    assert p["step"]["estimated_s"] == pytest.approx(pl["est_step_seconds"], rel=1e-5)
    assert p["step"]["measured_s"] > 0
    train_steps = [s for s in pl["steps"] if s["kind"] != "eval"]
    assert len(p["per_step"]) == len(train_steps)
    for a, b in zip(p["per_step"], train_steps):
        assert a["index"] == b["index"] and a["kind"] == b["kind"]
        assert a["measured_s"] >= 0
    kinds = {s["kind"] for s in train_steps}
    assert set(p["by_kind"]) == kinds
    assert {"offload", "prefetch", "recompute"} <= kinds
    assert "copy" in p["by_class"] and "conv_small" in p["by_class"]
    for group in ("by_kind", "by_class"):
        assert sum(v["steps"] for v in p[group].values()) == len(train_steps)
        tot = sum(v["measured_s"] for v in p[group].values())
        assert tot <= p["step"]["measured_s"] * 1.0001
    # the steps' measured times cover the train step (what lies between them
    # is the loop's own bookkeeping)
    assert sum(s["measured_s"] for s in p["per_step"]) > 0.5 * p["step"]["measured_s"]
