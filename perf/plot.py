#!/usr/bin/env python3
"""Draws the benchmark CSVs (impl,label,test,group,bytes,metric,value) written by dion-perf, p2p_bench,
nvshmem_bench and nccl_lsa_bench, one line per impl: library, or DION's transport and provider (dion is p2p;
dion-proxy-shm, dion-proxy-tcp[-hostwin] the proxy over libfabric's providers; dion-ring the proxy's ring alone;
dion-gdaki-softnic-shm/tcp[-hostwin] gdaki's device half posting to the softnic NIC model, whose CPU thread
executes the work requests over those providers: the model's times, not a NIC's):
  - latency against size per cooperation group: put_signal ping-pong (one-way), put + quiet, get;
  - bandwidth against size: put_bw (one way) and put_bw_bidir (both ways at once);
  - DION's packet puts against put_signal (the crossover size);
  - a summary of single-size rows;
  - transports side by side (perf/run_gpu.sh, step proxy): pickup, 8 B put_signal and put + quiet, message rate.
A header line (dion-perf writes one into a new file) is skipped. Needs matplotlib (not part of CI).
usage: plot.py OUTDIR FILE.csv [FILE.csv ...]"""
import csv
import math
import os
import sys
from collections import defaultdict

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402
except ImportError:
    sys.exit("plot.py needs matplotlib (pip install matplotlib)")

STYLE = {"dion": ("tab:blue", "o"), "nvshmem": ("tab:orange", "s"), "nccl_lsa": ("tab:green", "^"),
         "dion-proxy-shm": ("tab:red", "D"), "dion-proxy-shm-hostwin": ("tab:brown", "d"),
         "dion-proxy-tcp": ("tab:purple", "v"), "dion-proxy-tcp-hostwin": ("tab:purple", "v"),
         "dion-ring": ("tab:pink", "*"),
         "dion-gdaki-softnic-shm-hostwin": ("goldenrod", "P"), "dion-gdaki-softnic-tcp-hostwin": ("teal", "X")}
EXTRA = ["tab:olive", "tab:cyan", "tab:gray", "black"]


def style(impl):
    """An impl's colour and marker: fixed for the known ones, then the spare colours in order of first use."""
    if impl not in STYLE:
        STYLE[impl] = (EXTRA[len([k for k in STYLE if STYLE[k][1] == "x"]) % len(EXTRA)], "x")
    return STYLE[impl]


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            for r in csv.reader(f):
                if len(r) != 7 or r[0] == "impl":
                    continue
                impl, label, test, group, size, metric, value = r
                rows.append((impl, label, test, group, int(size), metric, float(value)))
    return rows


def series_of(rows, label, test, group, metric):
    """{impl: [(bytes, value)]} sorted by size; the last value of a repeated point wins."""
    pts = defaultdict(dict)
    for impl, lab, t, g, size, m, value in rows:
        if lab == label and t == test and g == group and m == metric:
            pts[impl][size] = value
    return {impl: sorted(p.items()) for impl, p in pts.items()}


