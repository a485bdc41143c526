#!/usr/bin/python3
"""make_fashion_cnn.py — writes examples/fashion_cnn.onnx, the small CNN of the
README's main job (28x28 grey images, 10 classes), with Debian's python3-torch.

    /usr/bin/python3 examples/make_fashion_cnn.py [--out examples/fashion_cnn.onnx]
                                                  [--check-epochs N]

The network: conv 32 3x3 + BN + ReLU + maxpool 2, conv 64 3x3 + BN + ReLU +
maxpool 2, flatten, dropout 0.25, Gemm 3136->64, ReLU, Gemm 64->10 (about
220k parameters, 0.9 MB of float32). Weights are PyTorch's default random
init with a fixed seed, stored as initializers; snc trains them. The graph is
exported in training mode (BatchNormalization with batch statistics, Dropout
kept) with a symbolic batch dimension, so `snc ... --batch N` sets it.

--check-epochs N trains a copy in PyTorch for N epochs (SGD, momentum 0.9,
lr 0.01, batch 64) on /usr/share/datasets/fashion-mnist and prints the test
accuracy: a sanity check that the model can reach the main job's target.
What is written to --out is always the untrained model.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from idx_io import read_idx  # noqa: E402

LR = 0.01
DATA = "/usr/share/datasets/fashion-mnist"


class FashionCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * 7 * 7, 64), nn.ReLU(),
            nn.Linear(64, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def check(model, epochs):
    xs = torch.from_numpy(read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz")).copy())
    ys = torch.from_numpy(read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz")).astype(np.int64))
    xt = torch.from_numpy(read_idx(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")).copy())
    yt = torch.from_numpy(read_idx(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")).astype(np.int64))
    xs = xs.float().div(255).unsqueeze(1)
    xt = xt.float().div(255).unsqueeze(1)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    t0 = time.time()
    for ep in range(epochs):
        model.train()
        perm = torch.randperm(len(xs))
        for i in range(0, len(xs), 64):
            idx = perm[i:i + 64]
            loss = nn.functional.cross_entropy(model(xs[idx]), ys[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        print("epoch %d: test accuracy %.4f (%.0f s)" % (ep + 1, acc, time.time() - t0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "fashion_cnn.onnx"))
    ap.add_argument("--check-epochs", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.01, help="learning rate of the check")
    args = ap.parse_args()
    global LR
    LR = args.lr
    torch.manual_seed(0)
    model = FashionCNN()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    if args.check_epochs:
        torch.set_num_threads(2)
        check(model, args.check_epochs)
        model.load_state_dict(state)
    model.train()
    torch.onnx.export(model, torch.zeros(1, 1, 28, 28), args.out, opset_version=13,
                      input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    n = sum(p.numel() for p in model.parameters())
    print("wrote %s: %d parameters, %d bytes" % (args.out, n, os.path.getsize(args.out)))


if __name__ == "__main__":
    sys.exit(main())
