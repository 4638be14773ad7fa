#!/usr/bin/env bash
# session 8 call 6: the wait's variants A/B'd inside one launch: signal_ab's DION half against its raw half,
# per build, three rounds alternating builds
set -uo pipefail
B=build/gpu
{ date -u; git log -1 --format='%H %s'; git status --short; nvidia-smi -L; } > $OUT/machine.txt 2>&1
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
V="p2p_bench p2p_bench_wsh1 p2p_bench_wsh2 p2p_bench_w0 p2p_bench_w1 p2p_bench_fastwb1"
t=$(date +%s)
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=ON "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target dionrun $V > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t )) s"
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 40"
for r in 1 2 3; do
  for v in $V; do
    timeout 45 $P $B/perf/$v --tests signal_ab --iters 20000 --csv $OUT/ab.csv --label "$v:r$r" > $OUT/${v}_$r.log 2>&1 || echo "$v r$r rc=$?"
  done
done
python3 - $OUT/ab.csv <<'PY'
import csv,sys,collections
d=collections.defaultdict(dict)
for r in csv.DictReader(open(sys.argv[1])): d[r['label']][r['test']]=float(r['value'])
by=collections.defaultdict(list)
for l,x in sorted(d.items(), key=lambda i:(i[0].split(':')[1], i[0])):
    raw,lib=x['signal_ab_raw_relaxed'],x['signal_ab_relaxed']
    print('%-28s raw %.4f dion %.4f diff %.4f ratio %.3f'%(l,raw,lib,lib-raw,lib/raw))
    by[l.split(':')[0]].append(lib-raw)
for v,ds in by.items(): print('%-20s dion-raw %s'%(v,' '.join('%.4f'%x for x in ds)))
PY
grep -hE "FAIL" $OUT/*.log | sort | uniq -c
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
