#!/usr/bin/env bash
# session 11: the committed tree's 1-GPU suite and benchmarks, then goal 2's samples (signal_parts, signal_ab)
set -uo pipefail
B=build/gpu
export OUT
{ date -u; nvidia-smi -L; md5sum include/dion/dion_device.cuh device/*.cuh perf/p2p_bench.cu perf/bench_common.h; } > $OUT/machine.txt 2>&1
T1_EXCLUDE="pergpu|conf_gpu_proxy|gdaki|hosts_gpu" STEPS=build,test1,bench1 OUT=$OUT/run perf/run_gpu.sh > $OUT/run_gpu.log 2>&1
echo "run_gpu rc=$?"; tail -n 5 $OUT/run/steps.log
tar xzf $OUT/run/logs.tgz -O ctest_1gpu.log | grep -E "tests passed|Failed|FAIL" | tail -5
for i in $(seq 1 ${PARTS:-3}); do # the default build and the one with no check or table code (all), alternating
  for v in p2p_bench p2p_bench_all; do
    CUDA_VISIBLE_DEVICES=0 timeout 60 $B/dionrun -n 2 --mps --timeout 50 $B/perf/$v --tests signal_parts \
      --csv $OUT/parts.csv --label "parts:$v:r$i" > $OUT/parts_${v}_$i.log 2>&1; echo "parts $v $i rc=$?"
  done
done
for i in $(seq 1 ${ABN:-10}); do
  CUDA_VISIBLE_DEVICES=0 timeout 60 $B/dionrun -n 2 --mps --timeout 50 $B/perf/p2p_bench --tests signal_ab \
    --csv $OUT/ab.csv --label "ab:r$i" > $OUT/ab_$i.log 2>&1; echo "ab $i rc=$?"
done
grep -h "ok:" $OUT/parts_*.log $OUT/ab_*.log | sort | uniq -c
date -u
# at most 8 files come back: everything in one archive, the CSVs beside it
cd $OUT && tar czf /tmp/all.tgz . && cp run/bench.csv bench.csv && find . -mindepth 1 -not -name '*.csv' -not -name machine.txt -delete; mv /tmp/all.tgz $OUT/; ls $OUT
