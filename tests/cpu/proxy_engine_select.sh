#!/usr/bin/env bash
# The proxy's engine choice (transports/proxy/proxy_ops.c), over the fake libibverbs (no RDMA device needed):
#  1. DION_TRANSPORT=proxy with verbs on every rank: the comm uses proxy/verbs, and the per-peer log says so;
#  2. one rank cannot load libibverbs: every rank falls back to proxy/ofi (tcp) together;
#  3. the same with DION_TRANSPORT=proxy/verbs: refused on every rank, naming the library that is missing;
#  4. DION_TRANSPORT=proxy/nothing: refused with a sentence listing the engines;
#  5. verbs opens everywhere but its QPs cannot connect: proxy falls back to ofi; proxy/verbs fails naming why.
# usage: proxy_engine_select.sh DIONRUN CONFORMANCE_CPU FAKE_IBVERBS
set -u
dionrun=$1 conf=$2 fake=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; sed 's/^/  | /' "$out" | tail -40; exit 1; }
export DION_CPU_MODE=1 DION_CHECK=1 DION_OFI_PROVIDER=tcp
# rank 1 gets a library path that does not exist (dionrun gives each rank DION_RANK)
one_without='if [ "$DION_RANK" = 1 ]; then export DION_IB_LIBRARY=/nonexistent/libibverbs.so.1; fi; exec "$0" "$@"'

# 1
DION_TRANSPORT=proxy DION_IB_LIBRARY=$fake DION_LOG=info "$dionrun" -n 3 --timeout 120 "$conf" check >"$out" 2>&1 ||
  fail "the suite failed over proxy with verbs on every rank"
for a in 0 1 2; do
  for b in 0 1 2; do
    [ "$a" = "$b" ] && continue
    grep -q "rank $a reaches rank $b (host .*) through proxy/verbs" "$out" || fail "no proxy/verbs line for rank $a -> rank $b"
  done
done
grep -q "proxy backend: verbs engine" "$out" || fail "no log line naming the verbs engine"

# 2
DION_TRANSPORT=proxy DION_IB_LIBRARY=$fake DION_LOG=info "$dionrun" -n 2 --timeout 120 sh -c "$one_without" "$conf" check \
  >"$out" 2>&1 || fail "the suite failed when rank 1 lacks libibverbs (should fall back to ofi)"
grep -q "rank 0 reaches rank 1 (host .*) through proxy/ofi" "$out" || fail "rank 0 did not fall back to proxy/ofi"
grep -q "rank 1 reaches rank 0 (host .*) through proxy/ofi" "$out" || fail "rank 1 did not use proxy/ofi"
grep -q "through proxy/verbs" "$out" && fail "a rank used proxy/verbs although rank 1 cannot"

# 3 (rank 1 stays 2 s after its failure: dionrun stops the job at the first exit, and rank 0's own failure
#    line is what is checked)
one_without_late='if [ "$DION_RANK" = 1 ]; then DION_IB_LIBRARY=/nonexistent/libibverbs.so.1 "$0" "$@"; rc=$?; sleep 2; exit $rc; fi; exec "$0" "$@"'
DION_TRANSPORT=proxy/verbs DION_IB_LIBRARY=$fake "$dionrun" -n 2 --timeout 60 sh -c "$one_without_late" "$conf" check \
  >"$out" 2>&1 && fail "DION_TRANSPORT=proxy/verbs was accepted although rank 1 cannot load libibverbs"
grep -q "/nonexistent/libibverbs.so.1 cannot be loaded" "$out" || fail "the refusal does not name the library"
grep -q "apt install libibverbs1" "$out" || fail "the refusal does not say what to install"
grep -q "FAIL rank 0 .*rank 1" "$out" || fail "rank 0's failure does not name rank 1"

# 5. every rank opens verbs but its QPs cannot connect (RTR refused): proxy falls back to ofi on every rank;
#    forced proxy/verbs fails naming the transition
FAKE_IBV_FAIL_RTR=1 DION_TRANSPORT=proxy DION_IB_LIBRARY=$fake DION_LOG=info "$dionrun" -n 2 --timeout 120 "$conf" check \
  >"$out" 2>&1 || fail "the suite failed when verbs QPs cannot connect (should fall back to ofi)"
grep -q "the verbs engine could not start on every rank (.*INIT->RTR.*); using ofi" "$out" || fail "no warning naming the failed connection"
grep -q "rank 0 reaches rank 1 (host .*) through proxy/ofi" "$out" || fail "rank 0 did not fall back to proxy/ofi"
grep -q "rank 1 reaches rank 0 (host .*) through proxy/ofi" "$out" || fail "rank 1 did not fall back to proxy/ofi"
FAKE_IBV_FAIL_RTR=1 DION_TRANSPORT=proxy/verbs DION_IB_LIBRARY=$fake "$dionrun" -n 2 --timeout 60 "$conf" check \
  >"$out" 2>&1 && fail "DION_TRANSPORT=proxy/verbs was accepted although no QP connects"
grep -q "ibv_modify_qp INIT->RTR towards rank" "$out" || fail "the refusal does not name the failed transition"

# 4
DION_TRANSPORT=proxy/nothing "$dionrun" -n 2 --timeout 60 "$conf" check >"$out" 2>&1 &&
  fail "DION_TRANSPORT=proxy/nothing was accepted"
grep -q "names no proxy engine; the engines are proxy/verbs and proxy/ofi" "$out" || fail "no sentence for proxy/nothing"
echo "PASS: proxy picks verbs when all ranks have it, else ofi on all (also when verbs cannot connect); proxy/verbs refused naming the library or the failed connection; proxy/nothing refused"
