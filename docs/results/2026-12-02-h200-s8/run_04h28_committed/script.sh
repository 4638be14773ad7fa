#!/usr/bin/env bash
# session 8 call 9: the committed tree (466587c) on one H200: build, the 1-GPU suite, bench1 (p2p_bench, nvshmem_bench), dion-perf
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 NVSHMEM_REMOTE_TRANSPORT=none
export NVSHMEM_IGNORE_CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=1 NVSHMEM_SYMMETRIC_SIZE=3G
B=build/gpu
{ date -u; git log -1 --format='%H %s'; git status --short; nvidia-smi -L; nvcc --version | tail -2; } > $OUT/machine.txt 2>&1
md5sum perf/p2p_bench.cu perf/nvshmem_bench.cu perf/bench_common.h perf/dion_perf*.cu* >> $OUT/machine.txt
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
t=$(date +%s)
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
grep -iE "nvshmem|nccl" $OUT/configure.log | head -5
cmake --build $B -j 16 > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t )) s"
export CUDA_VISIBLE_DEVICES=0
t=$(date +%s)
(cd $B && timeout 240 ctest -L gpu -j1 --output-on-failure -E "pergpu|conf_gpu_proxy|gdaki|hosts_gpu" > $OUT/ctest_1gpu.log 2>&1); echo "ctest rc=$? $(( $(date +%s) - t )) s"
grep -E "tests passed|tests failed|\(Failed\)|Timeout" $OUT/ctest_1gpu.log
P="$B/dionrun -n 2 --mps --timeout 110"
t=$(date +%s)
timeout 120 $P $B/perf/p2p_bench --tests signal,put_signal,put_bw,completion,msgrate,ref,packet --csv $OUT/bench.csv --label 1gpu-mps > $OUT/bench_dion_1gpu.log 2>&1; echo "p2p_bench rc=$? $(( $(date +%s) - t )) s"
t=$(date +%s)
timeout 120 $P $B/perf/nvshmem_bench --tests signal,put_signal,put_bw,completion,msgrate --csv $OUT/bench.csv --label 1gpu-mps > $OUT/bench_nvshmem_1gpu.log 2>&1; echo "nvshmem rc=$? $(( $(date +%s) - t )) s"
t=$(date +%s)
timeout 120 $P $B/perf/dion-perf --csv $OUT/perf.csv --label 1gpu-mps > $OUT/dion_perf_1gpu.log 2>&1; echo "dion-perf rc=$? $(( $(date +%s) - t )) s"
python3 perf/check_csv.py $OUT/perf.csv put_signal_pingpong,put_quiet,get,fetch_add,barrier_2ranks,put8_msgrate_allsm | tail -3
grep -hE "msgrate|signal_ab|relaxed|pkt.*,8,|FAIL|errors" $OUT/bench.csv $OUT/bench_*.log | grep -v "^#.*ok" | head -40
grep -hE "FAIL|errors" $OUT/*.log | sort | uniq -c
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
