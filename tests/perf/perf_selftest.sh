#!/bin/bash
# perf_selftest.sh CHORUS_RUN CHORUS_PERF - tests chorus-perf itself: bad flags give a clear
# message and exit 2; -h exits 0; the check catches a corrupted output (-x 1: exactly one wrong
# element per checked row, exit 1); a failed call (a forced algorithm that does not exist) makes
# it exit non-zero naming the status; -J writes valid JSON with one object per row; -a A,B,...
# with -k times several algorithms in one job, leaves out the one that cannot serve a call, and
# checks every contender's results, each round in another order; -B 1 (a barrier after every timed call) and -B 2 (calls
# entered together at a moment rank 0 names) say so in the header and the JSON and check their
# results like any run, and -B 2 times from that moment, not from when it was named (500 us
# before).
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
expect_usage_error '-B needs 0, 1 or 2' allreduce -B 3
expect_usage_error 'unknown dtype' allreduce -d float128
expect_usage_error 'unknown op' allreduce -o xor
expect_usage_error '-a needs a single collective' all -a ring
expect_usage_error 'unknown flag' allreduce -q
expect_usage_error 'flag needs a value' allreduce -b
expect_usage_error 'empty algorithm name in -a' allreduce -a ring,,rd
expect_usage_error 'algorithm named twice in -a' allreduce -a ring,rd,ring
expect_usage_error '-k needs 1..1000' allreduce -k 0
expect_usage_error '-R 1 takes a single -a algorithm' allreduce -a ring,rd -R 1
ok "bad flags: clear messages, exit 2 (22 cases)"

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

# -a auto,shm,ring -k 3 on 2 emulated hosts of 2 ranks: shm cannot serve a call across hosts and
# leaves every row; auto and ring get a checked row per size and a "# rounds" line of 3 times.
two_hosts=(sh -c 'CHORUS_HOST_ID=h$((CHORUS_RANK / 2)) exec "$0" "$@"' "$PERF")
run_job -n 4 "${two_hosts[@]}" allreduce -a auto,shm,ring -k 3 -b 8 -e 64K -f 8 -n 3 -w 1 \
  -J "$TMP/rounds.json" >"$TMP/out" 2>"$TMP/err" || fail "-a auto,shm,ring: exit $? ($(cat "$TMP/err"))"
awk '/^ / { rows[$5]++; if ($9 != 0) bad = 1 }
     $1 == "#" && $2 == "rounds" { rounds[$4]++; if (NF != 7) bad = 1 }
     / shm: not supported: / { skipped++ }
     END { exit !(rows["auto"] == 5 && rows["ring"] == 5 && !("shm" in rows) && rounds["auto"] == 5 &&
                  rounds["ring"] == 5 && skipped == 5 && !bad) }' "$TMP/out" ||
  fail "-a auto,shm,ring -k 3: unexpected rows: $(cat "$TMP/out")"
