"""auto's optimal persistent checkpointing family (compiler/plan/optimal.c)
against the optimum computed here, by a dynamic program of this file's own,
from the liveness plan's own per-step costs and sizes (plan.json).

The model: a plain chain of L x (Conv 3x3, C channels, padding 1; ReLU), then
global average pooling and a Linear layer. Stage j (Conv j and ReLU j)
keeps one tensor for backward, its ReLU output x_j (a slot); B_j, the
backward steps that read x_j (ReLU j's and Conv j+1's), need x_j alone, and
x_j comes from x_j-1 by F_j. The optimum of a persistent schedule with S
slots beside the input (Griewank's revolve with per-stage costs; Beaumont et
al. 2019 for heterogeneous chains):

    E(s, t, m) = b_s                                   if s == t
               = min over s < k <= t of f_s+1 + ... + f_k + E(k, t, m - 1) + E(s, k - 1, m)
                                                       if m >= 1 (else no schedule)

S = floor((M - overhead) / slot) at a budget of M bytes, where the overhead
is the most bytes any training step of the liveness plan holds beside the
slots live there. auto runs with --host-budget 1 (recomputation only).
"""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plan_check import check_plan  # noqa: E402
from snc_harness import SNC, run  # noqa: E402
from test_policies_bitexact import check_run, same_files, train3  # noqa: E402


def export_chain(path, layers, channels, size):
    import torch
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU()]
    m = torch.nn.Sequential(*mods, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(channels, 10))
    torch.onnx.export(m, torch.zeros(2, channels, size, size), path, opset_version=13,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "b"}, "output": {0: "b"}})
    return path


def plan_json(onnx, batch, out, *flags):
    """auto's (or a policy's) plan.json; None where snc refuses the budget."""
    r = subprocess.run([SNC, "plan", onnx, "--batch", str(batch), "--device", "h200",
                        "--json", out] + list(flags), capture_output=True, text=True)
    if r.returncode == 2:
        return None
    assert r.returncode == 0, r.stderr
    return json.load(open(out))


def chain_model(p, layers):
    """f_1..f_L, b_0..b_L, the rest, the slot and the overhead from a liveness plan."""
    steps, inst, tr = p["steps"], p["instances"], p["train_steps"]
    stage = {}   # forward node -> (j, "Conv" | "Relu")
    slots = []
    for st in steps[:tr]:
        if st["kind"] == "forward" and st["op"] in ("Conv", "Relu"):
            j = 1 + sum(1 for v in stage.values() if v[1] == st["op"])
            stage[st["node"]] = (j, st["op"])
            if st["op"] == "Relu":
                slots.append(inst[st["outputs"][0]])
    assert len(slots) == layers
    f, b, rest = [0.0] * (layers + 1), [0.0] * (layers + 1), 0.0
    for st in steps[:tr]:
        j, op = stage.get(st["node"].split("/bwd")[0], (None, None))
        if j is not None and st["kind"] == "forward":
            f[j] += st["est_seconds"]
        elif j is not None and st["kind"] == "backward":
            b[j - 1 if op == "Conv" else j] += st["est_seconds"]   # Conv j's reads x_j-1
        else:
            rest += st["est_seconds"]
    slot = max(x["bytes"] for x in slots)
    overhead = max(st["live_bytes"] - sum(x["bytes"] for x in slots if x["first"] <= s <= x["last"])
                   for s, st in enumerate(steps[:tr]))
    return f, b, rest, slot, overhead


def optimum_table(f, b):
    """opt[S]: the least seconds of forwards and backwards with S slots
    (bottom-up over segment length; inf where none)."""
    L = len(f) - 1
    pre = [0.0]
    for x in f[1:]:
        pre.append(pre[-1] + x)
    inf = float("inf")
    # E[m][s][t]
    E = [[[inf] * (L + 1) for _ in range(L + 1)] for _ in range(L + 1)]
    for m in range(L + 1):
        for s in range(L + 1):
            E[m][s][s] = b[s]
    for m in range(1, L + 1):
        for length in range(1, L + 1):
            for s in range(0, L + 1 - length):
                t = s + length
                E[m][s][t] = min(pre[k] - pre[s] + E[m - 1][k][t] + E[m][s][k - 1]
                                 for k in range(s + 1, t + 1))
    return [E[m][0][L] for m in range(L + 1)]


