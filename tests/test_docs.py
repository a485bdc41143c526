"""The documentation names only things that exist, and the reference matches
the programs.

Scanned: README.md, docs/*.md, bench/*.md, compiler/README.md and the
schemas' descriptions; the comments of compiler/, runtime/, tests/, bench/
and examples/ (C and CUDA comments, Python comments and docstrings, shell
comments). In all of them:

- a path under compiler/, runtime/, tests/, bench/, examples/, docs/,
  schemas/ or generated/ (and a bare file name such as `search.c`) names a
  file or folder that exists;
- `name()` names a function that some C source calls or defines, or a
  Python function of the tree; a `snake_case` identifier in backticks is a
  word of the C, Python, shell or JSON sources (a function, a variable, a
  plan.json or metrics key);
- a `--flag` is in a usage text (snc, the emitted program, snc-calibrate)
  or an argument parser of the tree;
- an SNRT_/SNC_ name is read from the environment (getenv, os.environ, a
  shell `$NAME`) or is an identifier of the C sources, and one written as
  an assignment (`SNRT_X=1`) is read from the environment.

docs/reference.md is checked against the sources: its usage blocks are the
programs' usage texts, its flag tables list exactly the flags each program
parses, its plan.json tables exactly schemas/plan.schema.json's keys, and its
environment table every SNRT_/SNC_ variable the code reads.

README figures: a measured figure (a number with a unit: %, x, ms, s, min,
GiB, MiB, KiB, GB/s, GFLOP/s, images/s) may only stand on a line that names
a bench/NAME.md, and that file must contain the same number string. So the
README quotes the bench page and never drifts from it.

test_*_planted plant one stale reference of each kind in a copy of the tree
and check that the check reports it.
"""
import json
import os
import re
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = {".git", "build", "build-san", "build-gpu", "gpu-bundle", "out", "__pycache__"}

# Pages another branch adds; a name here may be cited before it exists.
# Remove an entry once its page is in the tree.
PENDING_PATHS = set()

# Bare file names that are not files of the tree: outputs snc and the
# programs write, generated sources, and other projects' files.
OUTSIDE_FILES = {
    "train.c",            # the emitted program (DIR/train.c)
    "onnx.pb-c.c", "onnx.pb-c.h",   # protoc-c's output (build/gen)
    "llm.c",              # Karpathy's llm.c: its token file layout
    "train_gpt2.c",       # llm.c's CPU trainer (bench/gpt_speed --llmc compiles the user's copy)
    "loss.npy",           # --dump-grads's output
    "cudnn.h", "nccl.h", "mpi.h", "cublas_v2.h", "cuda_runtime.h",   # libraries' headers
    "stdio.h", "stdlib.h", "string.h", "stddef.h", "stdint.h", "math.h",
}
# Words that stand for a name in a path pattern (tests/unit/test_X.c, DIR/train).
PLACEHOLDERS = {"X", "N", "NAME", "STAGE", "DIR", "FILE", "MODEL", "PASS", "OUT", "A", "B", "K"}

# name() that are not functions of this tree: library and language names
# the comments mention (C library, OpenMP, MPI, CUDA, Python, PyTorch).
OUTSIDE_FUNCTIONS = {
    "main", "backward", "step", "zero_grad", "eval", "train", "no_grad", "parameters",
    "state_dict", "named_parameters", "contiguous", "item", "detach", "float", "half",
    "bfloat16", "view", "numpy", "time", "perf_counter", "fork", "exec", "wait",
    "abort", "sync", "fsync", "rename", "signal", "raise", "setUp", "cpu", "cuda",
}

# Flags of other programs that comments and pages show in command lines.
OUTSIDE_FLAGS = {
    "--oversubscribe", "--allow-run-as-root", "--host",        # mpirun
    "--tool",                                                  # valgrind --tool=callgrind
    "--list-gpu-arch",                                         # nvcc
    "--no-install-recommends",                                 # apt-get
    "--system-site-packages", "--disable-pip-version-check",   # python3 -m venv, pip
    "--version", "--help",
    "--bogus", "--frobnicate",    # docs/failures.md: the unknown flags it tries
}

