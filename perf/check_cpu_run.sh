#!/bin/sh
# ctest perf_cpu_csv: dion-perf once in CPU mode with 2 ranks at tiny sizes, then the CSV checked.
# usage: check_cpu_run.sh PYTHON OUTDIR TESTS DIONRUN DION_PERF
# The rows each test of TESTS writes (CPU mode, 2 ranks, sizes 8..256) must all be there.
set -eu
py=$1 out=$2 tests=$3 dionrun=$4 perf=$5
csv="$out/perf_cpu.csv"
rm -f "$csv"
rc=0
"$dionrun" -n 2 --timeout 100 "$perf" --transport cpu --tests "$tests",proxy_pickup --min 8 --max 256 \
  --iters 20 --warmup 4 --reps 3 --csv "$csv" --label ci-cpu >"$out/perf_cpu.txt" 2>&1 || rc=$?
cat "$out/perf_cpu.txt"
if [ "$rc" != 0 ]; then
  echo "FAIL: dion-perf exited with $rc"
  exit 1
fi
# the proxy's pickup row is a hook: measured with a proxy peer, else it says why not
grep -Eq '^proxy_pickup +(skipped: proxy transport not in this build|thread)' "$out/perf_cpu.txt" || {
  echo "FAIL: no proxy_pickup line in the table"
  exit 1
}
rows=signal_pingpong,signal_relaxed_pingpong,put_signal_pingpong,put_bw,put_bw_bidir,put8_msgrate_1sm,put8_msgrate_8sm
rows=$rows,put8_msgrate_allsm,put_quiet,get,fetch_add,barrier_2ranks
exec "$py" "$(dirname "$0")/check_csv.py" "$csv" "$rows"
