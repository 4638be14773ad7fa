#!/usr/bin/env bash
# session 8 call 5: the thread's 8 B packet with the size known at compile time (packet_const_pingpong) beside
# the run-time one and the raw put + flag, four launches; signal_ab in the same launches
set -uo pipefail
B=build/gpu
{ date -u; git log -1 --format='%H %s'; git status --short; nvidia-smi -L; } > $OUT/machine.txt 2>&1
md5sum perf/p2p_bench.cu perf/bench_common.h >> $OUT/machine.txt
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target dionrun p2p_bench > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 80"
for r in 1 2 3 4 5; do
  timeout 90 $P $B/perf/p2p_bench --tests signal,packet,refpp --csv $OUT/pkt.csv --label 1gpu-mps:r$r > $OUT/p2p_$r.log 2>&1; echo "p2p_bench r$r rc=$?"
done
grep -hE "(packet_pingpong|packet_const_pingpong),thread,8,|ref_put8_unordered|signal_ab|ref_flag_relaxed,|signal_relaxed" $OUT/pkt.csv | awk -F, '{print $2, $3, $4, $5, $7}'
grep -hE "FAIL|errors" $OUT/*.log | sort | uniq -c
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
