"""hf_export.py — builds a small random-init Hugging Face or torchvision model,
exports it as a user would, and writes PyTorch's reference for one training
step (run by tests/test_hf_models.py in build/venv, the virtual environment
that ./configure.py --install-test-deps makes: Debian's torch with PyPI's
transformers pinned beside it).

    build/venv/bin/python tests/hf_export.py MODEL OPSET EXPORT_BATCH RUN_BATCH OUTDIR [--dynamic]

Writes OUTDIR/model.onnx (exported at EXPORT_BATCH, training mode, no constant
folding), OUTDIR/x.npy and y.npy (RUN_BATCH samples: token ids and next
tokens, or images and classes) and OUTDIR/ref.npz: the loss and every
parameter's gradient for that batch, in float32 and float64
("loss32", "loss64", "g32/NAME", "g64/NAME", NAME the ONNX initializer),
and "curve32", "curve64": the losses of STEPS (20) training steps on that
batch in float32 and float64, SGD with lr LR (0.05) and momentum 0.9, as
snc's program runs them.
Models come from config classes only: no weights are downloaded.
"""
import os
import sys
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")
F = torch.nn.functional
V, T = 64, 8          # vocabulary and sequence length of the text models
STEPS, LR = 20, 0.05  # the loss curve's steps and SGD's learning rate
IMG = 16              # image side of ViT; mobilenet takes 64 (its last BatchNorms then
                      # see 2x2 per image: at 32 px, 1x1 and batch 2, they are ill-conditioned)


class Logits(torch.nn.Module):
    """The model's logits as the one output (HF models return a dict)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        o = self.m(x)
        return o.logits if hasattr(o, "logits") else o


def build(name):
    import transformers as tr
    torch.manual_seed(0)
    if name == "gpt2":
        m = tr.GPT2LMHeadModel(tr.GPT2Config(
            vocab_size=V, n_positions=T, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0))
    elif name == "bert":
        m = tr.BertForMaskedLM(tr.BertConfig(
            vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=T, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0))
    elif name == "llama":
        m = tr.LlamaForCausalLM(tr.LlamaConfig(
            vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T))
    elif name == "vit":
        m = tr.ViTForImageClassification(tr.ViTConfig(
            image_size=IMG, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=32, num_labels=10, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0))
    elif name == "mobilenet_v3_small":
        import torchvision
        m = torchvision.models.mobilenet_v3_small(num_classes=10)
        for mod in m.modules():
            if isinstance(mod, torch.nn.Dropout):
                mod.p = 0.0
    else:
        raise SystemExit("unknown model " + name)
    # Larger weights than the transformers' 0.02 initialisation, so that every
    # path carries a gradient well above rounding (torchvision's Kaiming
    # initialisation is kept: 16 BatchNorms deep, more would blow the logits up).
    if name == "mobilenet_v3_small":
        return Logits(m)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.2))
    return Logits(m)


def sample(name, batch, rng):
    if name in ("vit", "mobilenet_v3_small"):
        side = IMG if name == "vit" else 64
        x = rng.standard_normal((batch, 3, side, side)).astype(np.float32)
        return x, rng.integers(0, 10, batch).astype(np.int64)
    return (rng.integers(0, V, (batch, T)).astype(np.int64),
            rng.integers(0, V, (batch, T)).astype(np.int64))


def main():
    name, opset, eb, rb, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    dynamic = "--dynamic" in sys.argv[6:]
    os.makedirs(out, exist_ok=True)
    model = build(name)
    model.train()
    rng = np.random.default_rng(1)
    xe, _ = sample(name, eb, rng)
    from torch.onnx import TrainingMode
    torch.onnx.export(model, (torch.tensor(xe),), os.path.join(out, "model.onnx"),
                      opset_version=opset, training=TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}} if dynamic else None)
    # ONNX initializer names are the state_dict names (tied weights once).
    import onnx
    inits = {i.name for i in onnx.load(os.path.join(out, "model.onnx")).graph.initializer}
    x, y = sample(name, rb, rng)
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "y.npy"), y)
    ref = {}
    for tag, dt in (("32", torch.float32), ("64", torch.float64)):
        m = build(name).to(dt)
        m.train()
        xt = torch.tensor(x) if x.dtype == np.int64 else torch.tensor(x, dtype=dt)
        logits = m(xt)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(y).reshape(-1))
        loss.backward()
        ref["loss" + tag] = np.array(loss.item())
        for k, p in m.named_parameters():
            if k in inits and p.grad is not None:
                ref["g%s/%s" % (tag, k)] = p.grad.numpy()
    for tag, dt in (("32", torch.float32), ("64", torch.float64)):
        m = build(name).to(dt)
        m.train()
        opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=0.9)
        xt = torch.tensor(x) if x.dtype == np.int64 else torch.tensor(x, dtype=dt)
        curve = []
        for _ in range(STEPS):
            opt.zero_grad()
            logits = m(xt)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                   torch.tensor(y).reshape(-1))
            loss.backward()
            opt.step()
            curve.append(loss.item())
        ref["curve" + tag] = np.array(curve)
    np.savez(os.path.join(out, "ref.npz"), **ref)


if __name__ == "__main__":
    main()
