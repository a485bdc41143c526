"""The ONNX backend node suite: the 1,884 test cases the onnx
package generates (onnx.backend.test.case.node, outputs from its reference
implementation; tests/onnx_node_cases.py writes them from build/venv's onnx
1.23.2), given to snc in two forms:

  - constants: every input an initializer. `snc inspect --dump eval` runs the
    compile-time evaluator (compiler/front/eval.c) over the node and prints
    its outputs, which must equal the suite's: float within rtol 1e-4 /
    atol 1e-5 (float16 and bfloat16 within their own precision), integers
    and bools exactly, and the shapes exactly.
  - data: input 0 the data input, the rest initializers. `snc inspect --json`
    types the node on the data path; its output shapes must be the suite's.
    Then the values: `snc compile --loss mse` (the initializers become the
    parameters' initial values; a node with none compiles into a program
    that only predicts), the program built, and `DIR/train --predict` run on
    input 0's values: output 0 must equal the suite's (rtol 1e-4 / atol 1e-5;
    ROUNDED_REFS below for the references printed to fewer digits). A data
    form counts as accepted only with right values; a clean refusal from
    compile or the program (exit 2, one line) counts as refused, and
    DATA_PREDICT_DIFFERS names the cases whose output --predict computes
    differently by design.

A case is accepted when snc takes either form (and what it gives is right).
Every refusal must be one line on stderr with exit 2: never a crash, never
an internal error. Out of scope (OUT_OF_SCOPE below, with the reason for
each) are types snc has no use for in a training program and ops whose
outputs are not a function of their inputs; they must be refused cleanly
like the rest, and are counted apart.

The counts are printed; ACCEPTED_FLOOR keeps them from falling back.
"""
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from snc_harness import SNC  # noqa: E402

VENV_PY = os.path.join(ROOT, "build", "venv", "bin", "python")

# Out of scope, by what a case uses:
OUT_OF_SCOPE_TYPES = {
    # strings: no string tensors in a training program
    "STRING": "string tensors",
    # sequences, optionals, maps: no container values in snc's IR
    "sequence": "sequence values", "optional": "optional values", "map": "map values",
    # 8-, 4- and 2-bit float and integer types: quantized inference formats
    "FLOAT8E4M3FN": "float8", "FLOAT8E4M3FNUZ": "float8", "FLOAT8E5M2": "float8",
    "FLOAT8E5M2FNUZ": "float8", "FLOAT8E8M0": "float8", "UINT4": "4-bit integers",
    "INT4": "4-bit integers", "FLOAT4E2M1": "float4", "INT2": "2-bit integers",
    "UINT2": "2-bit integers",
    # complex numbers
    "COMPLEX64": "complex numbers", "COMPLEX128": "complex numbers",
}
OUT_OF_SCOPE_OPS = {
    # quantized arithmetic: inference-only formats
    **{op: "quantized" for op in (
        "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
        "QLinearMatMul", "ConvInteger", "MatMulInteger")},
    # outputs drawn at random: not a function of the inputs
    **{op: "random" for op in (
        "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
        "Multinomial")},
    # control flow and subgraphs beyond an If with a constant condition
    **{op: "control flow" for op in ("Loop", "Scan", "If", "SequenceMap")},
    # string processing
    **{op: "strings" for op in (
        "StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch", "TfIdfVectorizer")},
    # image and audio decoding, signal generation
    **{op: "media" for op in ("ImageDecoder",)},
}
OUT_OF_SCOPE_DOMAINS = {
    "ai.onnx.ml": "classical ML operators",
    "ai.onnx.preview.training": "training operators (snc derives the training step itself)",
}
# Reference outputs printed to 4 decimals in the onnx package's generator
# (snc's values equal a direct computation): checked within half a unit of
# the last digit.
ROUNDED_REFS = {"test_averagepool_2d_ceil_last_window_starts_on_pad": 5e-5}
# --predict runs the inference graph: BatchNormalization with its running
# statistics. These cases ask for the training-mode forward (batch
# statistics), which snc computes inside a training step but --predict does
# not write; counted as refused.
DATA_PREDICT_DIFFERS = {
    "test_batchnorm_example_training_mode": "training-mode BatchNormalization output",
    "test_batchnorm_epsilon_training_mode": "training-mode BatchNormalization output",
}
# Accepted cases may only grow (the count at the last change of snc).
ACCEPTED_FLOOR = 1002


