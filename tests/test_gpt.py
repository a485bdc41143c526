"""GPT-style language models from torch.onnx.export: one training step of the
whole model against PyTorch (loss and every parameter gradient, float32 and
float64 references), token data (npy int64 ids, tokens:FILE in llm.c's
layout and as raw bytes) and its errors.

The model is examples/make_gpt.py: token + position embeddings (Gather with
int64 ids and with constant positions), causal self-attention written out
(4-D batched MatMul, a constant mask through Where, Softmax over the last
axis), LayerNorm (decomposed below opset 17, LayerNormalization at 17), GELU
(Erf, or tanh with Pow at opset 13 / Mul at 17), and a head tied to the token
embedding, so the embedding's gradient sums a scatter-add and a matmul. The
loss is cross-entropy averaged over all batch x T positions, as
F.cross_entropy(logits.view(-1, V), y.view(-1)).

Tolerance as the CNN reference tests (onnx_ref.check): every gradient within
1e-4 of PyTorch float32 (or, where PyTorch float32 is itself that far from
float64, no farther from float64 than twice its error), the loss within 1e-5.
"""
import os
import struct
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from onnx_ref import check  # noqa: E402
from snc_harness import SNC, compile_model, load_dump, one_step_grads, run  # noqa: E402

import make_gpt  # noqa: E402

F = torch.nn.functional


def gpt_step(tmp, V, T, C, H, L, gelu, opset, batch=2, seed=0, tied=True, export_batch=None):
    torch.manual_seed(seed)
    model = make_gpt.GPT(V, T, C, H, L, gelu, tied)
    # Larger weights than GPT-2's 0.02, so every path carries a gradient well
    # above rounding (LayerNorm scales and biases away from 1 and 0 too).
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.2))
    path = os.path.join(tmp, "gpt.onnx")
    make_gpt.export(model, path, export_batch or batch, T, opset)
    rng = np.random.default_rng(seed)
    x = rng.integers(0, V, (batch, T)).astype(np.int64)
    y = rng.integers(0, V, (batch, T)).astype(np.int64)
    loss, dump = one_step_grads(path, tmp, x, y, batch, threads=2)
    res = {"ours": loss, "grads": {}}
    refs = {}
    for dt in (torch.float32, torch.float64):
        m = make_gpt.GPT(V, T, C, H, L, gelu, tied)
        m.load_state_dict(model.state_dict())
        m = m.to(dt)
        logits = m(torch.tensor(x))
        loss = F.cross_entropy(logits.reshape(-1, V), torch.tensor(y).reshape(-1))
        loss.backward()
        refs[dt] = (loss.item(), {k: p.grad.numpy() for k, p in m.named_parameters()})
    res["ref32"], res["ref64"] = refs[torch.float32][0], refs[torch.float64][0]
    for k in refs[torch.float64][1]:
        res["grads"][k] = (load_dump(dump, k), refs[torch.float32][1][k], refs[torch.float64][1][k])
    return res


@pytest.mark.parametrize("gelu,opset", [("erf", 13), ("tanh", 13), ("erf", 17), ("tanh", 17)])
def test_gpt_gradients_tied(gelu, opset, tmp_path):
    """The issue's model: T = 64, 4 layers, 4 heads, tied embeddings."""
    res = gpt_step(str(tmp_path), V=96, T=64, C=32, H=4, L=4, gelu=gelu, opset=opset)
    assert len(res["grads"]) == 2 + 4 * 12 + 2   # wte (tied with the head), wpe, blocks, lnf
    check(res, "gpt %s opset %d" % (gelu, opset))


def test_gpt_gradients_untied(tmp_path):
    res = gpt_step(str(tmp_path), V=50, T=16, C=32, H=2, L=1, gelu="erf", opset=13, batch=3,
                   tied=False)
    assert "head.weight" in res["grads"]
    check(res, "gpt untied")


def test_gpt_exported_at_another_batch(tmp_path):
    """Exported at batch 2 (view(2, T, H, D) targets), compiled at batch 3."""
    res = gpt_step(str(tmp_path), V=40, T=8, C=16, H=2, L=1, gelu="erf", opset=13, batch=3,
                   export_batch=2)
    check(res, "gpt exported at 2, run at 3")


