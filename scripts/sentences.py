#!/usr/bin/env python3
"""Every sentence the library can log or return, taken from its source, and a check that
docs/troubleshooting.md lists each one.

  sentences.py list  [ROOT]            one message per line, as the docs quote it
  sentences.py check [ROOT] DOC        exit 1 (and say which) when DOC lacks a message or lists a stale one

A message is the format string of a call that sets dion_last_error() or logs (dion__error, dion__error_set,
dion__error_wrap, DION_LOG), of a `why` sentence a backend hands back (snprintf(why, ...), *why = "..."),
or of the device error descriptions (snprintf(out, cap, ...) inside dion__describe*). Conversions such as %d
or %s become '…', so the docs quote "rank … cannot reach rank …". Format strings that are only conversions
("%s: %s") wrap other messages and are skipped.
"""
import os
import re
import sys

LIBRARY_DIRS = ("src", "bootstrap", "transports")
# Programs built beside the library print for themselves; they are not library sentences.
NOT_LIBRARY = {os.path.join("bootstrap", "dionrun.c"), os.path.join("src", "dion_info.c")}

CALLS = {  # call name -> index of its format argument
    "dion__error": 1,
    "dion__error_set": 1,
    "dion__error_wrap": 1,
    "DION_LOG": 1,
}
SPEC = re.compile(r"%[-+ #0]*(\*|\d+)?(\.(\*|\d+))?(hh|h|ll|l|L|z|j|t)?[diouxXeEfgGcspn%]")
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def strip_comments(text):
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " * 0 + "\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_args(text, start):
    """Arguments of the call whose '(' is at text[start]; returns a list of argument strings."""
    depth, i, n, args, cur = 0, start, len(text), [], []
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i : j + 1])
            i = j + 1
            continue
        if c == "(":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c == ")":
            depth -= 1
            if depth == 0:
                args.append("".join(cur))
                return args
        elif c == "," and depth == 1:
            args.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    return args


def literal(arg):
    """The string an argument made of adjacent literals spells (macros between them count as one conversion),
    or None when the argument is not a literal."""
    arg = arg.strip()
    if not arg.startswith('"'):
        return None
    parts, pos = [], 0
    for m in STRING.finditer(arg):
        between = arg[pos : m.start()].strip()
        if between:
            parts.append("%s")  # PRIu64 and friends
        parts.append(m.group(1))
        pos = m.end()
    s = "".join(parts)
    return bytes(s, "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")


def key(fmt):
    s = SPEC.sub("…", fmt.replace("%%", "%"))
    s = " ".join(s.split())
    return s


def meaningful(k):
    return re.search(r"[A-Za-z]{3}", k) is not None


def messages(root):
    found = {}
    for d in LIBRARY_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                if rel in NOT_LIBRARY:
                    continue
                with open(path, encoding="utf-8") as fh:
                    text = strip_comments(fh.read())
                for fmt, line in extract(text):
                    k = key(fmt)
                    if meaningful(k):
                        found.setdefault(k, "%s:%d" % (rel, line))
    return found


def extract(text):
    line_of = lambda pos: text.count("\n", 0, pos) + 1
    for name, idx in CALLS.items():
        for m in re.finditer(r"\b%s\s*\(" % re.escape(name), text):
            args = split_args(text, m.end() - 1)
            if len(args) > idx:
                s = literal(args[idx])
                if s is not None:
                    yield s, line_of(m.start())
    # sentences handed back through a why/reason buffer
    for m in re.finditer(r"\bsnprintf\s*\(", text):
        args = split_args(text, m.end() - 1)
        if len(args) > 2 and re.fullmatch(r"\s*(why|reason|out)\s*", args[0]):
            if args[0].strip() == "out" and not in_describe(text, m.start()):
                continue
            s = literal(args[2])
            if s is not None:
                yield s, line_of(m.start())
    for m in re.finditer(r"\*\s*(why|reason)\s*=\s*(\"(?:[^\"\\]|\\.)*\"(?:\s*\"(?:[^\"\\]|\\.)*\")*)", text):
        s = literal(m.group(2))
        if s is not None:
            yield s, line_of(m.start())


def in_describe(text, pos):
    start = text.rfind("\n}", 0, pos)
    header = text[start if start >= 0 else 0 : pos]
    return re.search(r"\bdion__describe\w*\s*\(", header) is not None


def doc_keys(doc):
    with open(doc, encoding="utf-8") as fh:
        text = fh.read()
    start = text.find("## Every message")
    if start < 0:
        return None, text
    section = text[start:]
    keys = set()
    for row in section.splitlines():
        m = re.match(r"\|\s*`(.+?)`\s*\|", row)
        if m:
            keys.add(" ".join(m.group(1).replace("\\|", "|").split()))
    return keys, text


def main(argv):
    if len(argv) < 2 or argv[1] not in ("list", "check"):
        print(__doc__)
        return 2
    root = argv[2] if len(argv) > 2 else "."
    found = messages(root)
    if argv[1] == "list":
        for k in sorted(found):
            print("%s\t%s" % (k, found[k]))
        return 0
    doc = argv[3] if len(argv) > 3 else os.path.join(root, "docs", "troubleshooting.md")
    keys, _ = doc_keys(doc)
    if keys is None:
        print("%s has no '## Every message' section" % doc)
        return 1
    missing = sorted(k for k in found if k not in keys)
    stale = sorted(k for k in keys if k not in found)
    for k in missing:
        print("missing from %s: `%s` (%s)" % (doc, k, found[k]))
    for k in stale:
        print("listed in %s but no longer in the code: `%s`" % (doc, k))
    print("%d messages in the code, %d in the table, %d missing, %d stale" % (len(found), len(keys),
                                                                            len(missing), len(stale)))
    return 1 if missing or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
