#!/usr/bin/env bash
# session 8 call 4: dion-perf's msgrate kernel (locals, launch bound 256) against p2p_bench's and NVSHMEM's,
# through p2p, the proxy and gdaki's model; then dion-perf's default run again
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 NVSHMEM_REMOTE_TRANSPORT=none
export NVSHMEM_IGNORE_CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=1 NVSHMEM_SYMMETRIC_SIZE=3G
B=build/gpu
{ date -u; git log -1 --format='%H %s'; git status --short; nvidia-smi -L; } > $OUT/machine.txt 2>&1
md5sum perf/dion_perf*.cu* perf/p2p_bench.cu perf/nvshmem_bench.cu perf/bench_common.h >> $OUT/machine.txt
FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
t=$(date +%s)
cmake --preset gpu -DDION_BUILD_BENCH_VARIANTS=OFF "${FAB[@]}" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target dionrun dion-perf p2p_bench nvshmem_bench > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t )) s"
export CUDA_VISIBLE_DEVICES=0
P="$B/dionrun -n 2 --mps --timeout 80"
for r in 1 2 3; do
  timeout 90 $P $B/perf/dion-perf --tests msgrate --csv $OUT/rate.csv --label 1gpu-mps:r$r > $OUT/perf_rate_$r.log 2>&1; echo "dion-perf r$r rc=$?"
  timeout 90 $P $B/perf/p2p_bench --tests msgrate --csv $OUT/rate.csv --label 1gpu-mps:r$r > $OUT/p2p_rate_$r.log 2>&1; echo "p2p_bench r$r rc=$?"
  timeout 90 $P $B/perf/nvshmem_bench --tests msgrate --csv $OUT/rate.csv --label 1gpu-mps:r$r > $OUT/nvshmem_rate_$r.log 2>&1; echo "nvshmem r$r rc=$?"
done
grep -hE "msgrate.*Mops_median" $OUT/rate.csv
Q=(--tests msgrate --reps 3 --row-seconds 1 --iters 300)
DION_OFI_PROVIDER=shm DION_PROXY_SPIN=10s timeout 60 $B/dionrun -n 2 --mps --timeout 55 $B/perf/dion-perf --transport proxy "${Q[@]}" --csv $OUT/rate_net.csv --label 1gpu-mps > $OUT/proxy_shm_rate.log 2>&1; echo "proxy shm rc=$?"
DION_GDAKI_NIC=softnic DION_OFI_PROVIDER=shm timeout 70 $B/dionrun -n 2 --mps --timeout 65 $B/perf/dion-perf --transport gdaki "${Q[@]}" --windows host --csv $OUT/rate_net.csv --label 1gpu-mps > $OUT/gdaki_shm_rate.log 2>&1; echo "gdaki shm rc=$?"
grep -hE "msgrate.*Mops_median" $OUT/rate_net.csv
timeout 120 $P $B/perf/dion-perf --csv $OUT/perf.csv --label 1gpu-mps > $OUT/dion_perf_1gpu.log 2>&1; echo "dion-perf all rc=$?"
python3 perf/check_csv.py $OUT/perf.csv put_signal_pingpong,put_quiet,get,fetch_add,barrier_2ranks,put8_msgrate_allsm | tail -2
grep -E "msgrate.*Mops_median" $OUT/perf.csv
grep -hE "FAIL|errors|skipped" $OUT/*.log | sort | uniq -c
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