PATH_RE = re.compile(r"(?<![\w/.$-])((?:compiler|runtime|tests|bench|examples|docs|schemas|generated)"
                     r"/[\w./-]*\w)(?![\w*<{])")
BARE_RE = re.compile(r"(?<![\w/.$-])([A-Za-z][\w-]*\.(?:c|h|cu|py|sh|md))\b(?![\w/(-])")
FUNC_RE = re.compile(r"(?<![\w.$])([A-Za-z_]\w*)\(\)")
FLAG_RE = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?![\w-])")
ENV_RE = re.compile(r"(?<![\w$])((?:SNRT|SNC)_[A-Z0-9_]*[A-Z0-9])\b(=?)")
FIGURE_RE = re.compile(r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)\s?(?:%|x\b|ms\b|s\b|min\b|GiB|MiB|KiB|GB/s|"
                       r"GFLOP/s|images/s|img/s)")
BENCH_RE = re.compile(r"bench/([\w-]+\.md)")


def walk(root, top, exts):
    out = []
    base = os.path.join(root, top)
    if os.path.isfile(base):
        return [top]
    for dirpath, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build"))
        for f in sorted(files):
            if exts is None or f.endswith(exts):
                out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return out


def is_python(root, rel):
    if rel.endswith(".py"):
        return True
    if "." in os.path.basename(rel):
        return False
    try:
        with open(os.path.join(root, rel)) as f:
            return "python" in f.readline()
    except (OSError, UnicodeDecodeError):
        return False


def c_comments(text):
    return "\n".join(m.group(0) for m in re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S))


def c_code(text):
    """C text without comments and string literals."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)
    return re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', text)


def py_comments(text):
    parts = re.findall(r'"""(.*?)"""', text, re.S)
    parts += re.findall(r"(?m)(?:^|\s)#(?!!)([^\n]*)", re.sub(r'"""(.*?)"""', "", text, flags=re.S))
    return "\n".join(parts)


def sh_comments(text):
    return "\n".join(re.findall(r"(?m)(?:^|\s)#(?!!)([^\n]*)", text))


def documents(root):
    """(file, text) of every page and every source file's comments."""
    out = []
    pages = ["README.md", "compiler/README.md"] + walk(root, "docs", (".md",)) + walk(root, "bench", (".md",))
    for rel in pages:
        if os.path.exists(os.path.join(root, rel)):
            out.append((rel, open(os.path.join(root, rel)).read()))
    for rel in walk(root, "schemas", (".json",)):
        out.append((rel, "\n".join(re.findall(r'"(?:_comment|description|title)"\s*:\s*"((?:[^"\\]|\\.)*)"',
                                               open(os.path.join(root, rel)).read()))))
    for top in ("compiler", "runtime", "tests", "bench", "examples", "docs", "generated/regenerate.py",
                "configure.py"):
        for rel in walk(root, top, None):
            path = os.path.join(root, rel)
            try:
                text = open(path).read()
            except UnicodeDecodeError:
                continue
            if rel == "tests/test_docs.py":
                continue      # its docstring shows the patterns it checks
            if rel.endswith((".c", ".h", ".cu")):
                if rel.startswith("generated/"):
                    continue
                out.append((rel, c_comments(text)))
            elif is_python(root, rel):
                out.append((rel, py_comments(text)))
            elif rel.endswith(".sh"):
                out.append((rel, sh_comments(text)))
    return out


def tree_files(root):
    files = set()
    for rel in walk(root, ".", None):
        rel = os.path.normpath(rel)
        files.add(rel)
        d = os.path.dirname(rel)
        while d:
            files.add(d)
            d = os.path.dirname(d)
    return files


