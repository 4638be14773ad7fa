#!/usr/bin/env bash
# Builds DION for sm_90 and runs, on the GPU machine, in one go: the gpu-labelled tests (ranks sharing GPU 0
# under MPS; one rank per GPU where there are several), compute-sanitizer (memcheck, racecheck), and the
# benchmarks of DION, NVSHMEM and NCCL's LSA device API side by side; on request (STEPS) the proxy ring's
# pickup latency and the floor of a proxied signal without DION, dion-perf through p2p, the proxy and gdaki on
# the softnic model side by side (proxy; copies under load: copyload; a short
# gdaki call alone: gdakiperf), the gdaki and proxy posting rates (gdakirate), scripts/setup.sh run from a fresh
# copy, and p2p_bench under plain mpirun. Logs and CSV go to $OUT.
# Every step is bounded by its own timeout so that one hang cannot eat the whole run.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_IGNORE_CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=1 NVSHMEM_SYMMETRIC_SIZE=3G
STEPS=${STEPS:-build,test1,bench1,test2,bench2,sanitize}
want() { [[ ",$STEPS," == *",$1,"* ]]; }
log() { echo "=== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.log"; }
run() { # run NAME SECONDS cmd...
  local name=$1 secs=$2; shift 2
  log "start $name"
  timeout -k 5 "$secs" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  log "end $name rc=$rc"
  tail -n 25 "$OUT/$name.log"
  return $rc
}
B=build/gpu
# iproute2's ip for dionrun --hosts where the machine lacks it (perf/gpu_deps.sh puts it in the carried .deps/)
command -v ip >/dev/null || { [ -x .deps/ip/ip ] && export PATH="$PWD/.deps/ip:$PATH"; }
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
{ date -u; git log -1 --format='%H %s' 2>/dev/null; nvidia-smi; nvidia-smi topo -m; nvcc --version | tail -2; } > "$OUT/machine.txt" 2>&1
log "GPUs: $NGPU"

if want build; then
  # libfabric's headers where the machine lacks them: Debian's libfabric-dev unpacked into .deps/ (carried)
  FAB=(); [ -f .deps/fab/usr/include/rdma/fabric.h ] && FAB=(-DDION_FABRIC_INCLUDE_HINT="$PWD/.deps/fab/usr/include")
  run configure 120 cmake --preset gpu -DDION_BUILD_EXAMPLES=ON "${FAB[@]}"
  grep -iE "nvshmem|nccl" "$OUT/configure.log"
  run build 300 cmake --build $B -j 16 || exit 1
fi
if want test1; then # ranks sharing GPU 0 under MPS; the proxy's GPU tests have their own step (proxytest)
  (cd $B && CUDA_VISIBLE_DEVICES=0 run ctest_1gpu 240 ctest -L gpu -j${T1_JOBS:-1} --output-on-failure \
    -E "${T1_EXCLUDE:-pergpu|conf_gpu_proxy}")
fi
if want proxytest; then # GPU kernels over the proxy (tcp, shm; host and staged GPU windows), and the stress
  (cd $B && CUDA_VISIBLE_DEVICES=0 DION_LOG=info run ctest_proxy 540 ctest -L gpu -V \
    -R "conf_gpu_stress_2|conf_gpu_proxy")
fi
if want gdaki; then # GPU kernels through the gdaki device half to the softnic model (issue 9), each section timed
  (cd $B && CUDA_VISIBLE_DEVICES=0 DION_LOG=${GDAKI_LOG:-warn} run ctest_gdaki ${GDAKI_SECS:-300} ctest -L gpu -V \
    -R "conf_gpu_gdaki|mlx5_warp_gpu|gdaki_mlx5_gpu|gdaki_post")
  grep -E "^(PASS|FAIL|SKIP)|FAIL rank|timed out|stall:|Test +#" "$OUT/ctest_gdaki.log" | tail -n 60
