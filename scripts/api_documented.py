#!/usr/bin/env python3
"""Checks the public API's documentation without depending on Doxygen's parser (stdlib only).

  api_documented.py headers ROOT      every public dion_* function declared at file scope in
                                      ROOT/include/dion/*.h and *.cuh has a /** ... */ (or ///) comment
                                      right above it, with a \\param per parameter and a \\return unless void
                                      (\\copydoc / \\copydetails F brings in F's)
  api_documented.py doxylog LOG       LOG (doxygen's WARN_LOGFILE) holds no warning
  api_documented.py snippets ROOT MD  every block of MD preceded by <!-- snippet: PATH --> equals ROOT/PATH
  api_documented.py names ROOT MD...  every dion_* and DION_* name in the MD files exists in the headers
                                      (include/dion, device/) or in docs/configuration.md

Exit 0 when all is well, 1 with one line per problem otherwise."""
import glob
import os
import re
import sys

# A declaration starts at column 0 (clang-format keeps file-scope code there); calls inside bodies are indented.
DECL = re.compile(r"^(?!return\b|if\b|#)[A-Za-z_][\w \t\*]*?\b(dion_[a-z0-9_]+)\s*\(")


def split_params(text):
    """Parameter names of a declaration's parenthesised list (text starts just after the '(')."""
    depth, cur, parts = 0, "", []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                parts.append(cur)
                break
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    names = []
    for p in parts:
        p = p.strip()
        if not p or p == "void" or p == "...":
            continue
        m = re.search(r"\(\s*\*\s*(\w+)\s*\)", p)  # function pointer: void (*fn)(void *)
        names.append(m.group(1) if m else re.findall(r"\w+", p)[-1])
    return names


def doc_above(lines, i):
    """The doc comment ending on the line above lines[i], or None when there is none."""
    j = i - 1
    if j < 0:
        return None
    if lines[j].lstrip().startswith("///"):
        k = j
        while k > 0 and lines[k - 1].lstrip().startswith("///"):
            k -= 1
        return "\n".join(lines[k : j + 1])
    if not lines[j].rstrip().endswith("*/"):
        return None
    k = j
    while k >= 0 and "/*" not in lines[k]:
        k -= 1
    if k < 0:
        return None
    start = lines[k][lines[k].index("/*") :]
    if not (start.startswith("/**") or start.startswith("/*!")):
        return None
    return "\n".join([start] + lines[k + 1 : j + 1])


def check_headers(root):
    problems, count, docs = [], 0, {}
    hdrs = sorted(glob.glob(os.path.join(root, "include/dion/*.h")) + glob.glob(os.path.join(root, "include/dion/*.cuh")))
    if not hdrs:
        return ["no public headers under %s/include/dion" % root], 0
    for path in hdrs:
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for i, line in enumerate(lines):
            m = DECL.match(line)
            if not m or m.group(1).startswith("dion__") or line.lstrip().startswith(("/*", "*")):
                continue
            name, count = m.group(1), count + 1
            where = "%s:%d: %s" % (rel, i + 1, name)
            doc = doc_above(lines, i)
            if doc is None:
                problems.append(where + " has no /** doc comment right above it")
                continue
            for ref in re.findall(r"[\\@]copy(?:doc|details)\s+(\w+)", doc):
                doc += "\n" + docs.get(ref, "")  # Doxygen copies the parameters of an earlier function
            docs[name] = doc
            rest = line[m.end() :] + "\n" + "\n".join(lines[i + 1 : i + 12])
            for p in split_params(rest):
                if not re.search(r"[\\@]param(\[[a-z, ]+\])?\s+%s\b" % re.escape(p), doc):
                    problems.append(where + ": parameter '%s' has no \\param" % p)
            returns_void = re.match(r"^(DION_API\s+|DION_HD\s+|static\s+inline\s+)*void\s", line)
            if not returns_void and not re.search(r"[\\@]returns?\b", doc):
                problems.append(where + ": no \\return")
    return problems, count


def check_doxylog(log):
    if not os.path.exists(log):
        return ["doxygen wrote no warning log at %s" % log]
    with open(log, encoding="utf-8", errors="replace") as f:
        return [l.rstrip() for l in f if l.strip()]


def check_snippets(root, md):
    problems = []
    with open(md, encoding="utf-8") as f:
        text = f.read()
    found = 0
    for m in re.finditer(r"<!-- snippet: (\S+) -->\s*\n```[a-z]*\n(.*?)```", text, re.S):
        found += 1
        with open(os.path.join(root, m.group(1)), encoding="utf-8") as f:
            if f.read() != m.group(2):
                problems.append("%s: the block marked '%s' differs from that file" % (md, m.group(1)))
    if not found:
        problems.append("%s: no <!-- snippet: PATH --> block" % md)
    return problems


def check_names(root, mds):
    known = ""
    for pat in ("include/dion/*.h", "include/dion/*.cuh", "device/*.cuh", "docs/configuration.md"):
        for path in glob.glob(os.path.join(root, pat)):
            with open(path, encoding="utf-8") as f:
                known += f.read()
    have = set(re.findall(r"\b(?:dion|DION)_\w+", known))
    problems = []
    for md in mds:
        with open(md, encoding="utf-8") as f:
            names = set(re.findall(r"\b(?:dion|DION)_\w+", f.read()))
        problems += ["%s: %s is in no public header" % (md, n) for n in sorted(names - have)]
    return problems


def main(argv):
    if len(argv) >= 3 and argv[1] == "headers":
        problems, count = check_headers(argv[2])
        what = "%d public functions" % count
    elif len(argv) >= 3 and argv[1] == "doxylog":
        problems, what = check_doxylog(argv[2]), "doxygen's warnings"
    elif len(argv) >= 4 and argv[1] == "snippets":
        problems, what = check_snippets(argv[2], argv[3]), argv[3]
    elif len(argv) >= 4 and argv[1] == "names":
        problems, what = check_names(argv[2], argv[3:]), "%d page(s)" % len(argv[3:])
    else:
        print(__doc__)
        return 2
    for p in problems:
        print({"snippets": "STALE: ", "names": "UNKNOWN: "}.get(argv[1], "UNDOCUMENTED: ") + p)
    if problems:
        print("FAIL: %d problem(s) in %s" % (len(problems), what))
        return 1
    print("ok: %s checked" % what)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
