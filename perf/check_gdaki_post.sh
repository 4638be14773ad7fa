#!/bin/sh
# ctest perf_cpu_gdaki_post: gdaki_post_bench in CPU mode at tiny sizes (WQEs also parsed by the softnic
# model's reader), its CSV checked; then once per --inject kind, which must fail and name the broken lane:
# a rate is printed only for work the consumers verified.
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
