#!/usr/bin/env bash
# session 11, second call: goals 2 and 3 in one launch each (signal_ab, packet_ab), 8 launches, and the packet rows
set -uo pipefail
B=build/gpu
{ date -u; nvidia-smi -L; md5sum include/dion/dion_device.cuh device/*.cuh perf/p2p_bench.cu perf/bench_common.h; } > $OUT/machine.txt 2>&1
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF -DDION_FABRIC_INCLUDE_HINT=$PWD/.deps/fab/usr/include > $OUT/configure.log 2>&1
cmake --build $B -j 16 --target dionrun p2p_bench > $OUT/build.log 2>&1 || { echo build failed; tail -20 $OUT/build.log; exit 1; }
for i in $(seq 1 8); do
  CUDA_VISIBLE_DEVICES=0 timeout 60 $B/dionrun -n 2 --mps --timeout 50 $B/perf/p2p_bench --tests signal_ab,packet_ab \
    --csv $OUT/ab.csv --label "ab:r$i" > $OUT/ab_$i.log 2>&1; echo "ab $i rc=$?"
done
for i in 1 2; do
  CUDA_VISIBLE_DEVICES=0 timeout 90 $B/dionrun -n 2 --mps --timeout 80 $B/perf/p2p_bench --tests packet,signal \
    --csv $OUT/bench.csv --label "1gpu-mps:r$i" > $OUT/pkt_$i.log 2>&1; echo "packet $i rc=$?"
done
grep -h "ok:" $OUT/ab_*.log $OUT/pkt_*.log | sort | uniq -c
date -u
cd $OUT && tar czf /tmp/all.tgz . && find . -mindepth 1 -not -name '*.csv' -not -name machine.txt -delete; mv /tmp/all.tgz $OUT/; ls $OUT
