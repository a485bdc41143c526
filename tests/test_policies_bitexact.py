"""Memory plans are checked, not trusted: every policy must give parameters
bit-identical to the `none` policy (every tensor its own region) after 3
training steps with --poison on (a read of a dead region shows up as NaN)
and a slow copy engine (SNRT_COPY_DELAY_US: a copy that compute does not
wait for lands late), on every example model: a CNN with dropout and BN, a
bottleneck ResNet (residual adds), GoogLeNet (concats), DenseNet (dense
concats), MobileNetV2 (depthwise convs, clip). Besides the fixed policies,
`auto` runs at one budget per tier it has (recompute only; offload;
optimizer state on the host; parameters on the host too), each budget found
from the plans themselves and each plan checked by tests/plan_check.py and
asserted to move what its tier moves, with SGD and with Adam. The compiler
itself runs its overlap checker on every plan it makes (an overlap is an
internal error, exit 3).
"""
import filecmp
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from snc_harness import ROOT, SNC, compile_model, run  # noqa: E402
from plan_check import TIERS, auto_tiers, check_plan, tier_of  # noqa: E402

# Every training run here has a slow copy engine: each copy sleeps this long
# before it lands, so a missing wait reads a region the copy has not filled
# (or reuses one it still reads). 500 us keeps the file fast (a few hundred
# copies per run at most).
COPY_DELAY_US = "500"

def model_path(name, tmp_dir, torchvision_onnx=None):
    """The ONNX file of an example model (built on first use; torchvision
    models by tests/conftest.py's torchvision_onnx where given, else in
    tmp_dir)."""
    if name == "fashion_cnn":
        return os.path.join(ROOT, "examples", "fashion_cnn.onnx"), 8
    out = os.path.join(tmp_dir, name + ".onnx")
    if name == "resnet50":
        run(["/usr/bin/python3", os.path.join(ROOT, "examples", "make_resnet.py"),
             "--depth", "50", "--size", "32", "--classes", "10", "-o", out])
        return out, 2
    if torchvision_onnx is not None:
        out = torchvision_onnx(name, 32)   # exported once per run
    else:
        run(["/usr/bin/python3", os.path.join(ROOT, "examples", "export_torchvision.py"), name,
             "--size", "32", "--out", tmp_dir])
    # mobilenet_v2 ends on 1x1 feature maps at 32 px: at batch 2 its last
    # BatchNormalizations normalise over two values, the first step's
    # gradients reach 1e10 (PyTorch's too) and the third step's loss is NaN
    # or not depending on the BLAS kernels' rounding (NaN on an AMD EPYC
    # host). Batch 4 keeps all three steps finite.
    return out, 4 if name == "mobilenet_v2" else 2


MODELS = ["fashion_cnn", "resnet50", "googlenet", "densenet121", "mobilenet_v2"]


@pytest.fixture(scope="module")
def models(tmp_path_factory, torchvision_onnx):
    d = str(tmp_path_factory.mktemp("models"))
    return lambda name: model_path(name, d, torchvision_onnx)


def train3(onnx, batch, policy, out, *flags):
    prog = compile_model(onnx, out, batch, "--policy", policy, *flags)
    dump = os.path.join(out, "params")
    run([prog, "--data", "synthetic", "--steps", "3", "--poison", "--dump-params", dump,
         "--metrics", os.path.join(out, "metrics.json")],
        env=dict(os.environ, SNRT_COPY_DELAY_US=COPY_DELAY_US))
    return dump


def same_files(a, b):
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b)), "different parameter sets"
    assert names, "no parameters dumped"
    match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return mismatch + errors


def smallest_budget(onnx, batch, *flags):
    """The smallest feasible budget, as snc's error for an impossible one names it."""
    r = run([SNC, "plan", onnx, "--batch", str(batch), "--policy", "auto", "--budget", "1"] +
            list(flags), check=False)
    assert r.returncode == 2, r.stderr
    m = re.search(r"smallest budget that fits is .*\((\d+) bytes\)", r.stderr)
    assert m, r.stderr
    return int(m.group(1))


def find_tiers(onnx, batch, tmp_dir, *flags, points=12):
    """auto's tiers on this model: {tier: budget}, from the plans (plan_check.auto_tiers)."""
    js = os.path.join(tmp_dir, "tier.json")

    def plan_at(budget):
        run([SNC, "plan", onnx, "--batch", str(batch), "--budget", str(budget), "--json", js] +
            list(flags))
        return json.load(open(js))
    run([SNC, "plan", onnx, "--batch", str(batch), "--policy", "liveness", "--json", js] +
        list(flags))
    live = json.load(open(js))["arena_bytes"]
    found = auto_tiers(plan_at, live, smallest_budget(onnx, batch, *flags), points=points)
    return {t: b for t, (b, _, _) in found.items() if t in TIERS}


