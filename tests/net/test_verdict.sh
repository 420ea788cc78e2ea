#!/usr/bin/env bash
# test_verdict.sh - timeout verdicts across hosts. 4 ranks on 2 emulated hosts (ranks 0, 1 on
# host0; 2, 3 on host1) run a stream of allreduces; then rank 3 misbehaves:
#  1. it never calls the allreduce of iteration 4 (it sleeps outside Chorus). Rank 2 has a long
#     timeout, so only ranks 0 and 1 time out: within CHORUS_TIMEOUT_SEC + 2 s each must print
#     a verdict naming rank 3 and its host ("rank 3 (host host1) never posted allreduce #8"),
#     which only rank 2 can tell them: it answers their status frames from inside its own
#     allreduce, with its status and rank 3's signature from their host's shared memory; rank 2
#     then learns of their failure (their give-up frames, which carry that verdict) within the
#     same bound, also when it waits for rank 3 in shared memory (hier);
#  2. it is stopped (SIGSTOP) in the middle of the stream, every rank with the same timeout:
#     ranks 0, 1 and 2 must name it;
#  3. it stops itself inside the allreduce of iteration 5, before doing its share
#     (CHORUS_TEST_STOP): rank 2 reads its standing heartbeat from their host's shared memory
#     and ranks 0 and 1 learn it from rank 2's status frames: all three must say "rank 3 (host
#     host1) posted allreduce #10 and has not moved for N s: stopped or stuck".
# Usage: test_verdict.sh ALLREDUCE_LOOP
set -u
LOOP=$1
. "$(dirname "$0")/netns.sh"
net_test_begin 8
TIMEOUT_SEC=3
SKIP_IT=4
SEQ=$((2 * SKIP_IT)) # each iteration is a data allreduce and a 1-element stop vote

net_create 2 || fail "cannot create the namespaces"

# start_job NAME RANK2_TIMEOUT_SEC [VAR=VALUE...]: rank r on host r/2, output in NAME.r.out,
# pid files in NAME/.
start_job() {
  local name=$1 timeout2=$2 r
  shift 2
  mkdir -p "$NET_TMP/$name"
  NET_PIDS=()
  for r in 0 1 2 3; do
    net_start $((r / 2)) $r 4 "$NET_TMP/$name.$r.out" env CHORUS_TIMEOUT_SEC=$((r == 2 ? timeout2 : TIMEOUT_SEC)) \
      CHORUS_TEST_PIDDIR="$NET_TMP/$name" "$@" "$LOOP" 60 65536
  done
}

# wait_survivors SECONDS: waits until ranks 0, 1, 2 (the first three started) have exited.
wait_survivors() {
  local deadline=$((SECONDS + $1)) i
  for i in 0 1 2; do
    while kill -0 "${NET_PIDS[$i]}" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
    kill -0 "${NET_PIDS[$i]}" 2>/dev/null && return 1
  done
  return 0
}

# ---- 1. rank 3 never calls the allreduce of iteration SKIP_IT; rank 2 waits 60 s ----
# Twice: with the two-level allreduce, where rank 2 waits for rank 3 inside their host (shared
# memory) and learns of the others' failure only from their give-up frames, and with the flat
# ring, where it has transfers pending with the other host and sees them leave.
for algo in hier ring; do
start_job skip 60 CHORUS_ALGO=allreduce:$algo CHORUS_TEST_SKIP=3:$SKIP_IT CHORUS_TEST_SKIP_SEC=60
for _ in $(seq 300); do grep -q "skipping" "$NET_TMP/skip.3.out" 2>/dev/null && break; sleep 0.05; done
grep -q "skipping" "$NET_TMP/skip.3.out" || fail "rank 3 never reached iteration $SKIP_IT"
t0=$(date +%s%N)
wait_survivors $((TIMEOUT_SEC + 5)) || fail "ranks 0-2 still run $((TIMEOUT_SEC + 5)) s after rank 3 skipped a call"
took_ms=$((($(date +%s%N) - t0) / 1000000))
((took_ms <= (TIMEOUT_SEC + 2) * 1000)) || fail "survivors took $took_ms ms (timeout $TIMEOUT_SEC s)"
want="rank 3 (host host1) never posted allreduce #$SEQ"
for r in 0 1; do
  f="$NET_TMP/skip.$r.out"
  grep -q "CHORUS_ERR_TIMEOUT" "$f" || fail "rank $r did not report a timeout"
  grep -qF "verdict: $want" "$f" || fail "rank $r's error has no verdict '$want'"
  grep -qF "verdict on allreduce #$SEQ: $want" "$f" || fail "rank $r logged no verdict line"
  # Rank 2 answered (it waits too), unless the other rank of host0 gave up first and rank 2,
  # told so, gave up too before it answered this one.
  grep -qE "verdict: .*(rank |ranks [0-9, ]*)2 (posted allreduce #$SEQ and waits? too|waited for allreduce #$SEQ too and gave up)" "$f" ||
    fail "rank $r's verdict does not say that rank 2 waits too (or gave up too)"
