"""generated/ is up to date: regenerate.py re-emits every example
into a scratch folder, and every committed file must be byte-identical. When
this fails, the compiler's output changed: run `ninja generated` and review
the diff of generated/ (that diff is the point), then commit it.

Also: the committed build.ninja files hold no absolute path (they are the
same on every machine) and still build from their folder.
"""
import filecmp
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEN = os.path.join(ROOT, "generated")
SNC = os.path.join(ROOT, "build", "snc")
KEEP = ["train.c", "plan.txt", "plan.json", "build.ninja"]


def committed():
    return sorted(d for d in os.listdir(GEN) if os.path.isdir(os.path.join(GEN, d)))


def test_generated_is_fresh(tmp_path):
    assert os.path.exists(SNC), "build it first: ninja"
    r = subprocess.run(["/usr/bin/python3", os.path.join(GEN, "regenerate.py"), "--out",
                        str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    fresh = sorted(d for d in os.listdir(tmp_path) if os.path.isdir(tmp_path / d))
    assert fresh, "regenerate.py wrote nothing"
    assert fresh == committed(), "examples in generated/ differ: committed %s, regenerated %s" % (
        committed(), fresh)
    stale = []
    for name in fresh:
        for f in KEEP:
            a, b = os.path.join(GEN, name, f), str(tmp_path / name / f)
            if not os.path.exists(a) or not filecmp.cmp(a, b, shallow=False):
                stale.append("generated/%s/%s" % (name, f))
    assert not stale, ("stale generated files (the compiler's output changed; run `ninja "
                       "generated`, review and commit the diff): " + ", ".join(stale))


def test_generated_build_ninja_is_portable():
    names = committed()
    assert names
    for name in names:
        text = open(os.path.join(GEN, name, "build.ninja")).read()
        assert "snc_root = ../..\n" in text, name
        assert ROOT not in text and "/tmp/" not in text, name
        for f in ("plan.txt", "plan.json", "train.c"):
            assert ROOT not in open(os.path.join(GEN, name, f)).read(), (name, f)


def test_generated_builds_from_its_folder(tmp_path):
    """`ninja -n` resolves every input (train.c, the runtime library) from the
    committed folder: a dry run fails if a path does not exist."""
    lib = os.path.join(ROOT, "build", "libsnrt_cpu.a")
    if not os.path.exists(lib):
        pytest.skip("build/libsnrt_cpu.a not built")
    name = committed()[0]
    r = subprocess.run(["ninja", "-n", "-C", os.path.join(GEN, name)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "LINK train" in r.stdout, r.stdout
