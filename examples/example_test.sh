#!/usr/bin/env bash
# Runs an example under dionrun and passes only when it exits 0 AND printed its verified-result line.
# Usage: example_test.sh DIONRUN cpu|gpu NRANKS PATTERN EXAMPLE [ARGS...]; exit 0 pass, 1 fail, 77 no GPU.
# gpu: ranks share the GPU under MPS where there is only one. hosts: CPU mode, each rank a separate simulated
# host (dionrun --hosts), so peers are reached through the proxy backend, which the log must show.
set -u
DIONRUN=$1 MODE=$2 NP=$3 PATTERN=$4
shift 4
mps=()
if [ "$MODE" = gpu ]; then
    if ! nvidia-smi -L >/dev/null 2>&1; then
        echo "SKIP: no GPU (nvidia-smi -L fails)"
        exit 77
    fi
    mps=(--mps)
fi
if [ "$MODE" = hosts ]; then
    mps=(--hosts)
    export DION_LOG=info
fi
out=$("$DIONRUN" -n "$NP" "${mps[@]}" --timeout 240 "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$MODE" = hosts ] && [ "$rc" -eq 77 ]; then
    echo "SKIP: dionrun cannot simulate hosts here (see above)"
    exit 77
fi
if [ "$MODE" = hosts ] && ! grep -q "reaches rank .* through proxy" <<<"$out"; then
    echo "FAIL: the ranks did not reach each other through the proxy backend" >&2
    exit 1
fi
if [ "$rc" -ne 0 ]; then
    echo "FAIL: the example exited with $rc" >&2
    exit 1
fi
if ! grep -Eq "$PATTERN" <<<"$out"; then
    echo "FAIL: no line matching: $PATTERN" >&2
    exit 1
fi
echo "ok: $(grep -E "$PATTERN" <<<"$out" | head -1)"
