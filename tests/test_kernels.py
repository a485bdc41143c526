"""Runs the C unit test of the CPU kernels (tests/unit/test_kernels.c:
naive references, finite differences, determinism) and asserts it passed,
once per convolution path of the runtime (SNRT_CONV: oneDNN where
libdnnl.so.2 loads, and the im2col + OpenBLAS kernels)."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("conv", ["auto", "im2col"])
def test_kernels_unit(conv):
    exe = os.path.join(ROOT, "build", "tests", "test_kernels")
    assert os.path.exists(exe), "build it first: ninja (build/tests/test_kernels)"
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2", SNRT_CONV=conv)
    r = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stdout
    assert "0 failures" in r.stdout, r.stdout
