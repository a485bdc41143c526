#!/bin/sh
# examples/demo_gpt.sh — the second main job (`ninja demo-gpt`): a byte-level
# GPT trained on English text. The text is every fortune of Debian's
# `fortunes` package (examples/fortunes_data.py writes train.txt and val.txt,
# one fortune in 20 held out, and prints the unigram baseline in bits per
# byte); the model is examples/gpt_bytes.onnx (examples/make_gpt.py's
# defaults: vocabulary 256, T 64, 4 layers of 4 heads, 64 wide, the head tied
# to the token embedding; 0.22 M parameters). The program reads the text
# files as raw bytes (--data tokens:FILE). AdamW, lr 0.003 for one epoch
# (2,369 steps of 16 windows), then 400 steps at lr 0.0003 resumed from the
# checkpoint; the validation loss is printed after each part in nats and bits
# per byte, and at the end 300 bytes sampled from the trained model after a
# prompt (--generate).
set -eu
OUT=${OUT:-out/gpt}
STEPS2=${STEPS2:-400}
THREADS=${THREADS:-2}
python3 examples/fortunes_data.py "$OUT"
build/snc compile examples/gpt_bytes.onnx -o "$OUT/prog" --batch 16 --optimizer adamw --lr 0.003
ninja -C "$OUT/prog"
"$OUT/prog/train" --data "tokens:$OUT/train.txt" --eval "tokens:$OUT/val.txt" --epochs 1 \
                  --log-every 200 --threads "$THREADS" --save "$OUT/checkpoint.snc"
echo "demo-gpt: $STEPS2 more steps at lr 0.0003, resuming from $OUT/checkpoint.snc"
"$OUT/prog/train" --data "tokens:$OUT/train.txt" --eval "tokens:$OUT/val.txt" \
                  --resume "$OUT/checkpoint.snc" --steps "$STEPS2" --lr 0.0003 --log-every 200 \
                  --threads "$THREADS" --metrics "$OUT/metrics.json" --save "$OUT/checkpoint.snc" \
                  --generate 300 --prompt "The meaning of life is"
echo "demo-gpt: metrics in $OUT/metrics.json"