fi
if want gdaki || want gdakiperf; then # gdakiperf: this part of step gdaki alone (about a minute)
  # dion-perf over gdaki in one short call next to p2p (one CSV): GPU threads post the work requests, the
  # softnic model's CPU thread executes them over ofi shm / tcp (host windows: the model serves host memory).
  # impl dion-gdaki-softnic-<prov>-hostwin: the model's times, not a NIC's. Packet and pickup rows must say why
  # they are skipped. (The proxy step has the full rows, 1 and 2 GPUs.)
  GPCSV="$OUT/gdaki_perf.csv"
  GQ=(--tests signal,put_signal,put_quiet,get,fetch_add,barrier,msgrate,packet,proxy_pickup --sizes 8,4096
      --reps 3 --row-seconds 1)
  CUDA_VISIBLE_DEVICES=0 run gdaki_perf_p2p 45 $B/dionrun -n 2 --mps --timeout 40 $B/perf/dion-perf \
    --transport p2p "${GQ[@]}" --iters 2000 --csv "$GPCSV" --label 1gpu-mps
  for prov in shm tcp; do
    CUDA_VISIBLE_DEVICES=0 DION_GDAKI_NIC=softnic DION_OFI_PROVIDER=$prov run gdaki_perf_$prov 70 \
      $B/dionrun -n 2 --mps --timeout 65 $B/perf/dion-perf --transport gdaki "${GQ[@]}" --iters 300 \
      --windows host --csv "$GPCSV" --label 1gpu-mps
  done
  grep -hE "^# (impl|gdaki NIC|ok|FAIL)|^(signal_pingpong|put_signal_pingpong|put_quiet|get|fetch_add) +thread +[08] |^put8_msgrate|skipped|FAIL|launching" \
    "$OUT"/gdaki_perf_*.log | tee -a "$OUT/steps.log"
  python3 perf/check_csv.py "$GPCSV" put_signal_pingpong,put_quiet,get,fetch_add,barrier_2ranks,put8_msgrate_allsm \
    | tee -a "$OUT/steps.log"
fi
if [ "$NGPU" -ge 2 ] && want proxy2; then # GPU kernels over the proxy with one rank per GPU (no MPS)
  for prov in shm tcp; do
    for w in hostwin gpuwin; do
      E=(DION_TRANSPORT=proxy DION_OFI_PROVIDER=$prov DT_ONE_RANK_PER_GPU=1 DT_STREAM_COUNT=2000)
      if [ $w = hostwin ]; then E+=(DT_ON_HOST=1); else E+=(DT_ON_HOST=0 DT_ATOMICS_ON_HOST=1); fi
      run proxy2_${prov}_$w 100 env "${E[@]}" $B/dionrun -n 2 --timeout 90 $B/tests/gpu/conformance_gpu_proxy all
      grep -E "^(PASS|FAIL)" "$OUT/proxy2_${prov}_$w.log" | tail -n 3
    done
  done
fi
if want hosts; then # issue 8: GPU kernels over the proxy between ranks run as separate hosts (dionrun --hosts)
  (cd $B && run ctest_hosts 560 ctest -V -R "hosts_gpu_")
  grep -E "^[0-9]+: (PASS|FAIL|SKIP)|Passed|Failed|Skipped|reaches rank" "$OUT/ctest_hosts.log" | tail -n 30
fi
NVSHMEM_LIB=$(grep -oP 'NVSHMEM found in \K\S+' "$OUT/configure.log" 2>/dev/null)
[ -n "$NVSHMEM_LIB" ] && export LD_LIBRARY_PATH=$NVSHMEM_LIB/lib:${LD_LIBRARY_PATH:-}
if want bench1; then
  CUDA_VISIBLE_DEVICES=0 run bench_dion_1gpu 120 $B/dionrun -n 2 --mps $B/perf/p2p_bench \
    --tests signal,put_signal,put_bw,completion,msgrate,ref,packet --csv "$OUT/bench.csv" --label 1gpu-mps
  [ -x $B/perf/nvshmem_bench ] && CUDA_VISIBLE_DEVICES=0 run bench_nvshmem_1gpu 120 $B/dionrun -n 2 --mps \
    $B/perf/nvshmem_bench --tests signal,put_signal,put_bw,completion,msgrate --csv "$OUT/bench.csv" --label 1gpu-mps
fi
if want variants; then # the cooperative copy with 8 loads in flight per thread instead of 4
  CUDA_VISIBLE_DEVICES=0 run bench_dion_1gpu_u8 120 $B/dionrun -n 2 --mps $B/perf/p2p_bench_u8 \
    --tests put_signal,put_bw,completion --csv "$OUT/variants.csv" --label 1gpu-mps-u8
  CUDA_VISIBLE_DEVICES=0 run bench_dion_1gpu_btab 120 $B/dionrun -n 2 --mps $B/perf/p2p_bench_btab \
    --tests put_signal,completion --csv "$OUT/variants.csv" --label 1gpu-mps-btab
  CUDA_VISIBLE_DEVICES=0 run bench_dion_1gpu_tma 120 $B/dionrun -n 2 --mps $B/perf/p2p_bench_tma \
    --tests put_signal,put_bw,completion --csv "$OUT/variants.csv" --label 1gpu-mps-tma
