#!/usr/bin/env bash
# The per-peer backend choice: logged for every pair at DION_LOG=info, forced by DION_TRANSPORT, and a name
# that no backend of this build has is refused on every rank with a sentence naming the variable.
# usage: transport_select.sh DIONRUN CONFORMANCE_CPU
set -u
dionrun=$1 conf=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; sed 's/^/  | /' "$out" | tail -40; exit 1; }

# 1. forced p2p: the argument-check part of the suite passes and each of the 3 ranks logs its choice for each of the 2 others
DION_CPU_MODE=1 DION_CHECK=1 DION_TRANSPORT=p2p DION_LOG=info "$dionrun" -n 3 --timeout 120 "$conf" check >"$out" 2>&1 ||
  fail "the conformance suite failed with DION_TRANSPORT=p2p"
for a in 0 1 2; do
  for b in 0 1 2; do
    [ "$a" = "$b" ] && continue
    grep -q "rank $a reaches rank $b (host .*) through p2p" "$out" || fail "no log line for rank $a -> rank $b"
  done
done
n=$(grep -c "reaches rank .* through" "$out")
[ "$n" -eq 6 ] || fail "expected 6 choice lines (one per ordered pair, logged once per comm), saw $n"

# 2. a backend this build does not have: every rank fails, nobody hangs, the sentence names the variable
DION_CPU_MODE=1 DION_TRANSPORT=gdaki "$dionrun" -n 2 --timeout 60 "$conf" all >"$out" 2>&1 &&
  fail "DION_TRANSPORT=gdaki was accepted by a build without gdaki"
grep -q "DION_TRANSPORT" "$out" || fail "the refusal does not name DION_TRANSPORT"
echo "PASS: choice logged for 6 pairs under DION_TRANSPORT=p2p; DION_TRANSPORT=gdaki refused"
