#!/usr/bin/env bash
# Ranks as separate hosts on one machine (dionrun --hosts): bootstrap and host collectives across the
# simulated network, the device handle between hosts, a killed host, a killed launcher, and the skip path.
# Usage: hosts_test.sh DIONRUN PROBE CONFORMANCE CASE [N]; exit 0 pass, 1 fail, 77 skipped.
set -u
DIONRUN=$1 PROBE=$2 CONF=$3 CASE=$4 N=${5:-3}

# The ranks get a private /tmp: the work folder must be elsewhere (the build tree).
work=$(mktemp -d "$PWD/hosts-test.XXXXXX") || exit 1
marker=$(mktemp /tmp/dion-hosts-marker.XXXXXX) || exit 1
dpid=
cleanup() {
    [ -n "$dpid" ] && kill -KILL "$dpid" 2>/dev/null
    rm -rf "$work" "$marker"
}
trap cleanup EXIT
export HOSTS_PROBE_DIR=$work/ranks
mkdir -p "$HOSTS_PROBE_DIR"
export CUDA_VISIBLE_DEVICES= DION_CPU_MODE=1 DION_BOOTSTRAP_TIMEOUT=20s
unset DION_RANK DION_NRANKS DION_UNIQUE_ID DION_DEVICE DION_ROOT DION_TRANSPORT
ERR=$work/err OUT=$work/out
rc=0

fail() {
    echo "FAIL ($CASE $N): $*" >&2
    for f in "$OUT" "$ERR"; do
        [ -s "$f" ] && { echo "--- $(basename "$f"):" >&2; sed 's/^/  | /' "$f" >&2; }
    done
    exit 1
}
skip() {
    echo "SKIP ($CASE): $*"
    exit 77
}
has() { grep -qE -- "$2" "$1"; }

# Whether this machine lets us build hosts; the same conditions dionrun checks, asked independently so that
# a dionrun that wrongly gives up (exit 77) fails the test instead of skipping it.
can_simulate() {
    command -v unshare >/dev/null || return 1
    { command -v ip || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ]; } >/dev/null || return 1
    unshare --net --uts --mount --ipc true 2>/dev/null
}

run() {
    "$DIONRUN" "$@" >"$OUT" 2>"$ERR"
    rc=$?
    if [ "$rc" -eq 77 ]; then
        has "$ERR" "cannot simulate hosts" || fail "dionrun exited 77 without saying why"
        fail "dionrun could not simulate hosts although unshare and ip work here: $(cat "$ERR")"
    fi
}

# Whether rank $1 logged a sentence that names itself and the host of another rank (the log prefix names its own).
names_peer_host() {
    grep -E "^dion\[dion-host-$1:$1\] " "$ERR" | sed 's/^dion\[[^]]*\] //' | grep -F "rank $1 " |
        grep -oE "dion-host-[0-9]+" | grep -qvx "dion-host-$1"
}

ready_count() { find "$HOSTS_PROBE_DIR" -name 'rank*.ready' | wc -l; }

# Starts dionrun in the background and waits (bounded) until all N ranks are ready.
start_bg() {
    "$DIONRUN" "$@" >"$OUT" 2>"$ERR" &
    dpid=$!
    local i
    for ((i = 0; i < 300; i++)); do
        [ "$(ready_count)" -eq "$N" ] && return
        kill -0 "$dpid" 2>/dev/null || break
        sleep 0.1
    done
    fail "the $N ranks did not all get ready ($(ready_count) did)"
}

# Waits up to $1 seconds for dionrun to end; rc is its exit status.
wait_bg() {
    local i
    for ((i = 0; i < $1 * 10; i++)); do
        kill -0 "$dpid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$dpid" 2>/dev/null && fail "dionrun still runs after $1 s"
    wait "$dpid"
    rc=$?
    dpid=
}

case "$CASE" in
noperm)
    # Without CAP_SYS_ADMIN dionrun must say so and exit 77 (what the tests report as skipped).
    command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
    [ "$(id -u)" -eq 0 ] || skip "needs root to drop CAP_SYS_ADMIN from"
    setpriv --bounding-set=-sys_admin --inh-caps=-sys_admin true 2>/dev/null ||
        skip "setpriv cannot drop CAP_SYS_ADMIN here (no CAP_SETPCAP?)"
    setpriv --bounding-set=-sys_admin --inh-caps=-sys_admin "$DIONRUN" -n 2 --hosts true >"$OUT" 2>"$ERR"
    rc=$?
    [ "$rc" -eq 77 ] || fail "dionrun --hosts without CAP_SYS_ADMIN exited $rc, expected 77"
    has "$ERR" "cannot simulate hosts on this machine: .*network namespace.*CAP_SYS_ADMIN" ||
        fail "dionrun does not say why it cannot simulate hosts"
    echo "PASS: without CAP_SYS_ADMIN: $(cat "$ERR")"
    exit 0
    ;;