TIER_DEVICE = ["--device", "h200"]
FIXED = ["liveness", "recompute", "offload", "superneurons"]
# "segment": --policy recompute --segment 64KiB (checkpoint segments: every
# layer between two checkpoints rebuilt, convolutions too).
CONFIGS = {"fashion_cnn": FIXED + ["segment"],  # its tiers: test_auto_tiers_bit_identical
           "resnet50": FIXED + ["segment", "tiers"],
           "googlenet": FIXED + ["segment", "tiers"],
           "densenet121": ["liveness", "recompute", "superneurons", "segment", "auto:min"],
           "mobilenet_v2": ["liveness", "recompute", "superneurons", "segment", "auto:min"]}


def check_run(out, budget=None):
    """plan.json of a compiled program through the independent checker; the
    program's metrics agree with it."""
    plan = json.load(open(os.path.join(out, "plan.json")))
    facts = check_plan(plan)
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["arena_bytes"] == plan["arena_bytes"]
    assert metrics["host_bytes"] == plan["host_bytes"]
    if budget is not None:
        assert plan["arena_bytes"] <= budget, (plan["arena_bytes"], budget)
    return plan, facts


@pytest.mark.parametrize("name", MODELS)
def test_policies_bit_identical(name, models, tmp_path):
    onnx, batch = models(name)
    ref = train3(onnx, batch, "none", str(tmp_path / "none"))
    arenas = {"none": json.load(open(tmp_path / "none" / "plan.json"))["arena_bytes"]}
    runs = []
    for cfg in CONFIGS[name]:
        if cfg == "tiers":
            # Found and compiled under one profile (snc plan's default is
            # h200, snc compile's for the cpu target is cpu).
            tiers = find_tiers(onnx, batch, str(tmp_path), *TIER_DEVICE)
            assert {"host-optimizer", "host-params"} <= set(tiers), tiers
            runs += [("auto:" + t, "auto", b) for t, b in sorted(tiers.items())]
        elif cfg == "auto:min":
            runs.append((cfg, "auto", smallest_budget(onnx, batch)))
        elif cfg == "segment":
            runs.append((cfg, "recompute", None))
        else:
            runs.append((cfg, cfg, None))
    for cfg, pol, budget in runs:
        out = str(tmp_path / cfg.replace(":", "_"))
        flags = ["--budget", str(budget)] if budget is not None else []
        if cfg == "segment":
            flags = ["--segment", "64KiB"]
        if cfg.startswith("auto:") and cfg != "auto:min":
            flags += TIER_DEVICE
        dump = train3(onnx, batch, pol, out, *flags)
        bad = same_files(ref, dump)
        assert not bad, "%s/%s: parameters differ from policy none: %s" % (name, cfg, bad[:5])
        plan, facts = check_run(out, budget)
        if cfg.startswith("auto:") and cfg != "auto:min":
            assert tier_of(facts) == cfg[5:], (cfg, facts)
        if cfg == "segment":
            assert facts["recompute_expensive"] > 0 and plan["checkpoints"] > 0, facts
        arenas[cfg] = plan["arena_bytes"]
    assert arenas["liveness"] < arenas["none"]
    assert arenas["recompute"] <= arenas["liveness"]
    assert arenas["superneurons"] <= arenas["recompute"]
    if "segment" in arenas:
        assert arenas["segment"] < arenas["liveness"]
    print(name, {k: "%.1f MiB" % (v / 2**20) for k, v in arenas.items()})