class EncoderLM(torch.nn.Module):
    """nn.Embedding + nn.TransformerEncoderLayer (GELU, no dropout) + nn.Linear."""
    def __init__(self, V, C, H, norm_first):
        super().__init__()
        self.emb = torch.nn.Embedding(V, C)
        self.enc = torch.nn.TransformerEncoderLayer(C, H, 2 * C, dropout=0.0, activation="gelu",
                                                    batch_first=True, norm_first=norm_first)
        self.head = torch.nn.Linear(C, V)

    def forward(self, x):
        return self.head(self.enc(self.emb(x)))


@pytest.mark.parametrize("norm_first,opset", [(False, 13), (True, 17)])
def test_transformer_encoder_layer_gradients(norm_first, opset, tmp_path):
    """torch's own nn.TransformerEncoderLayer (nn.MultiheadAttention inside),
    post-norm at opset 13 and pre-norm at 17."""
    tmp, V, T, B = str(tmp_path), 30, 8, 2
    torch.manual_seed(3)
    model = EncoderLM(V, 16, 4, norm_first)
    path = os.path.join(tmp, "enc.onnx")
    model.train()
    torch.onnx.export(model, (torch.zeros(B, T, dtype=torch.long),), path, opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["idx"], output_names=["logits"])
    rng = np.random.default_rng(1)
    x = rng.integers(0, V, (B, T)).astype(np.int64)
    y = rng.integers(0, V, (B, T)).astype(np.int64)
    loss, dump = one_step_grads(path, tmp, x, y, B, threads=1)
    res = {"ours": loss, "grads": {}}
    refs = {}
    for dt in (torch.float32, torch.float64):
        m = EncoderLM(V, 16, 4, norm_first)
        m.load_state_dict(model.state_dict())
        m = m.to(dt)
        loss = F.cross_entropy(m(torch.tensor(x)).reshape(-1, V), torch.tensor(y).reshape(-1))
        loss.backward()
        refs[dt] = (loss.item(), {k: p.grad.numpy() for k, p in m.named_parameters()})
    res["ref32"], res["ref64"] = refs[torch.float32][0], refs[torch.float64][0]
    for k in refs[torch.float64][1]:
        res["grads"][k] = (load_dump(dump, k), refs[torch.float32][1][k], refs[torch.float64][1][k])
    assert len(res["grads"]) == 15   # emb, in/out proj, 2 linears, 2 norms, head (w, b)
    check(res, "TransformerEncoderLayer norm_first=%s opset %d" % (norm_first, opset))


# ---- token data -------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_prog(tmp_path_factory):
    """A 1-layer byte-level GPT (vocab 256, T 8), batch 2."""
    tmp = str(tmp_path_factory.mktemp("tok"))
    torch.manual_seed(1)
    m = make_gpt.GPT(256, 8, 16, 2, 1, "erf", True)
    path = os.path.join(tmp, "gpt.onnx")
    make_gpt.export(m, path, 2, 8, 13)
    return compile_model(path, os.path.join(tmp, "prog"), 2, "--policy", "none", "--lr", "0"), tmp


def llmc_file(path, tokens, magic=20240520, version=1, count=None):
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = magic, version, len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def test_tokens_file_equals_npy_windows(tiny_prog):
    """tokens:FILE (llm.c layout and raw bytes) gives exactly the loss of the
    same windows given as npy ids: inputs w[0:T], targets w[1:T+1]."""
    prog, tmp = tiny_prog
    text = b"The quick brown fox jumps over the lazy dog; " * 3
    stream = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    T = 8
    n = (len(stream) - 1) // T
    X = np.stack([stream[i * T:i * T + T] for i in range(n)])
    Y = np.stack([stream[i * T + 1:i * T + T + 1] for i in range(n)])
    np.save(os.path.join(tmp, "X.npy"), X)
    np.save(os.path.join(tmp, "Y.npy"), Y)
    raw = os.path.join(tmp, "text.txt")
    with open(raw, "wb") as f:
        f.write(text)
    llmc = os.path.join(tmp, "text.bin")
    llmc_file(llmc, stream)
    outs = []
    for spec in ("npy:%s,%s" % (os.path.join(tmp, "X.npy"), os.path.join(tmp, "Y.npy")),
                 "tokens:" + raw, "tokens:" + llmc):
        r = run([prog, "--data", "synthetic", "--steps", "0", "--eval", spec, "--threads", "1"])
        line = [s for s in r.stdout.splitlines() if "test loss" in s][-1]
        outs.append(line)
    assert outs[0] == outs[1] == outs[2], outs
    assert "bits/token" in outs[0] and "perplexity" in outs[0]
    # An independent check of the value: torch on the same windows.
    m = make_gpt.GPT(256, 8, 16, 2, 1, "erf", True)
    torch.manual_seed(1)
    m = make_gpt.GPT(256, 8, 16, 2, 1, "erf", True)
    with torch.no_grad():
        loss = F.cross_entropy(m(torch.tensor(X)).reshape(-1, 256), torch.tensor(Y).reshape(-1))
    ours = float(outs[0].split("test loss")[1].split()[0])
    assert abs(ours - loss.item()) < 1e-3, (ours, loss.item())


