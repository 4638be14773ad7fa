#!/usr/bin/env bash
# session 9 call 3: packet_ab in the packet variants, interleaved launches (DION / hand in one launch per build)
set -uo pipefail
B=build/gpu
{ date -u; nvidia-smi -L; } > $OUT/machine.txt 2>&1
md5sum perf/p2p_bench.cu device/*.cuh >> $OUT/machine.txt
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
V="pkh2 pk3old pkt2old pkg pkf2 pkd2 pkf0"
t=$(date +%s)
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target dionrun p2p_bench $(for v in $V; do echo p2p_bench_$v; done) > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t )) s"
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 60"
for r in 1 2 3; do
  for v in default $V; do
    exe=$B/perf/p2p_bench; [ $v = default ] || exe=$B/perf/p2p_bench_$v
    timeout 70 $P $exe --tests packet_ab --csv $OUT/bench.csv --label $v:r$r > $OUT/pab_${v}_$r.log 2>&1 || echo "$v $r rc=$?"
  done
done
python3 - $OUT/bench.csv <<'PY'
import sys, collections
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) != 7 or not f[2].startswith("packet_ab"): continue
    rows[f[1]][f[2]] = float(f[6])
print(f"{'label':14} {'raw':>7} {'hand':>7} {'dion':>7} {'d/hand':>7} {'d-hand':>7}")
for k in sorted(rows, key=lambda s: (s.split(':')[0], s)):
    r = rows[k]; a, h, d = r.get("packet_ab_raw_put_flag"), r.get("packet_ab_by_hand"), r.get("packet_ab_dion")
    if a and h and d: print(f"{k:14} {a:7.4f} {h:7.4f} {d:7.4f} {d/h:7.3f} {d-h:7.4f}")
PY
grep -hE "FAIL|rror" $OUT/*.log | sort | uniq -c | head
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
