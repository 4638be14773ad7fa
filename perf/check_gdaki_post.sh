#!/bin/sh
# ctest perf_cpu_gdaki_post: gdaki_post_bench in CPU mode at tiny sizes (WQEs also parsed by the softnic
# model's reader), its CSV checked; then once per --inject kind, which must fail and name the broken lane:
# a rate is printed only for work the consumers verified. Last, a stalled consumer must be ended by the watchdog.
# usage: check_gdaki_post.sh PYTHON OUTDIR GDAKI_POST_BENCH
set -u
py=$1 out=$2 bench=$3
csv="$out/gdaki_post_cpu.csv"
rm -f "$csv"
args="--cpu --per 16 --reps 3 --blocks 2 --label ci-cpu"
"$bench" $args --check full --csv "$csv" || { echo "FAIL: gdaki_post_bench --cpu exited with $?"; exit 1; }
"$py" "$(dirname "$0")/check_csv.py" "$csv" \
  post_write_inline_1warp,post_write_1warp,post_cmd_1warp,post_write_inline_allsm,post_write_allsm,post_cmd_allsm \
  || exit 1
for inj in skip dup badid; do
  txt="$out/gdaki_post_cpu_$inj.txt"
  "$bench" $args --inject $inj --csv "$out/gdaki_post_cpu_$inj.csv" >"$txt" 2>&1
  rc=$?
  n=$(grep -c "lane 7" "$txt")
  if [ $rc != 1 ] || [ "$n" != 6 ] || grep -q "Mposts" "$txt"; then
    cat "$txt"
    echo "FAIL: --inject $inj: exit $rc, $n of 6 rows failed naming lane 7 (every row must fail, none print a rate)"
    exit 1
  fi
  echo "ok: --inject $inj failed every row, naming lane 7"
done
# a consumer that stops serving a QP: the watchdog must end the run (never a hang) with a FAIL naming the launch
# and the QP's counters
txt="$out/gdaki_post_cpu_stall.txt"
"$bench" --cpu --per 16 --reps 2 --tests inline --scopes 1warp --inject stall --limit 2 >"$txt" 2>&1
rc=$?
if [ $rc != 1 ] || ! grep -q "did not end within 2 s" "$txt" || ! grep -q "QP 0x000100: device resv_head" "$txt"; then
  cat "$txt"
  echo "FAIL: --inject stall: exit $rc; the watchdog must end the run and report QP 0x000100's counters"
  exit 1
fi
echo "ok: --inject stall ended by the watchdog, QP 0x000100 reported"