esac

can_simulate || skip "cannot create network, UTS, mount and IPC namespaces here (needs root or CAP_SYS_ADMIN, unshare and ip)"

case "$CASE" in
boot)
    run -n "$N" --hosts --timeout 100 "$PROBE" boot "$marker"
    [ "$rc" -eq 0 ] || fail "dionrun exited with $rc"
    [ "$(grep -c 'separate host, collectives ok' "$OUT")" -eq "$N" ] || fail "not every rank reported success"
    for ((r = 0; r < N; r++)); do
        has "$OUT" "^rank $r of $N on dion-host-$r: " || fail "rank $r did not run on dion-host-$r"
    done
    ;;
env_slurm | env_ompi | env_torch | env_noroot)
    # Multi-host env initialization as docs/multihost.md describes it for srun, mpirun and torchrun: no unique
    # id, the launcher's rank variables, and the root's address from DION_ROOT (or MASTER_ADDR/MASTER_PORT);
    # rank 0 hosts the root in its own namespace, reached by the others over the network. The port is fixed:
    # it lives in this run's private namespace, so parallel runs cannot collide.
    root=10.231.0.1:29555
    case "$CASE" in
    env_slurm) vars='SLURM_PROCID=$DION_RANK SLURM_NTASKS=$DION_NRANKS SLURM_NNODES=$DION_NRANKS SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_LOCALID=0 DION_ROOT='$root ;;
    env_ompi) vars='OMPI_COMM_WORLD_RANK=$DION_RANK OMPI_COMM_WORLD_SIZE=$DION_NRANKS OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0 PMIX_NAMESPACE=job42 DION_ROOT='$root ;;
    env_torch) vars='RANK=$DION_RANK WORLD_SIZE=$DION_NRANKS LOCAL_RANK=0 MASTER_ADDR=10.231.0.1 MASTER_PORT=29554 TORCHELASTIC_RUN_ID=run42' ;;
    env_noroot) vars='SLURM_PROCID=$DION_RANK SLURM_NTASKS=$DION_NRANKS SLURM_NNODES=$DION_NRANKS SLURM_JOB_ID=4242' ;;
    esac
    run -n "$N" --hosts --timeout 100 bash -c \
        'eval "exec env -u DION_RANK -u DION_NRANKS -u DION_LOCAL_RANK -u DION_UNIQUE_ID '"$vars"' \"\$@\""' _ \
        "$PROBE" boot "$marker"
    if [ "$CASE" = env_noroot ]; then
        [ "$rc" -ne 0 ] || fail "ranks on $N hosts met without a root address"
        has "$ERR" "needs the root's address: set DION_ROOT=host:port" || fail "no sentence asks for DION_ROOT"
    else
        [ "$rc" -eq 0 ] || fail "dionrun exited with $rc"
        for ((r = 0; r < N; r++)); do
            has "$OUT" "^rank $r of $N on dion-host-$r: " || fail "rank $r did not run on dion-host-$r"
        done
    fi
    ;;
dev)
    # p2p reaches same-host ranks only; the proxy backend (ofi engine) reaches the others, chosen by itself: the
    # handle is created and the conformance suite must pass across hosts. Where no network backend can run (no
    # libfabric) the handle must be refused, each rank logging a sentence that names itself, a peer and that
    # peer's host (the log prefix names its own host).
    run -n "$N" --hosts --timeout 100 "$PROBE" dev
    if [ "$rc" -eq 10 ]; then
        [ "$(grep -c CREATED "$OUT")" -eq "$N" ] || fail "some ranks created the handle, some did not"
        export DT_STREAM_COUNT=3000 # every put_signal crosses tcp between namespaces
        run -n "$N" --hosts --timeout 240 "$CONF" all
        [ "$rc" -eq 0 ] || fail "the conformance suite across $N hosts exited with $rc"
        echo "PASS: device handle across $N hosts; conformance suite passed"
        exit 0
    fi
    [ "$rc" -eq 0 ] || fail "dionrun exited with $rc"
    [ "$(grep -c REFUSED "$OUT")" -eq "$N" ] || fail "not every rank saw the refusal"
    for ((r = 0; r < N; r++)); do
        names_peer_host "$r" || fail "rank $r logged no sentence naming itself and a peer's host"
    done
    ;;
