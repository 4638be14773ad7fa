#!/usr/bin/env bash
# session 12: the committed tree's 1-GPU suite and benchmarks (DION, NVSHMEM, dion-perf), then goals 2 and 3 in one
# launch each (signal_ab, packet_ab), 8 launches, and the packet/signal rows twice more
set -uo pipefail
B=build/gpu
export OUT
{ date -u; git log -1 --format=%H 2>/dev/null; nvidia-smi -L; md5sum include/dion/dion_device.cuh device/*.cuh perf/p2p_bench.cu perf/bench_common.h; } > $OUT/machine.txt 2>&1
T1_EXCLUDE="pergpu|conf_gpu_proxy|gdaki|hosts_gpu" STEPS=build,test1,bench1 OUT=$OUT/run perf/run_gpu.sh > $OUT/run_gpu.log 2>&1
echo "run_gpu rc=$?"; tail -n 5 $OUT/run/steps.log
tar xzf $OUT/run/logs.tgz -O ctest_1gpu.log | grep -E "tests passed|Failed|FAIL" | tail -5
for i in $(seq 1 8); do
  CUDA_VISIBLE_DEVICES=0 timeout 60 $B/dionrun -n 2 --mps --timeout 50 $B/perf/p2p_bench --tests signal_ab,packet_ab \
    --csv $OUT/ab.csv --label "ab:r$i" > $OUT/ab_$i.log 2>&1; echo "ab $i rc=$?"
done
for i in 1 2; do
  CUDA_VISIBLE_DEVICES=0 timeout 90 $B/dionrun -n 2 --mps --timeout 80 $B/perf/p2p_bench --tests packet,signal \
    --csv $OUT/pkt.csv --label "1gpu-mps:r$i" > $OUT/pkt_$i.log 2>&1; echo "packet $i rc=$?"
done
grep -h "ok:" $OUT/ab_*.log $OUT/pkt_*.log | sort | uniq -c
date -u
# at most 8 files come back: everything in one archive, the CSVs beside it
cd $OUT && tar czf /tmp/all.tgz . && cp run/bench.csv bench.csv; cp run/perf.csv perf.csv 2>/dev/null; find . -mindepth 1 -not -name '*.csv' -not -name machine.txt -delete; mv /tmp/all.tgz $OUT/; ls $OUT
