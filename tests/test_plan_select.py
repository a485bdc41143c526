"""auto's rebuilds chosen per tensor (compiler/plan/select.c) on transformers:
the GPT of the planner issue (4 layers, 8 heads, 256 wide, T = 256,
vocabulary 256, batch 8, h200 costs) planned at 40 budgets from its liveness
arena down to 40% of it, and a small GPT trained bit-identically to `none`
under a plan of that family (carried rebuilds included)."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from snc_harness import ROOT, SNC, run  # noqa: E402
from plan_check import check_plan  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
sys.path.insert(0, os.path.join(ROOT, "examples"))
import make_gpt  # noqa: E402

MiB = 1 << 20


def plan(model, batch, tmp, *flags):
    js = os.path.join(tmp, "p.json")
    run([SNC, "plan", model, "--batch", str(batch), "--device", "h200", "--json", js] + list(flags))
    return json.load(open(js))


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("select") / "gpt.onnx")
    torch.manual_seed(0)
    make_gpt.export(make_gpt.GPT(256, 256, 256, 8, 4, "erf", True), path, 8, 256, 13)
    return path


def test_gpt_budget_sweep(gpt, tmp_path):
    """At 40 budgets from the liveness arena to 40% of it: every plan fits and
    passes plan_check; the estimate never falls as the budget grows; from
    the first budget under the liveness arena down to 50%, auto rebuilds
    tensors chosen one by one and lands under the budget by less than the
    largest activation (it does not drop a whole tier at once: before
    select.c the cheap rule landed 23.5 MiB under a 75% budget and rebuilt
    161 tensors); and at 50% it rebuilds attention probabilities (Softmax,
    with the Q K^T MatMul that makes its input)."""
    tmp = str(tmp_path)
    live = plan(gpt, 8, tmp, "--policy", "liveness")
    L = live["arena_bytes"]
    largest = max(i["bytes"] for i in live["instances"] if i["kind"] == "activation")
    assert largest == 16 * MiB   # batch x heads x T x T floats: one layer's scores
    budgets = [int(L * (1 - 0.6 * k / 39)) for k in range(40)]
    rows = []
    for b in budgets:
        p = plan(gpt, 8, tmp, "--budget", str(b))
        check_plan(p)
        assert p["arena_bytes"] <= b, (b, p["arena_bytes"])
        rows.append((b, p))
    for (b1, p1), (b2, p2) in zip(rows, rows[1:]):   # b1 > b2
        assert p1["est_step_seconds"] <= p2["est_step_seconds"] * (1 + 1e-12), (b1, b2)
    for b, p in rows[1:]:
        if b < L // 2:
            break
        assert p["selected_rebuilds"] > 0 and "chosen per tensor" in p["note"], (b, p["note"])
        assert b - p["arena_bytes"] < largest, (b, p["arena_bytes"])
    half = plan(gpt, 8, tmp, "--budget", str(L // 2))
    rebuilt = [s["op"] for s in half["steps"] if s["kind"] == "recompute"]
    assert "Softmax" in rebuilt and "MatMul" in rebuilt, rebuilt
    # The planner issue's goals, on the plans' own estimates (h200 costs):
    # within 1.03x the liveness step at 75% of its arena, 1.10x at 50%. Both
    # need GELU (and LayerNorm) outputs rebuilt by their backward steps
    # (carried rebuilds: the write of the output alone); by recompute steps
    # the best per-tensor sets were 1.0301x and 1.1006x.
    for frac, goal in ((0.75, 1.03), (0.5, 1.10)):
        p = plan(gpt, 8, tmp, "--budget", str(int(L * frac)))
        ratio = p["est_step_seconds"] / live["est_step_seconds"]
        print("GPT at %d%% of the liveness arena: arena %.1f MiB, est. %.4f x the liveness "
              "step, %d tensors rebuilt, %d by carriers" % (100 * frac, p["arena_bytes"] / MiB,
                                                          ratio, p["selected_rebuilds"],
                                                          p["carried_rebuilds"]))
        assert ratio <= goal, (frac, ratio)
        assert p["carried_rebuilds"] > 0, frac
        carriers = [s for s in p["steps"] if "rebuilds" in s]
        assert len(carriers) == p["carried_rebuilds"], carriers
        for s in carriers:   # a fused chain's or LayerNorm's backward that also writes y
            assert s["kind"] == "backward" and s["op"] in ("FUSED_BWD", "LN_BWD"), s
            out = p["instances"][s["rebuilds"]]
            assert out["first"] == s["index"] and out["tensor"].endswith("_output_0"), out


def test_selective_plan_trains_bit_identically(tmp_path):
    """A 2-layer GPT under auto at budgets where it rebuilds tensors chosen per
    tensor (found from the plans): parameters after 3 steps with --poison
    (a read of a dead region is NaN) and a slow copy engine equal policy
    none's bit for bit."""
    from test_policies_bitexact import same_files, train3
    tmp = str(tmp_path)
    torch.manual_seed(2)
    path = os.path.join(tmp, "gpt.onnx")
    make_gpt.export(make_gpt.GPT(64, 32, 64, 4, 2, "tanh", True), path, 4, 32, 13)
    flags = ["--device", "h200"]
    L = plan(path, 4, tmp, "--policy", "liveness")["arena_bytes"]
    chosen = []
    for frac in (0.9, 0.8, 0.7, 0.6):
        p = plan(path, 4, tmp, "--budget", str(int(L * frac)))
        if p["selected_rebuilds"] and p["arena_bytes"] not in [a for _, a in chosen]:
            chosen.append((int(L * frac), p["arena_bytes"]))
    assert len(chosen) >= 2, chosen
    base = train3(path, 4, "none", os.path.join(tmp, "none"), *flags)
    carried, kinds = 0, set()
    for b, _ in chosen[:2]:
        out = os.path.join(tmp, "auto%d" % b)
        dump = train3(path, 4, "auto", out, "--budget", str(b), *flags)
        bad = same_files(base, dump)
        assert not bad, (b, bad[:5])
        p = json.load(open(os.path.join(out, "plan.json")))
        assert p["selected_rebuilds"] > 0
        assert p["carried_rebuilds"] or any(s["kind"] == "recompute" for s in p["steps"])
        carried += p["carried_rebuilds"]
        ops = set(s["op"] for s in p["steps"] if "rebuilds" in s)
        src = open(os.path.join(out, "train.c")).read()   # the carriers' kernels
        assert ("FUSED_BWD" in ops) == ("snrt_fused_bwd_y(" in src), ops
        assert ("LN_BWD" in ops) == ("snrt_ln_bwd_y(" in src), ops
        kinds |= ops
    # a GELU or LayerNorm output rebuilt by its backward step (snrt_fused_bwd_y,
    # snrt_ln_bwd_y) gives the forward's bits: the weight gradient it feeds
    # would differ
    assert carried > 0 and kinds == {"FUSED_BWD", "LN_BWD"}, kinds
