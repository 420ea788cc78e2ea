#!/bin/bash
# test_timeout.sh CHORUS_RUN - `--timeout SEC`: a job still running after SEC seconds is ended
# (SIGTERM, then SIGKILL after --grace for ranks that ignore SIGTERM), chorus-run prints why and
# exits 124, no rank is left; a job that ends in time is not delayed and keeps its status.
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_timeout.sh CHORUS_RUN}
export MARKER

cat >"$TMP/sleeper.sh" <<'EOF2'
#!/bin/bash
# Ignore signals before announcing the PID: the test signals the job once every PID is written.
[ -n "${IGNORE_SIGS:-}" ] && trap "" $IGNORE_SIGS
echo $$ >"$PIDDIR/rank.$CHORUS_RANK.pid.tmp" && mv "$PIDDIR/rank.$CHORUS_RANK.pid.tmp" "$PIDDIR/rank.$CHORUS_RANK.pid"
exec -a "$MARKER" sleep 100
EOF2
chmod +x "$TMP/sleeper.sh"

# timed_job NAME N [options...]: sets EXIT_CODE, ELAPSED_MS, ERR, PIDS.
timed_job() {
  local name=$1 n=$2 t0
  shift 2
  export PIDDIR="$TMP/$name"
  mkdir -p "$PIDDIR"
  t0=$(now_us)
  timeout -s KILL 30 "$RUN" "$@" -n "$n" "$TMP/sleeper.sh" 2>"$TMP/$name.err"
  EXIT_CODE=$?
  ELAPSED_MS=$((($(now_us) - t0) / 1000))
  ERR=$(cat "$TMP/$name.err")
  PIDS=$(read_pids "$PIDDIR" "$n")
  CLEANUP_PIDS+=($PIDS)
}

timed_job plain 3 --timeout 1.5
[ $EXIT_CODE = 124 ] || fail "plain: exit $EXIT_CODE, expected 124"
((ELAPSED_MS >= 1500 && ELAPSED_MS < 3500)) || fail "plain: took $ELAPSED_MS ms"
[ "$ERR" = "chorus-run: timeout: job still running after 1.5 s; terminating 3 ranks" ] ||
  fail "plain: stderr '$ERR'"
wait_gone 1 $PIDS || fail "plain: ranks left behind"
ok "--timeout 1.5: exit 124 after $ELAPSED_MS ms with a message, no rank left"

IGNORE_SIGS=TERM timed_job stubborn 2 --timeout 1 --grace 1
[ $EXIT_CODE = 124 ] || fail "stubborn: exit $EXIT_CODE, expected 124"
((ELAPSED_MS >= 2000 && ELAPSED_MS < 4500)) || fail "stubborn: took $ELAPSED_MS ms"
grep -q 'sending SIGKILL' <<<"$ERR" || fail "stubborn: stderr '$ERR'"
wait_gone 1 $PIDS || fail "stubborn: ranks left behind"
ok "--timeout with ranks ignoring SIGTERM: SIGKILL after --grace ($ELAPSED_MS ms)"

t0=$(now_us)
timeout 20 "$RUN" --timeout 30 -n 2 sh -c 'exit 0' || fail "fast job: exit $?"
ms=$((($(now_us) - t0) / 1000))
((ms < 1000)) || fail "fast job under --timeout 30 took $ms ms"
timeout 20 "$RUN" --timeout 30 -n 2 sh -c 'exit $((CHORUS_RANK * 5))' 2>/dev/null
[ $? = 5 ] || fail "status not kept under --timeout"
ok "a job ending in time: not delayed ($ms ms), its status kept"

done_testing
