"""The chunked LM head + cross-entropy (compiler/train/autodiff.c, chunk_loss):
a sequence loss over a MatMul head runs as one LMHEAD_CE step that writes the
loss and the gradients of the hidden state and the head's weight, the logits
a sixteenth of the rows at a time, never whole in the training step.

Checked here: the same loss and gradients as the whole-logits graph
(--no-chunk-loss) within float32 rounding, tied and untied heads, and both
against PyTorch; the training steps hold no logits (only the chunk's
workspace: at most a tenth of what the whole logits and their gradient held
at any step); the eval pass keeps the whole product (--generate and the test
loss read it). Bit-identity of every policy under --poison with the chunked
loss on is test_gpt.py's and test_plan_select.py's (the default is on).
"""
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from snc_harness import SNC, load_dump, one_step_grads, run  # noqa: E402

import make_gpt  # noqa: E402


def gpt(tmp, V, T, C, H, L, batch, tied=True, seed=0):
    torch.manual_seed(seed)
    model = make_gpt.GPT(V, T, C, H, L, "erf", tied)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    path = os.path.join(tmp, "gpt.onnx")
    make_gpt.export(model, path, batch, T, 13)
    return model, path


def plan(path, tmp, batch, *flags):
    out = os.path.join(tmp, "plan%d.json" % len(os.listdir(tmp)))
    run([SNC, "plan", path, "--batch", str(batch), "--policy", "liveness", "--json", out] + list(flags))
    return json.load(open(out))


@pytest.mark.parametrize("tied", [True, False])
def test_same_loss_and_gradients_as_whole_logits(tied, tmp_path):
    V, T, C, B = 300, 24, 32, 3   # 72 rows: chunks of 5, the last one of 2
    model, path = gpt(str(tmp_path), V, T, C, 2, 2, B, tied)
    rng = np.random.default_rng(1)
    x = rng.integers(0, V, (B, T)).astype(np.int64)
    y = rng.integers(0, V, (B, T)).astype(np.int64)
    res = {}
    for name, flags in (("chunked", []), ("whole", ["--no-chunk-loss"])):
        d = tmp_path / name
        d.mkdir()
        res[name] = one_step_grads(path, str(d), x, y, B, *flags, threads=2)
    route = run([SNC, "plan", path, "--batch", str(B), "--dump", "route"]).stdout
    assert "LMHEAD_CE " in route and "SOFTMAX_CE" not in route
    whole = run([SNC, "plan", path, "--batch", str(B), "--dump", "route", "--no-chunk-loss"]).stdout
    assert "LMHEAD_CE" not in whole and "SOFTMAX_CE_BWD" in whole
    (lc, dc), (lw, dw) = res["chunked"], res["whole"]
    assert abs(lc - lw) <= 1e-6 * abs(lw), (lc, lw)
    m = model.double()
    logits = m(torch.tensor(x))
    ref = torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.tensor(y).reshape(-1))
    ref.backward()
    assert abs(lc - ref.item()) <= 1e-5 * abs(ref.item())
    names = [k for k, _ in m.named_parameters()]
    assert ("head.weight" in names) == (not tied)
    for k, p in m.named_parameters():
        a, b = load_dump(dc, k), load_dump(dw, k)
        scale = np.abs(b).max() + 1e-30
        assert np.abs(a - b).max() <= 1e-5 * scale, (k, np.abs(a - b).max(), scale)
        assert np.abs(a - p.grad.numpy()).max() <= 1e-4 * (np.abs(p.grad.numpy()).max() + 1e-30), k


def test_training_never_holds_the_logits(tmp_path):
    """Vocabulary-heavy: the logits (8 x 64 x 2048 floats, 4 MiB) and their
    gradient dominate a layer. Chunked, no training step reads or writes a
    logits tensor, the chunk workspace is at most a tenth of the logits'
    bytes live at the whole-logits plan's worst step, and the arena shrinks
    by at least the logits' bytes."""
    V, T, C, B = 2048, 64, 128, 8
    _, path = gpt(str(tmp_path), V, T, C, 4, 4, B)
    d = tmp_path / "plans"
    d.mkdir()
    chunked, whole = plan(path, str(d), B), plan(path, str(d), B, "--no-chunk-loss")
    logits_bytes = B * T * V * 4

    def logits_live(p):
        """The most bytes of logits-shaped training tensors (logits and
        their gradient) and LMHEAD workspaces live at one training step."""
        inst = p["instances"]
        big = [i for i in inst if i["bytes"] >= logits_bytes // 16 and i["first"] < p["train_steps"]
               and (i["tensor"] or "").split("@")[0] in ("logits", "logits.grad")]
        ws = {s["workspace"] for s in p["steps"][:p["train_steps"]]
              if s["op"].startswith("LMHEAD_CE") and s["workspace"] is not None}
        big += [inst[w] for w in ws]
        return max(sum(i["bytes"] for i in big if i["first"] <= s <= i["last"])
                   for s in range(p["train_steps"]))

    before, after = logits_live(whole), logits_live(chunked)
    assert before >= 2 * logits_bytes   # the logits and their gradient, together
    assert 0 < after <= 0.1 * before, (after, before)
    train_tensors = {chunked["instances"][i]["tensor"] for s in chunked["steps"][:chunked["train_steps"]]
                     for i in s["inputs"] + s["outputs"] if i is not None and i >= 0}
    assert "logits" not in train_tensors and "logits.grad" not in train_tensors
    # (the peak moves elsewhere: the arena shrinks by less than before - after)
    assert chunked["arena_bytes"] <= whole["arena_bytes"] - logits_bytes, \
        (chunked["arena_bytes"], whole["arena_bytes"])
    # The eval pass keeps the whole product.
    assert any(s["op"] == "MatMul" and s["node"].endswith("/eval")
               for s in chunked["steps"][chunked["train_steps"]:])


def test_not_chunked_where_the_pattern_does_not_hold(tmp_path):
    """--precision bf16 keeps the whole logits (the chunked kernels are
    float32), and so does a classifier (a (batch, classes) output)."""
    _, path = gpt(str(tmp_path), 64, 8, 16, 2, 1, 2)
    route = run([SNC, "plan", path, "--batch", "2", "--dump", "route", "--precision", "bf16"]).stdout
    assert "LMHEAD_CE" not in route and "SOFTMAX_CE_BWD" in route
