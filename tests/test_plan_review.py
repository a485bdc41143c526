"""The text plan's review sections and `snc plan --diff`.

Text: the summary names the budget, the peak line names the step with the
most live bytes (from plan.json, computed independently here) and its share
of the arena; the decisions section says "none" for each empty kind.

Diff: two plans of the same model (two batches; two policies): the arena,
layer peak and peak live rows carry the old and new values of the two
plan.json files, the delta and the percentage (computed here); identical
plans show no change; decisions that differ are named (a plan.json edited
here to recompute one tensor and offload another); malformed files are one
clear error line and exit 2.

The C side of decisions (instances written by recompute/prefetch steps, the
copy lane) is tested in tests/unit/test_review.c (run below).
"""
import json
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNC = os.path.join(ROOT, "build", "snc")
MODEL = os.path.join(ROOT, "examples", "fashion_cnn.onnx")


def run(cmd, timeout=120):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


def plan(tmp_path, batch, policy):
    j = str(tmp_path / ("p_%s_%d.json" % (policy, batch)))
    r = run([SNC, "plan", MODEL, "--batch", str(batch), "--policy", policy, "--json", j])
    assert r.returncode == 0, r.stderr
    return j, json.load(open(j)), r.stdout


def mib(b):
    return "%.1f MiB" % (b / 2**20)


def test_review_unit():
    exe = os.path.join(ROOT, "build", "tests", "test_review")
    assert os.path.exists(exe), "build it first: ninja tests"
    r = run([exe, MODEL])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "test_review: ok" in r.stdout


def test_text_peak_and_decisions(tmp_path):
    _, p, text = plan(tmp_path, 64, "liveness")
    live = [s["live_bytes"] for s in p["steps"]]
    peak = live.index(max(live))
    s = p["steps"][peak]
    m = re.search(r"^peak: step (\d+) \((\w+) (\S+) (.*)\), ([\d.]+ MiB) live = ([\d.]+)% of the arena",
                  text, re.M)
    assert m, text[:2000]
    assert int(m.group(1)) == peak and m.group(2) == s["kind"] and m.group(3) == s["op"]
    assert m.group(4) == s["node"] and m.group(5) == mib(max(live))
    assert abs(float(m.group(6)) - 100.0 * max(live) / p["arena_bytes"]) < 0.1
    # The default budget: the profile's memory (140.40 GiB) less its 1 GiB reserve
    # (measured on the H200: schemas/devices.json).
    assert re.search(r"^  budget\s+139\.40 GiB\s+\(device h200 memory less its 1\.00 GiB reserve",
                     text, re.M)
    for k in ("recomputed", "offloaded", "prefetched"):
        assert re.search(r"^  %s: none$" % k, text, re.M), k
    # The largest instance live at the peak is listed first.
    at = [i for i in p["instances"] if i["first"] <= peak <= i["last"]]
    top = max(at, key=lambda i: i["bytes"])
    first = re.search(r"^    - (\S+)", text[text.index("largest live tensors"):], re.M).group(1)
    assert first == top["tensor"]


def rows(out):
    """{label: (old, new, delta, pct)} from the diff's table."""
    res = {}
    for line in out.splitlines():
        m = re.match(r"^  (arena|persistent|layer peak|peak live|baseline|host)\s+"
                     r"([\d.]+ \w+)\s+([\d.]+ \w+)\s+([+-]?[\d.]+ \w+)\s+(\S+)", line)
        if m:
            res[m.group(1)] = m.groups()[1:]
    return res


def test_diff_batches(tmp_path):
    a, pa, _ = plan(tmp_path, 16, "liveness")
    b, pb, _ = plan(tmp_path, 32, "liveness")
    r = run([SNC, "plan", "--diff", a, b])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert re.search(r"^  batch\s+16 -> 32\s+\*$", out, re.M), out
    t = rows(out)
    for label, key in (("arena", "arena_bytes"), ("layer peak", "layer_peak_bytes"),
                       ("peak live", "peak_live_bytes")):
        old, new, delta, pct = t[label]
        x, y = pa[key], pb[key]
        assert x != y, key
        assert old == mib(x) and new == mib(y), (label, t[label])
        assert delta == ("+" if y > x else "-") + mib(abs(y - x)), (label, delta)
        assert abs(float(pct.rstrip("%")) - 100.0 * (y - x) / x) < 0.06, (label, pct)
    assert t["persistent"][2] == "0 B"
    assert re.search(r"^  est\. step .*\*$", out, re.M)
    assert "same number of steps of every kind" in out
    assert re.search(r"^decisions that differ.*\n  none$", out, re.M)


def test_diff_policies_and_identical(tmp_path):
    a, pa, _ = plan(tmp_path, 16, "none")
    b, pb, _ = plan(tmp_path, 16, "liveness")
    r = run([SNC, "plan", "--diff", a, b])
    assert r.returncode == 0, r.stderr
    assert re.search(r"^  policy\s+none -> liveness\s+\*$", r.stdout, re.M)
    assert rows(r.stdout)["arena"][:2] == (mib(pa["arena_bytes"]), mib(pb["arena_bytes"]))
    r = run([SNC, "plan", "--diff", b, b])
    assert r.returncode == 0
    assert not [l for l in r.stdout.splitlines()[1:] if l.endswith("*")], r.stdout


