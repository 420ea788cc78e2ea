#!/bin/bash
# test_failure.sh CHORUS_RUN - a failing rank ends the job: chorus-run names the rank, its PID
# and its exit status or signal, ends the other ranks (SIGTERM, then SIGKILL after --grace for
# ranks that ignore SIGTERM; later with --term-delay), exits with the failed rank's status
# (or 128+signal), leaves no process behind, and reaps ranks as they end (no zombies).
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_failure.sh CHORUS_RUN}

# The rank program: writes its PID, then rank $FAIL_RANK runs $FAIL_CMD after a short sleep,
# the others sleep 100 s under a marker name (optionally ignoring SIGTERM).
cat >"$TMP/rank.sh" <<'EOF'
#!/bin/bash
# Ignore SIGTERM before announcing the PID: the failing rank acts once every PID is written.
[ "${IGNORE_TERM:-0}" = 1 ] && trap '' TERM
echo $$ >"$PIDDIR/rank.$CHORUS_RANK.pid.tmp" && mv "$PIDDIR/rank.$CHORUS_RANK.pid.tmp" "$PIDDIR/rank.$CHORUS_RANK.pid"
if [ "$CHORUS_RANK" = "$FAIL_RANK" ]; then
  # Wait until every rank is up, so that the others are surely killed and not just unborn.
  for ((i = 0; i < 200; i++)); do
    [ "$(ls "$PIDDIR" | grep -c 'pid$')" = "$CHORUS_SIZE" ] && break
    sleep 0.05
  done
  eval "$FAIL_CMD"
fi
exec -a "$MARKER" sleep 100
EOF
chmod +x "$TMP/rank.sh"
export MARKER

# run_job NAME N FAIL_RANK FAIL_CMD [chorus-run options...]: runs the job in the foreground
# (bounded by `timeout`), sets EXIT_CODE, ELAPSED_MS, PIDS and ERR (chorus-run's stderr).
run_job() {
  local name=$1 n=$2 fail_rank=$3 fail_cmd=$4 t0
  shift 4
  PIDDIR="$TMP/$name"
  mkdir -p "$PIDDIR"
  t0=$(now_us)
  PIDDIR="$PIDDIR" FAIL_RANK=$fail_rank FAIL_CMD=$fail_cmd \
    timeout -s KILL 30 "$RUN" "$@" -n "$n" "$TMP/rank.sh" 2>"$TMP/$name.err"
  EXIT_CODE=$?
  ELAPSED_MS=$((($(now_us) - t0) / 1000))
  ERR=$(cat "$TMP/$name.err")
  PIDS=$(read_pids "$PIDDIR" "$n")
  CLEANUP_PIDS+=($PIDS)
}

expect_line() {
  grep -qE "$1" <<<"$ERR" || fail "$2: stderr lacks /$1/: '$ERR'"
}

# A rank exits 3: exit status 3, one line naming rank 1 and its PID; the sleepers are gone.
run_job exit3 4 1 'exit 3' --term-delay 0
[ $EXIT_CODE = 3 ] || fail "exit3: chorus-run exited $EXIT_CODE, expected 3"
pid1=$(cat "$TMP/exit3/rank.1.pid")
expect_line "^chorus-run: rank 1 \\(pid $pid1\\) exited with status 3$" exit3
[ "$(grep -c '^chorus-run:' <<<"$ERR")" = 1 ] || fail "exit3: expected one line, got '$ERR'"
((ELAPSED_MS < 5000)) || fail "exit3: took $ELAPSED_MS ms"
wait_gone 1 $PIDS || fail "exit3: ranks left behind"
ok "rank exiting 3: status 3, named with its PID, others gone after $ELAPSED_MS ms"

# A rank killed by SIGKILL: 128+9, named with the signal.
run_job kill9 3 2 'kill -KILL $$' --term-delay 0
[ $EXIT_CODE = 137 ] || fail "kill9: chorus-run exited $EXIT_CODE, expected 137"
pid2=$(cat "$TMP/kill9/rank.2.pid")
expect_line "^chorus-run: rank 2 \\(pid $pid2\\) killed by signal 9 \\(Killed\\)$" kill9
((ELAPSED_MS < 5000)) || fail "kill9: took $ELAPSED_MS ms"
wait_gone 1 $PIDS || fail "kill9: ranks left behind"
ok "rank killed by SIGKILL: 137, named with signal 9, others gone after $ELAPSED_MS ms"

