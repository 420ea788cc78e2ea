# lib.sh - helpers sourced by the process-level test scripts of chorus-run: a scratch
# directory, failing with a message, bounded waits for a background job, and checks (by PID and
# a marker in the command line) that no process of a job is left. Every wait here is bounded.

set -u
TEST_NAME=$(basename "$0" .sh)
TMP=$(mktemp -d /tmp/chorus-proc-test.XXXXXX)
# Ranks that must be found (or killed) later run as `exec -a "$MARKER" ...`, so a reused PID is
# never mistaken for one of ours.
MARKER="chorus-proc-test-$$-$RANDOM"
NCHECKS=0

# PIDs to kill at exit if a test fails half-way (only if they are still ours).
CLEANUP_PIDS=()

cleanup() {
  local pid
  for pid in "${CLEANUP_PIDS[@]}"; do
    if pid_alive "$pid"; then kill -KILL "$pid" 2>/dev/null; fi
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "FAIL ($TEST_NAME): $*" >&2
  exit 1
}

ok() {
  NCHECKS=$((NCHECKS + 1))
  echo "ok $NCHECKS - $*"
}

done_testing() {
  echo "$TEST_NAME: $NCHECKS passed, 0 failed"
}

now_us() { echo "${EPOCHREALTIME/./}"; }

# Alive = exists and is not a zombie (a zombie has ended; it only waits to be reaped).
pid_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# Alive and running one of our marked programs, or a shell still running one of our scripts.
pid_is_ours() {
  pid_alive "$1" || return 1
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -e "$MARKER" -e "$TMP"
}

# wait_gone SEC PID...: succeeds once none of the PIDs is alive, fails after SEC seconds.
wait_gone() {
  local limit_us=$(($(now_us) + $1 * 1000000)) pid any
  shift
  while :; do
    any=0
    for pid in "$@"; do pid_is_ours "$pid" && any=1; done
    [ $any = 0 ] && return 0
    [ "$(now_us)" -ge $limit_us ] && return 1
    sleep 0.05
  done
}

# wait_exit SEC PID: waits for a background child of this shell for at most SEC seconds and
# sets EXIT_CODE to its status (or fails the test).
wait_exit() {
  local limit_us=$(($(now_us) + $1 * 1000000))
  while pid_alive "$2"; do
    [ "$(now_us)" -ge $limit_us ] && fail "pid $2 still running after $1 s"
    sleep 0.05
  done
  wait "$2"
  EXIT_CODE=$?
}

# wait_files SEC FILE...: waits until every FILE exists and is non-empty.
wait_files() {
  local limit_us=$(($(now_us) + $1 * 1000000)) f missing
  shift
  while :; do
    missing=0
    for f in "$@"; do [ -s "$f" ] || missing=1; done
    [ $missing = 0 ] && return 0
    [ "$(now_us)" -ge $limit_us ] && return 1
    sleep 0.05
  done
}

# read_pids DIR N: prints the PIDs that ranks 0..N-1 wrote to DIR/rank.R.pid.
read_pids() {
  local r
  for ((r = 0; r < $2; r++)); do cat "$1/rank.$r.pid"; done
}
