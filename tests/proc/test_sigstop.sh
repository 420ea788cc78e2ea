#!/usr/bin/env bash
# test_sigstop.sh - a rank that is stopped (SIGSTOP) in the middle of a stream of allreduces:
# it neither dies nor closes anything, so only the timeout can save its peers. Every other rank
# must return CHORUS_ERR_TIMEOUT or CHORUS_ERR_REMOTE within CHORUS_TIMEOUT_SEC + 2 s, naming
# the operation, and exit; then the stopped rank is killed (by PID) and nothing is left.
# Usage: test_sigstop.sh CHORUS_RUN ALLREDUCE_LOOP [--host-per-rank]
set -u
RUN=$1
LOOP=$2
HOST_PER_RANK=${3:-}
TIMEOUT_SEC=3
TMP=$(mktemp -d)
RUN_PID=
cleanup() {
  [ -n "$RUN_PID" ] && kill -KILL "$RUN_PID" 2>/dev/null
  for f in "$TMP"/rank.*.pid; do [ -e "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -20 "$TMP/out" "$TMP/err"; exit 1; }

if [ "$HOST_PER_RANK" = --host-per-rank ]; then
  cmd=(sh -c 'CHORUS_HOST_ID=host$CHORUS_RANK exec "$0" "$@"' "$LOOP" 60 262144)
else
  cmd=("$LOOP" 60 262144)
fi
CHORUS_TIMEOUT_SEC=$TIMEOUT_SEC CHORUS_TEST_PIDDIR=$TMP "$RUN" --prefix --term-delay 10 -n 4 "${cmd[@]}" \
  >"$TMP/out" 2>"$TMP/err" &
RUN_PID=$!
for _ in $(seq 200); do [ -e "$TMP/rank.3.pid" ] && break; sleep 0.1; done
[ -e "$TMP/rank.3.pid" ] || fail "the job never got going"
sleep 0.5
victim=$(cat "$TMP/rank.2.pid")
kill -STOP "$victim"
stopped_at=$SECONDS
# Survivors report within the timeout (+2 s); chorus-run then sees them exit non-zero.
for _ in $(seq $(((TIMEOUT_SEC + 2) * 10))); do
  [ "$(grep -c 'CHORUS_ERR_' "$TMP/out" "$TMP/err" | awk -F: '{s += $2} END {print s}')" -ge 3 ] && break
  sleep 0.1
done
took=$((SECONDS - stopped_at))
kill -KILL "$victim" 2>/dev/null
wait "$RUN_PID"
rc=$?
RUN_PID=
for r in 0 1 3; do
  grep -Eq "^\[$r\].*CHORUS_ERR_(TIMEOUT|REMOTE)" "$TMP/out" "$TMP/err" ||
    grep -hEq "\[$r\].*CHORUS_ERR_(TIMEOUT|REMOTE)" "$TMP/out" "$TMP/err" || fail "rank $r reported no error"
done
((took <= TIMEOUT_SEC + 2)) || fail "survivors took $took s to report (timeout $TIMEOUT_SEC s)"
[ "$rc" -ne 0 ] || fail "chorus-run exited 0"
grep -hq "allreduce #" "$TMP/out" "$TMP/err" || fail "no error names the operation"
for f in "$TMP"/rank.*.pid; do
  kill -0 "$(cat "$f")" 2>/dev/null && fail "a rank process survived"
done
echo "ok: with rank 2 stopped, ranks 0, 1, 3 reported within $took s (timeout $TIMEOUT_SEC s)"
grep -h "CHORUS_ERR" "$TMP/out" "$TMP/err" | head -3
