"""The HTML plan page (`snc plan --html`).

- Rendered in headless Chromium (Debian's `chromium`): the screenshot is not
  blank and shows the chart's colours (PIL decodes the PNG).
- The page's elements, checked against plan.json from the same run (an
  independent path: the JSON printer, not the HTML one): the SVG, the legend
  categories, the budget line, the peak marker at the step with the most live
  bytes, one <title> per step (or per pixel column for deep networks, whose
  ranges cover every step), the largest tensor in the tensor table and the
  largest instance live at the peak in the peak table.
- Self-contained: no scripts, no external URLs, no fonts fetched.
- The 2,498-layer ResNet's page stays small (aggregated columns).
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plan_check import check_plan  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNC = os.path.join(ROOT, "build", "snc")
PY = "/usr/bin/python3"
CATEGORIES = ["persistent state", "activations", "gradients", "recomputed", "prefetched",
              "workspace"]


def run(cmd, timeout=300):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


def chromium():
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    return None


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    d = tmp_path_factory.mktemp("resnet")
    path = str(d / "resnet50.onnx")
    r = run([PY, os.path.join(ROOT, "examples", "make_resnet.py"), "--depth", "50", "--size", "32",
             "--classes", "10", "-o", path])
    assert r.returncode == 0, r.stderr
    return path


def page(model, batch, tmp_path, *extra):
    h, j = str(tmp_path / "plan.html"), str(tmp_path / "plan.json")
    r = run([SNC, "plan", model, "--batch", str(batch), "--html", h, "--json", j] + list(extra))
    assert r.returncode == 0, r.stderr
    p = json.load(open(j))
    if len(p["steps"]) < 20000:      # the page is checked against a plan that is itself checked
        check_plan(p)
    return open(h).read(), p, h


def check_page(text, p, per_step):
    steps, inst = p["steps"], p["instances"]
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    # Self-contained: the only URL is the SVG namespace, which is never fetched.
    assert "<script" not in text.lower() and "@import" not in text and "url(" not in text
    urls = set(re.findall(r"https?://[^\s\"'<>]+", text))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls
    assert text.count("<svg") == 1 and 'id="timeline"' in text
    for c in CATEGORIES:
        assert ">%s</span>" % c in text, c               # the legend
    assert 'class="budget"' in text and "budget " + "" in text
    # The peak: the step with the most live bytes, computed from plan.json.
    live = [s["live_bytes"] for s in steps]
    peak = live.index(max(live))
    m = re.search(r'<g id="peak">.*?peak live [^<]* at step (\d+) ', text, re.S)
    assert m and int(m.group(1)) == peak, (m and m.group(0), peak)
    assert 'id="at-peak">At the peak: step %d,' % peak in text
    # Hover titles: one per step, or per pixel column covering every step.
    hov = re.findall(r'<rect class="hov"[^>]*><title>(.*?)</title>', text, re.S)
    if per_step:
        assert len(hov) == len(steps)
        for i, t in enumerate(hov):
            first = t.split("\n")[0]
            assert first == "step %d" % i, first
            s = steps[i]
            assert html.escape(s["node"], quote=True).replace("&#x27;", "'") in t, (t, s)
            assert s["kind"] in t and s["op"] in t
    else:
        assert 0 < len(hov) < len(steps)
        covered = 0
        for t in hov:
            m = re.match(r"steps (\d+)-(\d+) \(most live: step (\d+)\)", t)
            assert m, t
            lo, hi, rep = map(int, m.groups())
            assert lo == covered and lo <= rep <= hi
            assert live[rep] == max(live[lo:hi + 1])     # max per column
            covered = hi + 1
        assert covered == len(steps)
    # Tables: the largest non-persistent instance, and the largest live at the peak.
    table = text[text.index('id="tensor-table"'):]
    big = max((i for i in inst if not i["persistent"]), key=lambda i: i["bytes"])
    assert html.escape(big["tensor"]) in table.split("</table>")[0]
    at_peak = [i for i in inst if i["first"] <= peak <= i["last"]]
    top = max(at_peak, key=lambda i: i["bytes"])
    ptab = text[text.index('id="peak-table"'):].split("</table>")[0]
    assert html.escape(top["tensor"]) in ptab
    kinds = {s["kind"] for s in steps}
    assert ("recomputed:</b> none" in text) == ("recompute" not in kinds)
    assert ("offloaded:</b> none" in text) == ("offload" not in kinds)
    assert "not implemented" not in text


def close_bytes(v, unit, exact):
    """The page's rounded "1.5 MiB" is `exact` bytes, to its printed digits."""
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
    digits = len(v.split(".")[1]) if "." in v else 0
    return abs(float(v) * scale - exact) <= 0.5 * 10 ** -digits * scale + 1   # half-way rounds either way


