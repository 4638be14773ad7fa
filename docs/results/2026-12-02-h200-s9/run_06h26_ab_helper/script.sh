#!/usr/bin/env bash
# session 9 call 7: p2p_bench's in-launch A/B rows through the shared host helper (run_ab_launch)
set -uo pipefail
B=build/gpu
{ date -u; nvidia-smi -L; } > $OUT/machine.txt 2>&1
md5sum perf/p2p_bench.cu include/dion/dion_device.cuh device/*.cuh >> $OUT/machine.txt
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
t=$(date +%s)
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target dionrun p2p_bench > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t )) s"
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 60"
for i in 1 2 3; do
  timeout 70 $P $B/perf/p2p_bench --tests packet_ab,signal_ab --csv $OUT/bench.csv --label r$i > $OUT/pab_$i.log 2>&1 || echo "pab $i rc=$?"
done
timeout 70 $P $B/perf/p2p_bench --tests signal,packet --groups thread --sizes 8 --csv $OUT/bench.csv --label rows > $OUT/rows.log 2>&1 || echo "rows rc=$?"
# 3 ranks: rank 2 takes no part (the benchmarks run on ranks 0 and 1), and must not fail
timeout 70 $B/dionrun -n 3 --mps --timeout 60 $B/perf/p2p_bench --tests packet_ab,signal_ab --csv $OUT/bench3.csv --label n3 > $OUT/n3.log 2>&1 || echo "n3 rc=$?"
cat $OUT/bench.csv $OUT/bench3.csv | grep -E "_ab_|pingpong"
grep -hE "FAIL|rror|# ok" $OUT/*.log | sort | uniq -c | head
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
