#!/bin/sh
# Builds the API reference with Doxygen and fails on any warning (an undocumented public symbol, a \param
# that names no parameter). Run from the repository root.
# Usage: api_doxygen.sh DOXYGEN OUTDIR [CHECKER...]   CHECKER: python3 scripts/api_documented.py
# Exit 0 clean, 1 warnings (listed), 77 when DOXYGEN is not installed.
doxygen=$1 out=$2
shift 2
if ! command -v "$doxygen" >/dev/null 2>&1; then
    echo "SKIP: doxygen is not installed (scripts/setup.sh test installs it); the reference was not built"
    exit 77
fi
mkdir -p "$out" && rm -f "$out/warnings.log" || exit 1
{ cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out"; echo "WARN_LOGFILE = $out/warnings.log"; } |
    "$doxygen" - || { echo "FAIL: doxygen exited with an error"; exit 1; }
echo "API reference: $out/html/index.html"
if [ $# -gt 0 ]; then exec "$@" doxylog "$out/warnings.log"; fi
[ ! -s "$out/warnings.log" ] || { cat "$out/warnings.log"; exit 1; }
