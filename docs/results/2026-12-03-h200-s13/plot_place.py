#!/usr/bin/env python3
"""Draws p2p_bench packet_place rows (one-way us against the unit's address index, one panel per stride, one
line per mode and launch) from a CSV: plot_place.py FILE.csv OUT.png"""
import collections
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

rows = collections.defaultdict(dict)
for r in csv.reader(open(sys.argv[1])):
    if len(r) >= 7 and r[2].startswith("place_"):
        mode, stride = r[2].rsplit("_s", 1)
        rows[(int(stride), mode, r[1])][int(r[4])] = float(r[6])
strides = sorted({k[0] for k in rows})
fig, axes = plt.subplots(1, len(strides), figsize=(4 * len(strides), 3.6), sharey=True)
colors = {"place_flag": "tab:gray", "place_hand": "tab:blue", "place_dion": "tab:red"}
names = {"place_flag": "raw relaxed flag", "place_hand": "packet by hand", "place_dion": "DION packet"}
for ax, s in zip(axes, strides):
    for (stride, mode, label), v in sorted(rows.items()):
        if stride != s:
            continue
        xs = sorted(v)
        first = label.endswith("r1")
        ax.plot(xs, [v[x] for x in xs], color=colors[mode], lw=1, alpha=0.6, label=names[mode] if first else None)
    ax.set_title(f"stride {s} B")
    ax.set_xlabel("address index i (PP_PKT + i * stride)")
    ax.grid(alpha=0.3)
axes[0].set_ylabel("one-way us (written-out round)")
axes[0].legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
