#!/usr/bin/env python3
"""Checks a benchmark CSV: the header, 7 columns, numeric bytes and values, every requested test present, and
min <= median <= p99 for every row that has X_min or X_p99 (all three must be there).
usage: check_csv.py FILE.csv TEST[,TEST...]   (test names as the rows spell them)"""
import csv
import math
import sys
from collections import defaultdict

HEADER = ["impl", "label", "test", "group", "bytes", "metric", "value"]


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    path, wanted = sys.argv[1], [t for t in sys.argv[2].split(",") if t]
    errors = []
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0] != HEADER:
        errors.append(f"line 1 is {rows[0] if rows else 'missing'}, expected the header {','.join(HEADER)}")
    stats = defaultdict(dict)
    tests = set()
    for n, r in enumerate(rows[1:], start=2):
        if len(r) != len(HEADER):
            errors.append(f"line {n}: {len(r)} columns, expected {len(HEADER)}: {r}")
            continue
        impl, label, test, group, size, metric, value = r
        try:
            b, v = int(size), float(value)
        except ValueError:
            errors.append(f"line {n}: bytes or value not a number: {r}")
            continue
        if b < 0 or not math.isfinite(v) or v < 0:
            errors.append(f"line {n}: negative or not finite: {r}")
            continue
        if not impl or not test or group not in ("thread", "warp", "block"):
            errors.append(f"line {n}: empty impl or test, or group not thread/warp/block: {r}")
        tests.add(test)
        for q in ("min", "median", "p99"):
            if metric.endswith("_" + q):
                stats[(impl, label, test, group, b, metric[: -len(q) - 1])][q] = v
    if len(rows) < 2:
        errors.append("no data rows")
    for key, s in sorted(stats.items()):
        if "min" not in s and "p99" not in s:
            continue  # a lone *_median (GBps_median, Mops_median) is a derived figure, not a triple
        if set(s) != {"min", "median", "p99"}:
            errors.append(f"{key}: has {sorted(s)}, expected min, median and p99")
        elif not s["min"] <= s["median"] <= s["p99"]:
            errors.append(f"{key}: min {s['min']} <= median {s['median']} <= p99 {s['p99']} does not hold")
    for t in wanted:
        if t not in tests:
            errors.append(f"requested test {t} has no row (tests present: {sorted(tests)})")
    for e in errors:
        print("FAIL", e)
    if not errors:
        print(f"ok: {len(rows) - 1} rows, {len(stats)} min/median/p99 triples, tests {sorted(tests)}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
