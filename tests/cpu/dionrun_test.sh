#!/usr/bin/env bash
# Runs dionrun on dionrun_probe and checks its exit status, its messages, MPS handling, and that no rank
# outlives it. Usage: dionrun_test.sh DIONRUN PROBE CASE [ARGS...]; exit 0 pass, 1 fail, 77 skipped.
set -u
DIONRUN=$1 PROBE=$2 CASE=$3
shift 3

tmp=$(mktemp -d /tmp/dionrun-test.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
export DIONRUN_PROBE_DIR=$tmp/ranks
# No GPUs as far as dionrun can tell, and no MPS daemon of the user's: the MPS cases set their own.
export CUDA_VISIBLE_DEVICES=
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY DION_RANK DION_NRANKS DION_UNIQUE_ID DION_DEVICE
ERR=$tmp/err
rc=0

fail() {
    echo "FAIL ($CASE): $*" >&2
    if [ -s "$ERR" ]; then
        echo "dionrun's stderr:" >&2
        sed 's/^/  | /' "$ERR" >&2
    fi
    exit 1
}

# Runs dionrun with stderr to $ERR and its exit status in rc; a fresh rank folder each time.
run() {
    rm -rf "$DIONRUN_PROBE_DIR"
    mkdir -p "$DIONRUN_PROBE_DIR"
    "$DIONRUN" "$@" 2>"$ERR"
    rc=$?
}

expect_rc() { [ "$rc" -eq "$1" ] || fail "dionrun exited with $rc, expected $1"; }
expect_err() { grep -qF -- "$1" "$ERR" || fail "dionrun's stderr lacks '$1'"; }
expect_no_err() { ! grep -qF -- "$1" "$ERR" || fail "dionrun's stderr has '$1'"; }
rank_pid() { cat "$DIONRUN_PROBE_DIR/rank$1.pid"; }
count() { find "$DIONRUN_PROBE_DIR" -name "$1" | wc -l; }

# Every rank that started must be gone once dionrun has returned (pid reuse by another probe is not a concern:
# nothing else runs probes in this folder).
expect_no_ranks_left() {
    local f pid
    for f in "$DIONRUN_PROBE_DIR"/rank*.pid; do
        [ -e "$f" ] || continue
        pid=$(cat "$f")
        if kill -0 "$pid" 2>/dev/null && grep -q dionrun_probe "/proc/$pid/cmdline" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null
            fail "rank process $pid ($f) outlived dionrun"
        fi
    done
}

# Starts dionrun in the background, waits until all N ranks passed their barrier, sends SIG to dionrun and
# waits (bounded) for it to end; rc is its exit status.
run_and_signal() {
    local n=$1 sig=$2
    shift 2
    rm -rf "$DIONRUN_PROBE_DIR"
    mkdir -p "$DIONRUN_PROBE_DIR"
    "$DIONRUN" -n "$n" "$@" 2>"$ERR" &
    local dpid=$! i
    for ((i = 0; i < 250; i++)); do
        [ "$(count 'rank*.ready')" -eq "$n" ] && break
        kill -0 "$dpid" 2>/dev/null || break
        sleep 0.1
    done
    [ "$(count 'rank*.ready')" -eq "$n" ] || { kill -KILL "$dpid" 2>/dev/null; fail "the $n ranks did not all start"; }
    kill "-$sig" "$dpid"
    for ((i = 0; i < 150; i++)); do
        kill -0 "$dpid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$dpid" 2>/dev/null; then
        kill -KILL "$dpid"
        fail "dionrun still runs 15 s after SIG$sig"
    fi
    wait "$dpid"
    rc=$?
}

# A stand-in for nvidia-cuda-mps-control that logs how it was called (and with which folders) to FAKE_MPS_LOG.
make_fake_mps() {
    if [ -e /tmp/nvidia-mps/control ]; then
        echo "an MPS daemon runs on this machine (/tmp/nvidia-mps/control): dionrun would use it; skipped"
        exit 77
    fi
    mkdir -p "$tmp/bin"
    cat >"$tmp/bin/nvidia-cuda-mps-control" <<'EOF'
#!/usr/bin/env bash
if [ "${1:-}" = -d ]; then
    echo "start $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY" >>"$FAKE_MPS_LOG"
    [ -n "${FAKE_MPS_FAIL:-}" ] && exit 3
    : >"$CUDA_MPS_PIPE_DIRECTORY/control"
    echo started >"$CUDA_MPS_LOG_DIRECTORY/control.log"
    exit 0
fi
read -r cmd
echo "$cmd $CUDA_MPS_PIPE_DIRECTORY" >>"$FAKE_MPS_LOG"
EOF
    chmod +x "$tmp/bin/nvidia-cuda-mps-control"
    export PATH="$tmp/bin:$PATH" FAKE_MPS_LOG=$tmp/mps.log
    : >"$FAKE_MPS_LOG"
}

# Checks that exactly one daemon was started and quit, in one private folder that is gone now.
expect_mps_started_and_stopped() {
    local dir
    dir=$(awk '$1 == "start" { print $2 }' "$FAKE_MPS_LOG")
    [ "$(grep -c '^start ' "$FAKE_MPS_LOG")" -eq 1 ] || fail "expected one 'nvidia-cuda-mps-control -d'; log: $(cat "$FAKE_MPS_LOG")"
    grep -qx "start $dir $dir" "$FAKE_MPS_LOG" || fail "pipe and log folders differ: $(cat "$FAKE_MPS_LOG")"
    case $dir in /tmp/*) ;; *) fail "the MPS folder '$dir' is not under /tmp" ;; esac
    [ "$(grep -c '^quit ' "$FAKE_MPS_LOG")" -eq 1 ] || fail "expected one 'quit'; log: $(cat "$FAKE_MPS_LOG")"
    grep -qx "quit $dir" "$FAKE_MPS_LOG" || fail "quit went to another folder: $(cat "$FAKE_MPS_LOG")"
    [ ! -e "$dir" ] || fail "the MPS folder $dir was not removed"
    MPS_DIR=$dir
}

expect_no_mps() {
    [ ! -s "$FAKE_MPS_LOG" ] || fail "nvidia-cuda-mps-control ran: $(cat "$FAKE_MPS_LOG")"
}

# rank R recorded "pipe=P log=L dev=D"
expect_rank_mps() {
    local f=$DIONRUN_PROBE_DIR/rank$1.mps
    [ -f "$f" ] || fail "rank $1 wrote no $f"
    grep -qx -- "$2" "$f" || fail "rank $1 saw '$(cat "$f")', expected '$2'"
}

case $CASE in
env)
    n=$1
    run -n "$n" "$PROBE" env
    expect_rc 0
    [ "$(count 'rank*.ready')" -eq "$n" ] || fail "only $(count 'rank*.ready') of $n ranks formed the comm"
    expect_no_err "nvidia-cuda-mps-control"
    expect_no_err "dionrun:" # dionrun itself is silent on success (ranks may log)
    expect_no_ranks_left
    ;;
fail)
    run -n 4 "$PROBE" fail 2 3
    expect_rc 3
    expect_err "dionrun: rank 2 (pid $(rank_pid 2)) exited with code 3; stopping the other 3 ranks"
    expect_no_ranks_left
    run -n 1 "$PROBE" fail 0 5
    expect_rc 5
    expect_err "dionrun: rank 0 (pid $(rank_pid 0)) exited with code 5"
    expect_no_err "stopping"
    ;;
stubborn)
    # The other ranks ignore SIGTERM: dionrun must SIGKILL them after its grace period.
    run -n 3 "$PROBE" stubborn 0 7
    expect_rc 7
    expect_err "dionrun: rank 0 (pid $(rank_pid 0)) exited with code 7; stopping the other 2 ranks"
    expect_err "SIGKILL"
    expect_no_ranks_left
    ;;
grace)
    # --grace sets the time between SIGTERM and SIGKILL; a bad value is a usage error.
    run -n 3 --grace 0.5 "$PROBE" stubborn 0 7
    expect_rc 7
    expect_err "dionrun: 2 ranks still running 0.5 s after SIGTERM; sending SIGKILL"
    expect_no_ranks_left
    run -n 2 --grace=0 "$PROBE" env
    expect_rc 2
    expect_err "--grace wants a number of seconds greater than 0, not '0'"
    run -n 2 --hosts --mps "$PROBE" env
    expect_rc 2
    expect_err "--hosts and --mps exclude each other"
    ;;
signal)
    run -n 3 "$PROBE" signal 1 9
    expect_rc 137
    expect_err "dionrun: rank 1 (pid $(rank_pid 1)) was killed by signal 9 (SIGKILL); stopping the other 2 ranks"
    expect_no_ranks_left
    usr1=$(kill -l USR1)
    run -n 2 "$PROBE" signal 0 "$usr1"
    expect_rc $((128 + usr1))
    expect_err "dionrun: rank 0 (pid $(rank_pid 0)) was killed by signal $usr1 (SIGUSR1); stopping the other 1 rank"
    expect_no_ranks_left
    ;;
timeout)
    run --timeout 2 -n 2 "$PROBE" sleep
    expect_rc 124
    expect_err "dionrun: timed out after 2 s; stopping 2 ranks"
    expect_no_ranks_left
    run --timeout=0.5 -n 1 "$PROBE" sleep
    expect_rc 124
    expect_err "dionrun: timed out after 0.5 s; stopping 1 rank"
    expect_no_ranks_left
    ;;
sigterm)
    run_and_signal 3 TERM "$PROBE" sleep
    expect_rc 143
    expect_err "SIGTERM"
    expect_no_ranks_left
    ;;
sigint)
    # A background job of a script ignores SIGINT, and so do the ranks it starts: dionrun still takes the
    # signal, passes it on, and SIGKILLs the ranks when they do not end.
    run_and_signal 2 INT "$PROBE" sleep
    expect_rc 130
    expect_err "SIGINT"
    expect_no_ranks_left
    ;;
notfound)
    run -n 2 /nonexistent/dionrun-no-such-program arg
    expect_rc 127
    expect_err "'/nonexistent/dionrun-no-such-program'"
    run -n 3 dionrun-no-such-program-in-path
    expect_rc 127
    expect_err "dionrun-no-such-program-in-path"
    ;;
usage)
    run
    [ "$rc" -ne 0 ] || fail "no arguments: exit status 0"
    expect_err "missing -n"
    run "$PROBE" env
    [ "$rc" -ne 0 ] || fail "no -n: exit status 0"
    expect_err "missing -n"
    run -n 0 "$PROBE" env
    [ "$rc" -ne 0 ] || fail "-n 0: exit status 0"
    expect_err "-n wants a number of ranks"
    run -n two "$PROBE" env
    [ "$rc" -ne 0 ] || fail "-n two: exit status 0"
    expect_err "'two'"
    run -n 2
    [ "$rc" -ne 0 ] || fail "no program: exit status 0"
    expect_err "no program to run"
    run -n 2 --
    [ "$rc" -ne 0 ] || fail "no program after --: exit status 0"
    expect_err "no program to run"
    run -n 2 --bogus "$PROBE" env
    [ "$rc" -ne 0 ] || fail "--bogus: exit status 0"
    expect_err "unknown option '--bogus'"
    run --timeout 0 -n 2 "$PROBE" env
    [ "$rc" -ne 0 ] || fail "--timeout 0: exit status 0"
    expect_err "--timeout wants"
    "$DIONRUN" --help >"$tmp/out" 2>"$ERR"
    rc=$?
    expect_rc 0
    grep -q "usage: dionrun -n N" "$tmp/out" || fail "--help printed no usage"
    # Options end at the program: its own -n and --help are its arguments.
    run -n2 -- "$PROBE" env -n 5 --help
    expect_rc 0
    ;;
mps_missing)
    if [ -e /tmp/nvidia-mps/control ]; then
        echo "an MPS daemon runs on this machine: dionrun would use it; skipped"
        exit 77
    fi
    # dionrun and the probe are given by path, so an empty PATH only hides nvidia-cuda-mps-control.
    mkdir -p "$DIONRUN_PROBE_DIR"
    PATH=/nonexistent "$DIONRUN" --mps -n 2 "$PROBE" env 2>"$ERR"
    rc=$?
    expect_rc 0
    expect_err "warning: nvidia-cuda-mps-control not found"
    expect_no_ranks_left
    ;;
mps_forced)
    make_fake_mps
    run --mps -n 2 "$PROBE" mps
    expect_rc 0
    expect_mps_started_and_stopped
    expect_rank_mps 0 "pipe=$MPS_DIR log=$MPS_DIR dev=-"
    expect_rank_mps 1 "pipe=$MPS_DIR log=$MPS_DIR dev=-"
    ;;
mps_auto)
    # More ranks than GPUs: MPS starts by itself, and ranks share device 0.
    make_fake_mps
    CUDA_VISIBLE_DEVICES=0 run -n 2 "$PROBE" mps
    expect_rc 0
    expect_mps_started_and_stopped
    expect_rank_mps 0 "pipe=$MPS_DIR log=$MPS_DIR dev=0"
    expect_rank_mps 1 "pipe=$MPS_DIR log=$MPS_DIR dev=0"
    # One GPU per rank: no MPS; ranks get devices round robin.
    : >"$FAKE_MPS_LOG"
    CUDA_VISIBLE_DEVICES=0,1 run -n 2 "$PROBE" mps
    expect_rc 0
    expect_no_mps
    expect_rank_mps 0 "pipe=- log=- dev=0"
    expect_rank_mps 1 "pipe=- log=- dev=1"
    CUDA_VISIBLE_DEVICES=GPU-a,GPU-b run -n 3 "$PROBE" mps
    expect_rc 0
    expect_mps_started_and_stopped
    expect_rank_mps 2 "pipe=$MPS_DIR log=$MPS_DIR dev=0"
    # No GPUs: nothing about MPS, no DION_DEVICE.
    for cvd in -1 NoDevFiles ""; do
        : >"$FAKE_MPS_LOG"
        CUDA_VISIBLE_DEVICES=$cvd run -n 2 "$PROBE" mps
        expect_rc 0
        expect_no_mps
        expect_rank_mps 1 "pipe=- log=- dev=-"
    done
    ;;
mps_user)
    # The user's own daemon (CUDA_MPS_PIPE_DIRECTORY set): dionrun starts nothing.
    make_fake_mps
    mkdir "$tmp/user-mps"
    CUDA_MPS_PIPE_DIRECTORY=$tmp/user-mps run --mps -n 2 "$PROBE" mps
    expect_rc 0
    expect_no_mps
    expect_rank_mps 0 "pipe=$tmp/user-mps log=- dev=-"
    ;;
mps_fail)
    # A failing rank still stops the daemon dionrun started.
    make_fake_mps
    run --mps -n 2 "$PROBE" fail 1 4
    expect_rc 4
    expect_err "dionrun: rank 1 (pid $(rank_pid 1)) exited with code 4"
    expect_mps_started_and_stopped
    expect_no_ranks_left
    ;;
mps_sigterm)
    make_fake_mps
    run_and_signal 2 TERM --mps "$PROBE" sleep
    expect_rc 143
    expect_mps_started_and_stopped
    expect_no_ranks_left
    ;;
mps_broken)
    # The daemon does not start: a warning, the job runs without MPS, the folder is removed.
    make_fake_mps
    FAKE_MPS_FAIL=1 run --mps -n 2 "$PROBE" mps
    expect_rc 0
    expect_err "warning:"
    expect_err "running without MPS"
    dir=$(awk '$1 == "start" { print $2 }' "$FAKE_MPS_LOG")
    [ -n "$dir" ] || fail "nvidia-cuda-mps-control -d did not run"
    [ ! -e "$dir" ] || fail "the MPS folder $dir was not removed"
    grep -q '^quit' "$FAKE_MPS_LOG" && fail "quit sent to a daemon that never started"
    expect_rank_mps 0 "pipe=- log=- dev=-"
    ;;
*)
    echo "unknown case '$CASE'" >&2
    exit 2
    ;;
esac
echo "PASS ($CASE)"
exit 0