gpu_proxy)
    # GPU kernels across simulated hosts (the GPU test hosts_gpu_proxy_2): the ranks share nothing but the
    # network, so every peer must be reached through the proxy, chosen by itself, with windows in GPU memory
    # (staged through host buffers where the provider cannot register them). dionrun gives rank r GPU r % n
    # (DION_DEVICE); two ranks on one GPU run without MPS, whose pipes live in the /tmp they no longer share.
    unset CUDA_VISIBLE_DEVICES DION_CPU_MODE
    nvidia-smi -L 2>/dev/null | grep -q "^GPU" || skip "no GPU (nvidia-smi lists none)"
    export DION_LOG=info DT_STREAM_COUNT=2000 DT_ON_HOST=0 DT_ATOMICS_ON_HOST=1 DION_BOOTSTRAP_TIMEOUT=60s
    run -n "$N" --hosts --timeout 280 "$CONF" all
    [ "$rc" -eq 77 ] && skip "no usable GPU"
    [ "$rc" -eq 0 ] || fail "the GPU conformance suite over the proxy across $N hosts exited with $rc"
    for ((r = 0; r < N; r++)); do
        [ "$(grep -cE "^dion\[dion-host-$r:$r\] .*rank $r reaches rank [0-9]+ \(host dion-host-[0-9]+\) through proxy" "$ERR")" -eq $((N - 1)) ] ||
            fail "rank $r does not reach all $((N - 1)) peers through the proxy"
    done
    grep -E "^(PASS|FAIL|SKIP)" "$OUT"
    run -n "$N" --hosts --timeout 200 "$CONF" stress
    [ "$rc" -eq 0 ] || fail "the GPU put_signal stress over the proxy across $N hosts exited with $rc"
    grep -E "stress:|^(PASS|FAIL)" "$OUT"
    echo "PASS: GPU conformance suite and put_signal stress over the proxy across $N hosts"
    ;;
gpu_gdaki)
    # GPU kernels over gdaki and the softnic model across simulated hosts (hosts_gpu_gdaki_2): gdaki comes
    # before the proxy, and the model serves host windows. As gpu_proxy, GPU r % n for rank r, no MPS.
    unset CUDA_VISIBLE_DEVICES DION_CPU_MODE
    nvidia-smi -L 2>/dev/null | grep -q "^GPU" || skip "no GPU (nvidia-smi lists none)"
    export DION_LOG=info DION_GDAKI_NIC=softnic DION_OFI_PROVIDER=tcp DT_STREAM_COUNT=500 DT_ON_HOST=1 \
        DION_BOOTSTRAP_TIMEOUT=60s
    run -n "$N" --hosts --timeout 280 "$CONF" all
    [ "$rc" -eq 77 ] && skip "no usable GPU"
    [ "$rc" -eq 0 ] || fail "the GPU conformance suite over gdaki across $N hosts exited with $rc"
    for ((r = 0; r < N; r++)); do
        has "$ERR" "^dion\[dion-host-$r:$r\] .*softnic model selected" || fail "rank $r did not log the softnic model"
        [ "$(grep -cE "^dion\[dion-host-$r:$r\] .*rank $r reaches rank [0-9]+ \(host dion-host-[0-9]+\) through gdaki" "$ERR")" -eq $((N - 1)) ] ||
            fail "rank $r does not reach all $((N - 1)) peers through gdaki"
    done
    grep -E "^(PASS|FAIL|SKIP)" "$OUT"
    run -n "$N" --hosts --timeout 200 "$CONF" stress
    [ "$rc" -eq 0 ] || fail "the GPU put_signal stress over gdaki across $N hosts exited with $rc"
    grep -E "stress:|^(PASS|FAIL)" "$OUT"
    echo "PASS: GPU conformance suite and put_signal stress over gdaki (softnic model) across $N hosts"
    ;;
gdaki)
    # Across hosts p2p cannot map the peers; with DION_GDAKI_NIC=softnic gdaki is usable and comes before the
    # proxy: every peer must be reached through gdaki (the per-peer log line says so), the model must say it
    # was selected, and the conformance suite must pass.
    export DION_GDAKI_NIC=softnic DION_OFI_PROVIDER=tcp DT_STREAM_COUNT=300 DION_LOG=info
    run -n "$N" --hosts --timeout 200 "$CONF" all
    [ "$rc" -eq 0 ] || fail "the conformance suite over gdaki across $N hosts exited with $rc"
    for ((r = 0; r < N; r++)); do
        has "$ERR" "^dion\[dion-host-$r:$r\] .*softnic model selected" || fail "rank $r did not log the softnic model"
        [ "$(grep -cE "^dion\[dion-host-$r:$r\] .*rank $r reaches rank [0-9]+ \(host dion-host-[0-9]+\) through gdaki" "$ERR")" -eq $((N - 1)) ] ||
            fail "rank $r does not reach all $((N - 1)) peers through gdaki"
    done
    echo "PASS: conformance suite over gdaki (softnic model) across $N hosts"
    ;;
