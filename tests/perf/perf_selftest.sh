#!/bin/bash
# perf_selftest.sh CHORUS_RUN CHORUS_PERF - tests chorus-perf itself: bad flags give a clear
# message and exit 2; -h exits 0; the check catches a corrupted output (-x 1: exactly one wrong
# element per checked row, exit 1); a failed call (a forced algorithm that does not exist) makes
# it exit non-zero naming the status; -J writes valid JSON with one object per row.
set -u
RUN=${1:?usage: perf_selftest.sh CHORUS_RUN CHORUS_PERF}
PERF=${2:?missing CHORUS_PERF}
TMP=$(mktemp -d /tmp/chorus-perf-selftest.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
NCHECKS=0
fail() { echo "FAIL (perf_selftest): $*" >&2; exit 1; }
ok() { NCHECKS=$((NCHECKS + 1)); echo "ok $NCHECKS - $*"; }
run_job() { timeout -k 5 120 "$RUN" --timeout 100 -x CHORUS_TIMEOUT_SEC=30 "$@"; }

# expect_usage_error PATTERN ARGS...: exit 2 and PATTERN on stderr, without any launcher.
expect_usage_error() {
  local pattern=$1 code
  shift
  timeout 10 "$PERF" "$@" >"$TMP/out" 2>"$TMP/err"
  code=$?
  [ $code = 2 ] || fail "'$*': exit $code, expected 2 (stderr: $(cat "$TMP/err"))"
  grep -qE -e "$pattern" "$TMP/err" || fail "'$*': stderr '$(cat "$TMP/err")' lacks /$pattern/"
}
expect_usage_error 'give exactly one COLLECTIVE'
expect_usage_error 'unknown collective' allreduce_typo
expect_usage_error 'give exactly one COLLECTIVE' allreduce broadcast
expect_usage_error 'bad -b size' allreduce -b 1X
expect_usage_error 'bad -e size' allreduce -e -4
expect_usage_error '-b is larger than -e' allreduce -b 1M -e 1K
expect_usage_error '-f needs an integer >= 2' allreduce -f 1
expect_usage_error 'bad -i step' allreduce -i 0
expect_usage_error '-n needs >= 1' allreduce -n 0
expect_usage_error '-c needs 0 or 1' allreduce -c 2
expect_usage_error '-z needs 0 or 1' allreduce -z x
expect_usage_error '-p needs 0 or 1' allreduce -p 3
expect_usage_error 'unknown dtype' allreduce -d float128
expect_usage_error 'unknown op' allreduce -o xor
expect_usage_error '-a needs a single collective' all -a ring
expect_usage_error 'unknown flag' allreduce -q
expect_usage_error 'flag needs a value' allreduce -b
ok "bad flags: clear messages, exit 2 (17 cases)"

timeout 10 "$PERF" -h >"$TMP/out" 2>&1 || fail "-h: exit $?"
grep -q '^usage: chorus-perf COLLECTIVE' "$TMP/out" || fail "-h: no usage text"
ok "-h prints the usage and exits 0"

run_job -n 2 "$PERF" allreduce -r 2 -b 8 -e 8 >"$TMP/out" 2>"$TMP/err"
code=$?
[ $code != 0 ] || fail "-r 2 on 2 ranks: exit 0"
grep -q -- '-r 2: only 2 ranks' "$TMP/err" || fail "-r 2 on 2 ranks: stderr '$(cat "$TMP/err")'"
ok "a root outside the communicator is refused"

# -x 1 flips one bit of one checked output element per call: every row but barrier's must show
# exactly one wrong element, the summary FAILED, and the exit status 1.
run_job -n 3 "$PERF" all -d all -o all -b 8 -e 4K -f 2 -n 1 -w 0 -x 1 >"$TMP/out" 2>"$TMP/err"
code=$?
[ $code != 0 ] || fail "-x 1: exit 0 although outputs were corrupted"
awk '/^# collective: / { coll = $3 } /^ / {
       rows++; want = (coll == "barrier") ? 0 : 1
       if ($9 != want) { print "row with #wrong " $9 ": " $0; bad = 1 } }
     END { if (rows < 100) { print rows " rows"; bad = 1 }; exit bad }' "$TMP/out" ||
  fail "-x 1: rows do not each count exactly one wrong element"
grep -q '^# Wrong elements : [1-9][0-9]* FAILED' "$TMP/out" || fail "-x 1: no FAILED summary"
ok "the check counts a corrupted element exactly once per row and fails the run"

# A forced algorithm that does not exist: the call fails; the status name is printed.
run_job -n 2 "$PERF" broadcast -a no_such_algorithm -b 8 -e 8 >"$TMP/out" 2>"$TMP/err"
code=$?
[ $code != 0 ] || fail "-a no_such_algorithm: exit 0"
grep -q 'CHORUS_ERR_' "$TMP/err" ||
  fail "-a no_such_algorithm: no status name in '$(cat "$TMP/err")'"
ok "a failing call ends the run non-zero with its status name"

# -J: a JSON document with the parameters and one object per printed row.
run_job -n 2 "$PERF" reduce_scatter -d all -o sum -b 8 -e 1K -f 4 -z 1 -p 1 -J "$TMP/perf.json" \
  >"$TMP/out" 2>"$TMP/err" || fail "-J run: exit $? ($(cat "$TMP/err"))"
nrows=$(grep -c '^ ' "$TMP/out")
if [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 - "$TMP/perf.json" "$nrows" <<'EOF' || fail "-J: bad JSON document"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["params"]["nranks"] == 2 and doc["params"]["inplace"] == 1, doc["params"]
assert doc["params"]["nonblocking"] == 1 and doc["status"] == "CHORUS_OK"
rows = doc["rows"]
assert len(rows) == int(sys.argv[2]) > 0, (len(rows), sys.argv[2])
assert all(r["wrong"] == 0 and r["collective"] == "reduce_scatter" for r in rows)
assert all(r["call_count"] * 2 * 1 == r["count"] for r in rows)
EOF
  ok "-J writes the parameters and every row as JSON ($nrows rows)"
else
  grep -q '"rows": \[' "$TMP/perf.json" || fail "-J: no rows array"
  ok "-J writes a rows array (no python3 here to parse it)"
fi
echo "perf_selftest: $NCHECKS passed, 0 failed"
