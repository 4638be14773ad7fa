#!/usr/bin/env bash
# session 9 call 4: put_signal's general path compiled out (experiment): ab_bench lsa, p2p_bench block put_signal
set -uo pipefail
B=build/gpu
{ date -u; nvidia-smi -L; } > $OUT/machine.txt 2>&1
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
t=$(date +%s)
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target dionrun p2p_bench p2p_bench_fo ab_bench ab_bench_fo > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t )) s"
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 60"
for r in 1 2; do
  for v in "" _fo; do
    timeout 70 $P $B/perf/ab_bench$v --tests lsa --csv $OUT/ab.csv --label ab$v:r$r > $OUT/ab${v}_$r.log 2>&1 || echo "ab$v $r rc=$?"
    timeout 70 $P $B/perf/p2p_bench$v --tests put_signal --groups block,warp --csv $OUT/bench.csv --label pb$v:r$r > $OUT/pb${v}_$r.log 2>&1 || echo "pb$v $r rc=$?"
  done
done
python3 - $OUT/ab.csv $OUT/bench.csv <<'PY'
import sys, collections
t = collections.defaultdict(dict)
for fn in sys.argv[1:]:
    for line in open(fn):
        f = line.strip().split(",")
        if len(f) != 7 or f[3] not in ("block", "warp"): continue
        t[(f[2], f[3], int(f[4]))][f[1]] = float(f[6])
labels = sorted({l for v in t.values() for l in v})
print(f"{'test':28} {'grp':5} {'bytes':>7} " + " ".join(f"{l:>10}" for l in labels))
for k in sorted(t):
    print(f"{k[0]:28} {k[1]:5} {k[2]:7d} " + " ".join(f"{t[k].get(l, float('nan')):10.4f}" for l in labels))
PY
grep -hE "FAIL|rror" $OUT/*.log | sort | uniq -c | head
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