fi
if want bns; then # candidate DION__BLOCK_NOSPILL=2 (device/p2p.cuh): its GPU suite, dion-perf built with it; the
  # A/B is step ab with AB_VARIANTS="p2p_bench p2p_bench_bns p2p_bench_bns2" (docs/results/perf10-notes.md)
  run build_bns 300 cmake --build $B -j 16 --target conformance_gpu_bns dion-perf-bns2
  CUDA_VISIBLE_DEVICES=0 run conf_bns_2 300 $B/dionrun -n 2 --mps --timeout 250 $B/tests/gpu/conformance_gpu_bns all
  CUDA_VISIBLE_DEVICES=0 run conf_bns_manywin_10 200 $B/dionrun -n 10 --mps --timeout 150 \
    $B/tests/gpu/conformance_gpu_bns manywin
  [ "$NGPU" -ge 2 ] && DT_ONE_RANK_PER_GPU=1 run conf_bns_pergpu_2 300 $B/dionrun -n 2 --timeout 250 \
    $B/tests/gpu/conformance_gpu_bns all
  grep -hE "^(PASS|FAIL)|FAIL rank" "$OUT"/conf_bns_*.log | sort | uniq -c | tail -n 40
  for round in 1 2; do # dion-perf's p2p rows with and without the candidate, alternating
    CUDA_VISIBLE_DEVICES=0 run perf_default_$round 120 $B/dionrun -n 2 --mps --timeout 110 $B/perf/dion-perf \
      --tests signal,put_signal,put_quiet --csv "$OUT/perf_bns.csv" --label "1gpu-mps:default:r$round"
    CUDA_VISIBLE_DEVICES=0 run perf_bns2_$round 120 $B/dionrun -n 2 --mps --timeout 110 $B/perf/dion-perf-bns2 \
      --tests signal,put_signal,put_quiet --csv "$OUT/perf_bns.csv" --label "1gpu-mps:bns2:r$round"
  done