def latency_plot(rows, label, out, test="put_signal_pingpong", metric="oneway_us",
                 title="put_signal ping-pong, one-way = half a round trip", ylabel="one-way latency (us)"):
    groups = ["thread", "warp", "block"]
    if not any(series_of(rows, label, test, g, metric) for g in groups):
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=False)
    for ax, g in zip(axes, groups):
        series = series_of(rows, label, test, g, metric)
        for impl, pts in sorted(series.items()):
            pts.sort()
            color, marker = style(impl)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=impl)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{test} {g}")
        ax.set_xlabel("bytes")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if series:
            ax.legend()
    fig.suptitle(f"{title} ({label})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def bandwidth_plot(rows, label, out):
    tests = [("put_bw", "put, one way"), ("put_bw_bidir", "put, both ways at once")]
    if not any(series_of(rows, label, t, "block", "GBps_median") for t, _ in tests):
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, (t, name) in zip(axes, tests):
        for impl, pts in sorted(series_of(rows, label, t, "block", "GBps_median").items()):
            color, marker = style(impl)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=impl)
        ax.set_xscale("log", base=2)
        ax.set_title(name)
        ax.set_xlabel("bytes")
        ax.set_ylabel("GB/s (median)")
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend()
    fig.suptitle(f"put bandwidth against size ({label})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def crossover(pk, ps):
    """The payload size where put_signal becomes faster than packets, from {bytes: us} of each: interpolated
    on log2(size) between the last size where packets win and the next measured size; None when packets win
    at every size both have, 0 when put_signal wins at the smallest."""
    common = sorted(b for b in pk if b in ps)
    prev = None
    for b in common:
        d = pk[b] - ps[b]  # > 0: put_signal faster
        if d > 0:
            if prev is None:
                return 0
            b0, d0 = prev
            x0, x1 = math.log2(b0), math.log2(b)
            return 2 ** (x0 + (x1 - x0) * (-d0) / (d - d0))
        prev = (b, d)
    return None


def packet_plot(rows, label, out):
    """DION's packet against put_signal one-way latency per group, with the crossover size (interpolated)
    marked and printed. p2p_bench writes oneway_us; dion-perf oneway_us_median (used when the other is absent)."""
    groups = ["thread", "warp", "block"]
    tests = {"packet_pingpong": ("tab:red", "D", "packet"), "put_signal_pingpong": ("tab:blue", "o", "put_signal")}
    by_metric = {"oneway_us": defaultdict(dict), "oneway_us_median": defaultdict(dict)}
    for impl, lab, test, group, size, metric, value in rows:
        if impl == "dion" and lab == label and test in tests and metric in by_metric and size <= 4096:
            by_metric[metric][(test, group)][size] = value
    series = by_metric["oneway_us"] if by_metric["oneway_us"] else by_metric["oneway_us_median"]
    if not any(k[0] == "packet_pingpong" for k in series):
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, g in zip(axes, groups):
        for test, (color, marker, name) in tests.items():
            pts = sorted(series.get((test, g), {}).items())
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=name)
        x = crossover(series.get(("packet_pingpong", g), {}), series.get(("put_signal_pingpong", g), {}))
        if x is None:
            note = "packet faster at every size measured"
        elif x == 0:
            note = "put_signal faster at every size measured"
        else:
            note = f"crossover ~{x:.0f} B: packet faster below"
            ax.axvline(x, color="gray", linestyle="--", alpha=0.7)
        print(f"packet crossover {label} {g}: {note}")
        ax.set_title(f"{g}: {note}", fontsize=10)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("payload bytes")
        ax.set_ylabel("one-way latency (us)")
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend()
    fig.suptitle(f"DION packet puts against put_signal, one-way = half a round trip ({label})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def summary_plot(rows, label, out):
    keys = [("signal_pingpong", "thread", 0, "oneway_us", "signal one-way (us)"),
            ("signal_relaxed_pingpong", "thread", 0, "oneway_us", "relaxed signal one-way (us)"),
            ("put_quiet", "thread", 8, "latency_us", "put 8 B + quiet (us)"),
            ("put_quiet", "block", 65536, "latency_us", "put_block 64 KiB + quiet (us)"),
            ("put_bw", "block", None, "GBps_median", "put 1 GiB, all SMs (GB/s)")]
    vals = defaultdict(dict)
    for impl, lab, test, group, size, metric, value in rows:
        for k in keys:
            if lab == label and test == k[0] and group == k[1] and metric == k[3] and (k[2] is None or size == k[2]):
                vals[k[4]][impl] = value
    titles = [k[4] for k in keys if vals[k[4]]]
    if not titles:
        return
    fig, axes = plt.subplots(1, len(titles), figsize=(3.2 * len(titles), 4))
    if len(titles) == 1:
        axes = [axes]
    for ax, t in zip(axes, titles):
        impls = sorted(vals[t])
        ax.bar(impls, [vals[t][i] for i in impls], color=[style(i)[0] for i in impls])
        for x, i in enumerate(impls):
            ax.text(x, vals[t][i], f"{vals[t][i]:.3g}", ha="center", va="bottom", fontsize=8)
        ax.set_title(t, fontsize=9)
    fig.suptitle(f"DION against NVSHMEM ({label}); lower is better except GB/s")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def transport_plot(rows, label, out):
    """DION's transports side by side: one bar per impl (p2p, proxy per provider, the ring alone, gdaki on the
    softnic model per provider) per figure."""
    keys = [("proxy_pickup", "thread", None, "oneway_us_median", "proxy pickup, one-way (us)"),
            ("proxy_pickup", "thread", 8, "oneway_us", "ring alone: pickup one-way (us)"),
            ("signal_pingpong", "thread", 0, "oneway_us_median", "signal one-way (us)"),
            ("put_signal_pingpong", "thread", 8, "oneway_us_median", "put_signal 8 B one-way (us)"),
            ("put_quiet", "thread", 8, "latency_us_median", "put 8 B + quiet (us)"),
            ("get", "thread", 8, "latency_us_median", "get 8 B (us)"),
            ("fetch_add", "thread", 8, "latency_us_median", "fetch-add (us)"),
            ("put8_msgrate_1sm", "thread", 8, "Mops_median", "8 B puts, 1 SM (Mops)"),
            ("put8_msgrate_8sm", "thread", 8, "Mops_median", "8 B puts, 8 SMs (Mops)"),
            ("put8_msgrate_allsm", "thread", 8, "Mops_median", "8 B puts, all SMs (Mops)")]
    vals = defaultdict(dict)
    for impl, lab, test, group, size, metric, value in rows:
        if lab != label or not impl.startswith("dion"):
            continue
        for k in keys:
            if test == k[0] and group == k[1] and metric == k[3] and (k[2] is None or size == k[2]):
                vals[k[4]][impl] = value
    titles = [k[4] for k in keys if vals[k[4]]]
    if not any(i != "dion" for t in titles for i in vals[t]):
        return  # p2p alone: the summary plot has it
    fig, axes = plt.subplots(1, len(titles), figsize=(3.0 * len(titles), 4.5))
    if len(titles) == 1:
        axes = [axes]
    for ax, t in zip(axes, titles):
        impls = sorted(vals[t])
        ax.bar(range(len(impls)), [vals[t][i] for i in impls], color=[style(i)[0] for i in impls])
        ax.set_xticks(range(len(impls)))
        ax.set_xticklabels([i.replace("dion-", "") for i in impls], rotation=45, ha="right", fontsize=8)
        ax.set_yscale("log")  # the proxy is orders of magnitude from p2p
        for x, i in enumerate(impls):
            ax.text(x, vals[t][i], f"{vals[t][i]:.3g}", ha="center", va="bottom", fontsize=7)
        ax.set_title(t, fontsize=9)
    fig.suptitle(f"DION's transports side by side, medians ({label}); lower is better except Mops")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    outdir, rows = sys.argv[1], load(sys.argv[2:])
    os.makedirs(outdir, exist_ok=True)
    for label in sorted({r[1] for r in rows}):
        latency_plot(rows, label, os.path.join(outdir, f"put_signal_latency_{label}.png"))
        latency_plot(rows, label, os.path.join(outdir, f"put_quiet_latency_{label}.png"), "put_quiet",
                     "latency_us", "put + quiet completion", "latency (us)")
        latency_plot(rows, label, os.path.join(outdir, f"get_latency_{label}.png"), "get", "latency_us",
                     "get (+ quiet)", "latency (us)")
        bandwidth_plot(rows, label, os.path.join(outdir, f"bandwidth_{label}.png"))
        summary_plot(rows, label, os.path.join(outdir, f"summary_{label}.png"))
        packet_plot(rows, label, os.path.join(outdir, f"packet_vs_put_signal_{label}.png"))
        transport_plot(rows, label, os.path.join(outdir, f"transports_{label}.png"))
    print("plots in", outdir)


if __name__ == "__main__":
    main()
