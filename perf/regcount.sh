#!/bin/sh
# Registers per thread (and stack bytes) of every device call, from ptxas -v on perf/regcount.cu, as the
# markdown tables of docs/gpu_kernels.md. Needs nvcc only (no GPU).  Usage: perf/regcount.sh [BUILD_DIR]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build/default}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# column: label, arch, backends mask, launch bound (0: none)
cols="p2p,sm_90:sm_90:1:0 p2p,sm_80:sm_80:1:0 p2p+proxy,sm_90:sm_90:3:0 p2p+proxy+gdaki,sm_90:sm_90:7:0 p2p,(1024,1):sm_90:1:1024 p2p,(512,1):sm_90:1:512"
i=0
for c in $cols; do
    arch=$(echo "$c" | cut -d: -f2)
    mask=$(echo "$c" | cut -d: -f3)
    bound=$(echo "$c" | cut -d: -f4)
    def=""
    if [ "$bound" != 0 ]; then def="-DREGCOUNT_BOUND=$bound"; fi
    nvcc -I"$here/include" -I"$build/include" -O3 -arch="$arch" -DDION_DEVICE_BACKENDS="$mask" $def \
        -Xptxas -v -c "$here/perf/regcount.cu" -o "$tmp/o$i.o" 2>"$tmp/c$i.txt"
    # one line per kernel: name regs stack
    awk '/Compiling entry function/ { gsub(/\x27/, "", $7); k = $7 }
         /bytes stack frame/ && k != "" && !(k in st) { st[k] = $1 }
         /Used [0-9]+ registers/ && k != "" { print k, $5, st[k]; k = "" }' "$tmp/c$i.txt" | sort >"$tmp/r$i.txt"
    i=$((i + 1))
done
printf '| kernel |'
for c in $cols; do printf ' %s |' "$(echo "$c" | cut -d: -f1 | tr , ' ')"; done
printf '\n|---|'
for c in $cols; do printf -- '---|'; done
printf '\n'
for k in $(cut -d' ' -f1 "$tmp/r0.txt"); do
    printf '| `%s` |' "$k"
    j=0
    while [ $j -lt $i ]; do
        awk -v k="$k" '$1 == k { if ($3 > 0) printf " %s (%s B stack) |", $2, $3; else printf " %s |", $2 }' "$tmp/r$j.txt"
        j=$((j + 1))
    done
    printf '\n'
done
