#!/bin/bash
# perf_check.sh - runs chorus-perf's bitwise check through chorus-run and fails unless the job
# exits 0, every row reports #wrong 0, and every (collective, dtype, op, size) that should have
# a row has one (so a silently skipped size or dtype fails too).
#   perf_check.sh CHORUS_RUN CHORUS_PERF NRANKS COLLECTIVE MAX_BYTES [--min BYTES]
#                 [--incr BYTES] [--host-per-rank] [VAR=VAL...] [-- extra chorus-perf flags]
# Sizes run from --min (8) to MAX_BYTES, doubling, or growing by --incr; every dtype and op;
# one timed iteration. --host-per-rank gives each rank its own CHORUS_HOST_ID, so that ranks
# talk over TCP. VAR=VAL pairs go to every rank (chorus-run -x).
set -u
RUN=${1:?usage: perf_check.sh CHORUS_RUN CHORUS_PERF NRANKS COLLECTIVE MAX_BYTES [...]}
PERF=${2:?missing CHORUS_PERF}
NRANKS=${3:?missing NRANKS}
COLL=${4:?missing COLLECTIVE}
MAX_BYTES=${5:?missing MAX_BYTES}
shift 5
HOST_PER_RANK=0
MIN_BYTES=8
INCR_BYTES=0
XOPTS=(-x CHORUS_TIMEOUT_SEC=60)
EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    --host-per-rank) HOST_PER_RANK=1 ;;
    --min) MIN_BYTES=${2:?--min needs bytes}; shift ;;
    --incr) INCR_BYTES=${2:?--incr needs bytes}; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    *=*) XOPTS+=(-x "$1") ;;
    *) echo "perf_check.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
JOB_TIMEOUT_SEC=${PERF_CHECK_TIMEOUT_SEC:-1500}
OUT=$(mktemp /tmp/chorus-perf-check.XXXXXX)
trap 'rm -f "$OUT"' EXIT

cmd=("$PERF")
if [ $HOST_PER_RANK = 1 ]; then
  cmd=(sh -c 'CHORUS_HOST_ID=host$CHORUS_RANK exec "$0" "$@"' "$PERF")
fi
STEP=(-f 2)
[ "$INCR_BYTES" != 0 ] && STEP=(-i "$INCR_BYTES")
start_sec=$SECONDS
timeout -k 10 $((JOB_TIMEOUT_SEC + 20)) "$RUN" --timeout "$JOB_TIMEOUT_SEC" --term-delay 5 \
  "${XOPTS[@]}" -n "$NRANKS" "${cmd[@]}" "$COLL" -d all -o all \
  -b "$MIN_BYTES" -e "$MAX_BYTES" "${STEP[@]}" \
  -c 1 -n 1 -w 0 "${EXTRA[@]}" >"$OUT"
status=$?
echo "perf_check: $COLL, $NRANKS ranks, $MIN_BYTES..$MAX_BYTES B step ${STEP[*]}," \
  "host per rank $HOST_PER_RANK, ${XOPTS[*]} ${EXTRA[*]}: exit $status," \
  "$((SECONDS - start_sec)) s"

# Checks the rows against the rows that must exist. Row fields: size count type redop algo
# time algbw busbw #wrong; "# collective: NAME" lines say which collective follows.
awk -v want_coll="$COLL" -v nranks="$NRANKS" -v max_bytes="$MAX_BYTES" -v min_bytes="$MIN_BYTES" \
    -v incr="$INCR_BYTES" '
  function fail(msg) { print "perf_check: FAIL: " msg > "/dev/stderr"; failed = 1 }
  function to_bytes(text,   suffix, mult) { # "64M" -> 67108864, as chorus-perf reads it
    suffix = toupper(substr(text, length(text)))
    mult = suffix == "K" ? 1024 : suffix == "M" ? 1048576 : suffix == "G" ? 1073741824 : 1
    return (mult == 1 ? text : substr(text, 1, length(text) - 1)) * mult
  }
  BEGIN {
    split("int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64", types, " ")
    split("1 1 4 4 8 8 2 2 4 8", type_bytes, " ")
    split("sum prod max min avg", ops, " ")
    ncoll = split("allreduce broadcast reduce allgather reduce_scatter alltoall gather scatter " \
                  "sendrecv barrier", colls, " ")
    split("1 0 1 0 1 0 0 0 0 0", reduces, " ")
    split("0 0 0 1 1 1 1 1 0 0", blocked, " ")
    m = to_bytes(max_bytes); first = to_bytes(min_bytes); step = to_bytes(incr)
    for (c = 1; c <= ncoll; c++) {
      if (want_coll != "all" && want_coll != colls[c]) continue
      if (colls[c] == "barrier") { expect["barrier none none"] = 1; continue }
      for (t = 1; t <= 10; t++) {
        unit = type_bytes[t] * (blocked[c] ? nranks : 1)
        sizes = 0
        for (s = first; s <= m; s = step ? s + step : (s ? 2 * s : 1))
          if (s > 0 && s % unit == 0) sizes++
        if (sizes == 0) continue
        nop = reduces[c] ? 5 : 1
        for (o = 1; o <= nop; o++)
          expect[colls[c] " " types[t] " " (reduces[c] ? ops[o] : "none")] = sizes
      }
    }
  }
  /^# collective: / { coll = $3; next }
  /^# Wrong elements : 0 OK/ { summary_ok = 1 }
  /^# Avg bus bandwidth : / { avg_seen = 1 }
  /^#/ || NF == 0 { next }
  {
    if (NF != 9) { fail("malformed row: " $0); next }
    rows++
    got[coll " " $3 " " $4]++
    if ($9 != 0) fail(coll " " $3 " " $4 " size " $1 ": #wrong " $9)
  }
  END {
    for (k in expect) {
      if (got[k] != expect[k]) fail(k ": " got[k] + 0 " rows, expected " expect[k])
      nexpect += expect[k]
    }
    for (k in got) if (!(k in expect)) fail("unexpected rows for " k)
    if (!summary_ok) fail("no \"# Wrong elements : 0 OK\" line")
    if (!avg_seen) fail("no \"# Avg bus bandwidth\" line")
    if (!failed) print "perf_check: " rows " rows, all #wrong 0 (" nexpect " expected)"
    exit failed
  }' "$OUT"
rows_ok=$?
if [ $status != 0 ] || [ $rows_ok != 0 ]; then
  echo "perf_check: FAIL (exit status $status); chorus-perf output:" >&2
  grep -v '^ ' "$OUT" | tail -n 40 >&2
  grep '^ ' "$OUT" | awk '$9 != 0' | head -n 20 >&2
  exit 1
fi
echo "perf_check: PASS"
