"""Corrupted models never crash, hang or print more than one error line.

Real models (a small conv net with BatchNormalization and Dropout, exported
by torch in training mode at opsets 13 and 14) are truncated at many offsets,
have bytes flipped, are spliced with each other, and are replaced by random
bytes or nothing. `snc inspect X --dump import` must exit 0 (the file still
reads as a model) or 2 with exactly one line `snc: error: ...` — never 3
(an internal error), never a signal, never a timeout. Sanitizer builds: set
SNC_BIN to their snc; a sanitizer report makes the run fail (stderr on
success must be empty, and ASan's exit code is set to 99).
"""
import os
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from import_util import run_snc

torch = pytest.importorskip("torch")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.c1, self.bn1 = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.c2, self.bn2 = nn.Conv2d(4, 4, 3, padding=1, groups=2), nn.BatchNorm2d(4)
        self.drop, self.fc = nn.Dropout(0.25), nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.c1(x)))
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn2(self.c2(x))) + x, 2)
        return self.fc(self.drop(x).flatten(1))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("corrupt")
    torch.manual_seed(0)
    m = Net().train()
    out = []
    for opset in (13, 14):
        p = d / ("net%d.onnx" % opset)
        torch.onnx.export(m, torch.randn(2, 1, 8, 8), str(p), opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}})
        out.append(p.read_bytes())
    return d, out


def variants(blobs, rng):
    """(label, bytes) pairs: a few hundred corruptions of the given models."""
    a, b = blobs
    yield "empty", b""
    for n in (1, 3, 17, 256, 4096):
        yield "random%d" % n, bytes(rng.randrange(256) for _ in range(n))
    for i, blob in enumerate(blobs):
        # Truncation: every byte of the header, then spread offsets.
        offs = sorted(set(list(range(1, 48)) + [rng.randrange(1, len(blob)) for _ in range(70)]))
        for o in offs:
            yield "m%d-trunc%d" % (i, o), blob[:o]
        # Byte flips: the structure (nodes come first) more often than the weights.
        for k in range(110):
            buf = bytearray(blob)
            limit = len(buf) if k % 3 == 0 else len(buf) // 3
            for _ in range(rng.choice((1, 1, 2, 4, 8))):
                pos = rng.randrange(limit)
                buf[pos] = rng.choice((0, 0xff, 0x7f, 0x80, 0x0a, rng.randrange(256),
                                       buf[pos] ^ (1 << rng.randrange(8))))
            yield "m%d-flip%d" % (i, k), bytes(buf)
        # Length fields blown up: a byte with its high bit set continues a varint.
        for k in range(15):
            buf = bytearray(blob)
            pos = rng.randrange(len(buf) // 3)
            buf[pos:pos + 1] = bytes([0xff] * rng.randrange(1, 10))
            yield "m%d-varint%d" % (i, k), bytes(buf)
    for k in range(30):  # halves of two models spliced
        yield "splice%d" % k, a[:rng.randrange(len(a))] + b[rng.randrange(len(b)):]


def check(path, label):
    """-> (exit code, failure message or None)"""
    try:
        r = run_snc("inspect", path, "--dump", "import", timeout=20)
    except Exception as e:  # timeout
        return -1, "%s: %s" % (label, e)
    err = r.stderr.decode("utf-8", "replace")
    if r.returncode == 0:
        if err or not r.stdout.startswith(b"graph '"):
            return 0, "%s: exit 0 but stderr %r" % (label, err[:300])
        return 0, None
    if r.returncode != 2:
        return r.returncode, "%s: exit %d: %s" % (label, r.returncode, err[-600:])
    lines = err.rstrip("\n").split("\n")
    if len(lines) != 1 or not lines[0].startswith("snc: error: "):
        return 2, "%s: not one error line: %r" % (label, err[:600])
    return 2, None


def test_corrupted_models_fail_cleanly(models):
    d, blobs = models
    os.environ.setdefault("ASAN_OPTIONS", "exitcode=99:detect_leaks=0")
    os.environ.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    rng = random.Random(1234)
    jobs = []
    for i, (label, data) in enumerate(variants(blobs, rng)):
        p = d / ("v%04d.onnx" % i)
        p.write_bytes(data)
        jobs.append((p, label))
    assert len(jobs) >= 300
    with ThreadPoolExecutor(max_workers=2) as ex:
        results = list(ex.map(lambda j: check(*j), jobs))
    failures = [f for _, f in results if f]
    assert not failures, "%d of %d variants failed:\n%s" % (len(failures), len(jobs),
                                                           "\n".join(failures[:20]))
    # Most corruptions must be caught (an importer accepting anything would
    # pass the checks above).
    rejected = sum(1 for rc, _ in results if rc == 2)
    assert rejected > len(jobs) // 2, (rejected, len(jobs))


def test_originals_import(models):
    d, blobs = models
    for i, blob in enumerate(blobs):
        p = d / ("orig%d.onnx" % i)
        p.write_bytes(blob)
        r = run_snc("inspect", p, "--dump", "import")
        assert r.returncode == 0 and r.stdout.startswith(b"graph '"), r.stderr