def check_copies_and_bands(text, p):
    """The copy lane, the recomputed/prefetched bands and the phase boundaries
    of a plan with copies, against plan.json."""
    steps, inst = p["steps"], p["instances"]
    # One bar per offload and per prefetch, naming its tensor and step.
    bars = re.findall(r'<rect class="(off|pf)"[^>]*><title>(offload|prefetch) (.*?) \([^)]*\) '
                      r'at step (\d+);', text)
    assert all((c == "off") == (k == "offload") for c, k, _, _ in bars)
    got = sorted((k, html.unescape(n), int(st)) for _, k, n, st in bars)
    want = sorted((s["kind"], s["node"], s["index"]) for s in steps
                  if s["kind"] in ("offload", "prefetch"))
    assert want and got == want, (len(got), len(want))
    assert text.count('<rect class="off"') == sum(k == "offload" for k, _, _ in want)
    assert text.count('<rect class="pf"') == sum(k == "prefetch" for k, _, _ in want)
    # Bands: an instance first written by a recompute (prefetch) step is
    # recomputed (prefetched) while it lives; each step's hover title gives
    # those bytes, and the bands are drawn when any step has some.
    first_kind = {}
    for s in steps:
        for i in s["outputs"]:
            if i >= 0 and inst[i]["first"] == s["index"]:
                first_kind[i] = s["kind"]
    hov = re.findall(r'<rect class="hov"[^>]*><title>(.*?)</title>', text, re.S)
    assert len(hov) == len(steps)
    for band, kind in (("recomputed", "recompute"), ("prefetched", "prefetch")):
        per_step = [sum(i["bytes"] for i in inst if i["offset"] >= 0 and
                        first_kind.get(i["index"]) == kind and i["first"] <= s <= i["last"])
                    for s in range(len(steps))]
        assert any(per_step), band
        assert ('<path class="c-%s"' % ("rec" if kind == "recompute" else "pre")) in text
        for s, t in enumerate(hov):
            m = re.search(r" %s ([\d.]+) (B|KiB|MiB|GiB);" % band, t)
            if not per_step[s]:
                assert not m, (s, t)
            else:
                assert m, (s, band, per_step[s], t)
                assert close_bytes(*m.groups(), per_step[s]), (s, band, m.group(0), per_step[s])
    # Boundaries: forward up to the loss, backward + updates, eval.
    loss = [s["kind"] for s in steps].index("loss")
    tr, T = p["train_steps"], len(steps)
    for label, lo, hi in (("forward", 0, loss - 1), ("backward + updates", loss, tr - 1),
                          ("eval", tr, T - 1)):
        assert ">%s (steps %d-%d)</text>" % (label, lo, hi) in text, label
    assert text.count('<line class="phase"') == 2