# Rank 0 dies of SIGSEGV (another signal, and the first rank).
run_job segv 2 0 'kill -SEGV $$'
[ $EXIT_CODE = 139 ] || fail "segv: chorus-run exited $EXIT_CODE, expected 139"
expect_line "^chorus-run: rank 0 \\(pid [0-9]+\\) killed by signal 11 \\(Segmentation fault\\)$" segv
wait_gone 1 $PIDS || fail "segv: ranks left behind"
ok "rank killed by SIGSEGV: 139"

# The others ignore SIGTERM: SIGKILL after the grace period (1 s), with a line saying so.
IGNORE_TERM=1 run_job grace 3 1 'exit 4' --grace 1 --term-delay 0
[ $EXIT_CODE = 4 ] || fail "grace: chorus-run exited $EXIT_CODE, expected 4"
expect_line '^chorus-run: 2 ranks still running 1 s after being asked to stop; sending SIGKILL$' grace
((ELAPSED_MS >= 1000 && ELAPSED_MS < 4000)) || fail "grace: took $ELAPSED_MS ms, expected 1-4 s"
wait_gone 1 $PIDS || fail "grace: ranks left behind"
ok "ranks ignoring SIGTERM get SIGKILL after --grace 1 ($ELAPSED_MS ms)"

# --term-delay: the other ranks get time to end by themselves; here they do not, so SIGTERM
# comes after the delay (not before).
run_job delay 3 2 'exit 6' --term-delay 1
[ $EXIT_CODE = 6 ] || fail "delay: chorus-run exited $EXIT_CODE, expected 6"
((ELAPSED_MS >= 1000 && ELAPSED_MS < 4000)) || fail "delay: took $ELAPSED_MS ms, expected 1-4 s"
wait_gone 1 $PIDS || fail "delay: ranks left behind"
ok "--term-delay 1 holds SIGTERM back for 1 s ($ELAPSED_MS ms)"

# All ranks exit 0 (at different times): exit 0, nothing printed.
timeout 20 "$RUN" -n 4 sh -c 'sleep 0.$CHORUS_RANK' 2>"$TMP/ok.err" || fail "success: exit $?"
[ ! -s "$TMP/ok.err" ] || fail "success: stderr '$(cat "$TMP/ok.err")'"
# A rank that exits 0 early does not end the job: the others run to their end.
got=$(timeout 20 "$RUN" -n 2 sh -c '[ $CHORUS_RANK = 0 ] && exit 0; sleep 0.5; echo late') ||
  fail "early exit 0: exit $?"
[ "$got" = late ] || fail "early exit 0 ended the job: '$got'"
# With one rank the job's status is the rank's status.
timeout 10 "$RUN" -n 1 sh -c 'exit 7' 2>/dev/null
[ $? = 7 ] || fail "n=1 exit 7 not propagated"
ok "exit 0 only when every rank exits 0; an early exit 0 ends nothing"

# No zombies: while rank 1 sleeps, rank 0 has ended and must already be reaped.
"$RUN" -n 2 bash -c 'echo $$ >"'"$TMP"'/z.$CHORUS_RANK"; [ $CHORUS_RANK = 1 ] && exec -a "$MARKER" sleep 2; exit 0' &
run_pid=$!
CLEANUP_PIDS+=($run_pid)
wait_files 10 "$TMP/z.0" "$TMP/z.1" || fail "zombie check: ranks did not start"
sleep 0.7
children=$(cat /proc/$run_pid/task/*/children 2>/dev/null)
[ "$children" ] || fail "zombie check: chorus-run not found (pid $run_pid)"
for c in $children; do
  state=$(sed 's/.*) //' "/proc/$c/stat" | cut -d' ' -f1)
  [ "$state" != Z ] || fail "rank $c is a zombie while the job runs"
done
grep -qw "$(cat "$TMP/z.0")" <<<"$children" && fail "ended rank 0 still a child of chorus-run"
wait_exit 10 $run_pid
[ $EXIT_CODE = 0 ] || fail "zombie check job exited $EXIT_CODE"
ok "ended ranks are reaped at once (children while running: $children)"

# No busy waiting: a 2-second job costs chorus-run (and its sleeping ranks) little CPU.
TIMEFORMAT='%U %S'
cpu=$({ time timeout 20 "$RUN" --prefix -n 4 sleep 2 >/dev/null; } 2>&1)
cpu_ms=$(awk '{printf "%d", ($1 + $2) * 1000}' <<<"$cpu")
((cpu_ms < 300)) || fail "a 2 s job of sleeping ranks used $cpu_ms ms of CPU"
ok "no busy waiting: $cpu_ms ms CPU for a 2 s job"

done_testing
