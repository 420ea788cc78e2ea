#!/bin/bash
# run_fuzz.sh - runs one libFuzzer target for a bounded time over the committed seed corpus and
# fails on any crash, sanitizer report, leak, timeout or out-of-memory. New inputs go to a
# scratch directory (the committed corpus is never written); crash inputs are kept in ARTDIR.
#   run_fuzz.sh TARGET_BINARY CORPUS_DIR SECONDS [ARTDIR]
set -u
BIN=${1:?usage: run_fuzz.sh TARGET_BINARY CORPUS_DIR SECONDS [ARTDIR]}
CORPUS=${2:?missing CORPUS_DIR}
SECONDS_TO_RUN=${3:?missing SECONDS}
ARTDIR=${4:-$PWD/fuzz-artifacts}
NAME=$(basename "$BIN")

[ -x "$BIN" ] || { echo "FAIL: $BIN is not an executable" >&2; exit 1; }
[ -d "$CORPUS" ] && [ -n "$(ls -A "$CORPUS")" ] || { echo "FAIL: empty corpus $CORPUS" >&2; exit 1; }
mkdir -p "$ARTDIR"
NEW=$(mktemp -d "/tmp/chorus-fuzz-$NAME.XXXXXX")
LOG="$NEW.log"
trap 'rm -rf "$NEW" "$LOG"' EXIT

# -timeout: one input may take at most 10 s; -rss_limit_mb bounds memory; leaks are detected.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
timeout -s KILL $((SECONDS_TO_RUN + 60)) "$BIN" -max_total_time="$SECONDS_TO_RUN" -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$ARTDIR/$NAME-" "$NEW" "$CORPUS" >"$LOG" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$LOG" | tail -n 1)
cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9a-zA-Z]+' "$LOG" | tail -n 1)
if [ $rc != 0 ]; then
  echo "FAIL: $NAME exited $rc after ${execs:-?} runs; log tail:" >&2
  tail -n 60 "$LOG" >&2
  ls "$ARTDIR" | grep "^$NAME-" | sed "s|^|artifact: $ARTDIR/|" >&2
  exit 1
fi
[ -n "$execs" ] && [ "$execs" -gt 0 ] || { echo "FAIL: $NAME ran no input" >&2; tail -n 20 "$LOG" >&2; exit 1; }
echo "ok - $NAME: $execs runs in ${SECONDS_TO_RUN} s, $cov, no crash, leak or timeout"
