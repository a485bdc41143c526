"""test_fuzz.py — the compiler fuzzer (tests/fuzz/) in CI size.

- Every input that once crashed snc (tests/fuzz/regressions/) goes through
  build/snc: exit 0 or 2 with one error line, never a signal or exit 3.
- A short, deterministic libFuzzer run (seed 1, 60,000 inputs) of tests/fuzz/fuzz_model.c from the seed models
  and the regression files; skipped, with the reason, where clang or its
  fuzzer runtime (libclang-rt-14-dev) is missing.
"""
import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNC = os.path.join(ROOT, "build", "snc")
REGRESSIONS = sorted(glob.glob(os.path.join(ROOT, "tests", "fuzz", "regressions", "*")))


def test_there_are_regression_files():
    assert REGRESSIONS, "tests/fuzz/regressions/ is empty"


POLICIES = ["none", "liveness", "recompute", "offload", "superneurons", "auto"]


@pytest.mark.parametrize("path", REGRESSIONS, ids=os.path.basename)
def test_regression_input_is_a_clean_error_or_ok(path):
    # The fuzzer picks loss, optimizer, policy, device and budget from a hash
    # of the input; here every combination that matters runs.
    cmds = [["inspect", path, "--batch", "3"]]
    for flags in ([], ["--loss", "mse", "--optimizer", "adam"]):
        for pol in POLICIES:
            cmds.append(["plan", path, "--batch", "2", "--policy", pol] + flags)
    cmds.append(["plan", path, "--batch", "2", "--policy", "superneurons", "--budget", "1MiB",
                 "--device", "k40c"])
    for cmd in cmds:
        if True:
            r = subprocess.run([SNC] + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=60)
            assert r.returncode in (0, 2), (cmd, r.returncode, r.stderr[-2000:])
            if r.returncode == 2:
                lines = r.stderr.strip().splitlines()
                assert len(lines) == 1 and lines[0].startswith("snc: error: "), r.stderr


def fuzzer_runtime():
    clang = shutil.which("clang")
    if not clang:
        return None, "clang is not installed (configure.py --install-test-deps adds it)"
    r = subprocess.run([clang, "-print-file-name=libclang_rt.fuzzer-x86_64.a"],
                       stdout=subprocess.PIPE, text=True)
    lib = r.stdout.strip()
    if not os.path.isabs(lib) or not os.path.exists(lib):
        r = subprocess.run([clang, "-print-resource-dir"], stdout=subprocess.PIPE, text=True)
        cands = glob.glob(os.path.join(r.stdout.strip(), "lib", "linux", "libclang_rt.fuzzer-*.a"))
        if not cands:
            return None, "clang's libFuzzer runtime is missing (Debian: libclang-rt-14-dev)"
    return clang, None


FUZZ_RUNS = 60000    # about 10 s on one core


def test_short_fuzz_run(tmp_path):
    clang, why = fuzzer_runtime()
    if not clang:
        pytest.skip(why)
    out = tmp_path / "fuzz"
    r = subprocess.run(["sh", os.path.join(ROOT, "tests", "fuzz", "build.sh"), str(out)],
                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=600, env=dict(os.environ, CLANG=clang))
    assert r.returncode == 0, r.stderr[-3000:]
    corpus = tmp_path / "corpus"
    os.makedirs(corpus)
    for f in REGRESSIONS:
        shutil.copy(f, corpus)
    # A fixed seed and a fixed number of runs make this run the same every
    # time (a failure here is a real bug, reproducible, never luck); the long
    # exploratory runs are done by hand (tests/fuzz/build.sh, then the binary).
    # No time limit: a run cut short by one would pass with fewer inputs.
    r = subprocess.run([str(out / "fuzz_model"), "-seed=1", "-runs=%d" % FUZZ_RUNS,
                        "-max_len=16384",
                        "-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1",
                        "-dict=" + os.path.join(ROOT, "tests", "fuzz", "onnx.dict"),
                        "-artifact_prefix=%s/" % tmp_path, str(corpus), str(out / "seeds")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    tail = r.stderr[-6000:]
    assert r.returncode == 0, tail
    assert "Done" in r.stderr and not glob.glob(str(tmp_path / "crash-*")), tail
    runs = [l for l in r.stderr.splitlines() if l.startswith("stat::number_of_executed_units")]
    assert runs and int(runs[0].split(":")[-1]) == FUZZ_RUNS, tail
    assert "Done %d runs" % FUZZ_RUNS in r.stderr, tail
