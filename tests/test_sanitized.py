"""test_sanitized.py — snc and the CPU runtime built with AddressSanitizer and
UndefinedBehaviorSanitizer (configure.py --sanitize address,undefined
--builddir build-san: a second build beside build/), on a CI-sized subset:

- snc compile of the Fashion-MNIST CNN and plans of a small ResNet under every
  policy; the fuzzer's regression inputs (tests/fuzz/regressions/).
- The emitted program, built with the sanitizers against build-san's runtime:
  a few steps with --poison and two threads, eval, --metrics, --export-onnx,
  dumps, a checkpoint save and resume, and its error paths (missing and
  truncated data, a truncated checkpoint, a full disk while saving).

Every run must be free of sanitizer reports. Leak detection is on for the
emitted program (the runtime frees what it allocates) and off for snc: the
compiler is a one-shot process that keeps its IR until it exits, by design
(freeing the graphs would be work for nothing), so its "leaks" are the IR.

The programs run their convolutions on the im2col kernels (SNRT_CONV=im2col)
where leaks are checked: this gcc's LeakSanitizer crashes ("Tracer caught
signal 11") scanning the dynamic TLS of a dlopen'ed library such as
libdnnl.so.2, and with use_tls=0 it reports glibc's per-thread dlerror
buffer as a leak. The oneDNN path (runtime/cpu/k_conv_dnnl.c) runs once
under ASan and UBSan with leak detection off (test_program_dnnl_convs).
"""
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BD = "build-san"
SNC = os.path.join(ROOT, BD, "snc")
LIB = os.path.join(ROOT, BD, "libsnrt_cpu.a")
FM = "/usr/share/datasets/fashion-mnist"
SAN = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
REPORT = ("AddressSanitizer", "LeakSanitizer", "runtime error:")


def env(leaks, conv=None):
    return dict(os.environ, ASAN_OPTIONS="detect_leaks=%d:abort_on_error=0" % leaks,
                UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
                SNRT_CONV=conv or ("im2col" if leaks else "auto"))


def run(cmd, leaks=1, ok=(0,), timeout=300, conv=None, **kw):
    r = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout, env=env(leaks, conv), **kw)
    assert not any(s in r.stderr for s in REPORT), r.stderr[-4000:]
    assert r.returncode in ok, (cmd, r.returncode, r.stderr[-3000:])
    return r


@pytest.fixture(scope="module")
def san(tmp_path_factory):
    subprocess.run([os.path.join(ROOT, "configure.py"), "--werror", "--cuda", "off",
                    "--sanitize", "address,undefined", "--builddir", BD], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    r = subprocess.run(["ninja", "-f", BD + "/build.ninja", BD + "/snc", BD + "/libsnrt_cpu.a"],
                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-4000:]
    # The second build really is instrumented.
    for f in (SNC, LIB):
        assert b"__asan_report" in open(f, "rb").read() and b"__ubsan_handle" in open(f, "rb").read(), f
    d = tmp_path_factory.mktemp("san")
    run([SNC, "compile", os.path.join(ROOT, "examples", "fashion_cnn.onnx"), "-o", d / "fc",
         "--batch", 16], leaks=0)
    exe = d / "fc" / "train_san"
    subprocess.run(["gcc", "-std=c11", "-O1", "-g"] + SAN + ["-I" + os.path.join(ROOT, "runtime"),
                    str(d / "fc" / "train.c"), LIB, "-o", str(exe), "-fopenmp", "-lopenblas",
                    "-lprotobuf-c", "-lz", "-lm", "-lpthread"], check=True)
    return {"dir": d, "exe": exe}


def test_compiler_on_a_small_resnet_every_policy(san, tmp_path):
    model = tmp_path / "r.onnx"
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "examples", "make_resnet.py"), "--blocks",
                    "1,1,1,1", "--size", "32", "--classes", "10", "-o", str(model)], check=True,
                   stdout=subprocess.DEVNULL)
    for pol in ["none", "liveness", "recompute", "offload", "superneurons", "auto"]:
        run([SNC, "plan", model, "--batch", 4, "--policy", pol, "--json", tmp_path / "p.json"],
            leaks=0)
    run([SNC, "inspect", model, "--json", "--batch", 3], leaks=0)
    run([SNC, "compile", model, "-o", tmp_path / "out", "--batch", 2, "--optimizer", "adam",
         "--loss", "mse"], leaks=0)


