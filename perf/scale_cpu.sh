#!/usr/bin/env bash
# Measures setup cost per rank against the number of ranks, in CPU mode, on one host and across simulated
# hosts (dionrun --hosts, which needs root), and fits the linear model of docs/multihost.md to it.
# Usage: perf/scale_cpu.sh BUILD_DIR OUT_DIR [REPEATS] [RANKS...]
# Writes OUT_DIR/scale_raw.csv (every run), OUT_DIR/scale.csv (medians) and prints the fits.
set -eu
BUILD=$1 OUT=$2
REPEATS=${3:-5}
shift $(($# < 3 ? $# : 3))
RANKS=${*:-2 3 4 6 8 12 16}
WINDOWS=8 CONTEXTS=4
mkdir -p "$OUT"
export DION_CPU_MODE=1 CUDA_VISIBLE_DEVICES=
# tcache off: mallinfo2 then counts exactly the bytes in use (freed chunks in the tcache look allocated).
export GLIBC_TUNABLES=glibc.malloc.tcache_count=0
header="ranks,placement,windows,contexts,init_us,init_heap_B,barrier_us,allgather112_us,allgather1k_us,allgather1k_sent_B,win_us,win_heap_B,dev_us,dev_heap_B,rss_kB"
echo "$header" >"$OUT/scale_raw.csv"
modes="one-host"
"$BUILD/dionrun" -n 2 --hosts true 2>/dev/null && modes="one-host hosts"
for mode in $modes; do
    flag=
    [ "$mode" = hosts ] && flag=--hosts
    for n in $RANKS; do
        for ((i = 0; i < REPEATS; i++)); do
            "$BUILD/dionrun" -n "$n" $flag --timeout 120 "$BUILD/perf/scale_probe" $WINDOWS $CONTEXTS >>"$OUT/scale_raw.csv"
        done
    done
done
python3 - "$OUT" <<'EOF'
import csv, statistics, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/scale_raw.csv")))
cols = ["init_us", "init_heap_B", "barrier_us", "allgather112_us", "allgather1k_us", "allgather1k_sent_B",
        "win_us", "win_heap_B", "dev_us", "dev_heap_B", "rss_kB"]
groups = {}
for r in rows:
    groups.setdefault((r["placement"], int(r["ranks"])), []).append(r)
with open(f"{out}/scale.csv", "w") as f:
    f.write("ranks,placement," + ",".join(cols) + "\n")
    for (mode, n), rs in sorted(groups.items()):
        f.write(f"{n},{mode}," + ",".join(f"{statistics.median(float(r[c]) for r in rs):g}" for c in cols) + "\n")
med = list(csv.DictReader(open(f"{out}/scale.csv")))
def fit(mode, col):
    pts = [(int(r["ranks"]), float(r[col])) for r in med if r["placement"] == mode and float(r[col]) >= 0]
    if len(pts) < 2: return None
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b
for mode in sorted({r["placement"] for r in med}):
    for col in cols:
        ab = fit(mode, col)
        if ab: print(f"{mode:9} {col:16} = {ab[0]:10.1f} + {ab[1]:9.2f} * ranks")
EOF
