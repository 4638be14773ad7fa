#!/usr/bin/env python3
"""Every sentence the library can log or return, taken from its source, and a check that
docs/troubleshooting.md lists each one.

  sentences.py list  [ROOT]            one message per line, as the docs quote it
  sentences.py check [ROOT] DOC        exit 1 (and say which) when DOC lacks a message or lists a stale one

A message is
  - the format string of a call that sets dion_last_error() or logs (dion__error, dion__error_set,
    dion__error_wrap, DION_LOG) or of any library helper declared DION__PRINTF(fmt, args) (they end in one);
  - a literal handed to a helper's `const char *why`/`reason` parameter (the drop/fail helpers log it);
  - a sentence written into a buffer that becomes part of one: snprintf into a buffer named like
    why/reason/msg/err (also struct fields: c->why, b->failed_msg) or one of MESSAGE_BUFFERS, and
    snprintf(out|buf, ...) inside a describe function (dion__describe*, dion__*_describe);
  - a literal assigned to a why/reason (`*why = "..."`, `c.why = "..."`), or to any variable inside a
    describe/hint function (`what = "..."`), and the literals such a function returns, and so do the
    functions whose result is assigned to a why/reason variable;
  - the sentence column of a status table (a static const array whose rows name a DION_ status);
  - the sentence pieces a message picks with `cond ? "..." : "..."` among its arguments (three words or more).
Conversions such as %d or %s become '…', so the docs quote "rank … cannot reach rank …". Format strings that
are only conversions ("%s: %s") wrap other messages and are skipped.
"""
import os
import re
import sys

LIBRARY_DIRS = ("src", "bootstrap", "transports")
# Programs built beside the library print for themselves; they are not library sentences.
NOT_LIBRARY = re.compile(r"bootstrap/dionrun[^/]*|src/dion_info\.c")

CALLS = {  # call name -> index of its format argument
    "dion__error": 1,
    "dion__error_set": 1,
    "dion__error_wrap": 1,
    "DION_LOG": 1,
}
# Buffers that other names do not reveal as parts of a message (src/dev.c's dion_dev_check pieces).
MESSAGE_BUFFERS = {"drops", "abort_text", "more"}
WHY_NAME = r"\w*(?:why|reason|msg)\w*|err"
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


def library_files(root):
    for d in LIBRARY_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                if NOT_LIBRARY.fullmatch(rel.replace(os.sep, "/")):
                    continue
                with open(path, encoding="utf-8") as fh:
                    yield rel, strip_comments(fh.read().replace("\\\n", " \n"))  # macro line joins


def messages(root):
    files = sorted(library_files(root))
    texts = [t for _, t in files]
    ctx = {"calls": printf_helpers(texts), "whys": why_helpers(texts), "sources": why_sources(texts)}
    found = {}
    for rel, text in files:
        for fmt, line in extract(text, ctx):
            k = key(fmt)
            if meaningful(k) and not re.fullmatch(r"[A-Z0-9_]+", k):  # a variable's name, not a sentence
                found.setdefault(k, "%s:%d" % (rel, line))
    return found


def printf_helpers(texts):
    """Library functions declared DION__PRINTF(a, b): name -> index of the format argument."""
    calls = dict(CALLS)
    for text in texts:
        for m in re.finditer(r"DION__PRINTF\s*\(\s*(\d+)\s*,\s*\d+\s*\)\s*(\w+)\s*\(", text):
            calls.setdefault(m.group(2), int(m.group(1)) - 1)  # attribute before the name
        for m in re.finditer(r"(\w+)\s*\([^;{]*\)\s*DION__PRINTF\s*\(\s*(\d+)", text):
            calls.setdefault(m.group(1), int(m.group(2)) - 1)  # attribute after the prototype
    calls.pop("DION__PRINTF", None)
    return calls


def why_helpers(texts):
    """Functions with a `const char *why` (or reason) parameter: name -> its index."""
    found = {}
    for text in texts:
        for m in re.finditer(r"\b(\w+)\s*\(([^;{}()]*)\)\s*\{", text):
            params = m.group(2).split(",")
            for i, prm in enumerate(params):
                if re.fullmatch(r"\s*const\s+char\s*\*\s*(why|reason)\s*", prm):
                    found[m.group(1)] = i
    return found


def why_sources(texts):
    """Functions whose result is assigned to a why/reason variable."""
    found = set()
    for text in texts:
        for m in re.finditer(r"\b(?:%s)\s*=\s*(\w+)\s*\(" % WHY_NAME, text):
            found.add(m.group(1))
    return found


def functions(text):
    """(name, body start, body end) of each function definition."""
    for m in re.finditer(r"^[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{}]*\)\s*\{", text, re.M):
        depth, i = 0, m.end() - 1
        while i < len(text):
            if text[i] in "\"'":
                j = i + 1
                while j < len(text) and text[j] != text[i]:
                    j += 2 if text[j] == "\\" else 1
                i = j + 1
                continue
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        yield m.group(1), m.end() - 1, i


