#!/bin/bash
# test_kill_cleanup.sh - a job under chorus-run in which one rank is SIGKILLed mid-allreduce
# must leave nothing behind: no process of the job, no /dev/shm entry named chorus-<pid>-* for
# any of its processes. While the job runs, it also checks that the shared segment is really in
# use (mapped by rank 0) and already unlinked (so that no name can outlive the job).
#   test_kill_cleanup.sh CHORUS_RUN RANK_PROG VICTIM [--host-per-rank]
# --host-per-rank gives every rank its own CHORUS_HOST_ID (TCP only, no segment).
set -u
RUN=${1:?usage: test_kill_cleanup.sh CHORUS_RUN RANK_PROG VICTIM [--host-per-rank]}
PROG=${2:?missing RANK_PROG}
VICTIM=${3:?missing VICTIM}
HOST_PER_RANK=0
[ "${4:-}" = --host-per-rank ] && HOST_PER_RANK=1
NRANKS=4
TMP=$(mktemp -d /tmp/chorus-leak-test.XXXXXX)
MARKER="chorus-leak-test-$$-$RANDOM" # every rank's argv[0]: found again by its command line
RUN_PID=

fail() {
  echo "FAIL (kill rank $VICTIM): $*" >&2
  exit 1
}

now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }

# Alive = exists and is not a zombie.
pid_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# PIDs of live processes whose command line carries our marker.
marked_pids() {
  local d
  for d in /proc/[0-9]*; do
    tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -q -- "$MARKER" && pid_alive "${d#/proc/}" && echo "${d#/proc/}"
  done
}

shm_names_of() { # shm_names_of PID...: /dev/shm entries those processes named
  local p
  for p in "$@"; do ls /dev/shm 2>/dev/null | grep "^chorus-$p-" ; done
}

cleanup() {
  local p
  [ -n "$RUN_PID" ] && pid_alive "$RUN_PID" && kill -KILL "$RUN_PID" 2>/dev/null
  for p in $(marked_pids); do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

export CHORUS_TEST_PIDDIR="$TMP/pids"
mkdir -p "$CHORUS_TEST_PIDDIR"
if [ $HOST_PER_RANK = 1 ]; then
  cmd=(bash -c 'CHORUS_HOST_ID=host$CHORUS_RANK exec -a "$0" "$@"' "$MARKER" "$PROG" 60)
else
  cmd=(bash -c 'exec -a "$0" "$@"' "$MARKER" "$PROG" 60)
fi
"$RUN" --timeout 90 --grace 2 -n $NRANKS -x CHORUS_TIMEOUT_SEC=30 "${cmd[@]}" >"$TMP/out" 2>"$TMP/err" &
RUN_PID=$!

# Wait (at most 40 s) until every rank has verified a first allreduce.
deadline=$(( $(now_ms) + 40000 ))
for ((r = 0; r < NRANKS; r++)); do
  while [ ! -s "$CHORUS_TEST_PIDDIR/rank.$r.pid" ]; do
    [ "$(now_ms)" -lt $deadline ] || fail "ranks did not complete a first allreduce in 40 s: $(tail -n 5 "$TMP/err")"
    pid_alive $RUN_PID || fail "job ended early: $(tail -n 5 "$TMP/err")"
    sleep 0.05
  done
done
pids=()
for ((r = 0; r < NRANKS; r++)); do pids+=("$(cat "$CHORUS_TEST_PIDDIR/rank.$r.pid")"); done

# The segment is in use and its name is already gone.
if [ $HOST_PER_RANK = 0 ]; then
  # A memfd ("memfd:chorus-shm") today; a /dev/shm name in earlier versions.
  grep -qE "memfd:chorus-shm|/dev/shm/chorus-${pids[0]}-" "/proc/${pids[0]}/maps" ||
    fail "rank 0 maps no shared segment: the test would not test shared memory"
fi
left=$(shm_names_of "${pids[@]}")
[ -z "$left" ] || fail "segment names exist in /dev/shm while the job runs: $left"

sleep 0.5 # well inside the loop of allreduces
t0=$(now_ms)
kill -KILL "${pids[$VICTIM]}"
while pid_alive $RUN_PID && [ $(( $(now_ms) - t0 )) -lt 20000 ]; do sleep 0.05; done
pid_alive $RUN_PID && fail "job still running 20 s after the kill: $(tail -n 5 "$TMP/err")"
wait $RUN_PID
code=$?
[ $code != 0 ] || fail "chorus-run exited 0 after rank $VICTIM was killed"
ended_ms=$(( $(now_ms) - t0 ))

# Nothing of the job survives it (allow a second for orphans to be reaped).
deadline=$(( $(now_ms) + 1000 ))
while [ -n "$(marked_pids)" ] && [ "$(now_ms)" -lt $deadline ]; do sleep 0.05; done
[ -z "$(marked_pids)" ] || fail "processes of the job survived: $(marked_pids)"
left=$(shm_names_of "${pids[@]}" "$RUN_PID")
[ -z "$left" ] || fail "/dev/shm entries left by the job: $left"
survivors=$(grep -c "allreduce [0-9]* failed: CHORUS_ERR_" "$TMP/err")
echo "ok - rank $VICTIM of $NRANKS SIGKILLed mid-allreduce$([ $HOST_PER_RANK = 1 ] && echo ' (tcp)'):" \
  "job ended in $ended_ms ms (exit $code), $survivors ranks reported an error, no process and" \
  "no /dev/shm entry left"
