"""Runs the C unit test of the emitters (tests/unit/test_emit.c: the text
emit.c, emit_ops.c, emit_seq.c, emit_convert.c, emit_dist.c and
emit_profile.c print for one step of each kind, against the plan's offsets)
and asserts it passed."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_emit_unit():
    exe = os.path.join(ROOT, "build", "tests", "test_emit")
    assert os.path.exists(exe), "build it first: ninja tests (build/tests/test_emit)"
    r = subprocess.run([exe, os.path.join(ROOT, "examples", "fashion_cnn.onnx"),
                        os.path.join(ROOT, "examples", "gpt_bytes.onnx")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    assert "test_emit: ok" in r.stdout, r.stdout