def out_of_scope(case):
    for t in case["types"]:
        if t in OUT_OF_SCOPE_TYPES:
            return OUT_OF_SCOPE_TYPES[t]
    for d in case["domains"]:
        if d in OUT_OF_SCOPE_DOMAINS:
            return OUT_OF_SCOPE_DOMAINS[d]
    for op in case["ops"]:
        if op in OUT_OF_SCOPE_OPS:
            return OUT_OF_SCOPE_OPS[op]
    if not case["const"]:
        return "inputs or outputs numpy cannot hold as arrays"
    return None


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    assert os.path.exists(VENV_PY), \
        "build/venv is missing: run ./configure.py --install-test-deps"
    out = str(tmp_path_factory.mktemp("node_suite"))
    r = subprocess.run([VENV_PY, os.path.join(HERE, "onnx_node_cases.py"), out],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(os.path.join(out, "cases.json")) as f:
        return out, json.load(f)


def snc(*args):
    return subprocess.run([SNC] + [str(a) for a in args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def clean_refusal(r, where):
    """None when r is a clean refusal (exit 2, one 'snc: error:' line);
    else what is wrong."""
    lines = r.stderr.strip().splitlines()
    if r.returncode != 2 or len(lines) != 1 or not lines[0].startswith("snc: error: "):
        return "%s: exit %d, stderr %r" % (where, r.returncode, r.stderr[-500:])
    return None


def close(ours, ref, dtype):
    if ref.dtype.kind in "fc":
        a = np.array([float(v) for v in ours], dtype=np.float64)   # "nan", "inf" parse too
        b = ref.astype(np.float64).ravel()
        tol = {"float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2)}.get(dtype, (1e-4, 1e-5))
        same_nan = np.isnan(a) == np.isnan(b)
        ok = np.isclose(a, b, rtol=tol[0], atol=tol[1], equal_nan=True)
        return bool(same_nan.all() and ok.all())
    return [int(v) for v in ours] == [int(v) for v in ref.ravel().tolist()]


def check_const(d, case):
    """'accepted' with right values, 'refused', or an error string."""
    r = snc("inspect", os.path.join(d, "const.onnx"), "--dump", "eval")
    if r.returncode != 0:
        return clean_refusal(r, "const") or "refused"
    outs = {o["name"]: o for o in json.loads(r.stdout)["outputs"]}
    for k, name in enumerate(case["outputs"]):
        ref = np.load(os.path.join(d, "out_%d.npy" % k))
        o = outs.get(name)
        if o is None:
            return "const: output %s missing" % name
        if tuple(o["shape"]) != ref.shape:
            return "const: output %s shape %s, expected %s" % (name, o["shape"], ref.shape)
        if not close(o["values"], ref, o["dtype"]):
            return "const: output %s values differ: %s vs %s" % (
                name, o["values"][:8], ref.ravel()[:8].tolist())
    return "accepted"


def check_data(d, case):
    """The shapes, from `snc inspect`: 'typed' (values still to check),
    'refused', or an error string."""
    r = snc("inspect", os.path.join(d, "data.onnx"), "--json")
    if r.returncode != 0:
        return clean_refusal(r, "data") or "refused"
    shapes = {}
    for n in json.loads(r.stdout)["nodes"]:
        for o in n["outputs"]:
            shapes[o["name"]] = tuple(o["shape"])
    for k, name in enumerate(case["outputs"]):
        if name not in shapes:
            continue     # an output snc computed at compile time, or not the first
        ref = np.load(os.path.join(d, "out_%d.npy" % k))
        if shapes[name] != ref.shape:
            return "data: output %s shape %s, expected %s" % (name, shapes[name], ref.shape)
    return "typed"


def check_data_values(d, case, work):
    """The data form compiled, built and run with --predict on input 0's
    values: 'accepted', 'refused' (cleanly), or an error string."""
    import onnx
    from onnx import numpy_helper
    if case["name"] in DATA_PREDICT_DIFFERS:
        return "refused"
    w = os.path.join(work, case["name"])
    os.makedirs(w, exist_ok=True)
    dm = onnx.load(os.path.join(d, "data.onnx"))
    inits = {i.name for i in dm.graph.initializer}
    x = [i.name for i in dm.graph.input if i.name not in inits][0]
    cm = onnx.load(os.path.join(d, "const.onnx"))
    xv = next(numpy_helper.to_array(i) for i in cm.graph.initializer if i.name == x)
    np.save(os.path.join(w, "x.npy"), xv)
    prog = os.path.join(w, "p")
    r = snc("compile", os.path.join(d, "data.onnx"), "-o", prog, "--loss", "mse",
            "--batch", xv.shape[0] if xv.ndim else 1)
    if r.returncode != 0:
        return clean_refusal(r, "data compile") or "refused"
    r = subprocess.run(["ninja", "-C", prog], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    if r.returncode != 0:
        return "data: the program does not build: " + r.stdout[-500:]
    y_path = os.path.join(w, "y.npy")
    r = subprocess.run([os.path.join(prog, "train"), "--predict", "npy:" + os.path.join(w, "x.npy"),
                        "--out", y_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        if r.returncode == 2 and len(lines) == 1 and lines[0].startswith("train: error: "):
            return "refused"
        return "data: --predict exit %d: %r" % (r.returncode, r.stderr[-500:])
    if os.path.isdir(y_path):
        y_path = os.path.join(y_path, case["outputs"][0] + ".npy")
    y = np.load(y_path).astype(np.float64)
    ref = np.load(os.path.join(d, "out_0.npy"))
    if y.shape != ref.shape:
        return "data: --predict output shape %s, expected %s" % (y.shape, ref.shape)
    atol = ROUNDED_REFS.get(case["name"], 1e-5)
    if not np.allclose(y, ref.astype(np.float64), rtol=1e-4, atol=atol, equal_nan=True):
        return "data: --predict values differ: %s vs %s" % (y.ravel()[:8].tolist(),
                                                           ref.ravel()[:8].tolist())
    shutil.rmtree(w, ignore_errors=True)
    return "accepted"


def test_node_suite(suite, tmp_path):
    out, cases = suite
    counts = {"accepted": 0, "accepted_const": 0, "accepted_data": 0, "refused": 0,
              "out_of_scope": 0}
    errors, refused_ops = [], {}
    typed = {}
    for case in cases:
        if case["const"] and case["data"]:
            typed[case["name"]] = check_data(os.path.join(out, case["name"]), case)
    # The values of every typed data form, two programs at a time.
    todo = [c for c in cases if typed.get(c["name"]) == "typed"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = pool.map(lambda c: check_data_values(os.path.join(out, c["name"]), c,
                                                    str(tmp_path)), todo)
        typed.update(zip((c["name"] for c in todo), done))
    for case in cases:
        d = os.path.join(out, case["name"])
        scope = out_of_scope(case)
        if not case["const"]:
            # Nothing snc could be given as a file of tensors; count it.
            counts["out_of_scope"] += 1
            continue
        c = check_const(d, case)
        dd = typed[case["name"]] if case["data"] else "refused"
        for res in (c, dd):
            if res not in ("accepted", "refused"):
                errors.append("%s: %s" % (case["name"], res))
        if scope:
            counts["out_of_scope"] += 1
            continue
        if "accepted" in (c, dd):
            counts["accepted"] += 1
            counts["accepted_const"] += c == "accepted"
            counts["accepted_data"] += dd == "accepted"
        else:
            counts["refused"] += 1
            for op in case["ops"]:
                refused_ops[op] = refused_ops.get(op, 0) + 1
    total = len(cases)
    print("ONNX node suite: %d cases; accepted %d (%d by the evaluator, %d on the data path "
          "with --predict's values), "
          "refused %d, out of scope %d" % (total, counts["accepted"], counts["accepted_const"],
                                           counts["accepted_data"], counts["refused"],
                                           counts["out_of_scope"]))
    print("refused, by op: " + ", ".join("%s %d" % kv for kv in
                                         sorted(refused_ops.items(), key=lambda kv: -kv[1])))
    assert not errors, "%d wrong results or unclean refusals:\n%s" % (
        len(errors), "\n".join(errors[:40]))
    assert counts["accepted"] >= ACCEPTED_FLOOR, counts
