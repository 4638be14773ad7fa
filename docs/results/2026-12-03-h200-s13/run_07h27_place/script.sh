#!/usr/bin/env bash
# session 13: the committed tree's 1-GPU suite, then packet_place (packet_ab's written-out modes at 32
# addresses, 4 strides) in 4 launches, each in the same process as the packet rows and packet_ab
set -uo pipefail
B=build/gpu
export OUT
{ date -u; git log -1 --format=%H 2>/dev/null; git status --short 2>/dev/null; nvidia-smi -L; md5sum include/dion/dion_device.cuh device/*.cuh perf/p2p_bench.cu perf/bench_common.h; } > $OUT/machine.txt 2>&1
T1_EXCLUDE="pergpu|conf_gpu_proxy|gdaki|hosts_gpu" STEPS=build,test1 OUT=$OUT/run perf/run_gpu.sh > $OUT/run_gpu.log 2>&1
echo "run_gpu rc=$?"; tail -n 5 $OUT/run/steps.log
tar xzf $OUT/run/logs.tgz -O ctest_1gpu.log | grep -E "tests passed|Failed|FAIL" | tail -5
for i in 1 2 3 4; do
  CUDA_VISIBLE_DEVICES=0 timeout 120 $B/dionrun -n 2 --mps --timeout 110 $B/perf/p2p_bench --tests packet,packet_place \
    --csv $OUT/place.csv --label "place:r$i" > $OUT/place_$i.log 2>&1; echo "place $i rc=$?"
  grep -E "^# packet_place|ok:|FAIL" $OUT/place_$i.log | head -8
done
grep -hE "packet_pingpong +thread +8 |packet_ab" $OUT/place_*.log
date -u
cd $OUT && tar czf /tmp/all.tgz . && find . -mindepth 1 -not -name '*.csv' -not -name machine.txt -delete; mv /tmp/all.tgz $OUT/; ls -la $OUT
