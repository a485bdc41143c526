"""Runs the C unit tests of shape inference (tests/unit/test_shape.c) and
asserts they pass: hand-computed shapes, params and FLOPs, and error cases
that must exit with code 2."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_shape_unit():
    exe = os.path.join(ROOT, "build", "tests", "test_shape")
    assert os.path.exists(exe), "build it first: ninja tests"
    r = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 failed" in r.stdout
