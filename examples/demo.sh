#!/bin/sh
# examples/demo.sh — the README's main job (`ninja demo`): compile the shipped
# Fashion-MNIST CNN into a training program, build it, train it on the real
# data set on the CPU, and print the plan summary, progress and test accuracy.
set -eu
DATA=/usr/share/datasets/fashion-mnist
OUT=${OUT:-out/fashion}
EPOCHS=${EPOCHS:-3}
build/snc compile examples/fashion_cnn.onnx -o "$OUT" --batch 64 --optimizer adam --lr 0.001
ninja -C "$OUT"
"$OUT/train" --data "idx:$DATA/train-images-idx3-ubyte.gz,$DATA/train-labels-idx1-ubyte.gz" \
             --eval "idx:$DATA/t10k-images-idx3-ubyte.gz,$DATA/t10k-labels-idx1-ubyte.gz" \
             --epochs "$EPOCHS" --log-every 100 --metrics "$OUT/metrics.json" \
             --save "$OUT/checkpoint.snc" --export-onnx "$OUT/trained.onnx"
echo "demo: metrics in $OUT/metrics.json, trained model in $OUT/trained.onnx"
