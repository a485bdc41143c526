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


class SharedW(torch.nn.Module):
    """Blocks whose three branches (two GELUs of their own products, one
    plain product) multiply one shared weight W: its gradient is the sum of
    three weight-gradient steps (ACCUMULATE), summed before one update, so
    moving one GELU's weight gradient past its carrier moves the sum and
    the update with it (compiler/plan/recompute.c, defer_set)."""

    def __init__(self, vocab, width, hidden, layers, one_gelu=False):
        super().__init__()
        nn = torch.nn
        self.one_gelu = one_gelu
        self.wte = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            b = nn.Module()
            b.ln = nn.LayerNorm(width)
            b.A, b.B, b.U = (nn.Linear(width, hidden) for _ in range(3))
            b.W = nn.Parameter(torch.randn(hidden, width) * 0.02)
            self.blocks.append(b)
        self.lnf = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        F = torch.nn.functional
        x = self.wte(idx)
        for b in self.blocks:
            h = b.ln(x)
            if self.one_gelu:   # plain, GELU, plain: the parameter's uses in backward
                v = b.B(h) @ b.W    # come together once the GELU's gradient moves
                u = b.U(h)
                y = F.gelu(b.A(h), approximate="tanh") @ b.W
                x = x + (v + y + u @ b.W)
            else:
                y1, y2 = F.gelu(b.A(h), approximate="tanh"), F.gelu(b.B(h), approximate="tanh")
                x = x + (y2 @ b.W + y1 @ b.W + b.U(h) @ b.W)
        return self.head(self.lnf(x))


def export_shared(path, layers, seq, one_gelu):
    torch.manual_seed(0)
    m = SharedW(64, 64, 256, layers, one_gelu).train()
    torch.onnx.export(m, (torch.zeros(4, seq, dtype=torch.long),), path, opset_version=13,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["idx"], output_names=["logits"])


def test_carried_rebuilds_with_a_shared_weight(tmp_path):
    """Where two GELU outputs feed products with one shared weight, their
    carriers would each move the weights' gradient sum and update: a step
    may move past one carrier only (before that check the update ran before
    one of the gradients it sums, and plans at other budgets read the
    gradient before it was written). At 24 budgets from the liveness arena
    down: every plan passes plan_check, and where a plan carries a rebuild,
    3 steps under --poison equal policy none's bit for bit."""
    from test_policies_bitexact import same_files, train3
    tmp = str(tmp_path)
    path = os.path.join(tmp, "shared.onnx")
    export_shared(path, 2, 32, False)
    L = plan(path, 4, tmp, "--policy", "liveness")["arena_bytes"]
    carried = []
    for k in range(24):
        b = int(L * (1 - 0.6 * k / 23))
        p = plan(path, 4, tmp, "--budget", str(b))
        check_plan(p)
        if p["carried_rebuilds"] and p["arena_bytes"] not in [a for _, a in carried]:
            carried.append((b, p["arena_bytes"]))
    assert carried, "no plan carries a rebuild"
    base = train3(path, 4, "none", os.path.join(tmp, "none"), "--device", "h200")
    for b, _ in carried[:3]:
        dump = train3(path, 4, "auto", os.path.join(tmp, "auto%d" % b), "--budget", str(b),
                      "--device", "h200")
        bad = same_files(base, dump)
        assert not bad, (b, bad[:5])


def test_carried_rebuild_moves_a_parameters_uses_together(tmp_path):
    """With the parameters on the host, a moved weight gradient can put two
    uses of one parameter next to each other (one trip to the device fewer
    than the route without recomputation has): auto's search must not take
    the base route's trips as a bound for such plans (it stopped with an
    internal error, an estimate under its bound, at 45% of the liveness
    arena and below). At 24 budgets from the liveness arena to 40%: a plan
    that passes plan_check, or where none fits, the error that says the
    smallest budget that does."""
    tmp = str(tmp_path)
    path = os.path.join(tmp, "shared1.onnx")
    export_shared(path, 1, 64, True)
    L = plan(path, 4, tmp, "--policy", "liveness")["arena_bytes"]
    js, planned, refused = os.path.join(tmp, "p.json"), 0, 0
    for k in range(24):
        r = run([SNC, "plan", path, "--batch", "4", "--device", "h200", "--json", js, "--budget",
                 str(int(L * (1 - 0.6 * k / 23)))], check=False)
        if r.returncode == 0:
            check_plan(json.load(open(js)))
            planned += 1
        else:
            assert r.returncode == 2 and "the smallest budget that fits is" in r.stderr, r.stderr
            refused += 1
    assert planned and refused, (planned, refused)
