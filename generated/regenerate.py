#!/usr/bin/python3
"""regenerate.py — re-emits generated/: the programs and plans snc makes from
the shipped examples, committed so that a compiler change shows up in review
as a diff of emitted code and plans (`ninja generated` runs this script;
tests/test_generated.py fails when the committed files are stale).

    /usr/bin/python3 generated/regenerate.py [--out DIR] [--snc PATH]

For each example it runs `snc compile` into a scratch folder and keeps
train.c, plan.txt, plan.json and build.ninja in DIR/<name>/ (default: this
folder). Not kept: params.bin and model.onnx (binary, and the model is in
examples/ or made by a script). The absolute repository path that snc writes
into build.ninja (snc_root) is replaced by the relative path from
generated/<name>/ to the repository, so the committed copy is the same on
every machine and `ninja -C generated/<name>` still builds (the program needs
the model's params.bin beside it to run: compile it yourself for that).

Standard library only.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"
KEEP = ["train.c", "plan.txt", "plan.json", "build.ninja"]

# name: (how to get the model, snc compile flags). Keep them small: generated/
# should stay well under a few MB (the ResNet's train.c is ~280 KB). Every
# one gives --host-budget: the cpu profile's default is this machine's
# memory, which would make plan.json differ from machine to machine.
EXAMPLES = {
    "fashion_cnn": (os.path.join(ROOT, "examples", "fashion_cnn.onnx"),
                    ["--batch", "64", "--policy", "liveness", "--host-budget", "16GiB"]),
    "resnet50_32px": ([os.path.join(ROOT, "examples", "make_resnet.py"), "--depth", "50",
                       "--size", "32", "--classes", "10"],
                      ["--batch", "8", "--policy", "liveness", "--host-budget", "16GiB"]),
    "gpt_bytes": (os.path.join(ROOT, "examples", "gpt_bytes.onnx"),
                  ["--batch", "16", "--policy", "liveness", "--host-budget", "16GiB"]),
}


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("regenerate: error: %s failed (%d):\n%s%s"
                 % (" ".join(cmd), r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
    return r


def portable_ninja(text):
    """snc_root = /abs/path  ->  snc_root = ../.. (relative to generated/<name>/)."""
    new, n = re.subn(r"^snc_root = .*$", "snc_root = ../..", text, count=1, flags=re.M)
    if n != 1:
        sys.exit("regenerate: error: no 'snc_root = ' line in the emitted build.ninja")
    return new


def regenerate(out, snc):
    with tempfile.TemporaryDirectory(prefix="snc-generated-") as tmp:
        for name, (model, flags) in EXAMPLES.items():
            if isinstance(model, list):
                # The model is named after the example: train.c's header names it.
                path = os.path.join(tmp, name + ".onnx")
                run([PY] + model + ["-o", path])
                model = path
            emitted = os.path.join(tmp, name)
            run([snc, "compile", model, "-o", emitted] + flags)
            dest = os.path.join(out, name)
            os.makedirs(dest, exist_ok=True)
            for f in KEEP:
                src = os.path.join(emitted, f)
                if f == "build.ninja":
                    with open(src) as fi, open(os.path.join(dest, f), "w") as fo:
                        fo.write(portable_ninja(fi.read()))
                else:
                    shutil.copyfile(src, os.path.join(dest, f))
            print("regenerate: %s/ (%s)" % (os.path.relpath(dest), ", ".join(KEEP)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=HERE, help="where to write (default: generated/)")
    ap.add_argument("--snc", default=os.path.join(ROOT, "build", "snc"))
    args = ap.parse_args()
    if not os.path.exists(args.snc):
        sys.exit("regenerate: error: %s not found: build it first (ninja)" % args.snc)
    regenerate(os.path.abspath(args.out), args.snc)


if __name__ == "__main__":
    main()
