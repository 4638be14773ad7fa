#!/usr/bin/env bash
# session 13, second call: the candidate DION__PKT_PRED=1 (default in fe7bca1) through the 1-GPU suite, then an
# A/B against p2p_bench_pkpred0 (the previous put), 4 alternating pairs of launches of --tests packet,packet_place
set -uo pipefail
B=build/gpu
export OUT
{ date -u; git log -1 --format=%H 2>/dev/null; nvidia-smi -L; md5sum include/dion/dion_device.cuh device/*.cuh perf/p2p_bench.cu perf/bench_common.h perf/CMakeLists.txt; } > $OUT/machine.txt 2>&1
mkdir -p $OUT/run
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
cmake --preset gpu -DDION_BUILD_EXAMPLES=ON -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/run/configure.log 2>&1
echo "configure rc=$?"
timeout 300 cmake --build $B -j 16 > $OUT/run/build.log 2>&1; echo "build rc=$?"
timeout 200 cmake --build $B -j 16 --target p2p_bench_pkpred0 >> $OUT/run/build.log 2>&1; echo "build pkpred0 rc=$?"
T1_EXCLUDE="pergpu|conf_gpu_proxy|gdaki|hosts_gpu" STEPS=test1 OUT=$OUT/run perf/run_gpu.sh > $OUT/run_gpu.log 2>&1
echo "run_gpu rc=$?"
tar xzf $OUT/run/logs.tgz -O ctest_1gpu.log | grep -E "tests passed|Failed|FAIL|\*\*\*" | tail -8
for i in 1 2 3 4; do
  for v in p2p_bench p2p_bench_pkpred0; do
    l=pred1; [ $v = p2p_bench_pkpred0 ] && l=pred0
    CUDA_VISIBLE_DEVICES=0 timeout 120 $B/dionrun -n 2 --mps --timeout 110 $B/perf/$v --tests packet,packet_place \
      --csv $OUT/ab.csv --label "$l:r$i" > $OUT/ab_${l}_$i.log 2>&1; echo "$l $i rc=$?"
    grep -hE "ok:|FAIL" $OUT/ab_${l}_$i.log | head -3
  done
done
grep -hE "packet_pingpong +thread +8 |packet_ab" $OUT/ab_*.log
date -u
cd $OUT && tar czf /tmp/all.tgz . && find . -mindepth 1 -not -name '*.csv' -not -name machine.txt -delete; mv /tmp/all.tgz $OUT/; ls -la $OUT
