#!/usr/bin/env bash
# session 8 call 2 (warm): the rows that move between launches, three rounds alternating DION and NVSHMEM
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 NVSHMEM_REMOTE_TRANSPORT=none
export NVSHMEM_IGNORE_CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=1 NVSHMEM_SYMMETRIC_SIZE=3G
B=build/gpu
{ date -u; nvidia-smi -L; } > $OUT/machine.txt 2>&1
[ -x $B/perf/p2p_bench ] || { echo "no build"; exit 1; }
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 80"
for r in 1 2 3 4; do
  timeout 90 $P $B/perf/p2p_bench --tests signal,msgrate,packet,refpp --csv $OUT/rounds.csv --label 1gpu-mps:r$r > $OUT/p2p_$r.log 2>&1; echo "p2p_bench r$r rc=$?"
  timeout 90 $P $B/perf/nvshmem_bench --tests signal,msgrate --csv $OUT/rounds.csv --label 1gpu-mps:r$r > $OUT/nvshmem_$r.log 2>&1; echo "nvshmem r$r rc=$?"
done
python3 - $OUT/rounds.csv <<'PY'
import csv,sys,collections
d=collections.defaultdict(dict)
for r in csv.DictReader(open(sys.argv[1])):
    d[r['label']][(r['impl'],r['test'],r['group'],r['bytes'])]=float(r['value'])
for l in sorted(d):
    x=d[l]
    g=lambda i,t,gr='thread',b='8': x.get((i,t,gr,b))
    print(l, {k[0]+':'+k[1]+':'+k[2]+':'+k[3]:round(v,4) for k,v in x.items() if any(s in k[1] for s in ('msgrate','signal_ab','relaxed','unordered')) or (k[1].startswith('pkt') or 'packet' in k[1]) and k[3]=='8'})
PY
grep -hE "FAIL|errors" $OUT/*.log | sort | uniq -c
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
