"""conftest.py — fixtures shared by the test files.

- torchvision_onnx(name, size): examples/export_torchvision.py's ONNX file of
  a torchvision model, exported once per test run and shared by every test
  file that uses that model at that size (an export takes 5-15 s of the
  2-core VM; the same command with the same seed writes the same file).
  Under pytest-xdist (`ninja test` runs the files on every core) the workers
  share one folder and a lock, so a model is exported once per run, not once
  per worker.
"""
import fcntl
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _shared_dir(tmp_path_factory):
    """A folder every worker of this run sees: the run's base temp folder
    (under xdist, each worker's basetemp is a child of it)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    d = os.path.join(str(base), "shared-models")
    os.makedirs(d, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def torchvision_onnx(tmp_path_factory):
    shared = _shared_dir(tmp_path_factory)

    def get(name, size):
        d = os.path.join(shared, "%s-%d" % (name, size))
        path = os.path.join(d, name + ".onnx")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(path):
                tmp = os.path.join(d, "tmp")
                r = subprocess.run(["/usr/bin/python3",
                                    os.path.join(ROOT, "examples", "export_torchvision.py"),
                                    name, "--size", str(size), "--out", tmp],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   timeout=600)
                assert r.returncode == 0, r.stdout[-4000:]
                os.rename(os.path.join(tmp, name + ".onnx"), path)   # complete or absent
        return path
    return get
