#!/usr/bin/env bash
# session 9 call 10: where DION's tight loop loses to the raw one: the default against p2p_bench_all (no checks, no fast-path selection)
set -uo pipefail
B=build/gpu
{ date -u; nvidia-smi -L; } > $OUT/machine.txt 2>&1
md5sum perf/p2p_bench.cu include/dion/dion_device.cuh device/*.cuh >> $OUT/machine.txt
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
t=$(date +%s)
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target dionrun p2p_bench p2p_bench_all > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t )) s"
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 60"
for i in 1 2 3; do
  for v in "" _all; do
    timeout 70 $P $B/perf/p2p_bench$v --tests packet_ab,signal_ab --csv $OUT/bench.csv --label ${v:-default}:r$i > $OUT/ab${v}_$i.log 2>&1 || echo "ab$v $i rc=$?"
  done
done
python3 - $OUT/bench.csv <<'PY'
import sys, collections
r = collections.defaultdict(dict)
for line in open(sys.argv[1]).read().splitlines():
    f = line.split(",")
    if len(f) == 7 and "_ab_" in f[2]: r[f[1]][f[2]] = float(f[6])
for k in sorted(r):
    v = r[k]; out = [f"{k:12}"]
    for p in ("signal_ab_", "signal_ab_split_"):
        a, b = v.get(p + "relaxed"), v.get(p + "raw_relaxed")
        if a and b: out.append(f"{p[:-1]}: {a:.4f}/{b:.4f}={a/b:.3f}")
    for p in ("packet_ab_", "packet_ab_split_"):
        d, h = v.get(p + "dion"), v.get(p + "by_hand")
        if d and h: out.append(f"{p[:-1]}: {d:.4f}/{h:.4f}={d/h:.3f}")
    print("  ".join(out))
PY
grep -hE "FAIL|rror|# ok" $OUT/*.log | sort | uniq -c | head
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
