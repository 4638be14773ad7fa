#!/usr/bin/env bash
# session 8 call 7: default wait against WAIT_SHAPE 1 and 2 on the rows that wait (signal, put_signal, refpp), three rounds
# per build, three rounds alternating builds
set -uo pipefail
B=build/gpu
{ date -u; git log -1 --format='%H %s'; git status --short; nvidia-smi -L; } > $OUT/machine.txt 2>&1
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
V="p2p_bench p2p_bench_wsh1 p2p_bench_wsh2"
t=$(date +%s)
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=ON "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target dionrun $V > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t )) s"
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 85"
for r in 1 2 3; do
  for v in $V; do
    timeout 90 $P $B/perf/$v --tests signal,put_signal,refpp --csv $OUT/ab.csv --label "$v:r$r" > $OUT/${v}_$r.log 2>&1 || echo "$v r$r rc=$?"
  done
done
python3 - $OUT/ab.csv <<'PY'
import csv,sys,collections
d=collections.defaultdict(lambda: collections.defaultdict(list))
for r in csv.DictReader(open(sys.argv[1])):
    v=r['label'].split(':')[0]; d[(r['test'],r['group'],r['bytes'])][v].append(float(r['value']))
V=['p2p_bench','p2p_bench_wsh1','p2p_bench_wsh2']
for k in sorted(d):
    if k[0].startswith('ref_') and k[0] not in ('ref_flag_relaxed','ref_flag_relaxed_libwait','ref_put8_param_libwait','ref_put8_param'): continue
    print('%-26s %-6s %8s '%k + '  '.join('%s=%s'%(v[10:] or 'def','/'.join('%.3f'%x for x in d[k][v])) for v in V))
PY
grep -hE "FAIL" $OUT/*.log | sort | uniq -c
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
