#!/usr/bin/env bash
# session 9 call 6: the committed tree on one H200: build, the 1-GPU suite, p2p_bench, nvshmem_bench, dion-perf, ab_bench
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 NVSHMEM_REMOTE_TRANSPORT=none
export NVSHMEM_IGNORE_CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=1 NVSHMEM_SYMMETRIC_SIZE=3G
B=build/gpu
{ date -u; nvidia-smi -L; nvcc --version | tail -2; } > $OUT/machine.txt 2>&1
md5sum include/dion/*.cuh include/dion/*.h device/*.cuh src/*.c perf/*.cu perf/*.cuh perf/*.h >> $OUT/machine.txt
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
t=$(date +%s)
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
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
timeout 120 $P $B/perf/ab_bench --tests lsa,packet --csv $OUT/ab.csv --label ab > $OUT/ab.log 2>&1; echo "ab_bench rc=$?"
for i in 2 3 4; do
  timeout 70 $P $B/perf/p2p_bench --tests packet_ab,signal_ab --csv $OUT/bench.csv --label 1gpu-mps:ab$i > $OUT/pab_$i.log 2>&1 || echo "pab $i rc=$?"
done
grep -hE "_ab_|put_signal_pingpong,block|FAIL" $OUT/bench.csv | head -60
grep -hE "FAIL|errors" $OUT/*.log | sort | uniq -c
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
