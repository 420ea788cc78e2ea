#!/bin/bash
# test_settings_mismatch.sh CHORUS_RUN CHORUS_PERF - ranks of one job given different values of
# a setting they must share (how they connect, whether they take part in the link probe, what
# makes them choose and cut calls alike) fail at creation within seconds, every rank, naming the
# variable; before, CHORUS_SHM_DISABLE on one rank hung the job, CHORUS_NSOCKS_PER_PEER and
# CHORUS_TUNE=0 held it for the 60 s connect timeout. Settings that are a rank's own (timeouts,
# spinning, its rings' sizes, logging) may differ, and the job runs with correct results.
# 4 ranks on 2 emulated hosts (CHORUS_HOST_ID: ranks 0 1 | 2 3), so the link probe runs; rank 2
# gets VAR=VALUE (rank 2 is one of the probe's pairs).
source "$(dirname "$0")/lib.sh"
RUN=${1:?usage: test_settings_mismatch.sh CHORUS_RUN CHORUS_PERF}
PERF=${2:?missing CHORUS_PERF}

WRAP="$TMP/wrap.sh"
cat >"$WRAP" <<'EOS'
#!/bin/sh
[ "$CHORUS_RANK" = 2 ] && [ -n "$ONE_RANK_SETS" ] && export "$ONE_RANK_SETS"
CHORUS_HOST_ID=smhost$((CHORUS_RANK / 2)) exec "$@"
EOS
chmod +x "$WRAP"

job() { # job NAME VAR=VALUE: the job's exit status in RC, its seconds in ELAPSED
  local t0=$SECONDS
  timeout -s KILL 60 "$RUN" --timeout 50 -n 4 -x ONE_RANK_SETS="$2" -x CHORUS_CONNECT_TIMEOUT_SEC=40 "$WRAP" \
    "$PERF" allreduce -b 8 -e 256K -f 32 -n 2 -w 1 -c 1 >"$TMP/$1.out" 2>&1
  RC=$?
  ELAPSED=$((SECONDS - t0))
}

for setting in CHORUS_NSOCKS_PER_PEER=2 CHORUS_SHM_DISABLE=1 CHORUS_TUNE=0 CHORUS_ALGO=allreduce:ring \
  CHORUS_LINK_INTRA=2,9000 CHORUS_LINK_INTER=40,250 CHORUS_BUFF_SIZE=65536 CHORUS_SHM_SLOT_SIZE=65536 \
  CHORUS_COMPRESSION=fp16 CHORUS_COMPRESSION_SCOPE=all CHORUS_COMPRESSION_MIN_BYTES=0 CHORUS_GROUP_FUSE_BYTES=0 \
  CHORUS_ZEROS=off CHORUS_ZEROS_MIN_BYTES=0; do
  var=${setting%%=*}
  job "$var" "$setting"
  [ $RC != 0 ] || fail "$setting on rank 2: the job succeeded"
  ((ELAPSED <= 15)) || fail "$setting on rank 2: took $ELAPSED s to fail"
  n=$(grep -c "was given another $var" "$TMP/$var.out")
  # Every rank refuses on its own (each differs from some rank): rank 2 names rank 0, the
  # others name rank 2.
  [ "$n" = 4 ] || fail "$setting: $n of 4 ranks named $var: $(grep -E 'WARN|failed' "$TMP/$var.out" | head -n 6)"
  grep -q "rank 2 (host smhost1, pid [0-9]*) was given another $var" "$TMP/$var.out" ||
    fail "$setting: rank 2 not named: $(grep WARN "$TMP/$var.out" | head -n 4)"
  grep -q "CHORUS_ERR_MISMATCH" "$TMP/$var.out" || fail "$setting: not ERR_MISMATCH: $(tail -n 4 "$TMP/$var.out")"
  ok "$setting on one rank of 4: every rank fails in ${ELAPSED} s naming $var"
done

