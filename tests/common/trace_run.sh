#!/bin/sh
# Runs the DION_TRACE ping-pong and checks its files:
#   trace_run.sh PYTHON DIR EVENTS -- dionrun -n 2 [...] runner trace
# DIR is emptied first; EVENTS is DION_TRACE_EVENTS, or "default". Exit 77 (skip) passes through.
set -u
py=$1 dir=$2 events=$3
shift 3
[ "$1" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$dir" && mkdir -p "$dir" || exit 1
DION_TRACE="$dir/pingpong.json"
export DION_TRACE
cap_arg=""
if [ "$events" != default ]; then
  DION_TRACE_EVENTS=$events
  export DION_TRACE_EVENTS
  cap_arg="--capacity $events"
fi
"$@"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -ne 0 ] && { echo "FAIL: the ping-pong exited with $rc"; exit 1; }
# shellcheck disable=SC2086
exec "$py" "$here/trace_check.py" --trace "$DION_TRACE" --ranks 2 --rounds 200 $cap_arg \
  --merge "$here/../../tools/dion-trace-merge"
