#!/bin/bash
# test_kill_setup.sh - rank 0 (the rank that creates the host's shared segment) SIGKILLed at
# points spread over communicator set-up must leave no /dev/shm entry named chorus-<pid>-*.
# Runs TRIES short jobs of 4 ranks under chorus-run, killing rank 0 after 0, STEP, 2*STEP ...
# ms; any name left is reported (and removed: it is this test's own leftover).
#   test_kill_setup.sh CHORUS_RUN RANK_PROG [TRIES] [STEP_MS]
set -u
RUN=${1:?usage: test_kill_setup.sh CHORUS_RUN RANK_PROG [TRIES] [STEP_MS]}
PROG=${2:?missing RANK_PROG}
TRIES=${3:-30}
STEP_MS=${4:-10}
TMP=$(mktemp -d /tmp/chorus-leak-setup.XXXXXX)
RUN_PID=
trap '[ -n "$RUN_PID" ] && kill -KILL $RUN_PID 2>/dev/null; rm -rf "$TMP"' EXIT

now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }

# The child of chorus-run whose environment says CHORUS_RANK=0 (empty until it exists).
rank0_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx CHORUS_RANK=0 && { echo "$p"; return; }
  done
}

leaks=()
killed=0
for ((i = 0; i < TRIES; i++)); do
  delay_ms=$((i * STEP_MS))
  "$RUN" --timeout 30 --grace 1 --term-delay 0 -n 4 -x CHORUS_CONNECT_TIMEOUT_SEC=5 "$PROG" 1 1024 \
    >"$TMP/out" 2>&1 &
  RUN_PID=$!
  t0=$(now_ms)
  pid=
  while [ -z "$pid" ] && [ $(( $(now_ms) - t0 )) -lt 5000 ]; do pid=$(rank0_pid $RUN_PID); done
  [ -n "$pid" ] || { echo "FAIL: try $i: rank 0 never started" >&2; exit 1; }
  while [ $(( $(now_ms) - t0 )) -lt $delay_ms ]; do sleep 0.002; done
  kill -KILL "$pid" 2>/dev/null && killed=$((killed + 1))
  wait $RUN_PID 2>/dev/null
  RUN_PID=
  for name in $(ls /dev/shm | grep "^chorus-$pid-"); do
    leaks+=("try $i (kill after $delay_ms ms): /dev/shm/$name")
    rm -f "/dev/shm/$name"
  done
done
if [ ${#leaks[@]} != 0 ]; then
  echo "FAIL: rank 0 killed during set-up left ${#leaks[@]} /dev/shm entries in $TRIES tries:" >&2
  printf '  %s\n' "${leaks[@]}" >&2
  exit 1
fi
echo "ok - rank 0 SIGKILLed at $TRIES points of set-up (0..$(( (TRIES - 1) * STEP_MS )) ms, $killed kills landed): no /dev/shm entry left"
