#!/usr/bin/python3
"""export_torchvision.py — exports torchvision models to ONNX for snc, in
training mode, with Debian's python3-torch and python3-torchvision.

    /usr/bin/python3 examples/export_torchvision.py [MODEL...] [--size S]
                     [--out DIR] [--opset 13] [--batch 2]

MODEL: alexnet vgg16 resnet18 resnet50 googlenet inception_v3 densenet121
mobilenet_v2 (default: all). Writes DIR/MODEL.onnx (DIR defaults to out/).

- Weights are PyTorch's random initialization with a fixed seed (torch seed
  0 before each model), stored as initializers; snc trains from them.
- Training mode (training=TrainingMode.TRAINING, do_constant_folding=False):
  BatchNormalization keeps batch statistics and its running-stat outputs,
  Dropout stays in the graph.
- googlenet and inception_v3 are built with aux_logits=False and
  transform_input=False; inception_v3 needs --size 75 or more.
- alexnet and vgg16 end their features with an adaptive average pool to 6x6
  / 7x7. At small sizes (32-64 px) the features are smaller than that and
  the pool cannot be exported (it would upsample). Then, and only then, the
  pool is replaced by nn.Identity and the first Linear is resized to the
  flattened features (C*H*W inputs); the script prints what it changed.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torchvision

MODELS = ["alexnet", "vgg16", "resnet18", "resnet50", "googlenet", "inception_v3",
          "densenet121", "mobilenet_v2"]
MIN_SIZE = {"inception_v3": 75}


def build(name, size):
    """The model (train mode, seeded random init), and a note of any change."""
    torch.manual_seed(0)
    kw = {}
    if name in ("googlenet", "inception_v3"):
        kw = dict(aux_logits=False, transform_input=False, init_weights=True)
    model = getattr(torchvision.models, name)(weights=None, **kw)
    note = ""
    if name in ("alexnet", "vgg16"):
        with torch.no_grad():
            f = model.features(torch.zeros(1, 3, size, size))
        oh, ow = model.avgpool.output_size
        h, w = f.shape[2], f.shape[3]
        if h < oh or w < ow or h % oh or w % ow:
            first = model.classifier[1] if name == "alexnet" else model.classifier[0]
            assert isinstance(first, nn.Linear)
            torch.manual_seed(1)
            lin = nn.Linear(f.shape[1] * h * w, first.out_features)
            if name == "alexnet":
                model.classifier[1] = lin
            else:
                model.classifier[0] = lin
            model.avgpool = nn.Identity()
            note = ("%s at %d px: features are %dx%d, smaller than (or not a multiple of) the "
                    "adaptive pool's %dx%d; replaced avgpool by Identity and the first Linear "
                    "%d->%d by %d->%d" % (name, size, h, w, oh, ow, first.in_features,
                                          first.out_features, lin.in_features, lin.out_features))
    model.train()
    return model, note


def export(name, size, out_dir, opset=13, batch=2):
    """Writes out_dir/name.onnx; returns (path, model, note)."""
    if name not in MODELS:
        raise ValueError("unknown model %r (one of %s)" % (name, ", ".join(MODELS)))
    if size < MIN_SIZE.get(name, 32):
        raise ValueError("%s needs --size %d or more" % (name, MIN_SIZE.get(name, 32)))
    model, note = build(name, size)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name + ".onnx")
    x = torch.randn(batch, 3, size, size)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, x, path, opset_version=opset, input_names=["input"],
                          output_names=["logits"], training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)
    model.train()   # export may leave the module in another mode
    return path, model, note


def main():
    ap = argparse.ArgumentParser(description="Export torchvision models to ONNX (training mode).")
    ap.add_argument("models", nargs="*", default=MODELS, help="default: all")
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--out", default="out", help="output folder")
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--batch", type=int, default=2,
                    help="leading dimension of the input (default 2: BatchNormalization in "
                    "training mode cannot trace one value per channel, as inception_v3 has at 75 px)")
    args = ap.parse_args()
    for name in args.models:
        try:
            path, model, note = export(name, args.size, args.out, args.opset, args.batch)
        except ValueError as e:
            sys.exit("export_torchvision: error: %s" % e)
        if note:
            print("note: " + note)
        n = sum(p.numel() for p in model.parameters())
        print("wrote %s (%d parameters, %d bytes)" % (path, n, os.path.getsize(path)))


if __name__ == "__main__":
    main()