def is_placeholder(path):
    """compiler/STAGE/x.c, tests/unit/test_X.c, DIR/...: a pattern, not a file."""
    return any(seg in PLACEHOLDERS for seg in re.split(r"[/._-]", path))


def c_sources(root):
    return [r for top in ("compiler", "runtime", "tests", "bench", "examples") for r in
            walk(root, top, (".c", ".h", ".cu"))]


def known_functions(root):
    names = set()
    for rel in c_sources(root):
        code = c_code(open(os.path.join(root, rel)).read())
        names.update(re.findall(r"\b([A-Za-z_]\w*)\s*\(", code))
    for rel in walk(root, ".", (".py",)) + [r for r in walk(root, "bench", None) if is_python(root, r)]:
        names.update(re.findall(r"(?m)^\s*def\s+(\w+)\s*\(", open(os.path.join(root, rel)).read()))
    return names


def source_words(root):
    """Every word of the C code (comments left out), Python, shell and JSON files."""
    words = set()
    for rel in c_sources(root):
        words.update(re.findall(r"\w+", re.sub(r"/\*.*?\*/|//[^\n]*", " ",
                                               open(os.path.join(root, rel)).read(), flags=re.S)))
    for rel in walk(root, ".", None):
        if rel.endswith((".py", ".json", ".sh")) or is_python(root, rel):
            if rel != "tests/test_docs.py":
                words.update(re.findall(r"\w+", open(os.path.join(root, rel)).read()))
    return words


def c_string(src, start):
    """The adjacent C string literals from the first one after start, joined."""
    m = re.compile(r'(?:\s*"(?:[^"\\\n]|\\.)*")+').search(src, start)
    parts = re.findall(r'"((?:[^"\\\n]|\\.)*)"', m.group(0))
    return "".join(parts).encode().decode("unicode_escape")


def usage_texts(root):
    """{program: its usage text as the program prints it}."""
    snc_src = open(os.path.join(root, "compiler/main.c")).read()
    train_src = open(os.path.join(root, "runtime/common/flags.c")).read()
    cal_src = open(os.path.join(root, "runtime/calibrate/calibrate.c")).read()
    out = {
        "snc": c_string(snc_src, snc_src.index("usage_text[] =")),
        "train": c_string(train_src, train_src.index("usage_text[] =")).replace("%s", "train", 1),
    }
    i = cal_src.index("static void usage(int code)")
    i = cal_src.index("stdout,", i) + len("stdout,")
    out["snc-calibrate"] = c_string(cal_src, i)
    return out


def parsed_flags(root):
    """{program: every flag its argument parsing compares against}."""
    def strcmp_flags(rel, fn):
        src = open(os.path.join(root, rel)).read()
        i = src.index(fn)
        body = src[i:src.index("\n}\n", i)]
        return set(re.findall(r'strcmp\(\w+(?:->\w+)?, "(-[-\w]+)"\)', body))
    return {
        "snc": strcmp_flags("compiler/main.c", "static void parse_args"),
        "train": strcmp_flags("runtime/common/flags.c", "void rt_parse_args"),
        "snc-calibrate": strcmp_flags("runtime/calibrate/calibrate.c", "static int parse_args("),
        "configure.py": set(re.findall(r'add_argument\("(--[\w-]+)"',
                                       open(os.path.join(root, "configure.py")).read())),
    }


def all_known_flags(root):
    flags = set()
    for text in usage_texts(root).values():
        flags.update(FLAG_RE.findall(text))
    for fl in parsed_flags(root).values():
        flags.update(fl)
    for rel in walk(root, ".", None):
        if rel.endswith(".py") or is_python(root, rel):
            text = open(os.path.join(root, rel)).read()
            flags.update(re.findall(r'add_argument\(\s*"(--[\w-]+)"', text))
            # a script that reads sys.argv itself: `"--flag" in argv`
            flags.update(re.findall(r'"(--[\w-]+)" in (?:sys\.)?\w+', text))
        elif rel.endswith(".sh"):
            # shell scripts' own options: case patterns and usage lines
            text = open(os.path.join(root, rel)).read()
            flags.update(re.findall(r"(?m)^\s*(--[\w-]+)[|)]", text))
    return flags | OUTSIDE_FLAGS


