#!/usr/bin/env python3
"""Summarizes perf/run_gpu.sh's `ab` step (issue 10): ab.csv (labels "WHERE:VARIANT:rROUND") against the peers
in bench.csv (labels "WHERE"), when that file exists.

usage: ab_summary.py ab.csv [bench.csv]

Prints these tables:
1. p2p_bench rows per library variant (mean over rounds; lower is better, except Mops): default = this build's
   defaults; wb8 = 8 polls per abort/clock test (DION__WAIT_BATCH=8); nochk = DION_CHECK paths left out of GPU
   code (DION__CHECK_COMPILED=0); lean = both; slot0 = diagnostic, no table fallbacks (DION__DIAG_SLOT0=1);
   all = the three; w1/w2 = wait poll modes and bpick/btab/bhyb/bbr = where block copies find the window bases
   (DION__BLOCK_BASES 0/1/2/3), when the run has them. 'peer' = the best of NVSHMEM and NCCL LSA in bench.csv
   for the same row (NVSHMEM's signal_op orders nothing: it is the peer of DION's relaxed signal, not of its
   release signal), and default/peer. The ref_* rows (test refpp) are the hand-written floors of the run.
1b. the issue's ratio goals per variant: each DION row over its hand-written floor from the same run.
2. ab_bench ping-pongs: the hand-written LSA-style put_signal against dion_put_signal_warp/_block, the
   mixes (DION sends / hand waits and the reverse), and packets by hand against dion_put_packet.
3. ab_bench bandwidth: the copy engine and the ten best kernel configurations per machine.
"""
import csv
import sys
from collections import defaultdict


