#!/usr/bin/env bash
# DION on a fresh Debian or Ubuntu machine, in one command.
#   scripts/setup.sh run    install what is missing, build, and run the main job: dion-info, the CPU-mode ring
#                           example, and where a GPU exists the GPU example and the latency benchmarks
#   scripts/setup.sh test   install what is missing, build (default and asan presets), run the whole test suite
# Needs root (or sudo) only to install packages; the CUDA Toolkit (nvcc) must already be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
case "$mode" in run | test) ;; *) echo "usage: $0 run|test" >&2; exit 2 ;; esac
jobs=$(nproc 2>/dev/null || echo 2)

say() { printf '\n== %s\n' "$*"; }

install_packages() {
  local want=(cmake ninja-build g++ make pkg-config openmpi-bin libopenmpi-dev libibverbs-dev ibverbs-providers
              libfabric-dev python3)
  local missing=()
  for p in "${want[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -eq 0 ]; then return; fi
  say "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

find_nvcc() {
  if ! command -v nvcc >/dev/null 2>&1; then
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
      if [ -x "$d/nvcc" ]; then export PATH="$d:$PATH"; break; fi
    done
  fi
  if ! command -v nvcc >/dev/null 2>&1; then
    echo "setup: nvcc not found. Install the CUDA Toolkit (12.x or 13.x) and put its bin/ on PATH; DION builds" >&2
    echo "       its device headers and tests with it even where no GPU is present." >&2
    exit 1
  fi
}

check_cmake() {
  local v
  v=$(cmake --version | head -1 | awk '{print $3}')
  if [ "$(printf '%s\n3.25\n' "$v" | sort -V | head -1)" != "3.25" ]; then
    echo "setup: cmake $v is older than 3.25; install a newer one (pip install cmake) and run again" >&2
    exit 1
  fi
}

build() { # build PRESET
  say "building ($1)"
  cmake --preset "$1" >/dev/null
  cmake --build --preset "$1" -j "$jobs"
}

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

install_packages
find_nvcc
check_cmake
build default

if [ "$mode" = run ]; then
  say "dion-info"
  ./build/default/dion-info
  say "CPU mode: 4 ranks pass a token around a ring (dionrun -n 4 cpu_ring)"
  ./build/default/dionrun -n 4 --timeout 120 ./build/default/examples/cpu_ring
  if has_gpu; then
    say "GPU: two ranks bounce 64 KiB (dionrun -n 2 --mps gpu_pingpong)"
    ./build/default/dionrun -n 2 --mps --timeout 120 ./build/default/examples/gpu_pingpong
    say "GPU: signal and put_signal latency (perf/p2p_bench; full runs: perf/run_gpu.sh)"
    ./build/default/dionrun -n 2 --mps --timeout 300 ./build/default/perf/p2p_bench --tests signal,put_signal
  fi
  exit 0
fi

build asan
say "tests (default preset; gpu-labelled tests are skipped without a GPU)"
ctest --preset default -j "$jobs"
say "host tests under AddressSanitizer and UndefinedBehaviorSanitizer (asan preset)"
ctest --preset asan -j "$jobs"
if has_gpu; then
  say "gpu-labelled tests"
  ctest --test-dir build/default -L gpu --output-on-failure
fi