def env_reads(root):
    """SNRT_/SNC_ (and other) names the code reads from the environment."""
    names = set()
    for rel in c_sources(root):
        names.update(re.findall(r'(?:getenv|env_flag)\("(\w+)"', open(os.path.join(root, rel)).read()))
    for rel in walk(root, ".", None):
        if rel.endswith(".py") or is_python(root, rel):
            text = open(os.path.join(root, rel)).read()
            names.update(re.findall(r'\b(?:environ|env)(?:\.get\(|\[)\s*"(\w+)"', text))
        elif rel.endswith(".sh"):
            names.update(re.findall(r"\$\{?(\w+)", open(os.path.join(root, rel)).read()))
    return names


def c_identifiers(root):
    names = set()
    for rel in c_sources(root):
        names.update(re.findall(r"\b((?:SNRT|SNC)_\w+)\b", c_code(open(os.path.join(root, rel)).read())))
    return names


def check_references(root):
    """Problems, one line each: file, what it names, why that is wrong."""
    files = tree_files(root)
    basenames = {os.path.basename(f) for f in files}
    funcs = known_functions(root)
    flags = all_known_flags(root)
    reads = env_reads(root)
    idents = c_identifiers(root)
    words = source_words(root)
    bad = []
    for rel, text in documents(root):
        here = os.path.dirname(rel)
        for m in PATH_RE.finditer(text):
            p = m.group(1).rstrip(".")
            if is_placeholder(p) or p in PENDING_PATHS:
                continue
            if os.path.normpath(p) not in files:
                bad.append("%s: names %s, which does not exist" % (rel, p))
        if rel.startswith("compiler/"):
            # inside compiler/, stage paths are relative to it (front/import.c)
            for m in re.finditer(r"(?<![\w/.-])((?:front|train|plan|review|emit)/\w+\.[ch])\b", text):
                if os.path.normpath(os.path.join("compiler", m.group(1))) not in files:
                    bad.append("%s: names %s, which does not exist" % (rel, m.group(1)))
        for m in BARE_RE.finditer(text):
            name = m.group(1)
            if name in basenames or name in OUTSIDE_FILES or is_placeholder(name):
                continue
            if os.path.normpath(os.path.join(here, name)) in files:
                continue
            bad.append("%s: names file %s, which does not exist" % (rel, name))
        for name in FUNC_RE.findall(text):
            if name not in funcs and name not in OUTSIDE_FUNCTIONS:
                bad.append("%s: names function %s(), which does not exist" % (rel, name))
        for name in re.findall(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`", text):
            if name not in words:
                bad.append("%s: names `%s`, which is nowhere in the sources" % (rel, name))
        for flag in FLAG_RE.findall(text):
            if flag not in flags:
                bad.append("%s: names flag %s, which no usage text or argument parser has" % (rel, flag))
        for name, assign in ENV_RE.findall(text):
            if assign and name not in reads:
                bad.append("%s: sets %s, which nothing reads from the environment" % (rel, name))
            elif name not in reads and name not in idents:
                bad.append("%s: names %s, which is neither read from the environment nor in the "
                           "sources" % (rel, name))
    return sorted(set(bad))


def check_figures(root):
    """README figures that are not on a line citing a bench page holding them."""
    bad = []
    text = open(os.path.join(root, "README.md")).read()
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    for n, line in enumerate(text.split("\n"), 1):
        figures = [m.group(1) for m in FIGURE_RE.finditer(line)]
        if not figures:
            continue
        pages = BENCH_RE.findall(line)
        if not pages:
            bad.append("README.md:%d: %s without a bench/*.md on its line" % (n, ", ".join(figures)))
            continue
        for fig in figures:
            if not any(os.path.exists(os.path.join(root, "bench", p)) and
                       re.search(r"(?<![\d.,])%s(?![\d])" % re.escape(fig),
                                 open(os.path.join(root, "bench", p)).read()) for p in pages):
                bad.append("README.md:%d: %s is not in %s" % (n, fig, ", ".join("bench/" + p for p in pages)))
    return bad


def section(text, heading):
    """The text from '## heading' to the next '## '."""
    i = text.index("\n## " + heading)
    j = text.find("\n## ", i + 1)
    return text[i:j if j >= 0 else len(text)]


REF_SECTIONS = {"snc": "snc\n", "train": "DIR/train", "snc-calibrate": "snc-calibrate",
                "configure.py": "configure.py"}


def check_reference(root):
    ref = open(os.path.join(root, "docs/reference.md")).read()
    bad = []
    usage = usage_texts(root)
    parsed = parsed_flags(root)
    for prog, heading in REF_SECTIONS.items():
        sec = section(ref, heading)
        if prog in usage:
            blocks = re.findall(r"```\n(.*?)```", sec, re.S)
            if usage[prog] not in blocks:
                bad.append("docs/reference.md: the usage block of %s is not the text its source prints" % prog)
        want = set(parsed[prog])
        want.discard("-h")
        others = set().union(*(f for p, f in parsed.items() if p != prog))
        for f in sorted(set(FLAG_RE.findall(usage.get(prog, ""))) - parsed[prog] - others):
            bad.append("%s's usage text names %s, which no program parses" % (prog, f))
        rows = [l for l in sec.split("\n") if l.startswith("| `-")]
        have = set()
        for r in rows:
            have.update(re.findall(r"`(-[-\w]+)", r.split("|")[1]))
        have.discard("-h")
        for f in sorted(want - have):
            bad.append("docs/reference.md: %s's flag %s has no row" % (prog, f))
        for f in sorted(have - want):
            bad.append("docs/reference.md: %s has no flag %s" % (prog, f))
    schema = json.load(open(os.path.join(root, "schemas/plan.schema.json")))
    keys = {"": set(schema["properties"]),
            "steps": set(schema["properties"]["steps"]["items"]["properties"]),
            "instances": set(schema["properties"]["instances"]["items"]["properties"])}
    sec = section(ref, "File formats")
    plan = sec[sec.index("### plan.json"):sec.index("### Device profiles")]
    tables = re.split(r"\nEach of `(steps|instances)`", plan)
    documented = {"": tables[0], tables[1]: tables[2], tables[3]: tables[4]}
    for part, want in keys.items():
        have = set(re.findall(r"(?m)^\| `(\w+)` \|", documented[part]))
        for k in sorted(want - have):
            bad.append("docs/reference.md: plan.json key %s%s has no row" % (part + "." if part else "", k))
        for k in sorted(have - want):
            bad.append("docs/reference.md: plan.json has no key %s%s" % (part + "." if part else "", k))
    env = section(ref, "Environment variables")
    have = set(re.findall(r"`(\w+)`", "\n".join(l.split("|")[1] for l in env.split("\n") if l.startswith("| `"))))
    for name in sorted(n for n in env_reads(root) if re.match(r"(SNRT|SNC)_", n)):
        if name not in have:
            bad.append("docs/reference.md: environment variable %s is read but has no row" % name)
    # names a C file passes to getenv through a table (the launchers' rank counts)
    listed = set()
    for rel in c_sources(root):
        text = open(os.path.join(root, rel)).read()
        if "getenv(" in text:
            listed.update(re.findall(r'"([A-Z][A-Z0-9_]+)"', text))
    for name in sorted(have):
        if name not in env_reads(root) and name not in listed:
            bad.append("docs/reference.md: environment variable %s is in the table but nothing reads it" % name)
    return bad


def test_references_exist():
    assert check_references(ROOT) == []


def test_readme_figures_are_in_the_bench_pages_they_cite():
    assert check_figures(ROOT) == []


def test_reference_matches_the_sources():
    assert check_reference(ROOT) == []


@pytest.fixture
def tree(tmp_path):
    """A copy of the tree's sources and pages (no build outputs)."""
    dst = tmp_path / "tree"
    ignore = shutil.ignore_patterns(".git", "build", "build-*", "out", "__pycache__")
    shutil.copytree(ROOT, dst, ignore=ignore)
    return dst


def plant(path, old, new):
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_stale_references_planted(tree):
    """Each kind of stale reference, planted in a copy, is reported."""
    assert check_references(str(tree)) == []
    plant(tree / "compiler/plan/search.c", "/* search.c — auto",
          "/* See compiler/plan/gone.c, docs/INTERFACE.md, INTERFACE.md, plan_everything(), --no-such-flag "
          "and SNRT_NO_SUCH=1, SNC_GONE.\n * search.c — auto")
    plant(tree / "README.md", "## A tour", "See bench/nothing.md and runtime/cpu/k_gone.c, and "
          "`snrt_allreduce_wait`.\n\n## A tour")
    bad = check_references(str(tree))
    for needle in ("compiler/plan/search.c: names compiler/plan/gone.c",
                   "compiler/plan/search.c: names docs/INTERFACE.md",
                   "compiler/plan/search.c: names file INTERFACE.md",
                   "compiler/plan/search.c: names function plan_everything()",
                   "compiler/plan/search.c: names flag --no-such-flag",
                   "compiler/plan/search.c: sets SNRT_NO_SUCH",
                   "compiler/plan/search.c: names SNC_GONE",
                   "README.md: names bench/nothing.md",
                   "README.md: names runtime/cpu/k_gone.c",
                   "README.md: names `snrt_allreduce_wait`"):
        assert any(b.startswith(needle) for b in bad), (needle, bad)
    assert len(bad) == 10, bad


def test_stale_figure_planted(tree):
    """A README figure that differs from its bench page, or cites none, is reported."""
    assert check_figures(str(tree)) == []
    plant(tree / "README.md", "91.4% test accuracy", "91.5% test accuracy")
    plant(tree / "README.md", "## A tour", "It trains at 2,480 images/s.\n\n## A tour")
    bad = check_figures(str(tree))
    assert any("91.5 is not in bench/demo.md" in b for b in bad), bad
    assert any("2,480 without a bench/*.md" in b for b in bad), bad
    assert len(bad) == 2, bad


def test_reference_drift_planted(tree):
    """A flag added to a usage text, a row for a flag that is gone, a usage block
    out of date, a schema key and an environment variable without a row: each
    reported."""
    assert check_reference(str(tree)) == []
    plant(tree / "runtime/common/flags.c", '"  --poison ', '"  --quiet            say less\\n"\n    "  --poison ')
    plant(tree / "runtime/common/flags.c", '!strcmp(s, "--poison")', '!strcmp(s, "--quiet")) o->poison = o->poison;\n'
          '    else if (!strcmp(s, "--poison")')
    plant(tree / "docs/reference.md", "| `--quick` | off |", "| `--slow` | off |")
    schema = json.loads((tree / "schemas/plan.schema.json").read_text())
    schema["properties"]["new_key"] = {"type": "integer"}
    (tree / "schemas/plan.schema.json").write_text(json.dumps(schema))
    plant(tree / "runtime/cpu/device.c", 'getenv("SNRT_COPY_LAZY")', 'getenv("SNRT_COPY_LAZIER")')
    bad = check_reference(str(tree))
    for needle in ("the usage block of train is not",
                   "train's flag --quiet has no row",
                   "snc-calibrate's flag --quick has no row",
                   "snc-calibrate has no flag --slow",
                   "plan.json key new_key has no row",
                   "SNRT_COPY_LAZIER is read but has no row",
                   "SNRT_COPY_LAZY is in the table but nothing reads it"):
        assert any(needle in b for b in bad), (needle, bad)
