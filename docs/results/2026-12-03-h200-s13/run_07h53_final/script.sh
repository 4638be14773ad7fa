#!/usr/bin/env bash
# session 13, third call: the final tree's 1-GPU benchmarks (perf/run_gpu.sh bench1: p2p_bench with packets,
# and nvshmem_bench), then the packet rows twice more; the suite ran on this library in the 07:45 call
set -uo pipefail
B=build/gpu
export OUT
{ date -u; nvidia-smi -L; md5sum include/dion/dion_device.cuh device/*.cuh perf/p2p_bench.cu perf/nvshmem_bench.cu perf/bench_common.h perf/CMakeLists.txt; } > $OUT/machine.txt 2>&1
mkdir -p $OUT/run
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
cmake --preset gpu -DDION_BUILD_EXAMPLES=ON -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/run/configure.log 2>&1
grep -iE "nvshmem|nccl" $OUT/run/configure.log | head -5
timeout 300 cmake --build $B -j 16 > $OUT/run/build.log 2>&1; echo "build rc=$?"
STEPS=bench1 OUT=$OUT/run perf/run_gpu.sh > $OUT/run_gpu.log 2>&1
echo "run_gpu rc=$?"; cat $OUT/run/steps.log
for i in 1 2; do
  CUDA_VISIBLE_DEVICES=0 timeout 90 $B/dionrun -n 2 --mps --timeout 80 $B/perf/p2p_bench --tests packet \
    --csv $OUT/pkt.csv --label "1gpu-mps:r$i" > $OUT/pkt_$i.log 2>&1; echo "packet $i rc=$?"
done
grep -h "ok:\|data errors" $OUT/pkt_*.log $OUT/run/*.log 2>/dev/null | sort | uniq -c
grep -hE "packet_pingpong +thread +8 |packet_ab_dion|packet_ab_by_hand" $OUT/pkt_*.log
date -u
cd $OUT && cp run/bench.csv bench.csv && tar czf /tmp/all.tgz . && find . -mindepth 1 -not -name '*.csv' -not -name machine.txt -delete; mv /tmp/all.tgz $OUT/; ls -la $OUT
