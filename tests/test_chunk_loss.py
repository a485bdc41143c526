"""The chunked LM head + cross-entropy (compiler/train/autodiff.c, chunk_loss):
a sequence loss over a MatMul head runs as one LMHEAD_CE step that writes the
loss and the gradients of the hidden state and the head's weight, the logits
a sixteenth of the rows at a time, never whole in the training step.

Checked here: the same loss and gradients as the whole-logits graph
(--no-chunk-loss) within float32 rounding, tied and untied heads, and both
against PyTorch; the training steps hold no logits (only the chunk's
workspace: at most a tenth of what the whole logits and their gradient held
at any step), nor does the eval pass (its LMHEAD_CE step writes per row the
loss term and the argmax); --eval, --generate and --predict give what the
whole-logits program gives. Bit-identity of every policy under --poison with
the chunked loss on is test_gpt.py's and test_plan_select.py's (the default
is on).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from snc_harness import SNC, compile_model, load_dump, one_step_grads, run  # noqa: E402

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
    # Nor does the eval pass: its head is a chunked step too, whose output
    # is (rows, 2), and no eval step is as large as the logits.
    ev = chunked["steps"][chunked["train_steps"]:]
    assert [s["op"] for s in ev if s["node"].endswith("/eval") and "LMHEAD" in s["op"]] == ["LMHEAD_CE"]
    def eval_largest(p):
        return max(i["bytes"] for i in p["instances"] if i["first"] >= p["train_steps"])
    assert eval_largest(whole) >= logits_bytes   # (the whole-logits eval pass: its logits)
    assert eval_largest(chunked) < logits_bytes, eval_largest(chunked)


def test_not_chunked_where_the_pattern_does_not_hold(tmp_path):
    """--precision bf16 keeps the whole logits (the chunked kernels are
    float32), and so does a classifier (a (batch, classes) output)."""
    _, path = gpt(str(tmp_path), 64, 8, 16, 2, 1, 2)
    route = run([SNC, "plan", path, "--batch", "2", "--dump", "route", "--precision", "bf16"]).stdout
    assert "LMHEAD_CE" not in route and "SOFTMAX_CE_BWD" in route


def test_eval_generate_predict_as_whole_logits(tmp_path):
    """The eval step's chunked head: --eval's test loss and accuracy (from its
    per-row terms and argmaxes), --generate's bytes and --predict's logits
    (copied to the host chunk by chunk) equal those of the whole-logits
    program (--no-chunk-loss) on the same weights and text (--lr 0: the two
    training steps change nothing). The chunks are a sixteenth of the 64
    rows, so every row's logits come from a chunk's product."""
    tmp = str(tmp_path)
    _, path = gpt(tmp, 256, 16, 32, 2, 2, 4, seed=3)
    text = os.path.join(tmp, "text.txt")
    with open(text, "wb") as f:
        f.write(b"Whose woods these are I think I know. His house is in the village though; " * 9)
    res = {}
    for name, flags in (("chunked", []), ("whole", ["--no-chunk-loss"])):
        prog = compile_model(path, os.path.join(tmp, name), 4, "--lr", "0", *flags)
        r = subprocess.run([prog, "--data", "tokens:" + text, "--eval", "tokens:" + text, "--steps",
                            "2", "--generate", "60", "--prompt", "His ", "--threads", "2"],
                           capture_output=True, timeout=300)   # (bytes: any byte may be drawn)
        assert r.returncode == 0, r.stderr
        ev = [ln for ln in r.stdout.splitlines() if b"test accuracy" in ln]
        gen = r.stdout[r.stdout.index(b"generated"):]
        out = os.path.join(tmp, name + ".npy")
        run([prog, "--predict", "tokens:" + text, "--out", out, "--threads", "2"])
        res[name] = (ev, gen, np.load(out))
    (ev_c, gen_c, pred_c), (ev_w, gen_w, pred_w) = res["chunked"], res["whole"]
    assert ev_c and ev_c == ev_w, (ev_c, ev_w)
    assert gen_c == gen_w, (gen_c, gen_w)
    assert pred_c.shape == pred_w.shape and pred_c.shape[1:] == (16, 256)
    np.testing.assert_allclose(pred_c, pred_w, rtol=1e-6, atol=1e-6)
    assert np.abs(pred_c).max() > 0.1   # (real logits, not zeros)