if [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 - "$TMP/rounds.json" <<'EOF' || fail "-a ... -k 3 -J: rows lack their 3 round times"
import json, statistics, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert sorted({r["algo"] for r in rows}) == ["auto", "ring"], rows
for r in rows:
    assert len(r["rounds_us"]) == 3 and abs(statistics.median(r["rounds_us"]) - r["time_us"]) < 0.01, r
EOF
fi
run_job -n 4 "${two_hosts[@]}" allreduce -a ring,rd,hier -b 64 -e 4K -f 4 -n 1 -w 0 -x 1 \
  >"$TMP/out" 2>"$TMP/err"
code=$?
[ $code = 1 ] || fail "-a ring,rd,hier -x 1: exit $code, expected 1"
awk '/^ / { rows++; if ($9 != 1) bad = 1 } END { exit !(rows == 12 && !bad) }' "$TMP/out" ||
  fail "-a ring,rd,hier -x 1: not one wrong element in each of 12 rows: $(cat "$TMP/out")"
ok "-a A,B,... -k N: every contender checked and timed in turns, unsupported ones left out"

# The rounds' orders (rank 0's trace: the algorithm of every allreduce in call order): each round
# times every contender, and over 4 rounds of 4 every contender follows at least two different
# ones (a fixed cyclic order would give each the same one in every round but at its edges).
run_job -n 2 -x CHORUS_TRACE_FILE="$TMP/trace.%r.json" "$PERF" allreduce -a ring,rd,direct,rhd -k 4 \
  -b 64 -e 64 -n 1 -w 0 -c 0 >"$TMP/out" 2>"$TMP/err" || fail "-a ... -k 4 with a trace: exit $? ($(cat "$TMP/err"))"
/usr/bin/python3 - "$TMP/trace.0.json" <<'EOF' || fail "-k 4: the rounds' orders do not vary"
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
calls = [e["args"]["algo"] for e in sorted(events, key=lambda e: e["ts"]) if e.get("name") == "allreduce"]
calls = calls[4:]  # one call of each contender before the rounds
per_batch = len(calls) // 16  # 16 batches of equal calls: 4 rounds of 4
assert per_batch >= 1 and len(calls) == 16 * per_batch, calls
order = calls[::per_batch]
assert all(calls[i:i + per_batch] == [order[i // per_batch]] * per_batch for i in range(0, len(calls), per_batch)), calls
names = {"ring", "rd", "direct", "rhd"}
rounds = [order[i:i + 4] for i in range(0, 16, 4)]
assert all(set(r) == names for r in rounds), rounds
before = {}
flat = [a for r in rounds for a in r]
for prev, cur in zip(flat, flat[1:]):
    before.setdefault(cur, set()).add(prev)
assert all(len(before.get(a, ())) >= 2 for a in names), (rounds, before)
EOF
ok "-k N: each round in another order, no contender always after the same one"

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
# -B 1: each timed call alone; results checked, the mode in the header and the JSON.
run_job -n 3 "$PERF" broadcast -B 1 -r 1 -b 8 -e 4K -f 8 -n 5 -w 1 -J "$TMP/iso.json" >"$TMP/out" 2>"$TMP/err" ||
  fail "-B 1 run: exit $? ($(cat "$TMP/err"))"
grep -q '| a barrier after each call' "$TMP/out" || fail "-B 1: the header does not say so: $(grep '^# nranks' "$TMP/out")"
[ "$(awk '$1 ~ /^[0-9]+$/ && $9 == 0' "$TMP/out" | wc -l)" = 4 ] || fail "-B 1: expected 4 checked rows: $(cat "$TMP/out")"
grep -q '"isolated": 1' "$TMP/iso.json" || fail "-B 1: the JSON parameters lack \"isolated\": 1"
ok "-B 1 times each call alone, checked, and says so"
# -B 2: the same, started together; an 8-byte call takes far less than the 500 us margin, which
# a time counted from when the moment was named would include (40 calls: a flake needs 20 ms of
# preemption in them).
run_job -n 3 "$PERF" broadcast -B 2 -r 1 -b 8 -e 4K -f 8 -n 40 -w 1 -J "$TMP/sync.json" >"$TMP/out" 2>"$TMP/err" ||
  fail "-B 2 run: exit $? ($(cat "$TMP/err"))"
grep -q '| calls started together' "$TMP/out" || fail "-B 2: the header does not say so: $(grep '^# nranks' "$TMP/out")"
[ "$(awk '$1 ~ /^[0-9]+$/ && $9 == 0' "$TMP/out" | wc -l)" = 4 ] || fail "-B 2: expected 4 checked rows: $(cat "$TMP/out")"
grep -q '"isolated": 2' "$TMP/sync.json" || fail "-B 2: the JSON parameters lack \"isolated\": 2"
awk '$1 == 8 { exit !($6 > 0 && $6 < 500) }' "$TMP/out" || fail "-B 2: an 8-byte call timed outside (0, 500) us: $(cat "$TMP/out")"
ok "-B 2 starts the calls together, times them from the start, checks them and says so"

echo "perf_selftest: $NCHECKS passed, 0 failed"
