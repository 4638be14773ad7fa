#!/usr/bin/env bash
# session 8 call 8 (experiment, not committed): signal_ab with rank 1 in the last block of a grid of G blocks
# (G = 1: both ranks' warps on the same SM, as always so far; G = 2, 8, 66: rank 1 on another SM), each rank's
# %smid printed; eight launches per G, interleaved
set -uo pipefail
B=build/gpu
{ date -u; git log -1 --format='%H %s'; git status --short; nvidia-smi -L; } > $OUT/machine.txt 2>&1
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target dionrun p2p_bench > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 40"
for r in 1 2 3 4 5 6 7 8; do
  for g in 1 2 8 66; do
    SIGAB_GRID=$g timeout 45 $P $B/perf/p2p_bench --tests signal_ab --iters 20000 --csv $OUT/spread.csv --label "g$g:r$r" > $OUT/g${g}_$r.log 2>&1 || echo "g$g r$r rc=$?"
  done
done
for f in $OUT/g*_*.log; do echo "$(basename $f .log) $(grep -h '# EXP' $f | sort | awk '{printf "%s:sm%s/w%s ", $4, $6, $8}')"; done > $OUT/smid.txt
python3 - $OUT/spread.csv $OUT/smid.txt <<'PY'
import csv,sys,collections
sm={l.split()[0]:' '.join(l.split()[1:]) for l in open(sys.argv[2])}
d=collections.defaultdict(dict)
for r in csv.DictReader(open(sys.argv[1])): d[r['label']][r['test']]=float(r['value'])
for l in sorted(d, key=lambda x:(int(x.split(':')[0][1:]), int(x.split(':r')[1]))):
    x=d[l]; raw,lib=x['signal_ab_raw_relaxed'],x['signal_ab_relaxed']
    k=l.split(':')[0]+'_'+l.split(':r')[1]
    print('%-8s raw %.4f dion %.4f diff %.4f ratio %.3f  %s'%(l,raw,lib,lib-raw,lib/raw,sm.get(k,'')))
PY
grep -hE "FAIL" $OUT/*.log | sort | uniq -c
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
