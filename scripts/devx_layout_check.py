#!/usr/bin/env python3
"""Compare the DEVX field table of transports/gdaki/devx_layout.c with a copy of the PRM layouts in C
(a mlx5_ifc.h: rdma-core providers/mlx5/, the Linux kernel include/linux/mlx5/, or UCX's ib_mlx5_ifc.h, whose
fields are `u8 name[0xBITS];` or `uint8_t name[0xBITS];` inside `struct <prefix>_<command>_bits`).

  scripts/devx_layout_check.py path/to/mlx5_ifc.h [more headers...]

Prints one line per field: ok, DIFFERS (with both positions) or absent from that header. Exit status 1 when
any field differs."""
import re
import sys
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "transports/gdaki/devx_layout.c"


def read_table():
    text = TABLE.read_text()
    tables = {}
    for m in re.finditer(r"dion__devx_field_t dion__devx_(\w+)\[\] = \{(.*?)\};", text, re.S):
        rows = re.findall(r'F\("([\w.]+)", (0x[0-9a-f]+|\d+), (\d+)\)', m.group(2))
        tables[m.group(1)] = [(n, int(o, 0), int(w)) for n, o, w in rows]
    return tables


def read_header(path):
    structs = {}
    for m in re.finditer(r"(?:struct|union)\s+(\w+)\s*\{(.*?)\n\};", Path(path).read_text(errors="replace"), re.S):
        fields = []
        for line in m.group(2).split("\n"):
            line = line.split("/*")[0].strip()
            f = re.match(r"(?:u8|uint8_t)\s+(\w+)((?:\[[^\]]*\])*)\s*;", line)
            if f:
                dims = re.findall(r"\[([^\]]*)\]", f.group(2))
                width = 0 if (not dims or "" in dims) else eval("*".join(dims))  # [0x10] or [16][0x8]
                fields.append((f.group(1), None, width))
                continue
            f = re.match(r"(?:struct|union)\s+(\w+)\s+(\w+)\s*;", line)
            if f:
                fields.append((f.group(2), f.group(1), None))
        structs[m.group(1)] = fields
    return structs


def is_union(name):
    return "_union_" in name  # mlx5_ifc.h names its unions *_union_bits


def size(structs, name):
    sizes = [w if t is None else size(structs, t) for _, t, w in structs[name]]
    return max(sizes) if is_union(name) else sum(sizes)


def flatten(structs, name, base=0, prefix=""):
    out, off = {}, base
    for f, t, w in structs[name]:
        if is_union(name):  # every member at the union's offset
            if t is None:
                out[prefix + f] = (base, w)
            elif t in structs:
                out.update(flatten(structs, t, base, prefix + f + "."))
            continue
        if t is None:
            out[prefix + f] = (off, w)
            off += w
        else:
            if t not in structs:  # a union or struct this parser does not follow: stop here
                return out
            out.update(flatten(structs, t, off, prefix + f + "."))
            off += size(structs, t)
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tables, bad = read_table(), 0
    for path in sys.argv[1:]:
        structs = read_header(path)
        for cmd, rows in tables.items():
            # Layouts that read another command's output (the atomic caps come in QUERY_HCA_CAP's mailbox;
            # every output starts with status and syndrome).
            alias = {"query_atomic_cap_out": "query_hca_cap_out", "cmd_out": "query_hca_cap_out"}
            name = alias.get(cmd, cmd if cmd.endswith("_out") else cmd + "_in")
            cands = [s for s in structs if s.endswith("_" + name + "_bits")]
            if not cands:
                print(f"{path}: no struct for {cmd}")
                continue
            layout = flatten(structs, cands[0])
            for n, o, w in rows:
                if n not in layout:
                    print(f"{path}: {cmd}.{n}: absent (reserved there?)")
                elif layout[n] != (o, w):
                    print(f"{path}: {cmd}.{n}: DIFFERS: table {o:#x}/{w}, header {layout[n][0]:#x}/{layout[n][1]}")
                    bad += 1
                else:
                    print(f"{path}: {cmd}.{n}: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
