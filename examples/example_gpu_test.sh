#!/usr/bin/env bash
# Runs a GPU example with two ranks (sharing one GPU under MPS where there is only one) and checks what it
# printed. Usage: example_gpu_test.sh DIONRUN verified|launch_fails EXAMPLE; exit 0 pass, 1 fail, 77 no GPU.
set -u
DIONRUN=$1 EXPECT=$2 EXAMPLE=$3
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no GPU (nvidia-smi -L fails)"
    exit 77
fi
out=$("$DIONRUN" -n 2 --mps --timeout 120 "$EXAMPLE" 2>&1)
rc=$?
printf '%s\n' "$out"
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
line=$(grep -E '^gpu_pingpong: put_signal_pingpong block 65536 B: [0-9]+\.[0-9]+ us one-way \(verified: ' <<<"$out")
case "$EXPECT" in
verified)
    [ "$rc" -eq 0 ] || fail "the example exited with $rc"
    [ -n "$line" ] || fail "no verified result line"
    us=$(sed -E 's/.*: ([0-9.]+) us one-way.*/\1/' <<<"$line")
    # a time of zero means nothing ran between the clock reads
    awk -v us="$us" 'BEGIN { exit !(us > 0) }' || fail "one-way time $us us"
    echo "ok: $line"
    ;;
launch_fails)
    [ "$rc" -ne 0 ] || fail "the example exited 0 although its kernel cannot be launched"
    [ -z "$line" ] || fail "a time was printed for a kernel that did not run: $line"
    grep -q "cudaGetLastError() failed: too many resources requested for launch" <<<"$out" ||
        fail "the launch error was not reported"
    echo "ok: the failed launch was caught"
    ;;
*) fail "unknown expectation $EXPECT" ;;
esac
