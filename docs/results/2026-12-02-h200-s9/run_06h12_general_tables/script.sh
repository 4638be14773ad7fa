#!/usr/bin/env bash
# session 9 call 5: a block's general copy through the tables (default) against the inline selections (bgany)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 NVSHMEM_REMOTE_TRANSPORT=none
export NVSHMEM_IGNORE_CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=1 NVSHMEM_SYMMETRIC_SIZE=3G
B=build/gpu
{ date -u; nvidia-smi -L; } > $OUT/machine.txt 2>&1
md5sum include/dion/*.cuh device/*.cuh perf/*.cu perf/*.cuh perf/*.h >> $OUT/machine.txt
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
t=$(date +%s)
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target dionrun p2p_bench p2p_bench_bgany dion-perf dion-perf-bgany nvshmem_bench ab_bench > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t )) s"
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 100"
for r in 1 2; do
  for v in "" _bgany; do
    timeout 110 $P $B/perf/p2p_bench$v --tests put_signal,completion,put_bw --groups block --csv $OUT/bench.csv --label pb$v:r$r > $OUT/pb${v}_$r.log 2>&1 || echo "pb$v $r rc=$?"
  done
  timeout 110 $P $B/perf/nvshmem_bench --tests put_signal,completion,put_bw --groups block --csv $OUT/bench.csv --label pb:r$r > $OUT/nv_$r.log 2>&1 || echo "nv $r rc=$?"
  for v in "" -bgany; do
    timeout 110 $P $B/perf/dion-perf --tests put_signal,put_quiet,put_bw --groups block --csv $OUT/perf.csv --label dp$v:r$r > $OUT/dp${v}_$r.log 2>&1 || echo "dp$v $r rc=$?"
  done
done
timeout 110 $P $B/perf/ab_bench --tests lsa --csv $OUT/ab.csv --label ab > $OUT/ab.log 2>&1 || echo "ab rc=$?"
python3 - $OUT/bench.csv $OUT/perf.csv $OUT/ab.csv <<'PY'
import sys, collections
t = collections.defaultdict(dict)
for fn in sys.argv[1:]:
    try: lines = open(fn).read().splitlines()
    except OSError: continue
    for line in lines:
        f = line.strip().split(",")
        if len(f) < 7 or f[3] != "block" or any(x in f[5] for x in ("min", "p99", "max")): continue
        t[(f[2], f[5], int(f[4]) if f[4].isdigit() else f[4])][f[0] + ":" + f[1]] = float(f[6])
labels = sorted({l for v in t.values() for l in v})
print(f"{'test':26} {'metric':10} {'bytes':>10} " + " ".join(f"{l[-14:]:>14}" for l in labels))
for k in sorted(t, key=lambda k: (k[0], k[1], str(k[2]).zfill(12))):
    print(f"{k[0][:26]:26} {k[1][:10]:10} {str(k[2]):>10} " + " ".join(f"{t[k].get(l, float('nan')):14.4f}" for l in labels))
PY
grep -hE "FAIL|rror" $OUT/*.log | sort | uniq -c | head
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
