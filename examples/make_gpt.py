#!/usr/bin/python3
"""make_gpt.py — a GPT-2-style decoder in PyTorch, exported to ONNX for snc.

Token and position embeddings (nn.Embedding), pre-LayerNorm blocks of causal
self-attention written out with matmuls, a masked fill and softmax (no
F.scaled_dot_product_attention), a GELU MLP, a final LayerNorm and a linear
head whose weight is tied to the token embedding (as GPT-2). The causal mask
is a buffer; torch exports it as an initializer, which snc recognises as a
constant. Exported in training mode with the weights as initializers at
batch --batch (torch bakes it into the Reshape targets; snc compile --batch
with another value follows it, unless the export batch is 1).

  /usr/bin/python3 examples/make_gpt.py -o gpt.onnx [--vocab 256 --block 64
      --embd 64 --heads 4 --layers 4 --gelu erf|tanh --opset 13..17 --batch 8]
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, T, gelu):
        super().__init__()
        self.H, self.gelu = H, gelu
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.shape
        D = C // self.H
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.H, D).transpose(1, 2)
        k = k.view(B, T, self.H, D).transpose(1, 2)
        v = v.view(B, T, self.H, D).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)),
                                   approximate="tanh" if self.gelu == "tanh" else "none"))


class GPT(nn.Module):
    def __init__(self, vocab=256, block=64, embd=64, heads=4, layers=4, gelu="erf", tied=True):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, embd), nn.Embedding(block, embd)
        self.blocks = nn.ModuleList([Block(embd, heads, block, gelu) for _ in range(layers)])
        self.lnf = nn.LayerNorm(embd)
        self.head = nn.Linear(embd, vocab, bias=False)
        # GPT-2's initialization (normal, std 0.02), so the first loss is near log(vocab).
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=0.02)
                if getattr(mod, "bias", None) is not None:
                    nn.init.zeros_(mod.bias)
        if tied:
            self.head.weight = self.wte.weight

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, dtype=torch.long))
        for b in self.blocks:
            x = b(x)
        return self.head(self.lnf(x))


def export(model, path, batch, block, opset=13):
    model.train()
    x = torch.zeros(batch, block, dtype=torch.long)
    torch.onnx.export(model, (x,), path, opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["idx"], output_names=["logits"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--block", type=int, default=64, help="sequence length T")
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--gelu", choices=["erf", "tanh"], default="erf")
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--untied", action="store_true", help="a head weight of its own")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    m = GPT(a.vocab, a.block, a.embd, a.heads, a.layers, a.gelu, not a.untied)
    export(m, a.output, a.batch, a.block, a.opset)
    n = sum(p.numel() for p in m.parameters())
    print("wrote %s: %d parameters, vocab %d, T %d, %d layers x %d heads x %d, opset %d"
          % (a.output, n, a.vocab, a.block, a.layers, a.heads, a.embd, a.opset))


if __name__ == "__main__":
    main()