for setting in CHORUS_SPIN_US=10 CHORUS_TIMEOUT_SEC=40 CHORUS_SHM_BUFF_SIZE=65536 CHORUS_LOG_LEVEL=info \
  CHORUS_SOCKET_CC=reno CHORUS_SHM_STREAM_BYTES=0 CHORUS_P2P_EAGER_BYTES=0; do
  var=${setting%%=*}
  job "ok_$var" "$setting"
  [ $RC = 0 ] || fail "$setting on rank 2 only: the job failed ($RC): $(grep -E 'WARN|failed' "$TMP/ok_$var.out" | head -n 4)"
  grep -Eq "^ +262144 .* 0$" "$TMP/ok_$var.out" && grep -q "^# Wrong elements : 0 OK" "$TMP/ok_$var.out" ||
    fail "$setting: no checked 256 KiB row: $(tail -n 5 "$TMP/ok_$var.out")"
  ok "$setting on one rank only: a rank's own setting, the job runs and checks"
done

# The same value spelled differently on rank 2 (what the ranks run with is compared, not the
# spelling): the job runs.
spelled() { # spelled NAME ALL_RANKS_VALUE RANK2_VALUE [CHECK]: CHECK 0 for lossy compression
  timeout -s KILL 60 "$RUN" --timeout 50 -n 4 -x "$1=$2" -x ONE_RANK_SETS="$1=$3" "$WRAP" \
    "$PERF" allreduce -b 8 -e 256K -f 32 -n 2 -w 1 -c "${4:-1}" >"$TMP/spelled_$1.out" 2>&1 ||
    fail "$1: '$2' on three ranks, '$3' on rank 2: the job failed: $(grep -E 'WARN|failed' "$TMP/spelled_$1.out" | head -n 3)"
  ok "$1: '$2' and '$3' are one value"
}
spelled CHORUS_LINK_INTRA 15,2000 "15.0, 2000"
spelled CHORUS_COMPRESSION topk:0.01 topk:1% 0
spelled CHORUS_TUNE "" 1
spelled CHORUS_BUFF_SIZE 262144 262100 # both are 256 KiB once rounded to 64 bytes

# Tune files at different paths with the same figures: the probe is skipped alike.
printf 'intra 1.5 12000\ninter 40 250\n' >"$TMP/a.tune"
cp "$TMP/a.tune" "$TMP/b.tune"
job tunefiles "CHORUS_TUNE=$TMP/b.tune"
[ $RC != 0 ] || fail "CHORUS_TUNE=file on rank 2, probe elsewhere: the job succeeded"
timeout -s KILL 60 "$RUN" --timeout 50 -n 4 -x CHORUS_TUNE="$TMP/a.tune" -x ONE_RANK_SETS="CHORUS_TUNE=$TMP/b.tune" \
  "$WRAP" "$PERF" allreduce -b 8 -e 256K -f 32 -n 2 -w 1 -c 1 >"$TMP/tunefiles2.out" 2>&1 ||
  fail "tune files at two paths: the job failed: $(grep -E 'WARN|failed' "$TMP/tunefiles2.out" | head -n 4)"
printf 'intra 1.5 12000\ninter 40 300\n' >"$TMP/c.tune"
timeout -s KILL 60 "$RUN" --timeout 50 -n 4 -x CHORUS_TUNE="$TMP/a.tune" -x ONE_RANK_SETS="CHORUS_TUNE=$TMP/c.tune" \
  "$WRAP" "$PERF" allreduce -b 8 -e 256K -f 32 -n 2 -w 1 -c 1 >"$TMP/tunefiles3.out" 2>&1 &&
  fail "tune files with different figures: the job succeeded"
grep -q "was given another CHORUS_TUNE than this rank's \"a file (no probe) whose contents hash to" "$TMP/tunefiles3.out" ||
  fail "tune files with different figures: $(grep WARN "$TMP/tunefiles3.out" | head -n 2)"
ok "CHORUS_TUNE: a file against the probe is refused, files at two paths with the same figures agree, other figures do not"
done_testing