@pytest.mark.parametrize("case,expect", [
    ("bad_version", "version 7 is not supported"),
    ("odd_bytes", "but 201 bytes follow"),
    ("count", "promises 150 tokens"),
    ("short", "fewer than one window"),
    ("id_range", "outside the model's vocabulary"),
    ("npy_range", "token id 300 at sample 1, position 2"),
    ("npy_len", "sequence length is 8"),
])
def test_token_data_errors(tiny_prog, case, expect):
    prog, tmp = tiny_prog
    path = os.path.join(tmp, case + ".bin")
    spec = "tokens:" + path
    if case == "bad_version":
        llmc_file(path, list(range(100)), version=7)
    elif case == "odd_bytes":
        llmc_file(path, list(range(100)))
        with open(path, "ab") as f:
            f.write(b"x")
    elif case == "count":
        llmc_file(path, list(range(100)), count=150)
    elif case == "short":
        with open(path, "wb") as f:
            f.write(b"tiny")
    elif case == "id_range":
        llmc_file(path, [1, 2, 3] * 10 + [300])
    else:
        X = np.zeros((3, 8 if case == "npy_range" else 9), dtype=np.int64)
        if case == "npy_range":
            X[1, 2] = 300
        np.save(path + ".x.npy", X)
        np.save(path + ".y.npy", np.zeros((3, 8), dtype=np.int64))
        spec = "npy:%s.x.npy,%s.y.npy" % (path, path)
    r = run([prog, "--data", spec, "--steps", "1"], check=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert expect in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


# ---- plans ------------------------------------------------------------------------

@pytest.mark.parametrize("policy,opset", [("liveness", 13), ("recompute", 13), ("offload", 13),
                                          ("superneurons", 13), ("recompute", 17),
                                          ("superneurons", 17)])
def test_gpt_policies_bit_identical(policy, opset, tmp_path):
    """Every policy gives parameters bit-identical to `none` after 3 steps with
    --poison (a read of a dead region would be NaN), on a 2-layer GPT (at
    opset 17 with LayerNormalization and its saved mean and 1/std), with the
    chunked loss and the Softmax's own mask."""
    from test_policies_bitexact import same_files, train3
    tmp = str(tmp_path)
    torch.manual_seed(2)
    path = os.path.join(tmp, "gpt.onnx")
    make_gpt.export(make_gpt.GPT(64, 16, 32, 4, 2, "tanh", True), path, 2, 16, opset)
    base = train3(path, 2, "none", os.path.join(tmp, "none"))
    other = train3(path, 2, policy, os.path.join(tmp, policy))
    assert not same_files(base, other), policy
    import json
    plans = [json.load(open(os.path.join(tmp, p, "plan.json"))) for p in ("none", policy)]
    arena = [p["arena_bytes"] for p in plans]
    assert arena[1] < arena[0], (policy, arena)   # the plan did share or move memory
    # with the chunked loss (on by default) and the mask in the Softmax
    for p in plans:
        ops = {s["op"] for s in p["steps"]}
        assert "LMHEAD_CE" in ops and "Where" not in ops, ops


# ---- generation -------------------------------------------------------------------

def test_generate_samples_from_the_models_top5(tiny_prog):
    """--generate N --prompt TEXT: N bytes, the same for the same seed; the
    first one is among torch's 5 likeliest next bytes after the prompt."""
    prog, tmp = tiny_prog
    outs = []
    import subprocess
    for seed in (3, 3, 4):
        r = subprocess.run([prog, "--data", "synthetic", "--steps", "0", "--generate", "12",
                            "--prompt", "abc", "--seed", str(seed), "--threads", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        assert r.returncode == 0, r.stderr
        text = r.stdout.split(b"after the prompt):\n", 1)[1]
        assert text.startswith(b"abc") and len(text) == 3 + 12 + 1, text
        outs.append(text)
    assert outs[0] == outs[1]
    torch.manual_seed(1)
    m = make_gpt.GPT(256, 8, 16, 2, 1, "erf", True)
    with torch.no_grad():
        logits = m(torch.tensor([[97, 98, 99, 0, 0, 0, 0, 0]]))[0, 2]
    top5 = set(torch.topk(logits, 5).indices.tolist())
    for t in outs:
        assert t[3] in top5, (t, top5)


def test_generate_needs_a_byte_level_model(tmp_path):
    torch.manual_seed(0)
    path = os.path.join(str(tmp_path), "g.onnx")
    make_gpt.export(make_gpt.GPT(50, 8, 16, 2, 1, "erf", True), path, 2, 8, 13)
    prog = compile_model(path, os.path.join(str(tmp_path), "prog"), 2, "--policy", "none")
    r = run([prog, "--generate", "5"], check=False)
    assert r.returncode == 1 and "byte-level language model" in r.stderr, r.stderr


def test_recompute_drops_attention_scores(tmp_path):
    """Selective recomputation: under --policy recompute the attention scores
    Q K^T (batch x heads x T x T, inner dimension the head width) are rebuilt
    in backward, not kept; the products with weights stay checkpoints, and so
    does P V here (inner dimension T = 300, above NODE_CHEAP_MATMUL_K)."""
    import json
    tmp = str(tmp_path)
    torch.manual_seed(0)
    path = os.path.join(tmp, "g.onnx")
    make_gpt.export(make_gpt.GPT(16, 300, 16, 2, 3, "erf", True), path, 1, 300, 13)
    plans = {}
    for p in ("liveness", "recompute"):
        js = os.path.join(tmp, p + ".json")
        run([SNC, "plan", path, "--batch", "1", "--policy", p, "--json", js])
        plans[p] = json.load(open(js))
    rebuilt = {s["node"] for s in plans["recompute"]["steps"]
               if s["kind"] == "recompute" and s["op"] == "MatMul"}
    # (the scale 1/sqrt(d) is the product's alpha: fuse.c's fold_scales)
    assert rebuilt == {"/blocks.%d/MatMul*scale" % i for i in range(3)}, rebuilt
    # The layers' scores no longer wait for backward (measured: 3.8 MB
    # liveness, 2.9 MB rebuilding them; before the mask was the Softmax's own
    # and its backward ran in place, 4.9 MB and 2.8 MB).
    scores = 2 * 300 * 300 * 4   # heads x T x T floats, one layer
    arena = {p: plans[p]["arena_bytes"] for p in plans}
    assert arena["recompute"] <= arena["liveness"] - scores, arena


def test_progress_counts_tokens_and_predict_takes_token_ids(tiny_prog):
    """The progress line of a token model says tok/s (T tokens a sample),
    not img/s; --predict over token ids (npy:X.npy, no targets) and over
    tokens:FILE writes the same (N, T, 256) logits for the same windows."""
    prog, tmp = tiny_prog
    text = b"Pack my box with five dozen liquor jugs. " * 3
    stream = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    T = 8
    n = (len(stream) - 1) // T
    X = np.stack([stream[i * T:i * T + T] for i in range(n)])
    np.save(os.path.join(tmp, "Xp.npy"), X)
    raw = os.path.join(tmp, "ptext.txt")
    with open(raw, "wb") as f:
        f.write(text)
    r = run([prog, "--data", "tokens:%s" % raw, "--steps", "4", "--log-every", "1"])
    lines = [ln for ln in r.stdout.splitlines() if " step " in ln and "loss" in ln]
    assert lines and all("tok/s" in ln and "img/s" not in ln for ln in lines), r.stdout
    outs = []
    for spec in ("npy:%s" % os.path.join(tmp, "Xp.npy"), "tokens:%s" % raw):
        out = os.path.join(tmp, "pred.npy")
        run([prog, "--predict", spec, "--out", out])
        outs.append(np.load(out))
    assert outs[0].shape == (n, T, 256)
    np.testing.assert_array_equal(outs[0], outs[1])
