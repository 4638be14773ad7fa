#!/usr/bin/env bash
# DION on a fresh machine, in one command.
#   scripts/setup.sh run    check the tools, install what is missing and required, build, and run the main job:
#                           dion-info, the CPU-mode ring example, and where a GPU exists the GPU example and the
#                           matching latency benchmark row
#   scripts/setup.sh test   the same checks plus what the test suite uses (Open MPI, clang's fuzzer runtime,
#                           iproute2, the RDMA headers), build (default and asan presets), run the whole suite
#   scripts/setup.sh check  only the checks and installs
# Tools are checked by running them, not by package names: cmake and ninja from pip or modules count. apt runs
# only for something missing and required, with sudo only when not root; where apt cannot reach an archive or
# there is no root, cmake and ninja come from pip (user install) instead. The CUDA Toolkit must be installed.
#
# Environment:
#   DION_BUILD_DIR    root of the build folders (default: build); preset P builds in $DION_BUILD_DIR/P
#   DION_CMAKE_ARGS   extra configure arguments (e.g. "-DDION_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90")
#   DION_CPU_MODE=1   skip the GPU steps even where a GPU exists
#   DION_SETUP_HIDE_HEADERS  space-separated headers the probe must treat as missing (tests of this script)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
case "$mode" in run | test | check) ;; *) echo "usage: $0 run|test|check" >&2; exit 2 ;; esac
jobs=$(nproc 2>/dev/null || echo 2)
build_root=${DION_BUILD_DIR:-build}
read -r -a cmake_extra <<<"${DION_CMAKE_ARGS:-}"

say() { printf '\n== %s\n' "$*"; }
ok() { printf '  [ok] %s\n' "$*"; }
miss() { printf '  [missing] %s\n' "$*"; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }

# ---- package installation (only ever for something found missing) ----
apt_state=unknown # unknown, works, unusable
apt_install() {   # apt_install PKG...: 0 when installed
  [ "$apt_state" = unusable ] && return 1
  if ! have apt-get; then
    echo "  (no apt-get on this machine)"
    apt_state=unusable
    return 1
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if have sudo && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "  (not root and no password-less sudo: cannot use apt)"
      apt_state=unusable
      return 1
    fi
  fi
  echo "  apt-get install $*"
  if [ "$apt_state" = unknown ]; then
    # An unreachable archive often ends apt-get update with status 0 and warnings only.
    local log unreachable='Failed to fetch|Temporary failure|Could not resolve|Unable to connect|index files failed'
    if ! log=$("${sudo[@]}" apt-get update -qq 2>&1) || grep -Eq "$unreachable" <<<"$log"; then
      echo "  (apt cannot reach its archives: $(grep -Em1 "$unreachable|^E: " <<<"$log" || echo 'apt-get update failed'))"
      apt_state=unusable
      return 1
    fi
    apt_state=works
  fi
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$@" >/dev/null
}

# cmake and ninja from pip where apt cannot help: a user install, else a private virtual environment.
pip_tools() { # pip_tools PKG...
  local venv="$HOME/.local/share/dion-tools"
  have python3 || return 1
  echo "  python3 -m pip install --user $*"
  if python3 -m pip install --user --quiet "$@" >/dev/null 2>&1; then
    export PATH="$HOME/.local/bin:$PATH"
    hash -r
    return 0
  fi
  echo "  (pip --user refused; trying a virtual environment in $venv)"
  if { [ -x "$venv/bin/pip" ] || python3 -m venv "$venv" >/dev/null 2>&1; } &&
    "$venv/bin/pip" install --quiet "$@" >/dev/null 2>&1; then
    export PATH="$venv/bin:$PATH"
    hash -r
    return 0
  fi
  return 1
}

# ---- checks, by running the tools ----
version_at_least() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]; }

cmake_ok() {
  have cmake || return 1
  local v
  v=$(cmake --version 2>/dev/null | head -1 | awk '{print $3}')
  [ -n "$v" ] && version_at_least "$v" 3.25
}

cc_ok() { # cc_ok COMPILER: compiles and links a program
  local d
  d=$(mktemp -d)
  printf 'int main(void) { return 0; }\n' >"$d/t.c"
  "$1" "$d/t.c" -o "$d/t" >/dev/null 2>&1
  local rc=$?
  rm -rf "$d"
  return $rc
}

find_nvcc() {
  if ! have nvcc; then
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/cuda/bin; do
      if [ -x "$d/nvcc" ]; then
        export PATH="$d:$PATH"
        break
      fi
    done
  fi
  have nvcc && nvcc --version >/dev/null 2>&1
}