done
# Answering did not disturb rank 2: it failed only when ranks 0 and 1 gave up and left, and
# it says so with their verdict.
grep -q "CHORUS_ERR_REMOTE" "$NET_TMP/skip.2.out" || fail "rank 2 did not report its peers leaving ($algo)"
if [ $algo = hier ]; then
  grep -qF "(host host0) gave up on allreduce #$SEQ (CHORUS_ERR_TIMEOUT); its verdict: $want" \
    "$NET_TMP/skip.2.out" || fail "rank 2 does not pass on the verdict of the rank that gave up ($algo)"
fi
echo "ok ($algo): rank 3 skipped allreduce #$SEQ; ranks 0, 1 named it within $took_ms ms (timeout $TIMEOUT_SEC s):"
grep -h "verdict:" "$NET_TMP/skip.0.out" | sed 's/.*verdict:/  verdict:/' | head -1
grep -h "gave up" "$NET_TMP/skip.2.out" | sed 's/.*failed: /  rank 2: /' | head -1
for pid in "${NET_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
rm -f "$NET_TMP"/skip.*.out
done

# ---- 2. rank 3 is stopped ----
start_job stop $TIMEOUT_SEC
for _ in $(seq 300); do [ -e "$NET_TMP/stop/rank.3.pid" ] && break; sleep 0.05; done
[ -e "$NET_TMP/stop/rank.3.pid" ] || fail "the second job never got going"
sleep 0.5
kill -STOP "${NET_PIDS[3]}"
t0=$(date +%s%N)
wait_survivors $((TIMEOUT_SEC + 5)) || fail "ranks 0-2 still run $((TIMEOUT_SEC + 5)) s after rank 3 stopped"
took_ms=$((($(date +%s%N) - t0) / 1000000))
((took_ms <= (TIMEOUT_SEC + 2) * 1000)) || fail "survivors took $took_ms ms after the stop (timeout $TIMEOUT_SEC s)"
for r in 0 1 2; do
  grep -qE "verdict: (.*; )?rank 3 \(host host1\) (posted allreduce #[0-9]+ (but does not answer|and has not moved for [0-9.]+ s: stopped or stuck)|never posted allreduce #[0-9]+ .* and does not answer)" \
    "$NET_TMP/stop.$r.out" || fail "rank $r's verdict does not name the stopped rank 3"
done
echo "ok: rank 3 stopped; ranks 0, 1, 2 named it within $took_ms ms:"
grep -h "verdict:" "$NET_TMP/stop.0.out" | sed 's/.*verdict:/  verdict:/' | head -1
kill -KILL "${NET_PIDS[3]}" 2>/dev/null
wait "${NET_PIDS[3]}" 2>/dev/null

# ---- 3. rank 3 stops itself inside allreduce #10 ----
# The two-level allreduce with rails (rank 3 reduces a segment its host-mate and rail need): in
# its leader mode rank 3 would only hand its input to rank 2 before stopping, and the others
# would finish #10 without it and name it at #11, rightly.
start_job stopin $TIMEOUT_SEC CHORUS_TEST_STOP=3:5 CHORUS_ALGO=allreduce:hier/ring
for _ in $(seq 300); do grep -q "stopping inside" "$NET_TMP/stopin.3.out" 2>/dev/null && break; sleep 0.05; done
grep -q "stopping inside" "$NET_TMP/stopin.3.out" || fail "rank 3 never stopped itself"
t0=$(date +%s%N)
wait_survivors $((TIMEOUT_SEC + 5)) || fail "ranks 0-2 still run $((TIMEOUT_SEC + 5)) s after rank 3 stopped in a call"
took_ms=$((($(date +%s%N) - t0) / 1000000))
for r in 0 1 2; do
  grep -qE "verdict: (.*; )?rank 3 \(host host1\) posted allreduce #10 and has not moved for [0-9.]+ s: stopped or stuck" \
    "$NET_TMP/stopin.$r.out" || fail "rank $r's verdict does not say that rank 3 stopped inside allreduce #10"
done
echo "ok: rank 3 stopped inside allreduce #10; ranks 0, 1, 2 named it within $took_ms ms:"
grep -h "verdict:" "$NET_TMP/stopin.0.out" | sed 's/.*verdict:/  verdict:/' | head -1
kill -KILL "${NET_PIDS[3]}" 2>/dev/null