def test_diff_names_decisions(tmp_path):
    a, pa, _ = plan(tmp_path, 16, "liveness")
    p = json.loads(open(a).read())
    acts = [i for i in p["instances"] if i["kind"] == "activation"]
    rec, off = acts[0], acts[1]
    T = len(p["steps"])
    # A recomputed copy of `rec` (a new instance written by a recompute step),
    # and an offload of `off` followed by its prefetch.
    p["instances"].append(dict(rec, index=len(p["instances"]), first=T, last=T))
    p["steps"].append({"index": T, "kind": "recompute", "op": "Relu", "node": "x",
                       "live_bytes": 0, "high_water_bytes": 0, "inputs": [],
                       "outputs": [len(p["instances"]) - 1], "workspace": None})
    p["steps"].append({"index": T + 1, "kind": "offload", "op": "copy", "node": off["tensor"],
                       "live_bytes": 0, "high_water_bytes": 0, "inputs": [], "outputs": [],
                       "workspace": None})
    p["steps"].append({"index": T + 2, "kind": "prefetch", "op": "copy", "node": off["tensor"],
                       "live_bytes": 0, "high_water_bytes": 0, "inputs": [], "outputs": [],
                       "workspace": None})
    p["instances"].append({"index": len(p["instances"]), "tensor": "only.in.b",
                           "kind": "activation", "bytes": 256, "first": 0, "last": 0,
                           "offset": 0, "host_offset": -1, "persistent": False})
    b = str(tmp_path / "edited.json")
    json.dump(p, open(b, "w"))
    r = run([SNC, "plan", "--diff", a, b])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "  - %s: kept -> recomputed\n" % rec["tensor"] in out, out
    assert "  - %s: kept -> offloaded\n" % off["tensor"] in out, out
    for k in ("recompute", "offload", "prefetch"):
        assert re.search(r"^  %s\s+0 ->\s+1  \(\+1 added\)$" % k, out, re.M), (k, out)
    assert re.search(r"only in .*edited\.json: 1 \(e\.g\. \+only\.in\.b\)", out), out


BAD = {
    "empty.json": "",
    "truncated.json": '{"arena_bytes": 1,',
    "garbage.json": "\x00\x01\x02 not json",
    "array.json": "[1, 2, 3]",
    "trailing.json": '{"a": 1} x',
    "badstring.json": '{"a": "\\q"}',
    "deep.json": "[" * 5000,
    "nan.json": '{"arena_bytes": NaN}',
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_diff_malformed(name, tmp_path):
    good, _, _ = plan(tmp_path, 4, "liveness")
    bad = tmp_path / name
    bad.write_text(BAD[name])
    for args in ([str(bad), good], [good, str(bad)]):
        r = run([SNC, "plan", "--diff"] + args)
        assert r.returncode == 2, (name, r.returncode, r.stdout, r.stderr)
        assert r.stderr.startswith("snc: error: ") and r.stderr.count("\n") == 1, r.stderr
        assert name in r.stderr, r.stderr
        assert r.stdout == ""


def test_diff_wrong_keys(tmp_path):
    good, p, _ = plan(tmp_path, 4, "liveness")
    q = dict(p)
    del q["arena_bytes"]
    (tmp_path / "nokey.json").write_text(json.dumps(q))
    r = run([SNC, "plan", "--diff", good, str(tmp_path / "nokey.json")])
    assert r.returncode == 2 and "no key 'arena_bytes'" in r.stderr, r.stderr
    q = dict(p, steps={"not": "a list"})
    (tmp_path / "steps.json").write_text(json.dumps(q))
    r = run([SNC, "plan", "--diff", good, str(tmp_path / "steps.json")])
    assert r.returncode == 2 and "'steps' is an object, not an array" in r.stderr, r.stderr
    r = run([SNC, "plan", "--diff", good, str(tmp_path / "missing.json")])
    assert r.returncode == 2 and "cannot open" in r.stderr
    r = run([SNC, "plan", "--diff", good])
    assert r.returncode == 1 and "--diff needs two plan.json files" in r.stderr


def test_decisions_for_host_resident_state(tmp_path):
    """At the smallest budget parameters and optimizer state live on the host:
    each one's decision says so, with its copies to the device and back
    counted from plan.json (not "idle for -145 steps")."""
    r = run([SNC, "plan", MODEL, "--batch", "8", "--budget", "1"])
    low = re.search(r"\((\d+) bytes\)", r.stderr).group(1)
    j = str(tmp_path / "low.json")
    r = run([SNC, "plan", MODEL, "--batch", "8", "--budget", low, "--json", j])
    assert r.returncode == 0, r.stderr
    p = json.load(open(j))
    hosted = {i["tensor"] for i in p["instances"] if i["persistent"] and i["host_offset"] >= 0
              and i["kind"] in ("param", "optimizer")}
    assert any(t.endswith(".momentum") for t in hosted) and "features.0.weight" in hosted
    decisions = r.stdout[r.stdout.index("\ndecisions ("):]
    for name in hosted:
        n_in = sum(s["kind"] == "prefetch" and s["node"] == name for s in p["steps"])
        n_out = sum(s["kind"] == "offload" and s["node"] == name for s in p["steps"])
        first = min(s["index"] for s in p["steps"] if s["kind"] == "prefetch" and s["node"] == name)
        want = "    - %s  " % name
        line = next(l for l in decisions.splitlines() if l.startswith(want))
        assert ("resident in host memory: copied to the device %d time%s (first at step %d), "
                "written back %d time" % (n_in, "" if n_in == 1 else "s", first, n_out)) in line, line
    assert not re.search(r"idle on the device for -", r.stdout)
