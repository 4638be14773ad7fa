#!/bin/sh
# ctest perf_cpu_csv / perf_cpu_proxy_csv / perf_cpu_gdaki_csv: dion-perf once in CPU mode with 2 ranks at tiny
# sizes, then the CSV checked.
# usage: check_cpu_run.sh PYTHON OUTDIR TESTS DIONRUN DION_PERF [proxy|gdaki]
# The rows each test of TESTS writes (CPU mode, 2 ranks) must all be there. proxy: every peer through the proxy
# backend (DION_TRANSPORT=proxy; the caller picks the provider with DION_OFI_PROVIDER), sizes 8..64, and the
# proxy's pickup row measured under impl dion-proxy[-provider] and the packet rows skipped. gdaki: every peer
# through gdaki (dion-perf --cpu --transport gdaki) and the softnic model (the caller sets
# DION_GDAKI_NIC=softnic: it is never implied), sizes 8..64, every row under impl
# dion-gdaki-softnic[-provider], the packet and pickup rows skipped. Otherwise p2p, sizes 8..256 with the packet
# rows, and the pickup row says why it was skipped.
set -eu
py=$1 out=$2 tests=$3 dionrun=$4 perf=$5 mode=${6:-p2p}
csv="$out/perf_cpu_$mode.csv"
txt="$out/perf_cpu_$mode.txt"
rm -f "$csv"
rc=0
transport="--transport cpu"
if [ "$mode" = proxy ]; then
  export DION_TRANSPORT=proxy
  max=64 iters=10
elif [ "$mode" = gdaki ]; then
  unset DION_TRANSPORT || true # dion-perf sets it from --transport
  transport="--cpu --transport gdaki"
  max=64 iters=10
else
  unset DION_TRANSPORT || true
  max=256 iters=20
fi
"$dionrun" -n 2 --timeout 100 "$perf" $transport --tests "$tests",proxy_pickup --min 8 --max $max \
  --iters $iters --warmup 4 --reps 3 --csv "$csv" --label ci-cpu >"$txt" 2>&1 || rc=$?
cat "$txt"
if [ "$rc" != 0 ]; then
  echo "FAIL: dion-perf exited with $rc"
  exit 1
fi
rows=signal_pingpong,signal_relaxed_pingpong,put_signal_pingpong,put_bw,put_bw_bidir,put8_msgrate_1sm,put8_msgrate_8sm
rows=$rows,put8_msgrate_allsm,put_quiet,get,fetch_add,barrier_2ranks
if [ "$mode" = proxy ]; then
  # the pickup row measured, and every row under the proxy's impl name (one line per transport in plot.py)
  grep -Eq '^proxy_pickup +thread +0 +oneway_us' "$txt" || {
    echo "FAIL: no measured proxy_pickup line in the table"
    exit 1
  }
  want=dion-proxy${DION_OFI_PROVIDER:+-$DION_OFI_PROVIDER}
  if tail -n +2 "$csv" | cut -d, -f1 | grep -qv "^$want\$"; then
    echo "FAIL: a CSV row's impl is not $want (the proxy served no peer?)"
    exit 1
  fi
  rows=$rows,proxy_pickup
  grep -Eq '^packet_pingpong +skipped: packet puts are carried by p2p' "$txt" || {
    echo "FAIL: no skipped packet_pingpong line in the table (the proxy does not carry packet puts)"
    exit 1
  }
elif [ "$mode" = gdaki ]; then
  # every row under the softnic's impl name (never a NIC's), the model named in the table's head, and the rows
  # gdaki does not carry skipped with their sentences
  want=dion-gdaki-softnic${DION_OFI_PROVIDER:+-$DION_OFI_PROVIDER}
  if tail -n +2 "$csv" | cut -d, -f1 | grep -qv "^$want\$"; then
    echo "FAIL: a CSV row's impl is not $want (gdaki served no peer?)"
    exit 1
  fi
  grep -Eq '^# dion-perf: 2 ranks, CPU mode .*transport gdaki \(peer 1: gdaki\)' "$txt" || {
    echo "FAIL: the table's head does not say that gdaki served peer 1 in CPU mode"
    exit 1
  }
  grep -q '^# gdaki NIC: the softnic model' "$txt" || {
    echo "FAIL: the table does not say that the softnic model played the NIC"
    exit 1
  }
  grep -Eq '^packet_pingpong +skipped: packet puts are carried by p2p.*served by gdaki' "$txt" || {
    echo "FAIL: no skipped packet_pingpong line naming gdaki in the table (gdaki does not carry packet puts)"
    exit 1
  }
  grep -Eq '^proxy_pickup +skipped: no peer of rank 0 is served by the proxy' "$txt" || {
    echo "FAIL: no skipped proxy_pickup line in the table"
    exit 1
  }
else
  rows=$rows,packet_pingpong
  grep -Eq '^proxy_pickup +skipped: no peer of rank 0 is served by the proxy' "$txt" || {
    echo "FAIL: no skipped proxy_pickup line in the table"
    exit 1
  }
fi
exec "$py" "$(dirname "$0")/check_csv.py" "$csv" "$rows"
