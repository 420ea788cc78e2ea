#!/bin/bash
# test_log_probe.sh CHORUS_RUN CHORUS_PERF - the log names the caller's calls, not the library's
# own exchanges: with CHORUS_LOG_LEVEL=info or debug, a job whose program makes allreduces only
# logs the link probe's figures but none of the probe's sendrecvs. A line per exchange made the
# probe time the log instead of the link (intra alpha 16-36 us against 1.1-1.3), so the choices
# differed with the log level.
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_log_probe.sh CHORUS_RUN CHORUS_PERF}
PERF=${2:?missing CHORUS_PERF}

for level in info debug; do
  out="$TMP/$level.out"
  timeout -s KILL 60 "$RUN" --timeout 50 -n 2 -x CHORUS_LOG_LEVEL=$level \
    "$PERF" allreduce -b 8 -e 8 -n 3 -w 1 >"$out" 2>&1 || fail "$level: the job failed ($?): $(tail -n 5 "$out")"
  n=$(grep -c "CHORUS INFO tune links (probe)" "$out")
  [ "$n" = 2 ] || fail "$level: $n of 2 ranks logged the probe's figures: $(grep 'tune' "$out" | head -n 4)"
  grep -q "CHORUS INFO coll allreduce #" "$out" || fail "$level: the job's allreduces are not logged: $(head -n 8 "$out")"
  if grep -q "coll sendrecv" "$out"; then
    fail "$level: the probe's exchanges are logged as calls: $(grep -m 3 'coll sendrecv' "$out")"
  fi
  ok "CHORUS_LOG_LEVEL=$level: the probe's figures and the job's allreduces logged, none of the probe's exchanges"
done
done_testing