def test_nested_and_host_budget_bit_identical(tmp_path):
    """The search's harder plans on fashion_cnn (h200 costs), each trained with
    --poison and a slow copy engine, bit-identical to `none`: a budget where
    auto nests (convolutions rebuilt from checkpoints, and cheap layers
    rebuilt again for each backward reader: some node recomputed more than
    once in a plan that recomputes convolutions), and a binding host budget
    (auto's plan at a tight device budget with half the host arena it would
    use by default)."""
    onnx, batch = os.path.join(ROOT, "examples", "fashion_cnn.onnx"), 8
    flags = ["--device", "h200"]
    ref = train3(onnx, batch, "none", str(tmp_path / "none"), *flags)
    js = str(tmp_path / "probe.json")

    def plan_at(budget, *extra):
        r = run([SNC, "plan", onnx, "--batch", str(batch), "--budget", str(budget), "--json",
                 js] + flags + list(extra), check=False)
        return json.load(open(js)) if r.returncode == 0 else None
    run([SNC, "plan", onnx, "--batch", str(batch), "--policy", "liveness", "--json", js] + flags)
    live = json.load(open(js))["arena_bytes"]
    low = smallest_budget(onnx, batch, *flags)
    nested = None
    for k in range(40):
        b = int(live * (low / live) ** (k / 39))
        p = plan_at(b)
        f = check_plan(p)
        per_node = {}
        for st in p["steps"]:
            if st["kind"] == "recompute":
                per_node[st["node"]] = per_node.get(st["node"], 0) + 1
        if f["recompute_expensive"] and per_node and max(per_node.values()) > 1:
            nested = b
            break
    assert nested, "no budget gave a nested plan"
    runs = [("nested", ["--budget", str(nested)])]
    tight = plan_at(low)
    assert tight["host_bytes"] > 0
    # The lowest device budget (up from the smallest) at which a host budget
    # just under the host arena auto would use there still leaves a plan
    # (another one: the host arena comes in lumps, optimizer state on the
    # host or not).
    # Where it leaves none at that device budget, the smallest device budget
    # that fits under that host budget (as snc's error names it).
    for k in range(1, 40):
        b = int(low * 1.04 ** k)
        free_plan = plan_at(b)
        if not free_plan["host_bytes"]:
            continue
        hb = free_plan["host_bytes"] - 256
        if plan_at(b, "--host-budget", str(hb)) is not None:
            break
        r = run([SNC, "plan", onnx, "--batch", str(batch), "--budget", str(b), "--host-budget",
                 str(hb)] + flags, check=False)
        m = re.search(r"smallest budget that fits is .*\((\d+) bytes\), under the host budget",
                      r.stderr)
        if m and plan_at(int(m.group(1)), "--host-budget", str(hb)) is not None:
            b = int(m.group(1))
            break
    else:
        raise AssertionError("no device budget where a host budget binds")
    runs.append(("host-budget", ["--budget", str(b), "--host-budget", str(hb)]))
    for cfg, extra in runs:
        out = str(tmp_path / cfg)
        dump = train3(onnx, batch, "auto", out, *(flags + extra))
        bad = same_files(ref, dump)
        assert not bad, "%s: parameters differ from policy none: %s" % (cfg, bad[:5])
        plan, facts = check_run(out)
        if cfg == "host-budget":
            assert plan["host_bytes"] <= hb == plan["host_budget_bytes"], plan["host_bytes"]
        print(cfg, extra, plan["planned_policy"], plan["arena_bytes"], plan["host_bytes"], facts)


