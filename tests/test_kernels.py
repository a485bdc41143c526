"""Runs the C unit test of the CPU kernels (tests/unit/test_kernels.c:
naive references, finite differences, determinism) and asserts it passed."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_kernels_unit():
    exe = os.path.join(ROOT, "build", "tests", "test_kernels")
    assert os.path.exists(exe), "build it first: ninja (build/tests/test_kernels)"
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2")
    r = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stdout
    assert "0 failures" in r.stdout, r.stdout
