"""snc_harness.py — shared helpers for the end-to-end tests: paths, running
snc and compiled programs, exporting PyTorch models, reading .npy dumps.

The independent reference in these tests is PyTorch (Debian's python3-torch,
CPU): the same ONNX weights, inputs and labels go through torch and through
the program snc emits.
"""
import os
import re
import subprocess

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNC = os.path.join(ROOT, "build", "snc")
FASHION = "/usr/share/datasets/fashion-mnist"


def run(cmd, timeout=600, check=True, **kw):
    """Runs a command, returns CompletedProcess; on failure raises with output."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError("command failed (%d): %s\nstdout:\n%s\nstderr:\n%s"
                             % (r.returncode, " ".join(cmd), r.stdout[-4000:], r.stderr[-4000:]))
    return r


# The C flags the tests build emitted programs with, in place of the
# `cflags = -std=c11 -O1 -g ...` line snc writes into DIR/build.ninja (what
# users build; test_train_fashion.py and test_generated.py keep it). train.c
# does no arithmetic of its own: it is tables of constants and one call into
# the runtime (libsnrt_cpu.a, built by configure.py with its own flags) per
# step, so its optimisation level changes no number a program computes and no
# bit the tests compare, only how long gcc takes: densenet121's 14,000-line
# train.c takes 11 s at -O1 -g and 3 s at -O0 -g on the 2-core VM, and the
# tests build about 150 programs.
TEST_CFLAGS = "-std=c11 -O0 -g"
_EMITTED_CFLAGS = re.compile(r"^cflags = -std=c11 -O1 -g ", re.M)


def build_program(out_dir, cflags=TEST_CFLAGS):
    """ninja -C DIR on what snc compile wrote, at `cflags` (None: as written);
    returns the program's path."""
    if cflags is not None:
        path = os.path.join(out_dir, "build.ninja")
        text = open(path).read()
        text, n = _EMITTED_CFLAGS.subn("cflags = %s " % cflags, text)
        assert n == 1, "%s: no 'cflags = -std=c11 -O1 -g' line (update TEST_CFLAGS)" % path
        with open(path, "w") as f:
            f.write(text)
    run(["ninja", "-C", out_dir], timeout=900)
    return os.path.join(out_dir, "train")


def compile_model(onnx_path, out_dir, batch, *flags, cflags=TEST_CFLAGS):
    """snc compile + ninja (at `cflags`, see TEST_CFLAGS); returns the program's path."""
    run([SNC, "compile", onnx_path, "-o", out_dir, "--batch", str(batch)] + list(flags))
    return build_program(out_dir, cflags)


def one_step_grads(onnx_path, tmp, x, y, batch, *flags, threads=None):
    """Compiles onnx_path (--policy none, then `flags`) into tmp/prog, trains
    one step on x and y (saved as tmp/x.npy, tmp/y.npy) with --dump-grads
    tmp/grads; returns (that step's loss, the dump folder)."""
    xp, yp = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    np.save(xp, x)
    np.save(yp, y)
    prog = compile_model(onnx_path, os.path.join(tmp, "prog"), batch, "--policy", "none", *flags)
    dump = os.path.join(tmp, "grads")
    run([prog, "--data", "npy:%s,%s" % (xp, yp), "--steps", "1", "--dump-grads", dump]
        + (["--threads", str(threads)] if threads else []))
    return float(np.load(os.path.join(dump, "loss.npy")).ravel()[0]), dump


def sanitize(name):
    return "".join(c if (c.isalnum() or c in "._-") else "_" for c in name)


def load_dump(folder, name):
    return np.load(os.path.join(folder, sanitize(name) + ".npy"))


def export(model, x, path, opset=13):
    """Exports a torch model in training mode with its weights as initializers."""
    import torch
    model.train()
    torch.onnx.export(model, x, path, opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"], output_names=["output"])


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    denom = np.linalg.norm(b.ravel())
    if denom == 0:
        return float(np.linalg.norm(a.ravel()))
    return float(np.linalg.norm((a - b).ravel()) / denom)


def grad_err(ours, ref, zero=1e-4):
    """||g - g_ref|| / ||g_ref||. Where the reference gradient is (nearly) zero,
    e.g. the bias of a conv followed by BatchNorm, whose exact gradient is 0
    and whose computed one is rounding noise, a relative error is meaningless:
    below ||g_ref|| = zero the difference is measured against `zero` instead,
    so a 1e-4 bound then means ||g - g_ref|| <= 1e-8."""
    ref = np.asarray(ref, dtype=np.float64)
    d = np.linalg.norm((np.asarray(ours, dtype=np.float64) - ref).ravel())
    n = np.linalg.norm(ref.ravel())
    return float(d / n) if n >= zero else float(d / zero)
