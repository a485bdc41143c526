"""auto's search: checkpointed recomputation (expensive layers rebuilt
too), the host budget, and auto as the fastest plan under both budgets.

Bit-identity of these plans in training is tests/test_policies_bitexact.py's (the
checkpoint tier, --segment, nested segments, a binding host budget); here:
what the plans are, checked from plan.json by tests/plan_check.py."""
import functools
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from snc_harness import ROOT, SNC, run  # noqa: E402
from plan_check import EXPENSIVE_OPS, auto_tiers, check_plan  # noqa: E402

PY = "/usr/bin/python3"
DEVICES = json.load(open(os.path.join(ROOT, "schemas", "devices.json")))["devices"]


@pytest.fixture(scope="module")
def models(tmp_path_factory, torchvision_onnx):
    d = tmp_path_factory.mktemp("planner_models")
    r50 = str(d / "resnet50.onnx")
    run([PY, os.path.join(ROOT, "examples", "make_resnet.py"), "--depth", "50", "--size", "32",
         "--classes", "10", "-o", r50])
    return {"fashion_cnn": (os.path.join(ROOT, "examples", "fashion_cnn.onnx"), 16),
            "resnet50": (r50, 4), "googlenet": (torchvision_onnx("googlenet", 32), 4)}


def plan(model, batch, tmp_path, *flags, check=True):
    js = str(tmp_path / "p.json")
    if os.path.exists(js):
        os.unlink(js)
    r = run([SNC, "plan", model, "--batch", str(batch), "--json", js] + list(flags), check=False)
    if not check:
        return r, (json.load(open(js)) if r.returncode == 0 else None)
    assert r.returncode == 0, r.stderr
    return json.load(open(js))


@functools.lru_cache(maxsize=None)
def smallest(model, batch, *flags):
    """The smallest budget auto fits in, as snc's error for budget 1 names it
    (memoised: with auto's search at every budget, one call takes 10-20 s on
    resnet50; snc is deterministic, so a second call would say the same)."""
    r = run([SNC, "plan", model, "--batch", str(batch), "--budget", "1"] + list(flags),
            check=False)
    assert r.returncode == 2, r.stderr
    m = re.search(r"smallest budget that fits is .*\((\d+) bytes\)", r.stderr)
    assert m, r.stderr
    return int(m.group(1))


def recomputed_ops(p):
    return [s["op"] for s in p["steps"] if s["kind"] == "recompute"]


@pytest.mark.parametrize("name,dev", [("resnet50", "h200"), ("resnet50", "k40c"),
                                      ("googlenet", "h200"), ("fashion_cnn", "h200")])
def test_auto_estimate_never_grows_with_the_budget(models, name, dev, tmp_path):
    """Budgets from the liveness arena down to the smallest that fits: auto's
    estimate at a larger budget is never above its estimate at any smaller
    one (search.c: the candidates do not depend on the budget and the search
    is exact on graphs this size), and every plan passes the independent
    checker."""
    model, batch = models[name]
    live = plan(model, batch, tmp_path, "--policy", "liveness", "--device", dev)
    lo = smallest(model, batch, "--device", dev)
    n = 28
    budgets = sorted({int(live["arena_bytes"] * (lo / live["arena_bytes"]) ** (k / (n - 1)))
                      for k in range(n)} | {lo})
    ests = []
    for b in budgets:
        p = plan(model, batch, tmp_path, "--budget", str(b), "--device", dev)
        check_plan(p)
        assert p["arena_bytes"] <= b and p["host_bytes"] <= p["host_budget_bytes"]
        ests.append((b, p["est_step_seconds"], p["planned_policy"]))
    worse = [(b, e) for k, (b, e, _) in enumerate(ests)
             if k and e > min(x[1] for x in ests[:k]) * (1 + 1e-12)]
    assert not worse, (worse, ests)
    assert ests[-1][1] == live["est_step_seconds"]