def test_compiler_on_fuzz_regressions(san):
    folder = os.path.join(ROOT, "tests", "fuzz", "regressions")
    for f in sorted(os.listdir(folder)):
        for flags in ([], ["--loss", "mse", "--optimizer", "adam"]):
            for pol in ["none", "liveness", "recompute", "offload", "superneurons", "auto"]:
                run([SNC, "plan", os.path.join(folder, f), "--batch", 2, "--policy", pol] + flags,
                    leaks=0, ok=(0, 2))


def test_program_steps_checkpoint_and_resume(san, tmp_path):
    exe = san["exe"]
    x = np.random.default_rng(0).integers(0, 256, (64, 28, 28), dtype=np.uint8)
    y = np.arange(64, dtype=np.int64) % 10
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    data = "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy")
    ck = tmp_path / "ck"
    run([exe, "--data", data, "--steps", 3, "--poison", "--threads", 2, "--save", ck,
         "--eval", data, "--metrics", tmp_path / "m.json", "--export-onnx", tmp_path / "e.onnx",
         "--dump-grads", tmp_path / "g", "--dump-params", tmp_path / "p"])
    run([exe, "--data", data, "--steps", 2, "--poison", "--threads", 1, "--resume", ck,
         "--save", ck])
    # Error paths, still without reports: each one clean exit 2.
    run([exe, "--data", "idx:%s/nope,%s/nope2" % (tmp_path, tmp_path)], ok=(2,))
    raw = open(ck, "rb").read()
    open(tmp_path / "trunc", "wb").write(raw[:len(raw) // 2])
    run([exe, "--data", data, "--resume", tmp_path / "trunc"], ok=(2,))
    open(tmp_path / "short.gz", "wb").write(open(FM + "/t10k-images-idx3-ubyte.gz", "rb").read()[:5000])
    run([exe, "--data", "idx:%s,%s/t10k-labels-idx1-ubyte.gz" % (tmp_path / "short.gz", FM)], ok=(2,))
    os.symlink("/dev/full", str(ck) + ".tmp")
    run([exe, "--data", data, "--steps", 1, "--save", ck], ok=(2,))
    assert open(ck, "rb").read() == raw


def test_program_dnnl_convs(san, tmp_path):
    """The Fashion-MNIST CNN's convolutions through oneDNN (forward, both
    backward passes, the blocked copies and scratchpads of
    k_conv_dnnl.c) under ASan and UBSan, leak detection off (see above)."""
    import ctypes
    try:
        ctypes.CDLL("libdnnl.so.2")
    except OSError:
        pytest.skip("libdnnl.so.2 is not installed")
    r = run([san["exe"], "--data", "synthetic", "--steps", 3, "--poison", "--threads", 2,
             "--metrics", tmp_path / "m.json"], leaks=0, conv="dnnl")
    assert "oneDNN convs" in r.stdout, r.stdout
    import json
    assert json.load(open(tmp_path / "m.json"))["outside_arena_bytes"] > 0


def test_program_through_most_ops(san, tmp_path):
    """The fuzzer's all-ops seed (conv, BN, LeakyReLU, tanh, sigmoid, pools,
    LRN, pad, slice, split, concat, arithmetic, clip, transpose, reduce-mean,
    matmul, softmax, dropout, reshape, gemm) compiled and trained under the
    sanitizers. Found: Split's params emitted twice (train.c did not compile)
    and the Add gradient loading through its NULL unused inputs (UBSan)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "make_seeds", os.path.join(ROOT, "tests", "fuzz", "make_seeds.py"))
    seeds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seeds)
    model = tmp_path / "all_ops.onnx"
    seeds.all_ops(str(model))
    run([SNC, "compile", model, "-o", tmp_path / "ao", "--batch", 4], leaks=0)
    exe = tmp_path / "ao" / "train_san"
    subprocess.run(["gcc", "-std=c11", "-O1", "-g"] + SAN + ["-I" + os.path.join(ROOT, "runtime"),
                    str(tmp_path / "ao" / "train.c"), LIB, "-o", str(exe), "-fopenmp", "-lopenblas",
                    "-lprotobuf-c", "-lz", "-lm", "-lpthread"], check=True)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((16, 3, 8, 8)).astype(np.float32))
    np.save(tmp_path / "y.npy", np.arange(16) % 5)
    data = "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy")
    r = run([exe, "--data", data, "--eval", data, "--steps", 4, "--poison", "--threads", 2,
             "--export-onnx", tmp_path / "e.onnx"])
    assert "test accuracy" in r.stdout + r.stderr


@pytest.mark.parametrize("opset,policy", [(13, "superneurons"), (17, "liveness")])
def test_program_gpt_tokens(san, tmp_path, opset, policy):
    """A byte-level GPT (embeddings, LayerNorm decomposed at 13 and as an op
    at 17, masked attention, GELU, tied head) trained under the sanitizers on
    a text file (tokens:FILE as raw bytes), evaluated and sampled from
    (--generate); a token file with a bad header is refused cleanly."""
    import sys
    import torch
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import make_gpt
    torch.manual_seed(0)
    model = tmp_path / "gpt.onnx"
    make_gpt.export(make_gpt.GPT(256, 16, 16, 2, 1, "tanh" if opset == 17 else "erf"), str(model),
                    2, 16, opset)
    run([SNC, "compile", model, "-o", tmp_path / "g", "--batch", 2, "--policy", policy,
         "--optimizer", "adamw"], leaks=0)
    exe = tmp_path / "g" / "train_san"
    subprocess.run(["gcc", "-std=c11", "-O1", "-g"] + SAN + ["-I" + os.path.join(ROOT, "runtime"),
                    str(tmp_path / "g" / "train.c"), LIB, "-o", str(exe), "-fopenmp", "-lopenblas",
                    "-lprotobuf-c", "-lz", "-lm", "-lpthread"], check=True)
    text = tmp_path / "text.txt"
    text.write_bytes(b"It is a truth universally acknowledged, that a single man in possession "
                     b"of a good fortune, must be in want of a wife.\n" * 4)
    r = run([exe, "--data", "tokens:%s" % text, "--eval", "tokens:%s" % text, "--steps", 5,
             "--poison", "--threads", 2, "--generate", 20, "--prompt", "It is"])
    assert "bits/token" in r.stdout and "after the prompt" in r.stdout, r.stdout
    bad = tmp_path / "bad.bin"
    bad.write_bytes((20240520).to_bytes(4, "little") + (1).to_bytes(4, "little") +
                    (99).to_bytes(4, "little") + bytes(1012) + bytes(7))
    r = run([exe, "--data", "tokens:%s" % bad, "--steps", 1], ok=(2,))
    assert "promises 99 tokens" in r.stderr, r.stderr


@pytest.mark.parametrize("head", ["flatten0", "gemm_transA"])
def test_eval_of_an_output_with_fewer_rows_than_the_batch(san, tmp_path, head):
    """--eval on a model whose output's first dimension is not the batch:
    Flatten(axis=0) makes (1, batch x 3), Gemm(transA) over the batch makes
    (3, 5). rt_evaluate()'s accuracy loop read a batch of rows of `classes`
    logits past the end of such an output (ASan: heap-buffer-overflow); it
    reads the output's own rows now, and --predict refuses 10 samples with
    one line (its rows are not samples: it writes such an output whole only
    for exactly one batch), leaking nothing."""
    from onnx import TensorProto, helper, numpy_helper
    import onnx
    B = 4
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((3, 3)).astype(np.float32), "w")
    if head == "flatten0":
        nodes = [helper.make_node("Gemm", ["x", "w"], ["h"]),
                 helper.make_node("Flatten", ["h"], ["out"], axis=0)]
        inits = [w]
    else:
        v = numpy_helper.from_array(rng.standard_normal((B, 5)).astype(np.float32), "v")
        nodes = [helper.make_node("Gemm", ["x", "w"], ["h"]),
                 helper.make_node("Gemm", ["h", "v"], ["out"], transA=1)]
        inits = [w, v]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, 3])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(model))
    run([SNC, "compile", model, "-o", tmp_path / "p", "--batch", B], leaks=0)
    exe = tmp_path / "p" / "train_san"
    subprocess.run(["gcc", "-std=c11", "-O1", "-g"] + SAN + ["-I" + os.path.join(ROOT, "runtime"),
                    str(tmp_path / "p" / "train.c"), LIB, "-o", str(exe), "-fopenmp", "-lopenblas",
                    "-lprotobuf-c", "-lz", "-lm", "-lpthread"], check=True)
    np.save(tmp_path / "x.npy", rng.standard_normal((10, 3)).astype(np.float32))
    np.save(tmp_path / "y.npy", np.arange(10) % 3)
    data = "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy")
    r = run([exe, "--data", data, "--eval", data, "--steps", 2])
    assert "test accuracy" in r.stdout + r.stderr
    r = run([exe, "--predict", "npy:%s" % (tmp_path / "x.npy"), "--out", tmp_path / "o.npy"], ok=(2,))
    assert len(r.stderr.strip().splitlines()) == 1 and "first dimension" in r.stderr, r.stderr


def test_program_through_the_data_path_ops(san, tmp_path):
    """The data-path ops in one model, compiled, trained (with
    --poison), evaluated and run with --predict under the sanitizers:
    HardSwish, HardSigmoid, Sin, Cos, Exp, Log, Abs, Min, Max, ReduceSum,
    ReduceMax, ReduceL2, Tile, Trilu, Gather on axis 1, GatherElements,
    Einsum, a 1-D MatMul operand, reflect and edge Pad, Conv and MaxPool
    over 1-D."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from onnx_ref import Model
    rng = np.random.default_rng(4)
    m = Model(14)

    def p(name, *shape):
        return m.param(name, (rng.standard_normal(shape) * 0.3).astype(np.float32))
    c = lambda v, dt=np.int64: m.const(v, dt)  # noqa: E731
    h = m.op("HardSwish", [m.op("Mul", ["x", p("s", 3, 6, 6)])])                    # (B,3,6,6)
    h = m.op("Pad", [h, c([0, 0, 1, 2, 0, 0, 2, 1])], mode="reflect")              # (B,3,9,9)
    h = m.op("Pad", [h, c([0, 0, 0, -1, 0, 0, 1, 1])], mode="edge")                # (B,3,10,9)
    h = m.op("Trilu", [h, c(1)], upper=0)
    h = m.op("Add", [m.op("Sin", [h]), m.op("Cos", [m.op("HardSigmoid", [h])])])
    e = m.op("Einsum", [h, m.op("Abs", [h])], equation="bchw,bcgw->bchg")          # (B,3,10,10)
    e = m.op("Max", [m.op("Min", [e, p("mn", 10)]), p("mx", 3, 1, 1)])
    g = m.op("Gather", [e, c(0)], axis=1)                                          # (B,10,10)
    g = m.op("GatherElements", [g, c(np.tile(rng.integers(0, 10, (1, 4, 10)), (4, 1, 1)))], axis=1)
    t = m.op("Tile", [g, c([1, 2, 1])])                                            # (B,8,10)
    t = m.op("Conv", [t, p("cw", 6, 8, 3)], pads=[1, 1])                           # (B,6,10)
    t = m.op("MaxPool", [t], kernel_shape=[2], strides=[2])                        # (B,6,5)
    lg = m.op("Log", [m.op("Add", [m.op("Exp", [t]), c(1.0, np.float32)])])
    r = m.op("Concat", [m.op("ReduceSum", [lg, c([2])], keepdims=1),
                        m.op("ReduceMax", [lg], axes=[2], keepdims=1),
                        m.op("ReduceL2", [lg], axes=[2], keepdims=1)], axis=2)     # (B,6,3)
    out = m.op("MatMul", [m.op("Flatten", [r], axis=1), p("v", 18)])               # (B,)
    out = m.op("Unsqueeze", [out, c([1])])
    out = m.op("MatMul", [out, p("w", 1, 5)])                                      # (B,5)
    path = str(tmp_path / "ops.onnx")
    m.save(path, (4, 3, 6, 6), out)
    run([SNC, "compile", path, "-o", tmp_path / "p", "--batch", 4], leaks=0)
    exe = tmp_path / "p" / "train_san"
    subprocess.run(["gcc", "-std=c11", "-O1", "-g"] + SAN + ["-I" + os.path.join(ROOT, "runtime"),
                    str(tmp_path / "p" / "train.c"), LIB, "-o", str(exe), "-fopenmp", "-lopenblas",
                    "-lprotobuf-c", "-lz", "-lm", "-lpthread"], check=True)
    np.save(tmp_path / "x.npy", rng.standard_normal((10, 3, 6, 6)).astype(np.float32))
    np.save(tmp_path / "y.npy", np.arange(10) % 5)
    data = "npy:%s,%s" % (tmp_path / "x.npy", tmp_path / "y.npy")
    r = run([exe, "--data", data, "--eval", data, "--steps", 3, "--poison", "--threads", 2])
    assert "test accuracy" in r.stdout + r.stderr
    run([exe, "--predict", "npy:%s" % (tmp_path / "x.npy"), "--out", tmp_path / "y.npy"])
    assert np.load(tmp_path / "y.npy").shape == (10, 5)