def rows(path):
    try:
        with open(path) as f:
            for r in csv.reader(f):
                if len(r) != 7:
                    continue
                try:  # a header line, or a row some other writer left, is skipped
                    yield r[0], r[1], r[2], r[3], int(r[4]), r[5], float(r[6])
                except ValueError:
                    continue
    except FileNotFoundError:
        return


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    ab = defaultdict(list)  # (where, variant, test, group, bytes, metric) -> values
    for impl, label, test, group, nbytes, metric, value in rows(sys.argv[1]):
        parts = label.split(":")
        if len(parts) != 3 or impl != "dion":
            continue
        ab[(parts[0], parts[1], test, group, nbytes, metric)].append(value)
    peers = defaultdict(dict)  # (where, test, group, bytes, metric) -> impl -> value
    for impl, label, test, group, nbytes, metric, value in rows(sys.argv[2] if len(sys.argv) > 2 else ""):
        if impl in ("nvshmem", "nccl_lsa"):
            # like with like: NVSHMEM's signal_op orders nothing (a volatile store, no fence), so its
            # signal row is the peer of DION's relaxed signal; NCCL LSA's is a release, DION's signal's peer
            if impl == "nvshmem" and test == "signal_pingpong":
                test = "signal_relaxed_pingpong"
            peers[(label, test, group, nbytes, metric)][impl] = value

    def mean(v):
        return sum(v) / len(v) if v else None

    # every variant the run has, default first, then the known ones in this order, then any other
    known = ["default", "wb8", "nochk", "lean", "slot0", "all", "w1", "w2", "bpick", "btab", "bhyb", "bbr"]
    present = {v for (_, v, _, _, _, _) in ab if v != "ab"}
    variants = [v for v in known if v in present] + sorted(present - set(known))
    if "default" not in variants:
        variants.insert(0, "default")
    keys = sorted({(w, t, g, b, m) for (w, v, t, g, b, m) in ab if v in variants},
                  key=lambda k: (k[0], k[1], ["thread", "warp", "block"].index(k[2]) if k[2] in
                                 ("thread", "warp", "block") else 3, k[3]))
    print("== 1. p2p_bench per variant (mean of rounds); peer = best of NVSHMEM / NCCL LSA in bench.csv")
    print(f"{'where':12} {'test':24} {'group':6} {'bytes':>8} " + " ".join(f"{v:>8}" for v in variants) +
          f" {'peer':>8} {'def/peer':>8}")
    for w, t, g, b, m in keys:
        vals = [mean(ab.get((w, v, t, g, b, m), [])) for v in variants]
        pv = peers.get((w, t, g, b, m), {})
        higher_better = m.startswith("Mops") or m.startswith("GBps")
        best = (max if higher_better else min)(pv.values()) if pv else None
        ratio = ""
        if best and vals[0]:
            ratio = f"{(best / vals[0]) if higher_better else (vals[0] / best):8.3f}"
        cells = " ".join(f"{x:8.3f}" if x is not None else f"{'-':>8}" for x in vals)
        print(f"{w:12} {t:24} {g:6} {b:8d} {cells} {best if best else float('nan'):8.3f} {ratio:>8}")

    # the ratio goals per variant, each row against its floor in the same variant's run (refpp)
    ratios = [("signal_relaxed_pingpong", 0, "ref_flag_relaxed", "relaxed signal / raw relaxed flag (goal <= 1.10)"),
              ("signal_pingpong", 0, "ref_flag_release", "release signal / raw release flag"),
              ("put_signal_pingpong", 8, "ref_put8_param", "put_signal 8 B thread / hand-written put8 + release"),
              ("packet_pingpong", 8, "ref_put8_unordered", "packet 8 B thread / raw unordered put8 + flag")]
    print("\n== 1b. ratios to the same run's hand-written floor (mean of rounds), per variant")
    print(f"{'where':12} {'ratio':52} " + " ".join(f"{v:>8}" for v in variants))
    for w in sorted({k[0] for k in ab}):
        for t, b, ref, what in ratios:
            cells = []
            for v in variants:
                x = mean(ab.get((w, v, t, "thread", b, "oneway_us"), []))
                y = mean(ab.get((w, v, ref, "thread", 0 if ref.startswith("ref_flag") else 8, "oneway_us"), []))
                cells.append(f"{x / y:8.3f}" if x and y else f"{'-':>8}")
            print(f"{w:12} {what:52} " + " ".join(cells))

    print("\n== 2. ab_bench ping-pongs, one-way us: by hand (LSA style), DION, and the mixes (who sends / waits)")
    names = ["ab_ps_lsa_by_hand", "ab_ps_dion", "ab_ps_dion_send_hand_wait", "ab_ps_hand_send_dion_wait"]
    print(f"{'where':12} {'group':6} {'bytes':>8} {'by hand':>8} {'dion':>8} {'dsend':>8} {'dwait':>8} {'dion/hand':>9}")
    for w in sorted({k[0] for k in ab}):
        for g in ("warp", "block"):
            for b in sorted({k[4] for k in ab if k[0] == w and k[3] == g and k[2].startswith("ab_ps")}):
                v = [mean(ab.get((w, "ab", n, g, b, "oneway_us"), [])) for n in names]
                cells = " ".join(f"{x:8.3f}" if x else f"{'-':>8}" for x in v)
                ratio = f"{v[1] / v[0]:9.3f}" if v[0] and v[1] else ""
                print(f"{w:12} {g:6} {b:8d} {cells} {ratio}")
        h = mean(ab.get((w, "ab", "ab_pkt_by_hand", "thread", 8, "oneway_us"), []))
        d = mean(ab.get((w, "ab", "ab_pkt_dion", "thread", 8, "oneway_us"), []))
        if h and d:
            print(f"{w:12} packet 8 B thread: by hand {h:.3f}  dion {d:.3f}  dion/hand {d / h:.3f}")

    print("\n== 3. ab_bench 1 GiB put bandwidth, GB/s (median of 5): copy engine and the best 10 kernels")
    for w in sorted({k[0] for k in ab}):
        bw = [(mean(v), k[2]) for k, v in ab.items()
              if k[0] == w and k[1] == "ab" and k[5] == "GBps_median" and k[2].startswith("bw_")]
        ce = [x for x in bw if x[1] == "bw_copy_engine"]
        for val, name in ce:
            print(f"{w:12} {name:28} {val:8.1f}")
        for val, name in sorted([x for x in bw if x[1] != "bw_copy_engine"], reverse=True)[:10]:
            print(f"{w:12} {name:28} {val:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