p2p_forced)
    # The conformance runner across hosts with p2p forced: it must fail by rank, quickly, never hang.
    export DION_TRANSPORT=p2p
    run -n "$N" --hosts --timeout 100 "$CONF" all
    [ "$rc" -ne 124 ] || fail "the conformance suite hung (dionrun's timeout)"
    [ "$rc" -ne 0 ] || fail "the conformance suite passed across hosts with p2p forced"
    has "$ERR" "^dionrun: rank [0-9]+ \(pid [0-9]+\) exited with code" || fail "dionrun did not name the failed rank"
    # dionrun stops the job at the first rank's exit, so one FAIL line is certain; every rank's own sentence
    # was logged before dion_dev_create's agreement step let any rank return.
    has "$ERR" "^FAIL rank [0-9]+ .*(dion_dev_create|dion_win_alloc)" || fail "no rank reported its dion_win_alloc or dion_dev_create failure"
    for ((r = 0; r < N; r++)); do
        names_peer_host "$r" || fail "rank $r logged no sentence naming itself and the unreachable rank's host"
    done
    ;;
kill)
    # kill -9 of one host mid-run: every survivor's barrier must fail naming it. Survivors ignore SIGTERM and
    # dionrun's grace is long, so they report before they are stopped.
    victim=$((N / 2))
    start_bg -n "$N" --hosts --timeout 100 --grace 60 "$PROBE" kill "$victim"
    vpid=$(cat "$HOSTS_PROBE_DIR/rank$victim.pid")
    kill -KILL "$vpid" || fail "cannot kill rank $victim (pid $vpid)"
    wait_bg 90
    [ "$rc" -eq 137 ] || fail "dionrun exited with $rc, expected 137 (the victim's SIGKILL)"
    has "$ERR" "^dionrun: rank $victim \(pid $vpid\) was killed by signal 9" || fail "dionrun did not report rank $victim"
    for ((r = 0; r < N; r++)); do
        [ "$r" -eq "$victim" ] && continue
        [ -s "$HOSTS_PROBE_DIR/rank$r.ok" ] || fail "survivor rank $r did not report the failure"
        grep -qF "rank $victim " "$HOSTS_PROBE_DIR/rank$r.ok" || fail "rank $r's report does not name rank $victim"
    done
    ;;
timeout)
    # dionrun's own --timeout with ranks that ignore SIGTERM: it must SIGKILL them after the grace period and
    # exit 124, leaving no rank (and so no namespace) behind.
    start_bg -n "$N" --hosts --timeout 2 --grace 1 "$PROBE" kill -1
    pids=$(cat "$HOSTS_PROBE_DIR"/rank*.pid)
    wait_bg 30
    [ "$rc" -eq 124 ] || fail "dionrun exited with $rc, expected 124 (its timeout)"
    has "$ERR" "timed out after 2 s" || fail "dionrun did not report its timeout"
    has "$ERR" "sending SIGKILL" || fail "dionrun did not SIGKILL the ranks that ignored SIGTERM"
    for p in $pids; do
        kill -0 "$p" 2>/dev/null && grep -q hosts_probe "/proc/$p/cmdline" 2>/dev/null && fail "rank pid $p outlived dionrun"
    done
    ;;
launcher_killed)
    # dionrun itself SIGKILLed (a test timeout, say): its ranks must die with it, and with them every
    # namespace and link (they are anonymous: no process, no namespace).
    start_bg -n "$N" --hosts --timeout 100 "$PROBE" kill -1
    pids=$(cat "$HOSTS_PROBE_DIR"/rank*.pid)
    kill -KILL "$dpid"
    wait "$dpid" 2>/dev/null
    dpid=
    for ((i = 0; i < 100; i++)); do
        left=
        for p in $pids; do kill -0 "$p" 2>/dev/null && grep -q hosts_probe "/proc/$p/cmdline" 2>/dev/null && left="$left $p"; done
        [ -z "$left" ] && break
        sleep 0.1
    done
    if [ -n "$left" ]; then
        kill -KILL $left 2>/dev/null
        fail "ranks$left outlived the SIGKILLed dionrun by 10 s"
    fi
    ;;
*)
    fail "unknown case"
    ;;
esac
echo "PASS ($CASE $N)"
cat "$OUT"
exit 0
