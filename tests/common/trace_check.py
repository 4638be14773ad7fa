#!/usr/bin/env python3
"""Checks the DION_TRACE files of the put_signal ping-pong (tests/common/trace_test.h, mode "trace").

    trace_check.py --trace DIR/t.json --ranks 2 --rounds 200 [--capacity K] --merge tools/dion-trace-merge

Per rank (files DIR/t.rank<N>.json): valid JSON in the Chrome "traceEvents" format; pid = rank; on context 0
exactly the expected sequence (rank 0: put_signal, wait per round; rank 1: wait, put_signal), then one quiet,
cut to the first K events when the array holds K; one signal instant on context 1; every put_signal and wait
carries its round's value, size, peer and signal; durations are non-negative and starts do not go back; the
dropped counts are what the capacity implies. Then the merge tool must give one valid file with both ranks,
every event kept, and each round's send starting before the peer's wait for it ends (the clocks line up).
Exits 0 when all holds, 1 with every failure printed otherwise.
"""
import argparse
import json
import os
import subprocess
import sys

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, file=sys.stderr)


def rank_path(pattern, rank):
    if "%r" in pattern:
        return pattern.replace("%r", str(rank))
    root, ext = (pattern[:-5], ".json") if pattern.endswith(".json") else (pattern, "")
    return f"{root}.rank{rank}.json" if ext else f"{pattern}.rank{rank}.json"


def expected_ctx0(rank, rounds):
    seq = []
    for k in range(1, rounds + 1):
        pair = [("put_signal", k), ("wait", k)]
        seq += pair if rank == 0 else pair[::-1]
    return seq + [("quiet", None)]


def check_rank(path, rank, rounds, capacity):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: does not parse as JSON: {e}")
        return None
    info = doc.get("otherData", {})
    evs = doc.get("traceEvents")
    if not isinstance(evs, list):
        fail(f"{path}: no traceEvents list")
        return None
    if info.get("rank") != rank:
        fail(f"{path}: otherData.rank is {info.get('rank')}, expected {rank}")
    for e in evs:
        if e.get("pid") != rank:
            fail(f"{path}: event with pid {e.get('pid')} in rank {rank}'s file: {e}")
            break
    want = expected_ctx0(rank, rounds)
    keep = min(len(want), capacity)
    dropped = len(want) - keep
    want = want[:keep]
    data = [e for e in evs if e.get("ph") != "M"]
    ctx0 = [e for e in data if e.get("tid") == 0]
    ctx1 = [e for e in data if e.get("tid") == 1]
    ctx2 = [e for e in data if e.get("tid") == 2]
    others = [e for e in data if e.get("tid") not in (0, 1, 2)]
    if others:
        fail(f"{path}: {len(others)} events on tracks other than contexts 0, 1 and 2, first {others[0]}")
    # the barrier encloses its quiet, and is written first (viewers nest events in file order on ties)
    if [(e.get("name"), e.get("ph")) for e in ctx2] != [("barrier", "X"), ("quiet", "X")]:
        fail(f"{path}: context 2 has {[(e.get('name'), e.get('ph')) for e in ctx2]}, expected a barrier, then its quiet")
    elif ctx2[0]["args"].get("status") != "DION_SUCCESS" or ctx2[0]["ts"] > ctx2[1]["ts"] or \
            ctx2[0]["ts"] + ctx2[0]["dur"] < ctx2[1]["ts"] + ctx2[1]["dur"] - 0.0015:
        fail(f"{path}: barrier event {ctx2[0]} does not enclose its quiet {ctx2[1]}")
    # exact counts per kind
    for kind in ("put_signal", "wait", "quiet"):
        got = sum(1 for e in ctx0 if e.get("name") == kind and e.get("ph") == "X")
        exp = sum(1 for w in want if w[0] == kind)
        if got != exp:
            fail(f"{path}: {got} '{kind}' events on context 0, expected {exp}")
    if len(ctx0) != len(want):
        fail(f"{path}: {len(ctx0)} events on context 0, expected {len(want)}")
    sig = [e for e in ctx1 if e.get("name") == "signal" and e.get("ph") == "i"]
    if len(sig) != 1 or len(ctx1) != 1:
        fail(f"{path}: context 1 has {len(ctx1)} events ({len(sig)} signal instants), expected one signal")
    elif sig[0]["args"].get("peer") != 1 - rank or sig[0]["args"].get("signal") != 1:
        fail(f"{path}: context 1's signal has args {sig[0]['args']}")
    # sequence, arguments, durations, order of starts
    last_ts = -1.0
    for i, (e, (name, k)) in enumerate(zip(ctx0, want)):
        a = e.get("args", {})
        where = f"{path}: context 0 event {i}"
        if e.get("name") != name or e.get("ph") != "X":
            fail(f"{where} is {e.get('ph')} '{e.get('name')}', expected X '{name}'")
            break
        if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
            fail(f"{where}: duration {e.get('dur')} is not a non-negative number")
        if e["ts"] < last_ts:
            fail(f"{where}: starts at {e['ts']} us, before the previous event ({last_ts} us)")
        last_ts = e["ts"]
        if a.get("status") != "DION_SUCCESS" or a.get("op") != name:
            fail(f"{where}: op/status {a.get('op')}/{a.get('status')}")
        if name == "put_signal":
            exp = {"peer": 1 - rank, "bytes": 1 + (k * 37) % 249, "signal": 0, "value": k, "sig_op": "set"}
        elif name == "wait":
            exp = {"peer": rank, "signal": 0, "value": k, "observed": k, "cmp": ">="}
        else:
            exp = {}
        bad = {x: a.get(x) for x in exp if a.get(x) != exp[x]}
        if bad:
            fail(f"{where} (round {k}): args {bad}, expected {exp}")
    if info.get("dropped") != dropped or (info.get("dropped_per_context") or [None])[0] != dropped:
        fail(f"{path}: dropped {info.get('dropped')} / per context {info.get('dropped_per_context')}, "
             f"expected {dropped} on context 0 (capacity {capacity})")
    if info.get("capacity") != capacity and capacity < 1 << 30:
        fail(f"{path}: capacity {info.get('capacity')}, expected {capacity}")
    return doc