def screenshot(html_path, png):
    exe = chromium()
    if not exe:
        pytest.skip("chromium is not installed (Debian package 'chromium'; "
                    "./configure.py --install-test-deps)")
    r = run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--screenshot=" + png, "--window-size=1400,1000", "file://" + html_path],
            timeout=120)
    assert os.path.exists(png), r.stdout + r.stderr
    try:
        from PIL import Image
    except ImportError:
        pytest.skip("python3-pil is not installed")
    img = Image.open(png).convert("RGB")
    assert img.size == (1400, 1000)
    px = list(img.getdata())
    nonwhite = sum(1 for p in px if p != (255, 255, 255))
    act = sum(1 for p in px if abs(p[0] - 0x4e) + abs(p[1] - 0x79) + abs(p[2] - 0xa7) < 12)
    return nonwhite / len(px), act / len(px)


@pytest.mark.parametrize("which", ["fashion_cnn", "resnet50"])
def test_page_renders(which, resnet, tmp_path):
    model, batch = ((os.path.join(ROOT, "examples", "fashion_cnn.onnx"), 64)
                    if which == "fashion_cnn" else (resnet, 8))
    text, p, h = page(model, batch, tmp_path, "--policy", "liveness")
    check_page(text, p, per_step=len(p["steps"]) <= 1180)
    nonwhite, act = screenshot(h, str(tmp_path / "shot.png"))
    assert nonwhite > 0.05, "the page rendered (almost) blank: %.3f non-white" % nonwhite
    assert act > 0.003, "the activations band is not visible: %.4f of the pixels" % act


@pytest.mark.parametrize("how", [["--policy", "superneurons"], ["--policy", "offload"],
                                 ["--budget", "smallest"]], ids=["superneurons", "offload", "auto-min"])
def test_page_with_copies(how, tmp_path):
    """A superneurons page (and offload, and auto at the smallest budget with
    parameters on the host): copy bars, recomputed/prefetched bands,
    boundaries; auto's note says what it chose."""
    model = os.path.join(ROOT, "examples", "fashion_cnn.onnx")
    if how[1] == "smallest":
        r = run([SNC, "plan", model, "--batch", "8", "--budget", "1"])
        how = ["--budget", re.search(r"\((\d+) bytes\)", r.stderr).group(1)]
    if how == ["--policy", "offload"]:
        how += ["--device", "cpu"]     # under h200 nothing of fashion_cnn hides: no copies
    text, p, _ = page(model, 8, tmp_path, *how)
    check_page(text, p, per_step=True)
    if how[0] == "--policy" and how[1] == "offload":
        assert '<path class="c-rec"' not in text and "recompute" not in {s["kind"] for s in p["steps"]}
        assert '<path class="c-pre"' in text
    else:
        check_copies_and_bands(text, p)
    if how[0] == "--budget":
        assert re.search(r'<div class="note">policy auto: auto chose %s( with checkpoint '
                         r'segments \(expensive layers rebuilt too\))?: ' % p["planned_policy"],
                         text), p["note"]


def test_budget_on_scale(tmp_path):
    """A budget near the arena is drawn as a line at its height, labelled."""
    model = os.path.join(ROOT, "examples", "fashion_cnn.onnx")
    text, p, _ = page(model, 64, tmp_path, "--policy", "liveness", "--budget", "40MiB")
    assert "budget 40.0 MiB</text>" in text and "off scale" not in text
    text, p, _ = page(model, 64, tmp_path, "--policy", "liveness")
    assert "off scale" in text


def test_deep_resnet_page_is_small(tmp_path):
    model = str(tmp_path / "resnet2498.onnx")
    r = run([PY, os.path.join(ROOT, "examples", "make_resnet.py"), "--blocks", "6,32,788,6",
             "-o", model])
    assert r.returncode == 0, r.stderr
    text, p, h = page(model, 32, tmp_path, "--policy", "liveness", "--device", "k40c")
    size = os.path.getsize(h)
    assert size < 3 * 2**20, size
    assert len(p["steps"]) > 30000
    check_page(text, p, per_step=False)


def test_bad_html_path():
    model = os.path.join(ROOT, "examples", "fashion_cnn.onnx")
    r = run([SNC, "plan", model, "--batch", "4", "--html", "/nonexistent/dir/x.html"])
    assert r.returncode == 2 and "cannot write" in r.stderr and r.stderr.count("\n") == 1
