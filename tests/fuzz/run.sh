#!/usr/bin/env bash
# Builds the fuzz preset (clang, libFuzzer, ASan+UBSan) and runs every fuzz target for a bounded time, starting
# from its seed corpus in tests/fuzz/corpus/<target>/. Exits non-zero on any crash, leak, sanitizer report,
# broken invariant or hang; the failing input is then under build/fuzz/tests/fuzz/artifacts/ (replay it with
# build/fuzz/tests/fuzz/fuzz_<target> <file>).
# Usage: tests/fuzz/run.sh [seconds per target, default 20]   (DION_JOBS: parallel jobs, default 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
jobs=${DION_JOBS:-2}
command -v clang >/dev/null || { echo "run.sh: clang is needed for libFuzzer (apt-get install clang)" >&2; exit 1; }
cmake --preset fuzz -DDION_FUZZ_SECONDS="$secs" >/dev/null
cmake --build --preset fuzz -j "$jobs" --target dion_fuzzers
ctest --preset fuzz -j "$jobs"