LIT = r'"(?:[^"\\]|\\.)*"(?:\s*(?:\w+\s*)?"(?:[^"\\]|\\.)*")*'


def picks(args):
    """Literals of `cond ? "a" : "b"` arguments with three words or more."""
    for a in args:
        if "?" not in a:
            continue
        for m in re.finditer(r"[?:]\s*(%s)" % LIT, a):
            s = literal(m.group(1))
            if s is not None and len(s.split()) >= 3:
                yield s


def extract(text, ctx):
    line_of = lambda pos: text.count("\n", 0, pos) + 1
    calls, whys = ctx["calls"], ctx["whys"]
    for name, idx in calls.items():
        for m in re.finditer(r"(?<![\w.>])%s\s*\(" % re.escape(name), text):
            if re.search(r"(DION__PRINTF\s*\([^)]*\)\s*|\b(void|dion_status_t)\s+)$", text[max(0, m.start() - 60) : m.start()]):
                continue  # the declaration itself
            args = split_args(text, m.end() - 1)
            if len(args) > idx:
                s = literal(args[idx])
                if s is not None:
                    yield s, line_of(m.start())
                for s in picks(args[idx + 1 :]):
                    yield s, line_of(m.start())
    for name, idx in whys.items():
        for m in re.finditer(r"(?<![\w.>])%s\s*\(" % re.escape(name), text):
            args = split_args(text, m.end() - 1)
            if len(args) > idx:
                s = literal(args[idx])
                if s is not None:
                    yield s, line_of(m.start())
    bodies = list(functions(text))
    describe = [(b, e) for n, b, e in bodies if re.search(r"describe|hint", n)]
    sources = [(b, e) for n, b, e in bodies if n in ctx["sources"]]
    inside = lambda pos, spans: any(b <= pos < e for b, e in spans)
    # sentences written into a buffer that becomes (part of) a message
    for m in re.finditer(r"\bsnprintf\s*\(", text):
        args = split_args(text, m.end() - 1)
        if len(args) < 3:
            continue
        dest = re.sub(r"\s*\+.*$", "", args[0].strip())
        dest = re.split(r"->|\.", dest)[-1].strip()
        if not (re.fullmatch(WHY_NAME, dest) or dest in MESSAGE_BUFFERS or
                (dest in ("out", "buf") and inside(m.start(), describe))):
            continue
        s = literal(args[2])
        if s is not None:
            yield s, line_of(m.start())
        for s in picks(args[3:]):
            yield s, line_of(m.start())
    # literals assigned to a why/reason, or to anything inside a describe function
    for m in re.finditer(r"(?:\*\s*|\.|->)?\b(\w+)\s*=\s*(%s)" % LIT, text):
        if re.fullmatch(WHY_NAME, m.group(1)) or (inside(m.start(), describe) and len(m.group(2).split()) >= 3):
            s = literal(m.group(2))
            if s is not None:
                yield s, line_of(m.start())
    for m in re.finditer(r"\b(?:%s)\s*=(?!=)((?:%s|[^;\"])*\?(?:%s|[^;\"])*);" % (WHY_NAME, LIT, LIT), text):
        for s in picks([m.group(1)]):
            yield s, line_of(m.start())
    # literals returned by describe/hint functions and by the functions that produce a why
    for m in re.finditer(r"\breturn\s+(%s)\s*;" % LIT, text):
        if inside(m.start(), describe) or inside(m.start(), sources):
            s = literal(m.group(1))
            if s is not None and len(s.split()) >= 2:
                yield s, line_of(m.start())
    # status tables: the sentences of rows that name a DION_ status
    for m in re.finditer(r"static\s+const\s+\w+\s+\w+\s*\[\s*\]\s*=\s*\{", text):
        body = split_braces(text, m.end() - 1)
        for row in re.finditer(r"\{([^{}]*)\}", body):
            if not re.search(r"\bDION_(SUCCESS|ERR_\w+)\b", row.group(1)):
                continue
            for lm in re.finditer(LIT, row.group(1)):
                s = literal(lm.group(0))
                if s is not None and len(s.split()) >= 3:
                    yield s, line_of(m.end() + row.start())


def split_braces(text, start):
    depth, i = 0, start
    while i < len(text):
        if text[i] in "\"'":
            j = i + 1
            while j < len(text) and text[j] != text[i]:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1 : i]
        i += 1
    return text[start + 1 :]


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
    if missing:
        print("add a row | `message` | cause | what to do | for each missing message to the table under "
              "'## Every message' in %s (read the code at file:line for the cause)" % doc)
    if stale:
        print("remove the stale rows from %s" % doc)
    return 1 if missing or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
