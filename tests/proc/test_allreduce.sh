#!/bin/bash
# test_allreduce.sh - chorus-run with the real library (chorus-test-allreduce-loop).
#   test_allreduce.sh CHORUS_RUN PROG ok N [--host-per-rank] [VAR=VAL...]
#     N ranks loop 16 MiB allreduces for 3 s: exit 0, every rank checked every result.
#   test_allreduce.sh CHORUS_RUN PROG kill RANK [--host-per-rank] [VAR=VAL...]
#     4 ranks loop for 60 s; 2 s after all have verified a first allreduce, rank RANK gets
#     SIGKILL. The job must end within 10 s; chorus-run exits non-zero naming that rank and
#     signal 9; every surviving rank reports an error status (it never hangs) and exits by
#     itself; no process of the job is left.
# --host-per-rank gives each rank its own CHORUS_HOST_ID, so that ranks talk as if on separate
# hosts (TCP). VAR=VAL pairs are passed with -x (e.g. CHORUS_NSOCKS_PER_PEER=4).
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_allreduce.sh CHORUS_RUN PROG ok|kill N|RANK [--host-per-rank] [VAR=VAL...]}
PROG=${2:?missing PROG}
MODE=${3:?missing mode}
ARG=${4:?missing N or RANK}
shift 4
HOST_PER_RANK=0
XOPTS=(-x CHORUS_TIMEOUT_SEC=30)
for a in "$@"; do
  case $a in
    --host-per-rank) HOST_PER_RANK=1 ;;
    *=*) XOPTS+=(-x "$a") ;;
    *) fail "unknown argument '$a'" ;;
  esac
done
export CHORUS_TEST_PIDDIR="$TMP/pids"
mkdir -p "$CHORUS_TEST_PIDDIR"

# rank_cmd SECONDS: sets cmd to what each rank runs; with --host-per-rank, a shell that sets the
# rank's host id and then execs the program (same PID).
rank_cmd() {
  if [ $HOST_PER_RANK = 1 ]; then
    cmd=(sh -c 'CHORUS_HOST_ID=host$CHORUS_RANK exec "$0" "$@"' "$PROG" "$1")
  else
    cmd=("$PROG" "$1")
  fi
}

# Lines on stderr (with --prefix) of one rank.
rank_lines() { grep "^\[$1\] " "$TMP/err" || true; }

run_ok() {
  local n=$1 r cmd
  rank_cmd 3
  timeout -s KILL 90 "$RUN" --prefix --timeout 60 -n "$n" "${XOPTS[@]}" "${cmd[@]}" \
    >"$TMP/out" 2>"$TMP/err"
  local code=$?
  [ $code = 0 ] || fail "exit $code; stderr: $(tail -n 20 "$TMP/err"); stdout: $(tail -n 5 "$TMP/out")"
  for ((r = 0; r < n; r++)); do
    grep -qE "^\[$r\] rank $r: done, [0-9]+ iterations of 4194304 floats, all results correct$" \
      "$TMP/out" || fail "rank $r did not finish: $(grep "^\[$r\]" "$TMP/out" | tail -n 3)"
  done
  [ ! -s "$TMP/err" ] || fail "unexpected stderr: $(head -n 20 "$TMP/err")"
  ok "$n ranks, 3 s of 16 MiB allreduces ${XOPTS[*]}: all verified ($(grep -h 'rank 0: done' "$TMP/out"))"
}

run_kill() {
  local victim=$1 n=4 r pids files=() cmd
  rank_cmd 60
  # The default --term-delay (2 s) gives the survivors time to report the error themselves
  # before chorus-run would SIGTERM them; reporting is what this test checks.
  "$RUN" --prefix --grace 2 --timeout 80 -n $n "${XOPTS[@]}" "${cmd[@]}" \
    >"$TMP/out" 2>"$TMP/err" &
  local run_pid=$!
  CLEANUP_PIDS+=($run_pid)
  for ((r = 0; r < n; r++)); do files+=("$CHORUS_TEST_PIDDIR/rank.$r.pid"); done
  if ! wait_files 40 "${files[@]}"; then
    fail "ranks did not complete a first allreduce within 40 s: $(tail -n 20 "$TMP/err")"
  fi
  pids=$(read_pids "$CHORUS_TEST_PIDDIR" $n)
  CLEANUP_PIDS+=($pids)
  sleep 2
  local victim_pid
  victim_pid=$(cat "$CHORUS_TEST_PIDDIR/rank.$victim.pid")
  pid_alive "$victim_pid" || fail "rank $victim (pid $victim_pid) ended before the kill: $(tail -n 20 "$TMP/err")"
  local t0
  t0=$(now_us)
  kill -KILL "$victim_pid"
  local limit_us=$((t0 + 10000000))
  while pid_alive $run_pid && [ "$(now_us)" -lt $limit_us ]; do sleep 0.05; done
  local ms=$((($(now_us) - t0) / 1000))
  if pid_alive $run_pid; then
    fail "job still running 10 s after the kill; stderr: $(tail -n 20 "$TMP/err")"
  fi
  wait $run_pid
  local code=$?
  [ $code != 0 ] || fail "chorus-run exited 0 after a rank was killed"
  [ $code = 137 ] || fail "chorus-run exited $code, expected 137 (the killed rank's 128+9)"
  grep -q "^chorus-run: rank $victim (pid $victim_pid) killed by signal 9 (Killed)$" "$TMP/err" ||
    fail "stderr does not name rank $victim and signal 9: $(grep '^chorus-run' "$TMP/err")"
  for ((r = 0; r < n; r++)); do
    [ $r = "$victim" ] && continue
    rank_lines $r | grep -qE "^\[$r\] rank $r: [a-z_/]+ \(iteration [0-9]+\) failed: CHORUS_ERR_[A-Z_]+: " ||
      fail "surviving rank $r printed no error status; its lines: $(rank_lines $r | tail -n 5)"
    rank_lines $r | grep -q "^\[$r\] rank $r: exiting with status 1$" ||
      fail "surviving rank $r did not exit by itself (hung in the collective or in destroy)"
  done
  wait_gone 2 $pids || fail "processes of the job survived"
  grep -q "still running" "$TMP/err" && fail "ranks had to be killed: $(grep '^chorus-run' "$TMP/err")"
  ok "rank $victim SIGKILLed mid-allreduce ${XOPTS[*]}: job ended in $ms ms, exit $code; survivors reported:"
  for ((r = 0; r < n; r++)); do [ $r = "$victim" ] || rank_lines $r | grep "^\[$r\] rank $r: .*failed:" | sed 's/^/#   /'; done
}

case $MODE in
  ok) run_ok "$ARG" ;;
  kill) run_kill "$ARG" ;;
  *) fail "unknown mode '$MODE'" ;;
esac
done_testing