fi
if want el; then # the block put's early leave (device/p2p.cuh DION__BLOCK_EARLY): dion-perf with it (default) and
  # without (el0), alternating, on one GPU and one rank per GPU; p2p_bench's pair is step ab with
  # AB_VARIANTS="p2p_bench p2p_bench_el0" (docs/results/perf10-notes.md, sixth pass)
  run build_el 300 cmake --build $B -j 16 --target dion-perf dion-perf-el0 || exit 1
  EA=(--tests put_signal,put_quiet --groups block --sizes 8,1024,4096,65536)
  for round in 1 2; do
    for v in dion-perf dion-perf-el0; do
      n=${v#dion-perf}; n=${n#-}; n=${n:-default}
      CUDA_VISIBLE_DEVICES=0 run el_${n}_1gpu_$round 120 $B/dionrun -n 2 --mps --timeout 110 $B/perf/$v "${EA[@]}" \
        --csv "$OUT/perf_el.csv" --label "1gpu-mps:$n:r$round"
      [ "$NGPU" -ge 2 ] && run el_${n}_2gpu_$round 120 $B/dionrun -n 2 --timeout 110 $B/perf/$v "${EA[@]}" \
        --csv "$OUT/perf_el.csv" --label "2gpu-nvlink:$n:r$round"
    done
  done
  grep -hE "^(put_quiet|put_signal_pingpong) " "$OUT"/el_*.log | tee -a "$OUT/steps.log"
fi
if want ab; then # issue 10 (perf10): library variants side by side, alternating, two rounds; then ab_bench
  # AB_VARIANTS picks the builds (perf/CMakeLists.txt); the wait-mode and block-base ones of 2026-11-30 (w1 w2
  # bpick btab bhyb bbr) are decided and left out unless named. refpp: the hand-written reference ping-pongs
  # (ref_flag_relaxed, ref_put8_param, ...) in every variant's run, so each row has its floor from the same run.
  # AB_ARGS: more p2p_bench arguments for every variant's run (e.g. --sizes 0,8,64 to keep the rows few)
  T=${AB_TESTS:-signal,put_signal,completion,msgrate,packet,refpp}
  for round in 1 2; do
    for v in ${AB_VARIANTS:-p2p_bench p2p_bench_prev p2p_bench_all p2p_bench_fastwb1}; do
      n=${v#p2p_bench}; n=${n#_}; n=${n:-default}
      CUDA_VISIBLE_DEVICES=0 run ab_${n}_1gpu_$round 90 $B/dionrun -n 2 --mps $B/perf/$v --tests $T ${AB_ARGS:-} \
        --csv "$OUT/ab.csv" --label "1gpu-mps:$n:r$round"
      [ "$NGPU" -ge 2 ] && run ab_${n}_2gpu_$round 90 $B/dionrun -n 2 $B/perf/$v --tests $T ${AB_ARGS:-} \
        --csv "$OUT/ab.csv" --label "2gpu-nvlink:$n:r$round"
    done
  done
  [ "${AB_BENCH:-1}" = 1 ] && CUDA_VISIBLE_DEVICES=0 run ab_bench_1gpu 150 $B/dionrun -n 2 --mps $B/perf/ab_bench --tests lsa,packet,bw,ce \
    --csv "$OUT/ab.csv" --label "1gpu-mps:ab:r1"
  [ "${AB_BENCH:-1}" = 1 ] && [ "$NGPU" -ge 2 ] && run ab_bench_2gpu 150 $B/dionrun -n 2 $B/perf/ab_bench --tests lsa,packet,bw,ce --csv "$OUT/ab.csv" \
    --label "2gpu-nvlink:ab:r1"
  python3 perf/ab_summary.py "$OUT/ab.csv" "$OUT/bench.csv" > "$OUT/ab_summary.txt" 2>&1
  cat "$OUT/ab_summary.txt"
fi
if want trace; then # DION_TRACE: hooks compiled out, compiled in but off, on (docs/tracing.md, overhead)
  for i in 1 2 3; do
    CUDA_VISIBLE_DEVICES=0 run bench_trace_compiled_out_$i 120 $B/dionrun -n 2 --mps $B/perf/p2p_bench \
      --tests signal,put_signal,completion,msgrate --csv "$OUT/trace.csv" --label trace-compiled-out
    CUDA_VISIBLE_DEVICES=0 run bench_trace_off_$i 120 $B/dionrun -n 2 --mps $B/perf/p2p_bench_trace \
      --tests signal,put_signal,completion,msgrate --csv "$OUT/trace.csv" --label trace-off
  done
  CUDA_VISIBLE_DEVICES=0 DION_TRACE=/tmp/dion_bench_trace.json run bench_trace_on 120 $B/dionrun -n 2 --mps \
    $B/perf/p2p_bench_trace --tests signal,put_signal,completion,msgrate --csv "$OUT/trace.csv" --label trace-on
  ls -l /tmp/dion_bench_trace.rank*.json >> "$OUT/steps.log" 2>&1
fi
if [ "$NGPU" -ge 2 ]; then
  if want test2; then
    (cd $B && run ctest_pergpu 200 ctest -L gpu --output-on-failure -R pergpu)
  fi
  if want bench2; then
    run bench_dion_2gpu 120 $B/dionrun -n 2 $B/perf/p2p_bench --tests signal,put_signal,put_bw,completion,msgrate,ref,packet \
      --csv "$OUT/bench.csv" --label 2gpu-nvlink
    [ -x $B/perf/nvshmem_bench ] && run bench_nvshmem_2gpu 120 $B/dionrun -n 2 $B/perf/nvshmem_bench \
      --tests signal,put_signal,put_bw,completion,msgrate --csv "$OUT/bench.csv" --label 2gpu-nvlink
    [ -x $B/perf/nccl_lsa_bench ] && run bench_nccl_2gpu 120 $B/dionrun -n 2 $B/perf/nccl_lsa_bench \
      --tests signal,put_signal,put_bw --csv "$OUT/bench.csv" --label 2gpu-nvlink
  fi
fi
if want sanitize; then # MPS clients cannot be sanitized: one rank per GPU, or a single rank
  NS=$(( NGPU >= 2 ? 2 : 1 ))
  for tool in memcheck racecheck; do
    run sanitize_$tool 150 $B/dionrun -n $NS --timeout 140 compute-sanitizer --tool $tool --error-exitcode 9 \
      $B/tests/gpu/conformance_gpu all
  done
fi
if want proxyring; then # the proxy command ring: GPU-to-proxy pickup latency and post rate (no network)
  [ -x $B/perf/proxy_ring_bench ] && CUDA_VISIBLE_DEVICES=0 run bench_proxy_ring 120 $B/perf/proxy_ring_bench \
    --csv "$OUT/bench.csv" --label 1gpu
fi
if want gdakirate; then # issue 9: WQEs posted per second through the gdaki device half into a model NIC consumer
  # next to commands per second into the proxy's ring, 1 warp and all SMs (one QP / ring per block), one CSV;
  # then all SMs again with 8 consumer threads, to tell the GPU's cost from the consumer's (docs/gdaki.md)
  GCSV="$OUT/gdakirate.csv"
  if [ -x $B/perf/gdaki_post_bench ]; then
    CUDA_VISIBLE_DEVICES=0 run gdakirate_c1 120 $B/perf/gdaki_post_bench --csv "$GCSV" --label 1gpu-c1
    CUDA_VISIBLE_DEVICES=0 run gdakirate_c8 120 $B/perf/gdaki_post_bench --scopes allsm --consumers 8 \
      --csv "$GCSV" --label 1gpu-c8
    grep -hE "^#|^dion-(gdaki|proxy)-post |FAIL" "$OUT"/gdakirate_c*.log | tee -a "$OUT/steps.log"
    python3 perf/check_csv.py "$GCSV" post_write_inline_1warp,post_write_1warp,post_cmd_1warp,post_write_inline_allsm,post_write_allsm,post_cmd_allsm \
      | tee -a "$OUT/steps.log"
  fi
fi
if want setup; then # first contact: scripts/setup.sh run from a fresh copy of the tree, no manual step
  rm -rf /tmp/dion-fresh && mkdir -p /tmp/dion-fresh
  # the working tree as it is (its .git may not match it on a copied machine), without builds
  tar -c --exclude=./build --exclude=./.git --exclude=./.deps . | tar -x -C /tmp/dion-fresh
  (cd /tmp/dion-fresh && CUDA_VISIBLE_DEVICES=0 run setup_run 420 scripts/setup.sh run)
  grep -E '^gpu_pingpong: |put_signal_pingpong +block +65536' "$OUT/setup_run.log" | tee -a "$OUT/steps.log"
fi
if [ "$NGPU" -ge 2 ] && want mpirun; then # the GPU choice without dionrun: one rank per GPU under plain mpirun
  run mpirun_bench 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x DION_LOG=info $B/perf/p2p_bench \
    --tests signal,put_signal --csv "$OUT/mpirun.csv" --label 2gpu-mpirun
  grep -E "comm ready|share GPU" "$OUT/mpirun_bench.log" | tee -a "$OUT/steps.log"
  run dionrun_bench 120 $B/dionrun -n 2 $B/perf/p2p_bench --tests signal,put_signal --csv "$OUT/mpirun.csv" \
    --label 2gpu-dionrun
fi
if want examples; then # issue 11: the examples at their GPU shapes (moe at DeepEP's), one GPU under MPS and over NVLink
  for shape in small ll normal; do
    CUDA_VISIBLE_DEVICES=0 run ex_moe_${shape}_1gpu 120 $B/dionrun -n 2 --mps --timeout 110 $B/examples/moe_dispatch_combine $shape
    [ "$NGPU" -ge 2 ] && run ex_moe_${shape}_2gpu 120 $B/dionrun -n 2 --timeout 110 $B/examples/moe_dispatch_combine $shape
  done
  for ex in ring_pipeline halo2d; do
    CUDA_VISIBLE_DEVICES=0 run ex_${ex}_1gpu 120 $B/dionrun -n 2 --mps --timeout 110 $B/examples/$ex
    [ "$NGPU" -ge 2 ] && run ex_${ex}_2gpu 120 $B/dionrun -n 2 --timeout 110 $B/examples/$ex
  done
  grep -hE "^(moe_dispatch_combine|ring_pipeline|halo2d|dispatch|combine)" "$OUT"/ex_*.log | tee -a "$OUT/steps.log"
fi
if want perf; then # issue 10: dion-perf, every test at its default sizes, next to p2p_bench's rows in bench.csv
  CUDA_VISIBLE_DEVICES=0 run dion_perf_1gpu 240 $B/dionrun -n 2 --mps --timeout 230 $B/perf/dion-perf \
    --csv "$OUT/perf.csv" --label 1gpu-mps
  [ "$NGPU" -ge 2 ] && run dion_perf_2gpu 240 $B/dionrun -n 2 --timeout 230 $B/perf/dion-perf --csv "$OUT/perf.csv" \
    --label 2gpu-nvlink
fi
if want copyload; then # a staging-sized copy while every SM polls, stores into or takes tickets in host memory
  CUDA_VISIBLE_DEVICES=0 run copy_under_load 90 $B/perf/copy_under_load --iters 100 --csv "$OUT/copyload.csv" --label 1gpu
fi
if want proxy; then # issue 8: dion-perf through p2p and through the proxy (ofi shm, ofi tcp) side by side, one CSV
  # proxy.csv's impl column names transport and provider: dion (p2p), dion-proxy-shm, dion-proxy-tcp[-hostwin]
  # (tcp cannot register GPU memory: its windows are host memory), dion-ring (perf/proxy_ring_bench: the ring
  # alone, no ranks), dion-gdaki-softnic-shm/tcp-hostwin (issue 9: GPU threads post mlx5 work requests to the
  # softnic NIC model, DION_GDAKI_NIC=softnic, whose CPU thread executes them over ofi shm / tcp; the model
  # serves host memory only, so host windows; its times are the model's, not a NIC's). Labels: 1gpu-mps (2
  # ranks under MPS), 2gpu (one rank per GPU). Proxy threads never nap here (DION_PROXY_SPIN=10s), so that
  # the rows measure the proxy, not its idle back-off.
  PCSV="$OUT/proxy.csv"
  PT=(--tests signal,put_signal,put_quiet,fetch_add,proxy_pickup,put_bw,msgrate --sizes 8,4096,65536
      --bw-min 1048576 --bw-max 268435456 --reps 3 --row-seconds 1)
  CUDA_VISIBLE_DEVICES=0 run proxy_ring_1gpu 30 $B/perf/proxy_ring_bench --tests pickup,ref --iters 5000 \
    --warmup 500 --csv "$PCSV" --label 1gpu-mps
  # the post before 2026-12-01 (impl dion-ring-serial), and libfabric shm alone (CPU ping-pong, no GPU)
  [ -x $B/perf/proxy_ring_bench_serial ] && CUDA_VISIBLE_DEVICES=0 run proxy_ring_serial_1gpu 30 \
    $B/perf/proxy_ring_bench_serial --tests pickup,ref --iters 5000 --warmup 500 --csv "$PCSV" --label 1gpu-mps
  [ -x $B/perf/ofi_shm_probe ] && run proxy_ofi_shm_probe 60 $B/perf/ofi_shm_probe 20000
  # the floor of a GPU -> CPU -> CPU -> GPU signal without DION (impl floor-2proc: two processes, MPS clients as
  # two ranks on one GPU are; dionrun -n 1 only provides MPS): bare flags, libfabric shm, DION's ring in front
  [ -x $B/perf/proxy_floor ] && CUDA_VISIBLE_DEVICES=0 run proxy_floor_1gpu-mps 60 $B/dionrun -n 1 --mps --timeout 55 \
    $B/perf/proxy_floor --procs 2 --iters 3000 --warmup 300 --csv "$PCSV" --label 1gpu-mps
  for where in 1gpu-mps 2gpu; do
    if [ $where = 1gpu-mps ]; then DR=($B/dionrun -n 2 --mps --timeout 40); VIS=0
    else [ "$NGPU" -ge 2 ] || continue; DR=($B/dionrun -n 2 --timeout 40); VIS=0,1; fi
    GDR=("${DR[@]:0:${#DR[@]}-2}" --timeout 65) # gdaki over the model's tcp: more time than the proxy's rows
    CUDA_VISIBLE_DEVICES=$VIS run proxy_p2p_$where 45 "${DR[@]}" $B/perf/dion-perf --transport p2p "${PT[@]}" \
      --iters 2000 --csv "$PCSV" --label $where
    for prov in shm tcp; do # tcp: host windows at once (GPU memory is refused); shm: GPU memory where it has FI_HMEM
      W=auto; [ $prov = tcp ] && W=host
      CUDA_VISIBLE_DEVICES=$VIS DION_OFI_PROVIDER=$prov DION_PROXY_SPIN=10s run proxy_${prov}_$where 45 "${DR[@]}" \
        $B/perf/dion-perf --transport proxy "${PT[@]}" --iters 300 --windows $W --csv "$PCSV" --label $where
      rc=$? # GPU windows that failed (not hung): once more with host windows (impl ...-hostwin)
      # shm: host windows too, always (the 4 µs put_signal target is for them; GPU windows are staged there)
      if [ $W = auto ] && { [ $prov = shm ] || { [ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 77 ]; }; }; then
        CUDA_VISIBLE_DEVICES=$VIS DION_OFI_PROVIDER=$prov DION_PROXY_SPIN=10s DION_LOG=info \
          run proxy_${prov}_host_$where 45 \
          "${DR[@]}" $B/perf/dion-perf --transport proxy "${PT[@]}" --iters 300 --windows host --csv "$PCSV" \
          --label $where
      fi
    done
    # gdaki on the softnic model, its engine over shm and tcp: the same rows (put_bw to 16 MiB: the model moves
    # the bytes with host copies or tcp), plus get; packet and pickup skipped with their sentences
    for prov in shm tcp; do
      CUDA_VISIBLE_DEVICES=$VIS DION_GDAKI_NIC=softnic DION_OFI_PROVIDER=$prov run gdaki_${prov}_$where 70 \
        "${GDR[@]}" $B/perf/dion-perf --transport gdaki "${PT[@]}" --tests get,packet \
        --bw-max 16777216 --iters 300 --windows host --csv "$PCSV" --label $where
    done
    # signals as plain atomics confirmed by a later fetch (DION_OFI_SIGNAL=plain) against the default fetching ones
    CUDA_VISIBLE_DEVICES=$VIS DION_OFI_PROVIDER=shm DION_PROXY_SPIN=10s DION_OFI_SIGNAL=plain DION_LOG=info \
      run proxy_shm_plainsig_$where 45 "${DR[@]}" $B/perf/dion-perf --transport proxy \
      --tests signal,put_signal,put_quiet,fetch_add,msgrate --sizes 8,4096 --reps 3 --row-seconds 1 --iters 300 \
      --windows host --impl dion-proxy-shm-hostwin-plainsig --csv "$PCSV" --label $where
    # a small put_signal or a signal as one shm message applied by the target's engine (DION_OFI_SIGNAL=msg)
    CUDA_VISIBLE_DEVICES=$VIS DION_OFI_PROVIDER=shm DION_PROXY_SPIN=10s DION_OFI_SIGNAL=msg DION_LOG=info \
      run proxy_shm_msgsig_$where 45 "${DR[@]}" $B/perf/dion-perf --transport proxy \
      --tests signal,put_signal,put_quiet,fetch_add,msgrate --sizes 8,4096 --reps 3 --row-seconds 1 --iters 300 \
      --windows host --impl dion-proxy-shm-hostwin-msgsig --csv "$PCSV" --label $where
    # the default idle back-off (spin 50 us, then naps): a rank that only receives (put_bw, msgrate) must keep
    # up without DION_PROXY_SPIN=10s now that served peers' operations keep its proxy awake (impl ...-spin50us)
    CUDA_VISIBLE_DEVICES=$VIS DION_OFI_PROVIDER=shm run proxy_shm_spin_$where 45 "${DR[@]}" $B/perf/dion-perf \
      --transport proxy --tests signal,put_signal,put_bw,msgrate --sizes 8 --bw-min 1048576 --bw-max 16777216 \
      --reps 3 --row-seconds 1 --iters 300 --windows host --impl dion-proxy-shm-hostwin-spin50us --csv "$PCSV" \
      --label $where
  done
  grep -hE "^# impl|^# (ok|FAIL)|^proxy_pickup|^put_signal_pingpong +thread +8 |^put8_msgrate|^(one|pingpong) |^floor|ofi: times|launching" \
    "$OUT"/proxy_*.log "$OUT"/gdaki_*.log \
    | tee -a "$OUT/steps.log"
  python3 perf/check_csv.py "$PCSV" put_signal_pingpong,put_quiet,proxy_pickup,put_bw,put8_msgrate_allsm \
    | tee -a "$OUT/steps.log"
fi
log "done"
# at most 8 files come back: keep the CSVs, the A/B summary and the step log apart, pack the rest
(cd "$OUT" && tar czf logs.tgz --exclude='*.csv' --exclude=logs.tgz --exclude=steps.log *.log *.txt 2>/dev/null && \
  find . -maxdepth 1 -name '*.log' ! -name steps.log -delete && rm -f machine.txt)
