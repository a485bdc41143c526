"""Helpers shared by the python tests: run build/snc, read `--dump import`."""
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# SNC_BIN: another build of snc (e.g. one with sanitizers) to run the tests on.
SNC = Path(os.environ.get("SNC_BIN", ROOT / "build" / "snc"))


def run_snc(*args, timeout=60):
    return subprocess.run([str(SNC), *map(str, args)], capture_output=True, timeout=timeout)


def snc_error(*args):
    """Runs snc expecting a bad-input failure; returns the one error line."""
    r = run_snc(*args)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, (r.returncode, err, r.stdout[:2000])
    lines = err.rstrip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("snc: error: "), err
    return lines[0]


_TENSOR = re.compile(
    r"^tensor (\d+) '(.*?)' kind=(\S+) dtype=(\S+) shape=(\?|\([^)]*\)) init=(\S+)"
    r"(?: fan_in=(\d+))?(?: producer=(\d+))?( output)?(?: data=(\d+) values=\[(.*)\])?$")
_NODE = re.compile(r"^node (\d+) '(.*?)' op=(\S+) in=\[(.*?)\] out=\[(.*?)\] attrs=\{(.*)\}$")


def _names(s):
    return [None if x == "-" else x.strip("'") for x in s.split(", ")] if s else []


def parse_dump(text):
    """-> (header line, {name: tensor dict}, [node dict])"""
    lines = text.splitlines()
    tensors, nodes = {}, []
    for line in lines[1:]:
        m = _TENSOR.match(line)
        if m:
            shape = m.group(5)
            vals = m.group(11)
            tensors[m.group(2)] = dict(
                index=int(m.group(1)), kind=m.group(3), dtype=m.group(4),
                shape=None if shape == "?" else tuple(
                    int(x) for x in shape[1:-1].split(", ") if x),
                init=m.group(6), fan_in=int(m.group(7)) if m.group(7) else None,
                producer=int(m.group(8)) if m.group(8) else None,
                output=bool(m.group(9)), ndata=int(m.group(10)) if m.group(10) else None,
                values=None if vals is None else [
                    float(v) for v in vals.split(", ") if v and v != "..."])
            continue
        m = _NODE.match(line)
        assert m, "unparsed dump line: " + line
        nodes.append(dict(index=int(m.group(1)), name=m.group(2), op=m.group(3),
                          inputs=_names(m.group(4)), outputs=_names(m.group(5)),
                          attrs=m.group(6)))
    return lines[0], tensors, nodes


def dump_import(path, *extra):
    r = run_snc("inspect", path, "--dump", "import", *extra)
    assert r.returncode == 0, r.stderr.decode()
    return parse_dump(r.stdout.decode())
