#!/usr/bin/env python3
"""test_function_length.py — C and CUDA functions in compiler/ and runtime/ longer
than LIMIT lines, from the line of the name to the closing brace.

    tests/test_function_length.py [--all] [FILE_OR_DIR ...]   (also a pytest file)

A long function is allowed when the comment right above it holds a line
starting with "Long:" that gives the reason. Prints one line per function
over the limit without one (with --all, every function over the limit, and
its reason) and exits 1 when there is any. A brace-matching scan: comments,
strings and character literals are blanked first; a top-level `{` that
follows `name(...)` (and no `=`) opens a function.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT = 120
DIRS = ["compiler", "runtime"]
EXTS = (".c", ".cu", ".h")


def blank(text):
    """Comments, strings and char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "#" and (i == 0 or text[i - 1] == "\n"):
            # A preprocessor line (with its continuations): not code to match.
            j = i
            while True:
                k = text.find("\n", j)
                if k < 0:
                    k = n
                    break
                if text[k - 1] != "\\":
                    break
                j = k + 1
            out.append(re.sub(r"[^\n]", " ", text[i:k]))
            i = k
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line) of every function definition, 1-based."""
    code = blank(text)
    found = []
    stmt_start = 0   # offset where the current top-level declaration began
    i = 0
    while i < len(code):
        c = code[i]
        if c == "{":
            head = code[stmt_start:i]
            if re.fullmatch(r"\s*(extern|namespace(\s+\w+)?)\s*", head):
                # extern "C" { ... } or a namespace: its functions are top level.
                i += 1
                stmt_start = i
                continue
            m = re.search(r"([A-Za-z_]\w*)\s*\([^;{}]*\)\s*(?:const\s*)?$", head, re.S)
            is_fn = m and "=" not in head and not re.match(r"\s*(struct|union|enum|typedef)\b", head) \
                and m.group(1) not in ("if", "for", "while", "switch", "sizeof")
            # Skip to the matching brace.
            d, j = 0, i
            while j < len(code):
                if code[j] == "{":
                    d += 1
                elif code[j] == "}":
                    d -= 1
                    if d == 0:
                        break
                j += 1
            if is_fn:
                name_at = stmt_start + len(head) - len(head.lstrip())
                first = code.count("\n", 0, name_at) + 1
                last = code.count("\n", 0, j) + 1
                found.append((m.group(1), first, last))
            i = j + 1
            stmt_start = i
            continue
        elif c in ";}":   # a declaration's end, or an extern "C" block's
            stmt_start = i + 1
        i += 1
    return found


def reason(lines, first):
    """The "Long:" line of the comment block that ends right above line `first`."""
    k = first - 2   # 0-based index of the line above
    block = []
    if k >= 0 and lines[k].rstrip().endswith("*/"):
        while k >= 0:
            block.append(lines[k])
            if "/*" in lines[k]:
                break
            k -= 1
    else:
        while k >= 0 and lines[k].lstrip().startswith("//"):
            block.append(lines[k])
            k -= 1
    text = [line.strip().lstrip("/").lstrip("*").strip() for line in reversed(block)]
    for k, s in enumerate(text):
        if s.startswith("Long:"):
            return " ".join(x.rstrip("*/").strip() for x in text[k:]).strip()
    return None


def scan(paths):
    """(path, name, lines, reason or None) of each function over LIMIT."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            for d, _, names in os.walk(p):
                files += [os.path.join(d, f) for f in names if f.endswith(EXTS)]
        else:
            files.append(p)
    out = []
    for path in sorted(files):
        text = open(path, encoding="utf-8", errors="replace").read()
        lines = text.split("\n")
        for name, first, last in functions(text):
            n = last - first + 1
            if n > LIMIT:
                out.append((os.path.relpath(path, ROOT) + ":%d" % first, name, n, reason(lines, first)))
    return out


def main(argv):
    show_all = "--all" in argv
    paths = [a for a in argv if a != "--all"] or [os.path.join(ROOT, d) for d in DIRS]
    bad = 0
    for where, name, n, why in scan(paths):
        if why is None:
            bad += 1
            print("%s: %s is %d lines (over %d) with no \"Long:\" reason above it" % (where, name, n, LIMIT))
        elif show_all:
            print("%s: %s is %d lines; %s" % (where, name, n, why))
    return 1 if bad else 0


def test_no_long_function_without_a_reason():
    bad = [(w, n, k) for w, n, k, why in scan([os.path.join(ROOT, d) for d in DIRS]) if why is None]
    assert not bad, "functions over %d lines with no \"Long:\" line above them: %s" % (LIMIT, bad)


def test_scan_sees_long_functions_and_reasons(tmp_path):
    """The scan itself: a planted long function is found (also inside
    extern "C" and after braces in strings and comments), and a "Long:" line
    in the comment right above it, and only there, excuses it."""
    body = "".join("  x += %d;   /* { */\n" % i for i in range(LIMIT))
    src = ('#include <stdio.h>\nstatic const char *s = "}{";\nstruct S { int a; };\n'
           'extern "C" {\nint f(int x) {\n' + body + '  return x;\n}\n}\n'
           '/* Why.\n * Long: a reason. */\nint g(int x) {\n' + body + '  return x;\n}\n'
           '/* Long: not right above. */\n\nint h(int x) {\n' + body + '  return x;\n}\n'
           'int k(void) { return 0; }\n')
    p = tmp_path / "planted.c"
    p.write_text(src)
    found = {name: (n, why) for _, name, n, why in scan([str(p)])}
    assert sorted(found) == ["f", "g", "h"], found
    assert found["f"] == (LIMIT + 3, None)
    assert found["g"][1] == "Long: a reason."
    assert found["h"][1] is None
    assert main([str(p)]) == 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
