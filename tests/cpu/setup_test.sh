#!/usr/bin/env bash
# Runs scripts/setup.sh as a new user would, on machines simulated by PATH: apt present but unable to reach
# any archive (fake apt-get, apt, dpkg and sudo that fail like that and log every call), an optional header
# missing (DION_SETUP_HIDE_HEADERS: the script's own compile probe then fails on it), cmake too old with no
# way to install another, and with pip as the way. Usage: setup_test.sh SRC WORK CASE; exit 0 pass, 1 fail.
set -u
SRC=$1 WORK=$2 CASE=$3
fake=$WORK/fake-$CASE
out=$WORK/out-$CASE
rm -rf "$fake"
mkdir -p "$fake"
calls=$fake/calls
: >"$calls"

fail() {
    echo "FAIL ($CASE): $*" >&2
    echo "setup.sh output:" >&2
    sed 's/^/  | /' "$out" >&2
    exit 1
}
expect() { grep -qF -- "$1" "$out" || fail "the output lacks '$1'"; }

# apt as on a node without network: update ends with warnings, install cannot find packages.
cat >"$fake/apt-get" <<'F'
#!/bin/sh
echo "apt-get $*" >>"$(dirname "$0")/calls"
case "$1" in
update) echo "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary failure resolving 'deb.debian.org'"
        echo "W: Some index files failed to download. They have been ignored, or old ones used instead."; exit 0 ;;
*) echo "E: Unable to locate package $2" >&2; exit 100 ;;
esac
F
cat >"$fake/dpkg" <<'F'
#!/bin/sh
echo "dpkg $*" >>"$(dirname "$0")/calls"
echo "dpkg-query: package '$2' is not installed" >&2
exit 1
F
cat >"$fake/sudo" <<'F'
#!/bin/sh
echo "sudo $*" >>"$(dirname "$0")/calls"
[ "$1" = -n ] && shift
exec "$@"
F
cp "$fake/apt-get" "$fake/apt"
chmod +x "$fake"/*
export PATH="$fake:$PATH"
# Nothing from the network, whatever happens; a home of its own for pip and virtual environments.
export PIP_NO_INDEX=1 HOME=$WORK/home-$CASE
mkdir -p "$HOME"
unset DION_SETUP_HIDE_HEADERS
# A small build of its own, away from the tree ctest runs from: CPU mode, no tests or benchmarks, one arch.
export DION_BUILD_DIR=$WORK/build DION_CPU_MODE=1
export DION_CMAKE_ARGS="-DDION_BUILD_TESTS=OFF -DDION_BUILD_PERF=OFF -DCMAKE_CUDA_ARCHITECTURES=90"

case "$CASE" in
apt_unreachable)
    bash "$SRC/scripts/setup.sh" run >"$out" 2>&1
    rc=$?
    [ $rc -eq 0 ] || fail "setup.sh run exited with $rc"
    for line in "[ok] cmake" "[ok] nvcc" "== building (default in $WORK/build/default)" "== dion-info" \
        "usable here:" "passed the token" "== setup run complete"; do
        expect "$line"
    done
    # Every tool is present: nothing may have been asked of the package manager.
    [ ! -s "$calls" ] || fail "the package manager was called although nothing required was missing: $(cat "$calls")"
    ;;
header_missing)
    DION_SETUP_HIDE_HEADERS="rdma/fabric.h" bash "$SRC/scripts/setup.sh" run >"$out" 2>&1
    rc=$?
    [ $rc -eq 0 ] || fail "setup.sh run exited with $rc"
    expect "[missing] rdma/fabric.h: the proxy/ofi backend"
    expect "-> install libfabric-dev"
    expect "passed the token"
    expect "== setup run complete"
    [ ! -s "$calls" ] || fail "run mode installed an optional package: $(cat "$calls")"
    expect "[ok] infiniband/verbs.h" # only the named header is hidden
    ;;
cmake_too_old)
    printf '#!/bin/sh\necho "cmake version 3.16.3"\n' >"$fake/cmake"
    chmod +x "$fake/cmake"
    bash "$SRC/scripts/setup.sh" check >"$out" 2>&1
    rc=$?
    [ $rc -eq 1 ] || fail "setup.sh check exited with $rc, expected 1 (cmake cannot be had here)"
    expect "[missing] cmake >= 3.25 (cmake version 3.16.3)"
    expect "apt cannot reach its archives"
    expect "python3 -m pip install --user cmake ninja"
    grep -q "apt-get update" "$calls" || fail "apt was not tried: $(cat "$calls")"
    grep -q "apt-get install" "$calls" && fail "apt-get install ran although the archive was unreachable"
    ;;
pip_fallback)
    # cmake too old and apt unreachable, but pip works (here: a stand-in that installs the real cmake into
    # ~/.local/bin, as pip install --user would): the script uses it and carries on.
    printf '#!/bin/sh\necho "cmake version 3.16.3"\n' >"$fake/cmake"
    real_cmake=$(PATH=${PATH#"$fake:"} command -v cmake)
    cat >"$fake/python3" <<F
#!/bin/sh
echo "python3 \$*" >>"$calls"
[ "\$1 \$2 \$3 \$4" = "-m pip install --user" ] || exit 1
mkdir -p "\$HOME/.local/bin" && ln -sf "$real_cmake" "\$HOME/.local/bin/cmake"
F
    chmod +x "$fake/cmake" "$fake/python3"
    bash "$SRC/scripts/setup.sh" check >"$out" 2>&1
    rc=$?
    [ $rc -eq 0 ] || fail "setup.sh check exited with $rc"
    expect "apt cannot reach its archives"
    expect "installed cmake with pip"
    expect "== setup check complete"
    grep -q "python3 -m pip install --user --quiet cmake" "$calls" || fail "pip was not used: $(cat "$calls")"
    ;;
*)
    echo "unknown case $CASE" >&2
    exit 2
    ;;
esac
echo "ok ($CASE)"