def deep_narrow_resnet(path, blocks=24, ch=8, size=32, classes=10):
    """A residual network whose activations outweigh its parameters (8
    channels, 24 blocks of conv-BN-ReLU-conv-BN + add + ReLU at 32x32): long
    checkpoint segments with many cuts inside, the case for recursion."""
    import onnx
    from onnx import TensorProto, helper
    nodes = []
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", ch, size, size])]

    def param(name, shape):
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        return name

    def conv_bn(x, name, relu):
        w = param(name + ".w", [ch, ch, 3, 3])
        nodes.append(helper.make_node("Conv", [x, w], [name + ".c"], name=name + ".c",
                                      kernel_shape=[3, 3], pads=[1] * 4))
        bn = [param(name + "." + k, [ch]) for k in ("g", "b", "m", "v")]
        nodes.append(helper.make_node("BatchNormalization", [name + ".c"] + bn, [name + ".bn"],
                                      name=name + ".bn"))
        if not relu:
            return name + ".bn"
        nodes.append(helper.make_node("Relu", [name + ".bn"], [name + ".r"], name=name + ".r"))
        return name + ".r"
    x = "input"
    for i in range(blocks):
        y = conv_bn(conv_bn(x, "b%d.1" % i, True), "b%d.2" % i, False)
        nodes.append(helper.make_node("Add", [x, y], ["b%d.add" % i], name="b%d.add" % i))
        nodes.append(helper.make_node("Relu", ["b%d.add" % i], ["b%d.out" % i],
                                      name="b%d.out" % i))
        x = "b%d.out" % i
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat"))
    fw, fb = param("fc.w", [classes, ch]), param("fc.b", [classes])
    nodes.append(helper.make_node("Gemm", ["flat", fw, fb], ["logits"], name="fc", transB=1))
    graph = helper.make_graph(nodes, "deep_narrow", inputs, [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_recursive_segments_bit_identical(tmp_path):
    """The recursive level (recompute.c: a checkpoint segment rebuilt by a
    binary schedule over the cuts inside it, O(log) of them kept at a time)
    on a deep, narrow residual network. With the host budget at 1 MiB nothing
    is offloaded, so between the nested plans and the smallest budget auto
    rebuilds segments recursively: the budget is walked down to the first
    plan that does, which must rebuild some convolution at least three
    times, pass the checker, be faster than the smallest-budget plan and
    train bit-identically to `none` with --poison."""
    onnx = deep_narrow_resnet(str(tmp_path / "deep.onnx"))
    batch = 4
    flags = ["--device", "h200", "--host-budget", "1MiB"]
    js = str(tmp_path / "probe.json")
    run([SNC, "plan", onnx, "--batch", str(batch), "--policy", "liveness", "--json", js] + flags)
    live = json.load(open(js))["arena_bytes"]
    low = smallest_budget(onnx, batch, *flags)
    found = None
    for k in range(64):
        b = int(live * (low / live) ** (k / 63))
        run([SNC, "plan", onnx, "--batch", str(batch), "--budget", str(b), "--json", js] + flags)
        p = json.load(open(js))
        if p["recursive_segments"]:
            found = (b, p)
            break
    assert found, "no budget gave a recursive plan"
    b, p = found
    facts = check_plan(p)
    per_node = {}
    for st in p["steps"]:
        if st["kind"] == "recompute" and st["op"] == "Conv":
            per_node[st["node"]] = per_node.get(st["node"], 0) + 1
    assert facts["recompute_expensive"] and max(per_node.values()) >= 3, per_node
    run([SNC, "plan", onnx, "--batch", str(batch), "--budget", str(low), "--json", js] + flags)
    assert p["est_step_seconds"] < json.load(open(js))["est_step_seconds"]
    ref = train3(onnx, batch, "none", str(tmp_path / "none"), *flags)
    out = str(tmp_path / "recursive")
    dump = train3(onnx, batch, "auto", out, *(flags + ["--budget", str(b)]))
    bad = same_files(ref, dump)
    assert not bad, "recursive: parameters differ from policy none: %s" % bad[:5]
    plan, _ = check_run(out)
    assert plan["recursive_segments"] == p["recursive_segments"]
    print("recursive at", b, "of", live, "segments", p["recursive_segments"],
          "most rebuilds of a conv", max(per_node.values()))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_auto_tiers_bit_identical(optimizer, tmp_path):
    """One budget per auto tier on fashion_cnn (the h200 profile's costs, under
    which it has rebuilds chosen per tensor, a convolution's among them, and
    cheap or checkpointed recomputation where those are faster, optimizer
    state and then parameters on the host, and offload where that is faster
    than moving optimizer state), with SGD and
    Adam: each plan moves what its tier moves, and trains bit-identically to
    `none`."""
    onnx, batch = os.path.join(ROOT, "examples", "fashion_cnn.onnx"), 8
    flags = ["--device", "h200", "--optimizer", optimizer]
    ref = train3(onnx, batch, "none", str(tmp_path / "none"), *flags)
    tiers = find_tiers(onnx, batch, str(tmp_path), *flags, points=24)
    # (its offload tier can be absent: moving optimizer state may be faster;
    # rebuilds chosen per tensor are faster than cheap and checkpointed
    # recomputation at every budget they fit: those tiers are gone)
    assert set(TIERS) - {"offload", "recompute", "checkpoint"} <= set(tiers), tiers
    for t in sorted(tiers):
        out = str(tmp_path / t)
        dump = train3(onnx, batch, "auto", out, "--budget", str(tiers[t]), *flags)
        bad = same_files(ref, dump)
        assert not bad, "%s at %d: parameters differ from policy none: %s" % (t, tiers[t], bad[:5])
        plan, f = check_run(out, tiers[t])
        host_opt, host_par = f["host_optimizer"], f["host_params"]
        if t == "recompute":
            assert f["recompute"] > 0 and f["copies"] == 0 and plan["host_bytes"] == 0, f
            assert f["recompute_expensive"] == 0, f
        elif t == "selective":
            assert f["recompute"] > 0 and f["copies"] == 0 and plan["selected_rebuilds"], f
        elif t == "checkpoint":
            assert f["recompute_expensive"] > 0 and f["copies"] == 0 and plan["checkpoints"], f
        elif t == "offload":
            assert f["copies"] > 0 and not host_opt and not host_par, f
        elif t == "host-optimizer":
            assert host_opt and not host_par, f
        else:
            assert host_opt and host_par, f
        print(optimizer, t, tiers[t], plan["planned_policy"], plan["arena_bytes"],
              plan["host_bytes"], f)


def test_recompute_resnet50_224(tmp_path):
    """On resnet50 at batch 32, 224x224, recomputation brings the arena
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