CHAINS = {"chain30": (30, 32, 128, 32),      # the chain
          "heldout": (24, 24, 112, 24)}      # not used while building optimal.c


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_auto_at_the_optimum_on_a_chain(name, tmp_path):
    """At every budget from the liveness arena down to the smallest the
    optimum accepts (one slot), 40 budgets spaced geometrically and that
    smallest one, auto (recomputation only) is accepted and within 2% of the
    optimum's estimate; its estimate never falls as the budget shrinks (no
    inversion); and below 60% of the liveness arena it chooses a plan of the
    optimal family somewhere."""
    layers, ch, size, batch = CHAINS[name]
    onnx = export_chain(str(tmp_path / (name + ".onnx")), layers, ch, size)
    js = str(tmp_path / "p.json")
    live = plan_json(onnx, batch, js, "--policy", "liveness")
    f, b, rest, slot, overhead = chain_model(live, layers)
    base = live["est_step_seconds"]
    opt = optimum_table(f, b)
    # the model reproduces the liveness plan's estimate with every slot
    assert abs(opt[layers] + rest - base) <= 1e-6 * base
    arena = live["arena_bytes"]
    smallest = overhead + slot
    budgets = sorted({int(arena * (smallest / arena) ** (k / 39)) for k in range(40)} | {smallest},
                     reverse=True)
    prev, rows, chose_optimal = 0.0, [], 0
    for M in budgets:
        S = min(layers, (M - overhead) // slot)
        best = opt[S] + rest
        p = plan_json(onnx, batch, js, "--budget", str(M), "--host-budget", "1")
        assert p is not None, "auto refused %d bytes (%d slots; the optimum: %.3f)" % (
            M, S, best / base)
        check_plan(p)
        assert p["arena_bytes"] <= M
        ratio = p["est_step_seconds"] / best
        rows.append((M, S, p["est_step_seconds"] / base, best / base, ratio))
        assert ratio <= 1.02, rows[-1]
        assert p["est_step_seconds"] >= prev * (1 - 1e-9), (M, p["est_step_seconds"], prev)
        prev = p["est_step_seconds"]
        if M < 0.6 * arena:
            chose_optimal += p["optimal_schedule_kept"] >= 0
    for r in rows:
        print("%s budget %.1f MiB, %d slots: auto %.3f, optimum %.3f, auto/optimum %.3f" %
              ((name, r[0] / 2**20) + r[1:]))
    assert chose_optimal, "auto never chose an optimal persistent schedule"


@pytest.mark.parametrize("model", ["chain", "residual"])
def test_optimal_schedule_bit_identical(model, tmp_path):
    """A plan of the optimal family trains bit-identically to policy none
    with --poison and a slow copy engine, and passes the plan checker: a
    small chain (the budget walked down from the liveness arena to the first
    plan whose schedule rebuilds a convolution at least twice) and a deep,
    narrow residual network with BatchNormalization (the first plan of the
    family: block outputs are the cuts, BN rebuilt from its saved
    statistics)."""
    if model == "chain":
        batch, flags, twice = 4, ["--device", "h200", "--host-budget", "1"], True
        onnx = export_chain(str(tmp_path / "small.onnx"), 16, 8, 32)
    else:
        from test_policies_bitexact import deep_narrow_resnet
        batch, flags, twice = 4, ["--device", "h200", "--host-budget", "1MiB"], False
        onnx = deep_narrow_resnet(str(tmp_path / "deep.onnx"))
    js = str(tmp_path / "p.json")
    arena = plan_json(onnx, batch, js, "--policy", "liveness", *flags[2:])["arena_bytes"]
    found = None
    for pct in range(99, 5, -2):
        b = arena * pct // 100
        p = plan_json(onnx, batch, js, "--budget", str(b), *flags[2:])
        if p is None:
            break
        per_conv = {}
        for st in p["steps"]:
            if st["kind"] == "recompute" and st["op"] == "Conv":
                per_conv[st["node"]] = per_conv.get(st["node"], 0) + 1
        if p["optimal_schedule_kept"] >= 0 and per_conv and max(per_conv.values()) >= 1 + twice:
            found = (b, p, per_conv)
            break
    assert found, "no budget gave an optimal schedule that rebuilds a convolution"
    b, p, per_conv = found
    check_plan(p)
    ref = train3(onnx, batch, "none", str(tmp_path / "none"), *flags)
    out = str(tmp_path / "optimal")
    dump = train3(onnx, batch, "auto", out, *(flags + ["--budget", str(b)]))
    bad = same_files(ref, dump)
    assert not bad, "parameters differ from policy none: %s" % bad[:5]
    plan, _ = check_run(out, b)
    assert plan["optimal_schedule_kept"] == p["optimal_schedule_kept"]
    print(model, "optimal schedule at", b, "of", arena, "kept", p["optimal_schedule_kept"],
          "most rebuilds of a conv", max(per_conv.values()))


def lrn_chain(path, layers=16, ch=8, size=32):
    """Conv, ReLU, LRN(size 3) x layers (onnx.helper): an LRN's backward reads
    its input and its output, the cut after it."""
    import onnx
    from onnx import TensorProto, helper
    nodes = []
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", ch, size, size])]
    x = "input"
    for i in range(layers):
        inputs.append(helper.make_tensor_value_info("w%d" % i, TensorProto.FLOAT, [ch, ch, 3, 3]))
        nodes.append(helper.make_node("Conv", [x, "w%d" % i], ["c%d" % i], kernel_shape=[3, 3],
                                      pads=[1] * 4))
        nodes.append(helper.make_node("Relu", ["c%d" % i], ["r%d" % i]))
        nodes.append(helper.make_node("LRN", ["r%d" % i], ["l%d" % i], size=3))
        x = "l%d" % i
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    inputs.append(helper.make_tensor_value_info("fw", TensorProto.FLOAT, [10, ch]))
    nodes.append(helper.make_node("Gemm", ["flat", "fw"], ["logits"], transB=1))
    graph = helper.make_graph(nodes, "lrn_chain", inputs, [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.mark.parametrize("model", ["chain", "lrn", "residual"])
def test_schedule_costs_what_its_model_says(model, tmp_path):
    """Every plan of the optimal family that auto chooses, at 30 budgets from
    the liveness arena down to a tenth of it, spends in its recompute steps
    the seconds the dynamic program's model promised (plan.json
    optimal_schedule_seconds; within 0.5%: BatchNormalization is rebuilt by
    its cheaper saved-statistics twin): recompute.c runs each backward step
    in the interval optimal.c counted it in (an LRN's backward reads the cut
    after it; counted by the latest tensor read, it rebuilt its interval
    twice, 45% over the model on a 40-layer LRN chain)."""
    path = str(tmp_path / (model + ".onnx"))
    if model == "chain":
        onnx = export_chain(path, 16, 8, 32)
    elif model == "lrn":
        onnx = lrn_chain(path)
    else:
        from test_policies_bitexact import deep_narrow_resnet
        onnx = deep_narrow_resnet(path)
    js = str(tmp_path / "p.json")
    arena = plan_json(onnx, 4, js, "--policy", "liveness")["arena_bytes"]
    seen = 0
    for k in range(30):
        p = plan_json(onnx, 4, js, "--budget", str(int(arena * 0.1 ** (k / 29))),
                      "--host-budget", "1MiB")
        if p is None or p["optimal_schedule_kept"] < 0:
            continue
        seen += 1
        model_s, real = p["optimal_schedule_seconds"], p["recompute_seconds"]
        assert abs(real - model_s) <= 0.005 * model_s, (k, real, model_s)
    assert seen, "auto chose no optimal schedule"