check_required() {
  say "required tools"
  local want_apt=() pip_pkgs=()
  cc_ok "${CC:-cc}" && ok "C compiler (${CC:-cc})" || { miss "C compiler"; want_apt+=(gcc); }
  have g++ && g++ --version >/dev/null 2>&1 && ok "C++ compiler for nvcc's host code (g++)" ||
    { miss "g++ (nvcc's host compiler)"; want_apt+=(g++); }
  if cmake_ok; then
    ok "cmake $(cmake --version | head -1 | awk '{print $3}') (>= 3.25)"
  else
    miss "cmake >= 3.25 ($(have cmake && cmake --version | head -1 || echo 'not found'))"
    want_apt+=(cmake)
    pip_pkgs+=(cmake)
  fi
  if have ninja && ninja --version >/dev/null 2>&1; then
    ok "ninja $(ninja --version)"
  elif have make && make --version >/dev/null 2>&1; then
    ok "make (ninja not found: building with Unix Makefiles)"
  else
    miss "ninja or make"
    want_apt+=(ninja-build)
    pip_pkgs+=(ninja)
  fi
  if [ "$mode" = test ]; then
    if have mpirun && mpirun --version >/dev/null 2>&1; then ok "mpirun ($(mpirun --version 2>&1 | head -1))"; else
      miss "mpirun (the MPI bootstrap tests)"; want_apt+=(openmpi-bin libopenmpi-dev); fi
  fi
  if [ ${#want_apt[@]} -gt 0 ]; then
    say "installing what is missing"
    if ! apt_install "${want_apt[@]}"; then
      if [ ${#pip_pkgs[@]} -gt 0 ] && pip_tools "${pip_pkgs[@]}"; then
        echo "  installed ${pip_pkgs[*]} with pip; for your own shells: export PATH=\"$(dirname "$(command -v cmake || command -v ninja)"):\$PATH\""
      fi
    fi
    cc_ok "${CC:-cc}" || die "no working C compiler: install gcc (apt-get install gcc) or load your site's compiler module"
    have g++ || die "no g++: nvcc needs a host C++ compiler (apt-get install g++, or a compiler module)"
    cmake_ok || die "cmake >= 3.25 is needed and could not be installed here; run: python3 -m pip install --user cmake ninja, put ~/.local/bin on PATH, and run this script again"
    { have ninja || have make; } || die "neither ninja nor make could be installed; run: python3 -m pip install --user ninja"
    if [ "$mode" = test ] && ! have mpirun; then
      die "mpirun is needed by the test suite and could not be installed (apt-get install openmpi-bin libopenmpi-dev)"
    fi
  fi
  if find_nvcc; then
    ok "nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  else
    die "nvcc not found. Install the CUDA Toolkit (12.x or 13.x) and put its bin/ on PATH; DION builds its device headers and tests with it even where no GPU is present."
  fi
}

# Optional headers, probed by compiling a one-line program; a missing one leaves a backend out.
hidden_dir=""
header_ok() { # header_ok HEADER
  local d rc
  d=$(mktemp -d)
  printf '#include <%s>\nint main(void) { return 0; }\n' "$1" >"$d/t.c"
  "${CC:-cc}" ${hidden_dir:+-I"$hidden_dir"} -c "$d/t.c" -o "$d/t.o" >/dev/null 2>&1
  rc=$?
  rm -rf "$d"
  return $rc
}

check_optional() {
  say "optional headers"
  if [ -n "${DION_SETUP_HIDE_HEADERS:-}" ]; then
    # Shadow each named header with one that does not compile, so that the probe below fails on it.
    hidden_dir=$(mktemp -d)
    for h in $DION_SETUP_HIDE_HEADERS; do
      mkdir -p "$hidden_dir/$(dirname "$h")"
      printf '#error "%s hidden by DION_SETUP_HIDE_HEADERS"\n' "$h" >"$hidden_dir/$h"
    done
  fi
  local missing_pkgs=()
  #          header            package         what it leaves out
  local rows=("rdma/fabric.h|libfabric-dev|the proxy/ofi backend (libfabric: EFA, Slingshot, TCP)"
    "infiniband/verbs.h|libibverbs-dev|the proxy/verbs and gdaki backends (rdma-core verbs)"
    "infiniband/mlx5dv.h|libibverbs-dev|the gdaki backend (rdma-core mlx5 direct verbs)")
  for row in "${rows[@]}"; do
    IFS='|' read -r h pkg what <<<"$row"
    if header_ok "$h"; then
      ok "$h"
    else
      miss "$h: $what is left out -> install $pkg (apt-get install $pkg)"
      missing_pkgs+=("$pkg")
    fi
  done
  # The test suite covers every backend: there, install them when apt can.
  if [ "$mode" = test ] && [ ${#missing_pkgs[@]} -gt 0 ]; then
    if apt_install $(printf '%s\n' "${missing_pkgs[@]}" ibverbs-providers | sort -u); then
      for h in rdma/fabric.h infiniband/verbs.h infiniband/mlx5dv.h; do header_ok "$h" || echo "  still missing: $h"; done
    else
      echo "  (could not install ${missing_pkgs[*]}: the tests of those backends are skipped)"
    fi
  fi
  [ -n "$hidden_dir" ] && rm -rf "$hidden_dir"
  hidden_dir=""
  return 0
}

# What the test suite uses beyond the build: clang's fuzzer runtime, ip (iproute2), pkg-config, python3.
check_test_tools() {
  say "test suite tools"
  local want=()
  local d
  d=$(mktemp -d)
  printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }\n' >"$d/f.c"
  if have clang && clang -fsanitize=fuzzer,address "$d/f.c" -o "$d/f" >/dev/null 2>&1; then ok "clang with libFuzzer"; else
    miss "clang with libFuzzer (the fuzz tests)"; want+=(clang libclang-rt-14-dev); fi
  rm -rf "$d"
  if have ip; then ok "ip (iproute2)"; else miss "ip (iproute2)"; want+=(iproute2); fi
  if have pkg-config; then ok "pkg-config"; else miss "pkg-config (the install test)"; want+=(pkg-config); fi
  if have python3; then ok "python3"; else miss "python3 (trace and message-table checks)"; want+=(python3); fi
  if [ ${#want[@]} -gt 0 ] && ! apt_install "${want[@]}"; then
    echo "  (could not install ${want[*]}: the tests that need them are skipped or fail)"
  fi
  return 0
}

build() { # build PRESET
  local dir="$build_root/$1" gen=()
  say "building ($1 in $dir)"
  if [ ! -f "$dir/CMakeCache.txt" ] && ! have ninja; then gen=(-G "Unix Makefiles"); fi
  cmake --preset "$1" -B "$dir" "${gen[@]}" "${cmake_extra[@]}" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

has_gpu() {
  [ "${DION_CPU_MODE:-0}" != 1 ] && have nvidia-smi && nvidia-smi -L >/dev/null 2>&1
}

check_required
check_optional
[ "$mode" = test ] && check_test_tools
if [ "$mode" = check ]; then
  say "setup check complete"
  exit 0
fi
build default
bin="$build_root/default"

if [ "$mode" = run ]; then
  say "dion-info"
  "$bin/dion-info"
  say "CPU mode: 4 ranks pass a token around a ring (dionrun -n 4 cpu_ring)"
  "$bin/dionrun" -n 4 --timeout 120 "$bin/examples/cpu_ring"
  if has_gpu; then
    say "GPU: two ranks bounce 64 KiB with put_signal_block (dionrun -n 2 --mps gpu_pingpong)"
    "$bin/dionrun" -n 2 --mps --timeout 120 "$bin/examples/gpu_pingpong"
    say "GPU: the same size and variant in the benchmark (perf/p2p_bench; full runs: perf/run_gpu.sh)"
    "$bin/dionrun" -n 2 --mps --timeout 300 "$bin/perf/p2p_bench" --tests put_signal --sizes 65536 --groups block
    say "GPU: signal and put_signal latency at every size"
    "$bin/dionrun" -n 2 --mps --timeout 300 "$bin/perf/p2p_bench" --tests signal,put_signal
  fi
  say "setup run complete"
  exit 0
fi

build asan
say "tests (default preset; gpu-labelled tests are skipped without a GPU)"
ctest --preset default --test-dir "$bin" -j "$jobs"
say "host tests under AddressSanitizer and UndefinedBehaviorSanitizer (asan preset)"
ctest --preset asan --test-dir "$build_root/asan" -j "$jobs"
say "fuzz targets under ASan+UBSan (libFuzzer, 20 s each from their seed corpora)"
if have clang; then
  DION_JOBS="$jobs" tests/fuzz/run.sh 20
else
  echo "  (clang is missing: the fuzz targets were not run; apt-get install clang libclang-rt-14-dev)"
fi
if has_gpu; then
  say "gpu-labelled tests"
  ctest --test-dir "$bin" -L gpu --output-on-failure
fi
say "setup test complete"
