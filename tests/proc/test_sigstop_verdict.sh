#!/usr/bin/env bash
# test_sigstop_verdict.sh - the verdict on a rank stopped (SIGSTOP) on one host, and how soon
# chorus-run ends such a job. Each round starts 4 ranks of allreduces of COUNT float32 under
# chorus-run and stops one of ranks 1-3 after a delay that differs from round to round, so that
# it stops inside a call (it posted the allreduce, then stood still) or between calls. Every
# other rank must fail with an error that names the stopped rank: "posted allreduce #K and has
# not moved for N s: stopped or stuck", or "never posted allreduce #K" when it stopped between
# calls. chorus-run must then end the job, stopped rank included, within timeout + term delay
# + 1 s of the stop: its SIGTERM comes with a SIGCONT (--grace is long, so waiting it out fails).
# With MODE in-call, the stopped rank stops itself inside the allreduce of iteration 5, before
# it has done its share (CHORUS_TEST_STOP, allreduce_loop.c), and every survivor must say
# "stopped or stuck": the case that a verdict from the signatures alone cannot tell.
# Usage: test_sigstop_verdict.sh CHORUS_RUN ALLREDUCE_LOOP COUNT ROUNDS [in-call]
set -u
RUN=$1
LOOP=$2
COUNT=$3
ROUNDS=$4
MODE=${5:-}
STOP_IT=5
TIMEOUT_SEC=3
TERM_DELAY_SEC=1
GRACE_SEC=10
TMP=$(mktemp -d)
RUN_PID=
cleanup() {
  [ -n "$RUN_PID" ] && kill -KILL "$RUN_PID" 2>/dev/null && wait "$RUN_PID" 2>/dev/null
  for f in "$TMP"/*/rank.*.pid; do [ -e "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL (round $round): $*"; tail -n 20 "$dir/err"; exit 1; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

inside=0
between=0
for ((round = 1; round <= ROUNDS; round++)); do
  dir=$TMP/$round
  mkdir "$dir"
  victim=$((1 + round % 3))
  stop=()
  [ "$MODE" = in-call ] && stop=(-x "CHORUS_TEST_STOP=$victim:$STOP_IT")
  CHORUS_TIMEOUT_SEC=$TIMEOUT_SEC CHORUS_TEST_PIDDIR=$dir "$RUN" --prefix --term-delay $TERM_DELAY_SEC \
    --grace $GRACE_SEC "${stop[@]}" -n 4 "$LOOP" 120 "$COUNT" >"$dir/out" 2>"$dir/err" &
  RUN_PID=$!
  for _ in $(seq 300); do [ -e "$dir/rank.3.pid" ] && break; sleep 0.05; done
  [ -e "$dir/rank.3.pid" ] || fail "the job never got going"
  if [ "$MODE" = in-call ]; then
    for _ in $(seq 300); do grep -q "stopping inside" "$dir/out" && break; sleep 0.01; done
    grep -q "stopping inside" "$dir/out" || fail "rank $victim never stopped itself"
  else
    # 0.2 s to 0.9 s into the stream, in steps that are not a multiple of an iteration's time.
    sleep "0.$((2 + (round * 37) % 8))$((round * 7 % 10))"
    kill -STOP "$(cat "$dir/rank.$victim.pid")"
  fi
  t0=$(now_ms)
  limit_ms=$(((TIMEOUT_SEC + TERM_DELAY_SEC + 1) * 1000))
  while kill -0 "$RUN_PID" 2>/dev/null && (($(now_ms) - t0 < limit_ms + GRACE_SEC * 1000)); do sleep 0.05; done
  took_ms=$(($(now_ms) - t0))
  kill -0 "$RUN_PID" 2>/dev/null && fail "the job still runs $took_ms ms after the stop"
  wait "$RUN_PID"
  rc=$?
  RUN_PID=
  ((took_ms <= limit_ms)) || fail "the job ended $took_ms ms after the stop (limit $limit_ms ms)"
  [ "$rc" -ne 0 ] || fail "chorus-run exited 0"
  grep -q "still running" "$dir/err" && fail "ranks had to be killed: $(grep '^chorus-run' "$dir/err")"
  stuck="rank $victim \(host [^)]*\) posted allreduce #[0-9]+ and has not moved for [0-9.]+ s: stopped or stuck"
  never="rank $victim \(host [^)]*\) never posted allreduce #[0-9]+"
  for r in 0 1 2 3; do
    [ $r = $victim ] && continue
    line=$(grep -E "^\[$r\] rank $r: [a-z_]+ \(iteration [0-9]+\) failed: CHORUS_ERR_" "$dir/err" | head -n 1)
    [ -n "$line" ] || fail "rank $r reported no error"
    if grep -qE "$stuck" <<<"$line"; then
      inside=$((inside + 1))
    elif [ "$MODE" != in-call ] && grep -qE "$never" <<<"$line"; then
      between=$((between + 1))
    else
      fail "rank $r's error does not name the stopped rank $victim: $line"
    fi
  done
  for f in "$dir"/rank.*.pid; do kill -0 "$(cat "$f")" 2>/dev/null && fail "a rank process survived"; done
  echo "round $round: rank $victim stopped; the job ended after $took_ms ms (limit $limit_ms ms)"
  grep -hE "^\[[0-3]\] rank [0-3]: .*failed: " "$dir/err" | head -n 1 | sed 's/^/  /'
done
echo "ok: $ROUNDS rounds of $COUNT floats; survivors named the stopped rank: $inside times as stopped inside" \
  "the call, $between times as not having posted it"