def rounds_of(doc, name, tid=0):
    return {e["args"]["value"]: e for e in doc["traceEvents"]
            if e.get("name") == name and e.get("tid") == tid and e.get("ph") == "X"}


def check_merge(tool, paths, out, docs):
    r = subprocess.run([sys.executable, tool, "-o", out] + paths, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{tool} exited with {r.returncode}: {r.stderr.strip()}")
        return
    try:
        with open(out) as f:
            merged = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"merged file {out} does not parse: {e}")
        return
    evs = merged.get("traceEvents", [])
    pids = sorted({e.get("pid") for e in evs})
    if pids != list(range(len(paths))):
        fail(f"merged file has pids {pids}, expected {list(range(len(paths)))}")
    total = sum(len(d["traceEvents"]) for d in docs)
    if len(evs) != total:
        fail(f"merged file has {len(evs)} events, the rank files {total}")
    if any(e.get("ts", 0) < 0 for e in evs):
        fail("merged file has negative timestamps")
    # causality across ranks: a round's put_signal starts before the peer's wait for that round ends
    by = {p: {"put_signal": {}, "wait": {}} for p in (0, 1)}
    for e in evs:
        if e.get("tid") == 0 and e.get("ph") == "X" and e.get("name") in ("put_signal", "wait"):
            by[e["pid"]][e["name"]][e["args"]["value"]] = e
    late = 0
    for sender in (0, 1):
        for k, send in by[sender]["put_signal"].items():
            w = by[1 - sender]["wait"].get(k)
            if w and send["ts"] > w["ts"] + w["dur"] + 0.002:
                late += 1
                if late <= 3:
                    fail(f"merged: rank {sender}'s put_signal of round {k} starts at {send['ts']} us, after rank "
                         f"{1 - sender}'s wait for it ended ({w['ts'] + w['dur']} us): clocks not aligned")
    if late > 3:
        fail(f"merged: {late} rounds out of causal order in all")
    # --align barrier undoes a clock error: rank 1's clock claimed 50 ms off, the barrier puts it back
    skewed = []
    for p, d in zip(paths, docs):
        d2 = json.loads(json.dumps(d))
        if d2["otherData"]["rank"] == 1:
            d2["otherData"]["host"] = "elsewhere"
            d2["otherData"]["epoch_offset_ns"] += 50_000_000
        q = out + f".skew{d2['otherData']['rank']}.json"
        with open(q, "w") as f:
            json.dump(d2, f)
        skewed.append(q)
    r = subprocess.run([sys.executable, tool, "--align", "barrier", "-o", out + ".aligned.json"] + skewed,
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{tool} --align barrier exited with {r.returncode}: {r.stderr.strip()}")
        return
    with open(out + ".aligned.json") as f:
        aligned = json.load(f)["traceEvents"]
    ends = {e["pid"]: e["ts"] + e["dur"] for e in aligned if e.get("name") == "barrier" and e.get("tid") == 2}
    if len(ends) != 2 or abs(ends[0] - ends[1]) > 0.002:
        fail(f"--align barrier: barrier ends {ends} do not line up")
    send = {(e["pid"], e["args"]["value"]): e["ts"] for e in aligned
            if e.get("name") == "put_signal" and e.get("tid") == 0}
    wait = {(e["pid"], e["args"]["value"]): e["ts"] + e["dur"] for e in aligned
            if e.get("name") == "wait" and e.get("tid") == 0}
    worst = max((send[(s, k)] - wait[(1 - s, k)] for (s, k) in send if (1 - s, k) in wait), default=0)
    if worst > 25000:  # us: the 50 ms error must be gone, up to the barrier's exit skew
        fail(f"--align barrier left rounds {worst} us out of causal order")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", required=True, help="the DION_TRACE value the ranks ran with")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--capacity", type=int, default=1 << 30, help="DION_TRACE_EVENTS, when set")
    ap.add_argument("--merge", help="the merge tool; its output goes beside the trace as .merged.json")
    args = ap.parse_args()
    paths = [rank_path(args.trace, r) for r in range(args.ranks)]
    docs = []
    for r, p in enumerate(paths):
        if not os.path.exists(p):
            fail(f"rank {r} wrote no trace file {p}")
            continue
        d = check_rank(p, r, args.rounds, args.capacity) if r < 2 else json.load(open(p))
        if d is not None:
            docs.append(d)
    if args.merge and len(docs) == args.ranks:
        out = (args.trace[:-5] if args.trace.endswith(".json") else args.trace).replace("%r", "all") + ".merged.json"
        check_merge(args.merge, paths, out, docs)
    if failures:
        print(f"FAIL: {len(failures)} problems in the trace files", file=sys.stderr)
        return 1
    print(f"PASS: {args.ranks} trace files, {args.rounds} rounds, capacity {args.capacity}, merged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
