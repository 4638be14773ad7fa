#!/usr/bin/env bash
# session 9 call 1: packet_ab (goal 3 in one launch) and signal_ab, several launches; ab_bench's packet rows
set -uo pipefail
B=build/gpu
{ date -u; nvidia-smi -L; nvcc --version | tail -2; } > $OUT/machine.txt 2>&1
md5sum perf/p2p_bench.cu perf/ab_bench.cu perf/bench_common.h device/*.cuh >> $OUT/machine.txt
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
t=$(date +%s)
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target dionrun p2p_bench ab_bench > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t )) s"
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 60"
for i in 1 2 3 4 5 6 7 8; do
  timeout 70 $P $B/perf/p2p_bench --tests packet_ab,signal_ab --csv $OUT/bench.csv --label r$i > $OUT/pab_$i.log 2>&1 || echo "pab $i rc=$?"
done
timeout 70 $P $B/perf/p2p_bench --tests packet,refpp --groups thread --sizes 8 --csv $OUT/bench.csv --label rows > $OUT/rows.log 2>&1 || echo "rows rc=$?"
for i in 1 2; do
  timeout 70 $P $B/perf/ab_bench --tests packet --csv $OUT/ab.csv --label ab$i > $OUT/ab_$i.log 2>&1 || echo "ab $i rc=$?"
done
grep -hE "_ab_|packet_pingpong|ref_put8_unordered|ab_pkt" $OUT/bench.csv $OUT/ab.csv
grep -hE "FAIL|rror" $OUT/*.log | sort | uniq -c | head
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
