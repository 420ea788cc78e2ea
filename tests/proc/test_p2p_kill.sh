#!/bin/bash
# test_p2p_kill.sh CHORUS_RUN PROG [--host-per-rank] - point-to-point operations pending when
# a peer dies (chorus-test-p2p-wait): 3 ranks; once every rank has posted its receives (from
# rank 0 and from any source) and a large send to rank 0, rank 0 gets SIGKILL. Every survivor
# must report an error status for each of the three within 10 s (CHORUS_TIMEOUT_SEC is 60:
# the death, not the timeout, ends them; usually ERR_REMOTE, or ERR_COMM_BROKEN for those that
# another's failure ended) and exit by itself; chorus-run exits 137 naming rank 0.
# --host-per-rank: each rank its own CHORUS_HOST_ID (TCP between all).
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_p2p_kill.sh CHORUS_RUN PROG [--host-per-rank]}
PROG=${2:?missing PROG}
HOST_PER_RANK=0
[ "${3:-}" = --host-per-rank ] && HOST_PER_RANK=1
export CHORUS_TEST_PIDDIR="$TMP/pids"
mkdir -p "$CHORUS_TEST_PIDDIR"
n=3
if [ $HOST_PER_RANK = 1 ]; then
  cmd=(sh -c 'CHORUS_HOST_ID=host$CHORUS_RANK exec "$0"' "$PROG")
else
  cmd=("$PROG")
fi
"$RUN" --prefix --grace 2 --timeout 80 -n $n -x CHORUS_TIMEOUT_SEC=60 "${cmd[@]}" >"$TMP/out" 2>"$TMP/err" &
run_pid=$!
CLEANUP_PIDS+=($run_pid)
files=()
for ((r = 0; r < n; r++)); do files+=("$CHORUS_TEST_PIDDIR/rank.$r.pid"); done
wait_files 40 "${files[@]}" || fail "ranks did not post within 40 s: $(tail -n 20 "$TMP/err") $(tail -n 20 "$TMP/out")"
pids=$(read_pids "$CHORUS_TEST_PIDDIR" $n)
CLEANUP_PIDS+=($pids)
sleep 0.5
victim_pid=$(cat "$CHORUS_TEST_PIDDIR/rank.0.pid")
t0=$(now_us)
kill -KILL "$victim_pid"
limit_us=$((t0 + 10000000))
while pid_alive $run_pid && [ "$(now_us)" -lt $limit_us ]; do sleep 0.05; done
ms=$((($(now_us) - t0) / 1000))
pid_alive $run_pid && fail "job still running 10 s after the kill; stdout: $(tail -n 20 "$TMP/out")"
wait $run_pid
code=$?
[ $code = 137 ] || fail "chorus-run exited $code, expected 137; stderr: $(tail -n 5 "$TMP/err")"
for ((r = 1; r < n; r++)); do
  lines=$(grep "^\[$r\] " "$TMP/out" || true)
  for what in "recv from rank 0" "recv from any source" "send to rank 0"; do
    grep -qE "^\[$r\] rank $r: $what failed: CHORUS_ERR_[A-Z_]+: " <<<"$lines" ||
      fail "rank $r reported no error for its $what: $lines"
  done
  grep -q "^\[$r\] rank $r: exiting with status 1$" <<<"$lines" || fail "rank $r did not exit by itself: $lines"
done
wait_gone 2 $pids || fail "processes of the job survived"
grep -q "still running" "$TMP/err" && fail "ranks had to be killed: $(grep '^chorus-run' "$TMP/err")"
ok "rank 0 SIGKILLed with point-to-point operations pending on it${3:+ ($3)}: job ended in $ms ms; survivors reported:"
grep -h "failed:" "$TMP/out" | sed 's/^/#   /'
done_testing
