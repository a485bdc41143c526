"""The cuda target's compile-time decisions, checked without a GPU or nvcc.

- conv workspaces (compiler/plan/workspace.c): every conv step of a cuda plan
  (forward, backward-data, backward-filter, eval; 1x1 convs included) is lent
  the largest free hole of the arena at its step, up to the cap; recomputed
  here from plan.json's instance table alone (an independent sweep), and the
  emitted train.c gives each conv step a struct whose ws_bytes is its hole;
  the arena is the CPU plan's, unchanged;
- the reserve: the default budget is the profile's memory less its reserve,
  and the emitted cuda program carries the reserve for the runtime's check.
"""
import json
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNC = os.path.join(ROOT, "build", "snc")
FASHION = os.path.join(ROOT, "examples", "fashion_cnn.onnx")
CONV_OPS = {"Conv", "CONV_BWD_DATA", "CONV_BWD_FILTER"}
ALIGN = 256


def snc(*args):
    r = subprocess.run([SNC] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    """A ResNet-50 at 64x64: bottlenecks, so 1x1 stride-1 convs, those of the
    16x16 stage without a CPU workspace (runtime/snrt.h, SNRT_CONV_1X1_PLANE)."""
    path = str(tmp_path_factory.mktemp("ws") / "resnet50.onnx")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "examples", "make_resnet.py"),
                    "--depth", "50", "--size", "64", "--classes", "10", "-o", path], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


def plan_json(tmp_path, model, batch, target, policy):
    out = str(tmp_path / ("%s_%s.json" % (target, policy)))
    r = snc("plan", model, "--batch", str(batch), "--policy", policy, "--target", target,
            "--json", out)
    return json.load(open(out)), r.stdout


def largest_hole(plan, step, skip):
    """(offset, bytes) of the largest free byte range at `step` (lowest on ties)."""
    busy = sorted((i["offset"], i["offset"] + i["bytes"]) for i in plan["instances"]
                  if i["index"] != skip and i["offset"] >= 0 and i["bytes"] > 0
                  and i["first"] <= step <= i["last"])
    best, best_lo, cur = -1, 0, 0
    for lo, hi in busy + [(plan["arena_bytes"], plan["arena_bytes"])]:
        if lo - cur > best:
            best, best_lo = lo - cur, cur
        cur = max(cur, hi)
    return best_lo, best


@pytest.mark.parametrize("case", ["fashion-liveness", "fashion-superneurons", "resnet-recompute"])
def test_conv_workspace_is_the_largest_free_hole(case, tmp_path, resnet):
    name, policy = case.split("-")
    model, batch = (FASHION, 64) if name == "fashion" else (resnet, 4)
    plan, text = plan_json(tmp_path, model, batch, "cuda", policy)
    cpu, _ = plan_json(tmp_path, model, batch, "cpu", policy)
    cap = plan["workspace_cap_bytes"]
    assert cap == 1 << 30
    assert "workspace_cap_bytes" not in cpu
    assert plan["arena_bytes"] == cpu["arena_bytes"], "lending workspaces must not grow the arena"
    inst = plan["instances"]
    convs = [s for s in plan["steps"] if s["op"] in CONV_OPS]
    assert len(convs) >= 7
    cpu_none = 0
    for s in convs:
        ws = s["workspace"]
        assert ws is not None, "conv step %d (%s) has no workspace" % (s["index"], s["node"])
        w = inst[ws]
        assert w["kind"] == "workspace" and w["first"] == w["last"] == s["index"]
        lo, size = largest_hole(plan, s["index"], ws)
        want = min(size, cap) // ALIGN * ALIGN
        assert (w["offset"], w["bytes"]) == (lo, want), (s, w, lo, size)
        if cpu["steps"][s["index"]]["workspace"] is None:
            cpu_none += 1
    if name == "resnet":
        assert cpu_none > 0, "expected 1x1 convs, which the CPU plan gives no workspace"
    m = re.search(r"conv workspaces: (\d+) conv steps lent the largest free hole", text)
    assert m and int(m.group(1)) == len(convs), text[:3000]
    assert "(workspace " in text


def test_emitted_cuda_program_carries_step_workspaces_and_reserve(tmp_path):
    out = str(tmp_path / "prog")
    snc("compile", FASHION, "-o", out, "--batch", "8", "--target", "cuda", "--policy", "liveness")
    plan = json.load(open(os.path.join(out, "plan.json")))
    src = open(os.path.join(out, "train.c")).read()
    params = dict(re.findall(r"static const snrt_conv_t (P\d+) = \{([^}]*)\};", src))
    calls = re.findall(r"snrt_conv_(fwd|bwd_data|bwd_filter)\(c, &(P\d+)", src)
    convs = [s for s in plan["steps"] if s["op"] in CONV_OPS]
    assert len(calls) == len(convs)
    assert len({p for _, p in calls}) == len(calls), "each conv step needs its own struct"
    # Calls appear in step order (train_step's parts, then eval_step's).
    for (_, pname), s in zip(calls, convs):
        ws = int(re.search(r"\.ws_bytes = (\d+)", params[pname]).group(1))
        assert ws == plan["instances"][s["workspace"]]["bytes"], (pname, s)
    # The reserve of the profile planned for (h200 by default) and its name.
    dev = {d["name"]: d for d in json.load(open(os.path.join(ROOT, "schemas", "devices.json")))["devices"]}
    assert ".reserve_bytes = %d," % dev["h200"]["reserve_bytes"] in src
    assert '.device = "h200"' in src


def test_default_budget_leaves_the_reserve(tmp_path):
    dev = {d["name"]: d for d in json.load(open(os.path.join(ROOT, "schemas", "devices.json")))["devices"]}
    for name in ("h200", "v100", "cpu"):
        plan, _ = plan_json(tmp_path, FASHION, 8, "cuda" if name != "cpu" else "cpu", "liveness")
        if name != "h200":
            out = str(tmp_path / (name + ".json"))
            snc("plan", FASHION, "--batch", "8", "--policy", "liveness", "--device", name,
                "--json", out)
            plan = json.load(open(out))
        d = dev[name]
        assert plan["budget_bytes"] == d["mem_bytes"] - d["reserve_bytes"], name
        assert d["reserve_bytes"] > 0 or name == "cpu"


def test_planning_only_profiles_are_below_sm75():
    """docs/cuda.md names the profiles CUDA 13 cannot build for."""
    dev = json.load(open(os.path.join(ROOT, "schemas", "devices.json")))["devices"]
    old = sorted(d["name"] for d in dev if 0 < d["sm"] < 75)
    assert old == ["k40c", "titan-xp", "v100"]
    page = open(os.path.join(ROOT, "docs", "cuda.md")).read()
    m = re.search(r"[Pp]lanning-only profiles: ([^.]*)\.", page)
    assert m, "docs/cuda.md must name the planning-only profiles"
    for n in old:
        assert "`%s`" % n in m.group(1)
