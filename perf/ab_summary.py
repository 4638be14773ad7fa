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
2. ab_bench ping-pongs: the hand-written LSA-style put_signal against dion_put_signal_warp/_block and the
   mixes (DION sends / hand waits and the reverse); 2b. packets 8 B thread by hand against dion_put_packet /
   dion_wait_packet with the two mixes, per machine, with the goal (0.40 us one GPU, 0.85 us NVLink);
   2c. packet against put_signal per size and group from bench.csv (the crossover).
3. ab_bench 1 GiB bandwidth, both machines side by side: the copy engine (the target), the best configuration of
   each family (ld/st plain, .cs, .L1::no_allocate, .lu; bulk copies; gets), the best 15, and the goal (>= 395
   GB/s over NVLink) per machine; 3b. p2p_bench put_bw per build variant (stcs, u8cs, u8, tma when run).
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
    known = ["default", "wb8", "nochk", "lean", "slot0", "all", "w1", "w2", "bpick", "btab", "bhyb", "bbr", "pktab", "pk1", "stcs",
             "u8", "u8cs", "tma"]
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
              ("packet_pingpong", 8, "ref_put8_unordered", "packet 8 B thread / raw unordered put8 + flag"),
              # the relaxed signal's gap, split: the acquire itself, then DION on the wait side and the send side
              ("ref_flag_relaxed_acq", 0, "ref_flag_relaxed", "raw relaxed flag + fence.acquire / raw relaxed flag"),
              ("signal_relaxed_pingpong", 0, "ref_flag_relaxed_acq", "relaxed signal / raw relaxed flag + fence.acquire"),
              ("ref_flag_relaxed_libwait", 0, "ref_flag_relaxed", "raw store + dion_wait / raw relaxed flag"),
              ("ref_flag_relaxed_libsignal", 0, "ref_flag_relaxed", "dion_signal relaxed + raw wait / raw relaxed flag"),
              # the same goal with both in one launch (p2p_bench's signal_ab): no launch-to-launch spread
              ("signal_ab_relaxed", 0, "signal_ab_raw_relaxed", "relaxed signal / raw relaxed flag, one launch"),
              # goal 3 in one launch (p2p_bench's packet_ab): against the goal's floor and a packet by hand
              ("packet_ab_dion", 8, "packet_ab_raw_put_flag", "packet 8 B / raw unordered put8 + flag, one launch"),
              ("packet_ab_dion", 8, "packet_ab_by_hand", "packet 8 B / packet by hand, one launch"),
              # the same with each mode in a loop of its own (split): what a tight hand-written loop reaches
              ("signal_ab_split_relaxed", 0, "signal_ab_split_raw_relaxed", "relaxed signal / raw flag, split"),
              ("packet_ab_split_dion", 8, "packet_ab_split_by_hand", "packet 8 B / packet by hand, split")]
    print("\n== 1b. ratios to the same run's hand-written floor (mean of rounds), per variant")
    print(f"{'where':12} {'ratio':52} " + " ".join(f"{v:>8}" for v in variants))
    for w in sorted({k[0] for k in ab}):
        for t, b, ref, what in ratios:
            cells = []
            for v in variants:
                x = mean(ab.get((w, v, t, "thread", b, "oneway_us"), []))
                rb = 0 if ref.startswith("ref_flag") or ref.startswith("signal_ab") else 8
                y = mean(ab.get((w, v, ref, "thread", rb, "oneway_us"), []))
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

    # packets (issue 10 goal 3): by hand against DION in the same binary, the mixes, and the goal per machine
    print("\n== 2b. packet 8 B thread ping-pong, one-way us (ab_bench): by hand, DION, and who sends / waits")
    print(f"{'where':12} {'by hand':>8} {'dion':>8} {'hs+dw':>8} {'ds+hw':>8} {'dion/hand':>9} {'goal':>6} "
          f"{'dion/goal':>9} {'p2p_bench':>9}")
    goals = {"1gpu-mps": 0.40, "2gpu-nvlink": 0.85}
    pk = ["ab_pkt_by_hand", "ab_pkt_dion", "ab_pkt_hand_send_dion_wait", "ab_pkt_dion_send_hand_wait"]
    for w in sorted({k[0] for k in ab}):
        v = [mean(ab.get((w, "ab", n, "thread", 8, "oneway_us"), [])) for n in pk]
        if not v[0] and not v[1]:
            continue
        pb = mean(ab.get((w, "default", "packet_pingpong", "thread", 8, "oneway_us"), []))
        g = goals.get(w)
        cells = " ".join(f"{x:8.3f}" if x else f"{'-':>8}" for x in v)
        ratio = f"{v[1] / v[0]:9.3f}" if v[0] and v[1] else f"{'-':>9}"
        gr = f"{v[1] / g:9.3f}" if g and v[1] else f"{'-':>9}"
        print(f"{w:12} {cells} {ratio} {g if g else float('nan'):6.2f} {gr} "
              f"{pb if pb else float('nan'):9.3f}")
    print("   hs+dw: hand send, DION wait; ds+hw: DION send, hand wait; dion/goal <= 1 meets the goal; "
          "p2p_bench: its packet_pingpong thread 8 B row (default build)")

    # the crossover against put_signal (bench.csv, p2p_bench's packet and put_signal rows; perf/plot.py draws it)
    lat = defaultdict(dict)  # (where, group, test) -> bytes -> us
    for impl, label, test, group, nbytes, metric, value in rows(sys.argv[2] if len(sys.argv) > 2 else ""):
        if impl == "dion" and metric == "oneway_us" and test in ("packet_pingpong", "put_signal_pingpong"):
            lat[(label, group, test)][nbytes] = value
    cx = sorted({(w, g) for (w, g, t) in lat if t == "packet_pingpong"})
    if cx:
        print("\n== 2c. packet against put_signal in bench.csv, one-way us per size (packet / put_signal)")
        for w, g in cx:
            pk, ps = lat[(w, g, "packet_pingpong")], lat.get((w, g, "put_signal_pingpong"), {})
            sizes = sorted(b for b in pk if b in ps)
            cross = [b for b in sizes if ps[b] < pk[b]]
            cells = "  ".join(f"{b}: {pk[b]:.2f}/{ps[b]:.2f}" for b in sizes)
            note = f"put_signal faster from {cross[0]} B" if cross else "packet faster at every size"
            print(f"{w:12} {g:6} {note:32} {cells}")

    # bandwidth (issue 10 goal 4): both machines side by side
    print("\n== 3. ab_bench 1 GiB put bandwidth, GB/s (median of 6): copy engine, best per family, the best 15")
    wheres = sorted({k[0] for k in ab if k[1] == "ab"})
    bw = defaultdict(dict)  # test -> where -> GB/s
    # ab_bench times each configuration at 256 MiB and 1 GiB: this table reads the largest size
    big = max((k[4] for k in ab if k[1] == "ab" and k[2].startswith("bw_")), default=0)
    for k, v in ab.items():
        if k[1] == "ab" and k[5] == "GBps_median" and k[2].startswith("bw_") and k[4] == big:
            bw[k[2]][k[0]] = mean(v)
    if bw:
        key = "2gpu-nvlink" if "2gpu-nvlink" in wheres else (wheres[0] if wheres else None)
        print(f"{'config':34} " + " ".join(f"{w:>12}" for w in wheres) + "   (order: " + str(key) + ")")

        def line(name, tag=""):
            cells = " ".join(f"{bw[name].get(w, float('nan')):12.1f}" for w in wheres)
            print(f"{name:34} {cells} {tag}")

        if "bw_copy_engine" in bw:
            line("bw_copy_engine", "<- target")

        def family(name):
            if name.startswith("bw_ce_"):
                return {"get": "copy engine pull", "2streams": "copy engine, 2 streams"}.get(name[6:], "copy engine + SMs")
            if name.startswith("bw_gran"):
                return "put write size"
            if name.startswith("bw_stores_only"):
                return "put stores only"
            if name.startswith("bw_ldgsts"):
                return "put ldgsts"
            if name.startswith("bw_get_tma"):
                return "get tma"
            if name.startswith("bw_get_"):
                return "get ldst"
            if name.startswith("bw_tma"):
                return "put tma"
            for suf, f in (("_cs", "put ldst .cs"), ("_na", "put ldst .L1::no_allocate"), ("_lu", "put ldst .lu+.cs")):
                if name.endswith(suf):
                    return f
            return "put ldst " + name.rsplit("_", 1)[-1]

        best = {}
        for name, per in bw.items():
            if name == "bw_copy_engine" or key not in per:
                continue
            f = family(name)
            if f not in best or per[key] > bw[best[f]][key]:
                best[f] = name
        print("-- best per family (by " + str(key) + ")")
        for f in sorted(best):
            line(best[f], f"[{f}]")
        print("-- the best 15 (by " + str(key) + ")")
        ranked = sorted((n for n in bw if n != "bw_copy_engine" and key in bw[n]), key=lambda n: -bw[n][key])
        for name in ranked[:15]:
            line(name)
        for w in wheres:
            ce = bw.get("bw_copy_engine", {}).get(w)
            top = max(((per[w], n) for n, per in bw.items()
                       if n != "bw_copy_engine" and not n.startswith(("bw_get_", "bw_ce_", "bw_stores_only"))
                       and w in per),
                      default=None)
            if top:
                msg = f"{w}: best put kernel {top[1]} {top[0]:.1f} GB/s"
                if ce:
                    msg += f" = {top[0] / ce:.3f} x copy engine ({ce:.1f})"
                if w.startswith("2gpu"):
                    msg += f"; goal >= 395: {'MET' if top[0] >= 395 else 'missed'}"
                print(msg)
    # the library's large puts per build variant (p2p_bench put_bw, when AB_TESTS has it)
    pv = [(k, mean(v)) for k, v in ab.items() if k[2] == "put_bw" and k[5] == "GBps_median" and k[1] != "ab"]
    if pv:
        print("\n== 3b. p2p_bench put_bw (dion_put_block, 4 blocks per SM x 512 threads), GB/s, per build variant")
        for w in sorted({k[0] for k, _ in pv}):
            cells = "  ".join(f"{k[1]} {x:.1f}" for k, x in sorted(pv, key=lambda t: t[0][1]) if k[0] == w)
            print(f"{w:12} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