def test_checkpoint_mode_rebuilds_expensive_layers(models, tmp_path):
    """--policy recompute --segment SIZE: every layer between checkpoints is
    rebuilt, convolutions too; plan.json says how many checkpoints; the plan
    review names the rebuilt convolutions; cheap recompute rebuilds none."""
    model, batch = models["resnet50"]
    cheap = plan(model, batch, tmp_path, "--policy", "recompute")
    assert not set(recomputed_ops(cheap)) & set(EXPENSIVE_OPS)
    assert cheap["checkpoints"] == 0 and cheap["checkpoint_segment_bytes"] == 0
    p = plan(model, batch, tmp_path, "--policy", "recompute", "--segment", "256KiB")
    facts = check_plan(p)
    assert facts["recompute_expensive"] > 0 and "Conv" in recomputed_ops(p)
    assert p["checkpoints"] > 0 and p["checkpoint_segment_bytes"] == 256 << 10
    # Speed-centric: every rebuilt conv is run at most once more.
    convs = [s["node"] for s in p["steps"] if s["kind"] == "recompute" and s["op"] == "Conv"]
    assert len(convs) == len(set(convs))
    # Smaller than the cheap plan at an extra forward pass at most.
    assert p["arena_bytes"] < cheap["arena_bytes"]
    # (a backward pass costs about twice the forward: one more forward is
    # under half of the rest of the step)
    assert p["recompute_flops"] <= (p["step_flops"] - p["recompute_flops"]) / 2
    text = run([SNC, "plan", model, "--batch", str(batch), "--policy", "recompute", "--segment",
                "256KiB"]).stdout
    assert re.search(r"^  checkpoints +%d " % p["checkpoints"], text, re.M), text[:2000]
    # ... with the costs compared: a rebuild against a copy to the host and back.
    m = re.search(r"Conv output \(expensive to recompute\): not kept .*recomputed 1 time; a "
                  r"rebuild costs ([\d.e+]+) (us|ms), a copy to the host and back ([\d.e+]+) "
                  r"(us|ms) on h200", text)
    assert m, text[:3000]
    r = run([SNC, "plan", model, "--batch", str(batch), "--segment", "1MiB"], check=False)
    assert r.returncode == 1 and "--segment SIZE goes with --policy recompute" in r.stderr


@pytest.mark.parametrize("name", ["fashion_cnn", "resnet50"])
def test_auto_picks_checkpoints_between_cheap_recompute_and_offload(models, name, tmp_path):
    """Walking the budget down (plan_check.auto_tiers), there is a band where
    auto's fastest plan rebuilds convolutions and copies nothing (h200
    costs): rebuilds chosen per tensor (select.c) first, then checkpoint
    segments where they are faster; there it is at least as fast as every
    fixed policy that fits. (Before select.c, cheap recomputation came
    first; on these two models a per-tensor set is now faster at every
    budget it fits.)"""
    model, batch = models[name]

    def plan_at(b):
        return plan(model, batch, tmp_path, "--budget", str(b))
    live = plan(model, batch, tmp_path, "--policy", "liveness")
    tiers = auto_tiers(plan_at, live["arena_bytes"], smallest(model, batch), points=16)
    print(name, {t: (v[0], v[2]) for t, v in tiers.items()})
    assert "selective" in tiers, sorted(tiers)
    if "checkpoint" in tiers:
        assert tiers["selective"][0] > tiers["checkpoint"][0], sorted(tiers)
    for t in ("selective", "checkpoint"):
        if t not in tiers:
            continue
        b, p, facts = tiers[t]
        assert facts["recompute_expensive"] > 0 and facts["copies"] == 0, (t, facts)
        if t == "checkpoint":
            assert p["checkpoints"] > 0 and "checkpoint segments" in p["note"]
        else:
            assert p["selected_rebuilds"] > 0 and "chosen per tensor" in p["note"]
        for pol in ("recompute", "offload", "superneurons"):
            q = plan(model, batch, tmp_path, "--policy", pol)
            if q["arena_bytes"] <= b:
                assert p["est_step_seconds"] <= q["est_step_seconds"], (t, pol)


