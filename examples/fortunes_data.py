#!/usr/bin/python3
"""fortunes_data.py — the byte-level GPT demo's text: every fortune of
Debian's `fortunes` package (/usr/share/games/fortunes, English; the ASCII
art file left out), one in 20 held out for validation. Writes DIR/train.txt
and DIR/val.txt (fortunes separated by blank lines) and prints their sizes
and the unigram baseline: the entropy of the training text's byte
distribution, and the cross-entropy of the validation text under it (bits
per byte). Python's standard library only.

  python3 examples/fortunes_data.py DIR
"""
import collections
import math
import os
import sys

SRC = "/usr/share/games/fortunes"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: fortunes_data.py DIR")
    out = sys.argv[1]
    if not os.path.isdir(SRC):
        sys.exit("fortunes_data: %s is missing (apt-get install fortunes)" % SRC)
    names = sorted(n for n in os.listdir(SRC)
                   if "." not in n and n != "ascii-art" and os.path.isfile(os.path.join(SRC, n)))
    train, val, k = [], [], 0
    for n in names:
        with open(os.path.join(SRC, n), "rb") as f:
            for fortune in f.read().split(b"\n%\n"):
                fortune = fortune.strip(b"%\n")
                if not fortune:
                    continue
                (val if k % 20 == 19 else train).append(fortune)
                k += 1
    os.makedirs(out, exist_ok=True)
    data = {}
    for name, part in (("train", train), ("val", val)):
        data[name] = b"\n\n".join(part) + b"\n"
        with open(os.path.join(out, name + ".txt"), "wb") as f:
            f.write(data[name])
    cnt = collections.Counter(data["train"])
    tot = len(data["train"])
    h = -sum(c / tot * math.log2(c / tot) for c in cnt.values())
    # Validation bytes under the training unigram (add-one smoothed over 256).
    p = {b: (cnt.get(b, 0) + 1) / (tot + 256) for b in range(256)}
    xh = -sum(math.log2(p[b]) for b in data["val"]) / len(data["val"])
    print("fortunes: %d fortunes from %d files; train %d bytes, val %d bytes" %
          (k, len(names), len(data["train"]), len(data["val"])))
    print("fortunes: unigram entropy %.3f bits/byte (train), %.3f bits/byte on val" % (h, xh))


if __name__ == "__main__":
    main()
