#!/usr/bin/env bash
# test_linkcut.sh - a host's link goes down in the middle of a stream of allreduces: no FIN,
# no RST, the peers just stop hearing from it. Every rank must return an error within
# CHORUS_TIMEOUT_SEC + 2 s of the cut (never hang), naming the operation and a peer, and exit.
# Usage: test_linkcut.sh ALLREDUCE_LOOP
set -u
LOOP=$1
. "$(dirname "$0")/netns.sh"
net_test_begin 5
TIMEOUT_SEC=4

net_create 2 || fail "cannot create the namespaces"
for r in 0 1 2 3; do
  net_start $((r % 2)) $r 4 "$NET_TMP/rank$r.out" env CHORUS_TIMEOUT_SEC=$TIMEOUT_SEC \
    CHORUS_TEST_PIDDIR="$NET_TMP" "$LOOP" 120 262144
done
for _ in $(seq 100); do [ -e "$NET_TMP/rank.3.pid" ] && break; sleep 0.1; done
[ -e "$NET_TMP/rank.3.pid" ] || fail "the job never got going"
sleep 1
net_cut 1
cut_at=$SECONDS
net_wait $((TIMEOUT_SEC + 2 + 3)) || fail "a rank still runs $((TIMEOUT_SEC + 5)) s after the cut"
took=$((SECONDS - cut_at))
((took <= TIMEOUT_SEC + 3)) || fail "ranks took $took s to give up"
for i in 0 1 2 3; do
  [ "${NET_RCS[$i]}" -ne 0 ] || fail "rank $i exited 0 after the cut"
  grep -Eq "CHORUS_ERR_(TIMEOUT|REMOTE)" "$NET_TMP/rank$i.out" || fail "rank $i printed no timeout/remote error"
  grep -Eq "allreduce #[0-9]+" "$NET_TMP/rank$i.out" || fail "rank $i's error does not name the operation"
  grep -Eq "rank [0-3]" "$NET_TMP/rank$i.out" || fail "rank $i's error names no peer"
done
echo "ok: every rank returned an error within $took s of the cut (timeout $TIMEOUT_SEC s)"
grep -h "CHORUS_ERR" "$NET_TMP"/rank*.out | head -4