def test_fragmented_best_is_searched_again(models, tmp_path):
    """auto keeps the fastest candidate that fits by live bytes and packs it
    at the end; where packing leaves a gap (arena > peak live) and the budget
    lies in it, that candidate does not fit, and the search runs again
    packing each new best at once. Its plan fits, and it is no faster than
    the plan at the larger budget (a larger budget never makes auto slower)."""
    model, batch = models["fashion_cnn"]
    live = plan(model, batch, tmp_path, "--policy", "liveness")["arena_bytes"]
    gap = None
    for pct in range(100, 20, -3):
        p = plan(model, batch, tmp_path, "--policy", "auto", "--budget", str(live * pct // 100))
        if p["arena_bytes"] > p["peak_live_bytes"]:
            gap = p
            break
    assert gap, "no auto plan of fashion_cnn with a packing gap: pick another model"
    b = (gap["peak_live_bytes"] + gap["arena_bytes"]) // 2
    js = str(tmp_path / "gap.json")
    out = run([SNC, "plan", model, "--batch", str(batch), "--policy", "auto", "--budget", str(b),
               "--dump", "auto", "--json", js]).stdout
    # the plan packed at the end was faster than or the same as the one the
    # larger budget chose, so it packs over this budget: the search ran again
    m = re.search(r"^#(\d+) packed: arena .*, over the budget; searching again", out, re.M)
    assert m, out[-3000:]
    p = json.load(open(js))
    check_plan(p)
    assert p["arena_bytes"] <= b and p["est_step_seconds"] >= gap["est_step_seconds"]
    chosen = re.search(r"^chosen: #(\d+)", out, re.M).group(1)
    fits = re.findall(r"^ *(\d+)  fits ", out[m.end():], re.M)
    assert fits and fits[-1] == chosen and int(chosen) > int(m.group(1)), out[-3000:]


def test_dump_auto_lists_the_candidates(models, tmp_path):
    model, batch = models["resnet50"]
    live = plan(model, batch, tmp_path, "--policy", "liveness")
    out = run([SNC, "plan", model, "--batch", str(batch), "--budget",
               str(int(live["arena_bytes"] * 0.97)), "--dump", "auto"]).stdout
    rows = re.findall(r"^ *\d+  (fits|slower|-) +(>=)?[\d.]+ [KMG]?i?B", out, re.M)
    assert len(rows) > 10 and any(r[0] == "fits" for r in rows), out[:3000]
    assert "checkpoints every" in out and "cheap layers rebuilt" in out
    # the chosen plan is the last one that fits, and it says so
    m = re.search(r"^chosen: #(\d+)", out, re.M)
    fits = re.findall(r"^ *(\d+)  fits ", out, re.M)
    assert m and fits and fits[-1] == m.group(1), out[-3000:]
    # candidates the bounds leave out are listed with the reason
    assert re.search(r"\((bound|skipped|dominated|cut short)\)", out), out[:3000]
    out = run([SNC, "plan", model, "--batch", str(batch), "--policy", "liveness", "--dump",
               "auto"]).stdout
    assert "no candidates were compared" in out


def test_host_budget(models, tmp_path):
    """The host arena never exceeds --host-budget; the default is the
    profile's host_bytes (cpu: this machine's memory); an infeasible host
    budget is exit 2 with the smallest host budget that fits; fixed policies
    are bound by it too; compile and max-batch take it."""
    model, batch = models["resnet50"]
    for d in DEVICES:
        p = plan(model, batch, tmp_path, "--policy", "liveness", "--device", d["name"])
        if d["host_bytes"]:
            assert p["host_budget_bytes"] == d["host_bytes"], d["name"]
        else:
            assert p["host_budget_bytes"] == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    lo = smallest(model, batch)
    tight = plan(model, batch, tmp_path, "--budget", str(lo))
    assert tight["host_bytes"] > 0
    # A host budget under what the tightest plan needs: no plan, and the
    # message names a host budget that does fit.
    r, _ = plan(model, batch, tmp_path, "--budget", str(lo), "--host-budget",
                str(tight["host_bytes"] // 4), check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    m = re.search(r"(host budget .* too small).*smallest (host )?budget that fits is .*\((\d+) "
                  r"bytes\)", r.stderr)
    assert m, r.stderr
    # With more device room, a small host budget steers auto to plans that
    # keep more on the device.
    mid = int(lo * 1.6)
    free = plan(model, batch, tmp_path, "--budget", str(mid))
    if free["host_bytes"]:
        hb = free["host_bytes"] // 2
        r, p = plan(model, batch, tmp_path, "--budget", str(mid), "--host-budget", str(hb),
                    check=False)
        if r.returncode == 0:
            check_plan(p)
            assert p["host_bytes"] <= hb and p["host_budget_bytes"] == hb
            assert p["est_step_seconds"] >= free["est_step_seconds"]
        else:
            assert r.returncode == 2 and "host budget" in r.stderr, r.stderr
    # A fixed policy over the host budget.
    sn = plan(model, batch, tmp_path, "--policy", "superneurons")
    r, _ = plan(model, batch, tmp_path, "--policy", "superneurons", "--host-budget",
                str(sn["host_bytes"] - 256), check=False)
    assert r.returncode == 2 and "host budget" in r.stderr and "policy superneurons needs" in \
        r.stderr, r.stderr
    # max-batch: a host budget can only lower the answer.
    mb = lambda *f: int(run([SNC, "max-batch", model, "--budget", "400MiB"] + list(f)).stdout)
    assert mb("--host-budget", "8MiB") <= mb()
    # compile records it.
    out = str(tmp_path / "prog")
    run([SNC, "compile", model, "-o", out, "--batch", str(batch), "--host-budget", "3GiB"])
    assert json.load(open(os.path.join(out, "plan.json")))["host_budget_bytes"] == 3 << 30
    r = run([SNC, "plan", model, "--batch", "2", "--host-budget", "0"], check=False)
    assert r.returncode == 1 and "bad size for --host-budget" in r.stderr


def test_tiny_tensors_stay_on_the_device(models, tmp_path):
    """BN's saved statistics (a few hundred bytes) are not worth a copy."""
    model, batch = models["resnet50"]
    p = plan(model, batch, tmp_path, "--policy", "superneurons")
    copied = {p["instances"][s["inputs"][0]]["bytes"] for s in p["steps"]
              if s["kind"] == "offload"}
    assert copied and min(copied) >= 4096, sorted(copied)[:5]
